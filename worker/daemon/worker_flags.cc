#include "worker/daemon/worker_flags.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/cli.h"
#include "common/log.h"
#include "common/strings.h"
#include "worker/daemon/job_paths.h"
#include "worker/daemon/launch.h"

namespace rdattn::worker {
namespace {

namespace fs = std::filesystem;

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// "model name" of /proc/cpuinfo, or the first GPU's "Model:" from the NVIDIA driver.
std::string DeviceName(bool gpu) {
  auto field = [](const std::string& path, const std::string& key) -> std::string {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.compare(0, key.size(), key) != 0) continue;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string v = line.substr(colon + 1);
      return strings::Trim(v);
    }
    return "";
  };
  if (gpu) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
      std::string name = field((e.path() / "information").string(), "Model");
      if (!name.empty()) return name;
    }
    return "";
  }
  return field("/proc/cpuinfo", "model name");
}

// Default rdattn-train: beside this binary, then the build tree's ../trainer/, then PATH.
StatusOr<std::string> DefaultTrainBinary() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& candidate :
         {self.parent_path() / "rdattn-train",
          self.parent_path().parent_path() / "trainer" / "rdattn-train"}) {
      auto found = FindExecutable(candidate.string());
      if (found.ok()) return found;
    }
  }
  return FindExecutable("rdattn-train");
}

}  // namespace

std::chrono::milliseconds Seconds(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
}

bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  const std::string port_text = address.substr(colon + 1);
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *port = std::stoi(port_text);
  *host = address.substr(0, colon);
  return *port <= 65535;
}

void AddWorkerFlags(CLI::App& app, WorkerFlags& f) {
  using cli::NumberWhere;
  auto at_least = [](double min, const std::string& rule) {
    return NumberWhere([min](double v) { return v >= min; }, rule);
  };
  cli::AddConnectionFlags(&app, &f.connection, {});
  app.add_option("--slots", f.slots,
                 "ranks this worker runs at once: GPUs on a GPU worker, rank slots on a CPU worker")
      ->check(at_least(1, "must be at least 1"));
  app.add_option("--kind", f.kind, "hardware kind: cpu or gpu")->check(cli::OneOf({"cpu", "gpu"}));
  app.add_option("--workdir", f.workdir,
                 "working directory (required): <workdir>/<job>/attempt-<n>/ holds job.json, "
                 "events.jsonl, stderr.log; <workdir>/worker_id keeps the worker's id")
      ->required();
  app.add_option("--checkpoint-root", f.checkpoint_root,
                 "checkpoint root (default <workdir>/checkpoints): jobs without checkpoint.dir "
                 "get <root>/<job>; share it between nodes so a requeued job resumes anywhere");
  app.add_option("--train-binary", f.train_binary,
                 "rdattn-train to launch (default: next to rdattn-worker, ../trainer/ in a build "
                 "tree, else PATH)");
  app.add_option("--mpirun", f.mpirun, "mpirun for jobs of world size > 1");
  app.add_option("--hostname", f.hostname, "hostname to register (default: gethostname)");
  app.add_option("--worker-id", f.worker_id,
                 "worker id to register with (default: <workdir>/worker_id, else assigned)");
  app.add_option("--threads-per-rank", f.threads_per_rank,
                 "threads per rank when a job does not set them (0: max(1, cores / slots))")
      ->check(at_least(0, "must not be negative"));
  app.add_flag("--once", f.once,
               "lease one job and exit when it is over (tests; default off, --once=false too)");
  app.add_option("--exit-when-idle", f.exit_when_idle,
                 "exit after this many seconds without a job (0: never)");
  app.add_option("--lease-wait", f.lease_wait, "seconds a LeaseJob long poll may wait");
  app.add_option("--stop-grace", f.stop_grace,
                 "seconds between SIGTERM and SIGKILL when the worker shuts down");
  app.add_option("--cancel-grace", f.cancel_grace,
                 "seconds between SIGTERM and SIGKILL for a cancel order without a grace");
  app.add_option("--unreachable-grace", f.unreachable_grace,
                 "seconds a job's ranks keep running while the coordinator cannot be reached "
                 "(then they checkpoint and stop; > 0)")
      ->check(NumberWhere([](double v) { return v > 0; }, "must be > 0 seconds"));
  app.add_option("--event-poll", f.event_poll, "seconds between reads of a job's events.jsonl");
  app.add_option("--max-start-failures", f.max_start_failures,
                 "after this many attempts in a row that failed at their start (job folder not "
                 "writable, ENOSPC/EIO, trainer exit 74) the worker stops leasing until a disk "
                 "probe passes (>= 0; 0: never)")
      ->check(at_least(0, "must be >= 0"));
  app.add_option("--health-probe-seconds", f.health_probe_min,
                 "first wait before an unhealthy worker probes its disks; doubles after each "
                 "failed probe (> 0)")
      ->check(NumberWhere([](double v) { return v > 0; }, "must be > 0"));
  app.add_option("--health-probe-max-seconds", f.health_probe_max,
                 "longest wait between disk probes (>= --health-probe-seconds)")
      ->check(NumberWhere([](double) { return true; }, "must be >= --health-probe-seconds"));
  app.add_option("--stall-floor-seconds", f.stall_floor,
                 "progress watchdog: a job with no event for max(this, --stall-factor x its "
                 "slowest recent step) seconds is killed and retried as 'stalled' (0: no "
                 "watchdog). Must exceed the longest evaluation or checkpoint write")
      ->check(at_least(0, "must be a number >= 0"));
  app.add_option("--stall-factor", f.stall_factor,
                 "progress watchdog: the bound's multiple of the job's slowest recent step "
                 "interval and of its slowest evaluation or checkpoint (0: the floor alone)")
      ->check(at_least(0, "must be a number >= 0"));
  app.add_option("--stall-startup-seconds", f.stall_startup,
                 "progress watchdog: the least bound before a job's first step (start, data "
                 "checks, checkpoint load, the first step) and before an evaluation, checkpoint "
                 "or test evaluation the attempt has not timed yet")
      ->check(at_least(0, "must be a number >= 0"));
  app.add_option("--metrics-listen", f.metrics_listen,
                 "serve Prometheus metrics at http://HOST:PORT/metrics (HOST an IP address; port "
                 "0 picks a free one; empty: off). docs/metrics.md")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            std::string host;
            int port = 0;
            if (text.empty() || SplitHostPort(text, &host, &port)) return "";
            return "must be HOST:PORT (port 0-65535), not '" + text + "'";
          },
          ""));
  app.add_option("--metrics-retention", f.metrics_retention,
                 "seconds a finished job's metric series are still served before they are "
                 "removed (>= 0)")
      ->check(at_least(0, "must be a number of seconds >= 0"));
  app.add_flag("--verbose", f.verbose, "debug logging (default off)");
  cli::CheckAfterParse(&app, [&f]() -> std::string {
    if (f.health_probe_max >= f.health_probe_min) return "";
    return "--health-probe-max-seconds: must be >= --health-probe-seconds";
  });
}

