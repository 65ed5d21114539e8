// Command lines for the trainer ranks (see launch.h).
#include "worker/daemon/launch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

extern char** environ;

namespace rdattn::worker {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

CommandLine BuildCommandLine(const LaunchSpec& spec) {
  CommandLine cmd;
  const std::string threads = std::to_string(spec.threads_per_rank < 1 ? 1 : spec.threads_per_rank);
  cmd.env.emplace_back("OMP_NUM_THREADS", threads);
  cmd.env.emplace_back("MKL_NUM_THREADS", threads);
  if (!spec.cuda_visible_devices.empty()) {
    cmd.env.emplace_back("CUDA_VISIBLE_DEVICES", spec.cuda_visible_devices);
  }
  if (spec.supervisor) {
    for (const auto& [name, value] : SupervisorEnvironment(*spec.supervisor))
      cmd.env.emplace_back(name, value);
  }
  if (spec.world_size > 1) {
    if (spec.run_as_root) {
      cmd.env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT", "1");
      cmd.env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    // --oversubscribe: a CPU worker's slots may exceed its cores. --bind-to none: each rank
    // runs threads_per_rank threads, which core binding would pin to a single core.
    cmd.argv = {spec.mpirun,
                "-np",
                std::to_string(spec.world_size),
                "--oversubscribe",
                "--bind-to",
                "none",
                "-x",
                "OMP_NUM_THREADS",
                "-x",
                "MKL_NUM_THREADS"};
    if (!spec.cuda_visible_devices.empty()) {
      cmd.argv.insert(cmd.argv.end(), {"-x", "CUDA_VISIBLE_DEVICES"});
    }
    if (spec.supervisor) {
      for (const auto& [name, value] : SupervisorEnvironment(*spec.supervisor)) {
        cmd.argv.insert(cmd.argv.end(), {"-x", name});
      }
    }
  }
  cmd.argv.insert(cmd.argv.end(),
                  {spec.train_binary, "train", "--job", spec.job_json, "--events", spec.events});
  if (spec.attempt > 0)
    cmd.argv.insert(cmd.argv.end(), {"--attempt", std::to_string(spec.attempt)});
  return cmd;
}

std::string FormatCommandLine(const CommandLine& cmd) {
  auto quote = [](const std::string& s) {
    if (!s.empty() && s.find_first_of(" \t\n'\"\\$`") == std::string::npos) return s;
    std::string q = "'";
    for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  std::string out;
  for (const auto& [name, value] : cmd.env) out += name + "=" + quote(value) + " ";
  for (size_t i = 0; i < cmd.argv.size(); ++i) out += (i ? " " : "") + quote(cmd.argv[i]);
  return out;
}

std::vector<std::string> MergedEnvironment(const CommandLine& cmd) {
  std::map<std::string, std::string> overrides(cmd.env.begin(), cmd.env.end());
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (overrides.count(name) == 0) out.push_back(entry);
  }
  for (const auto& [name, value] : cmd.env) out.push_back(name + "=" + value);
  return out;
}

StatusOr<std::string> FindExecutable(std::string_view name_or_path) {
  const std::string name(name_or_path);
  if (name.empty()) return NotFoundError("empty program name");
  if (name.find('/') != std::string::npos) {
    if (IsExecutableFile(name)) return name;
    return NotFoundError(name + ": not an executable file");
  }
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end > start ? path.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + name;
    if (IsExecutableFile(candidate)) return candidate;
    start = end + 1;
  }
  return NotFoundError(name + ": not found on PATH");
}

}  // namespace rdattn::worker
