#include "common/cpu_features.h"

#include <dlfcn.h>
#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/log.h"

namespace rdattn::cpu {
namespace {

constexpr char kFixedBy[] = "RDATTN_BLAS_CORE";

// OpenBLAS's x86-64 cores by the instructions their kernels use: 0 SSE2/SSE3, 1 AVX, 2 AVX2 and
// FMA, 3 AVX-512. -1: not a name known here (nothing is done then).
int CoreLevel(const char* name) {
  if (name == nullptr) return -1;
  static const struct {
    const char* name;
    int level;
  } kCores[] = {
      {"Katmai", 0},       {"Coppermine", 0},     {"Northwood", 0},  {"Prescott", 0},
      {"Banias", 0},       {"Atom", 0},           {"Core2", 0},      {"Penryn", 0},
      {"Dunnington", 0},   {"Nehalem", 0},        {"Athlon", 0},     {"Opteron", 0},
      {"Opteron_SSE3", 0}, {"Barcelona", 0},      {"Nano", 0},       {"Bobcat", 0},
      {"Sandybridge", 1},  {"Bulldozer", 1},      {"Piledriver", 1}, {"Steamroller", 1},
      {"Excavator", 2},    {"Haswell", 2},        {"Zen", 2},        {"SkylakeX", 3},
      {"Cooperlake", 3},   {"SapphireRapids", 3},
  };
  for (const auto& c : kCores)
    if (strcasecmp(c.name, name) == 0) return c.level;
  return -1;
}

// The core the loaded OpenBLAS runs, or nullptr without OpenBLAS.
const char* OpenBlasCore() {
  using Fn = char* (*)();
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return fn != nullptr ? fn() : nullptr;
}

}  // namespace

bool HasAvx2() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = __builtin_cpu_supports("avx2") != 0;
  return has;
#else
  return false;
#endif
}

const char* BestBlasCore() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "Sandybridge";
#endif
  return nullptr;
}

const char* BlasCoreToSet(const char* detected, const char* best) {
  const int have = CoreLevel(detected), want = CoreLevel(best);
  return have >= 0 && want > have ? best : nullptr;
}

void UseBestBlasKernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  // valgrind runs an exec'd program natively unless told to follow children.
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload != nullptr && std::strstr(preload, "vgpreload") != nullptr) return;
  const char* core = OpenBlasCore();
  if (core == nullptr) return;
  const char* best = BlasCoreToSet(core, BestBlasCore());
  if (best == nullptr) return;
  auto warn = [&](const std::string& failed, int err) {
    log::Warning(std::string("OpenBLAS runs its ") + core + " kernels on a CPU that runs its " +
                 best + " ones, and " + failed + " with OPENBLAS_CORETYPE=" + best +
                 " failed: " + std::strerror(err) + "; matrix products will be slower");
  };
  // The program's own path, not /proc/self/exe: the process keeps its name (ps, pgrep -x, top
  // and mpirun's messages show the basename of what was executed).
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0 || n >= static_cast<ssize_t>(sizeof(self)) - 1) {
    warn("reading the program's path to re-execute it", errno);
    return;
  }
  self[n] = '\0';
  const std::string note = std::string(best) + " (set by rdattn: OpenBLAS chose " + core + ")";
  setenv("OPENBLAS_CORETYPE", best, 1);
  setenv(kFixedBy, note.c_str(), 1);
  execv(self, argv);
  const int err = errno;
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kFixedBy);
  warn(std::string("re-executing ") + self, err);
}

std::string BlasCore() {
  const char* core = OpenBlasCore();
  if (core == nullptr) return "";
  if (const char* fixed = std::getenv(kFixedBy); fixed != nullptr) return fixed;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr)
    return std::string(core) + " (OPENBLAS_CORETYPE)";
  return core;
}

}  // namespace rdattn::cpu
