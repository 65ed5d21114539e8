// The launcher's environment (launch_env.h).
#include "worker/launch_env.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace rdattn::launch {
namespace {

// A whole non-negative decimal integer up to 2^30 (no sign, no spaces), else -1.
int ParseCount(const char* text) {
  if (text == nullptr || *text < '0' || *text > '9') return -1;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 0 || v > (1L << 30)) return -1;
  return static_cast<int>(v);
}

// SLURM_TASKS_PER_NODE: "4", "4(x2)" or "4(x2),3": this node's count only when every node has
// the same (the first group covers all nodes); else -1.
int UniformTasksPerNode(const char* text) {
  if (text == nullptr) return -1;
  const std::string s(text);
  const size_t paren = s.find('(');
  const std::string head = s.substr(0, paren);
  if (s.find(',') != std::string::npos) return -1;
  if (paren != std::string::npos && (s.back() != ')' || s.compare(paren, 2, "(x") != 0)) return -1;
  return ParseCount(head.c_str());
}

struct Family {
  Launcher launcher;
  const char* world;
  const char* rank;
  const char* local_rank;
  const char* local_size;  // null: SLURM_TASKS_PER_NODE
};

constexpr Family kFamilies[] = {
    {Launcher::kOpenMpi, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {Launcher::kMpich, "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {Launcher::kSlurm, "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", nullptr},
    {Launcher::kTorchrun, "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
};

int LocalSize(const Family& f, const GetEnvFn& getenv) {
  return f.local_size != nullptr ? ParseCount(getenv(f.local_size))
                                 : UniformTasksPerNode(getenv("SLURM_TASKS_PER_NODE"));
}

}  // namespace

std::string_view LauncherName(Launcher launcher) {
  switch (launcher) {
    case Launcher::kNone:
      return "none";
    case Launcher::kOpenMpi:
      return "openmpi";
    case Launcher::kMpich:
      return "mpich";
    case Launcher::kSlurm:
      return "slurm";
    case Launcher::kTorchrun:
      return "torchrun";
  }
  return "none";
}

LaunchEnv ReadLaunchEnv() {
  return ReadLaunchEnv([](const char* name) { return std::getenv(name); });
}

LaunchEnv ReadLaunchEnv(const GetEnvFn& getenv) {
  LaunchEnv env;
  const Family* chosen = nullptr;
  for (const Family& f : kFamilies) {
    const int world = ParseCount(getenv(f.world));
    if (world >= 1) {
      chosen = &f;
      env.launcher = f.launcher;
      env.world_size = world;
      break;
    }
  }
  if (chosen == nullptr) return env;
  const int rank = ParseCount(getenv(chosen->rank));
  env.rank = rank >= 0 && rank < env.world_size ? rank : 0;
  env.local_rank = ParseCount(getenv(chosen->local_rank));
  env.local_size = LocalSize(*chosen, getenv);
  // The local rank from a second launcher that describes the same world (MPICH's PMI under
  // srun leaves MPI_LOCALRANKID unset; Slurm's SLURM_LOCALID is then right).
  for (const Family& f : kFamilies) {
    if (env.local_rank >= 0) break;
    if (&f == chosen || ParseCount(getenv(f.world)) != env.world_size) continue;
    env.local_rank = ParseCount(getenv(f.local_rank));
    if (env.local_size < 0) env.local_size = LocalSize(f, getenv);
  }
  if (env.local_size >= 0 && env.local_rank >= env.local_size) env.local_size = -1;
  return env;
}

int CudaDeviceForRank(const LaunchEnv& env, int visible, int fallback_local_rank) {
  if (visible <= 0) return -1;
  if (visible == 1) return 0;
  const int local = env.local_rank >= 0 ? env.local_rank : std::max(fallback_local_rank, 0);
  return local % visible;
}

}  // namespace rdattn::launch