StatusOr<WorkerOptions> MakeWorkerOptions(const WorkerFlags& flags, const std::string& version) {
  WorkerOptions options;
  options.slots = flags.slots;
  options.kind = flags.kind == "gpu" ? pb::HARDWARE_KIND_GPU : pb::HARDWARE_KIND_CPU;
  std::error_code ec;
  fs::create_directories(flags.workdir, ec);
  if (ec) return InvalidArgumentError("--workdir " + flags.workdir + ": " + ec.message());
  options.workdir = fs::absolute(flags.workdir).lexically_normal().string();
  options.checkpoint_root = flags.checkpoint_root.empty()
                                ? JoinPath(options.workdir, "checkpoints")
                                : fs::absolute(flags.checkpoint_root).lexically_normal().string();
  const std::string train_flag = flags.train_binary;
  auto train = train_flag.empty() ? DefaultTrainBinary() : FindExecutable(train_flag);
  if (!train.ok()) return train.status().WithPrefix("--train-binary");
  options.train_binary = fs::absolute(*train).lexically_normal().string();
  options.mpirun = flags.mpirun;
  if (options.slots > 1 && !FindExecutable(options.mpirun).ok()) {
    log::Warning("mpirun '" + options.mpirun + "' not found: jobs of world size > 1 will fail");
  }
  const int threads = flags.threads_per_rank;
  options.threads_per_rank = threads > 0 ? threads : std::max(1, UsableCores() / options.slots);
  options.hostname = flags.hostname;
  if (options.hostname.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    options.hostname = host;
  }
  options.worker_id = flags.worker_id;
  options.device_name = DeviceName(options.kind == pb::HARDWARE_KIND_GPU);
  options.version = version;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && *visible) {
    std::string list = visible;
    for (size_t start = 0; start <= list.size();) {
      const size_t comma = std::min(list.find(',', start), list.size());
      if (comma > start) options.gpu_ids.push_back(list.substr(start, comma - start));
      start = comma + 1;
    }
  }
  options.once = flags.once;
  if (flags.exit_when_idle > 0) options.exit_when_idle = Seconds(flags.exit_when_idle);
  options.lease_wait = Seconds(std::max(0.1, flags.lease_wait));
  options.stop_grace = Seconds(std::max(0.0, flags.stop_grace));
  options.cancel_grace = Seconds(std::max(0.0, flags.cancel_grace));
  options.unreachable_grace = Seconds(flags.unreachable_grace);
  options.event_poll_interval = Seconds(std::max(0.01, flags.event_poll));
  options.max_start_failures = flags.max_start_failures;
  options.health_probe_min = Seconds(flags.health_probe_min);
  options.health_probe_max = Seconds(flags.health_probe_max);
  options.watchdog.floor = Seconds(flags.stall_floor);
  options.watchdog.factor = flags.stall_factor;
  options.watchdog.startup = Seconds(flags.stall_startup);

  return options;
}

}  // namespace rdattn::worker
