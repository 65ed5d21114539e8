// The fused AdamW loop for the baseline instruction set (worker/trainer/adamw_kernel.inc), and the
// run-time choice of the AVX2 build.
#include "worker/trainer/adamw_kernel.h"

#define RDATTN_ADAMW_ISA base
#include "worker/trainer/adamw_kernel.inc"

namespace rdattn::trainer::adamw {

bool HasAvx2() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = __builtin_cpu_supports("avx2") != 0;
  return has;
#else
  return false;
#endif
}

}  // namespace rdattn::trainer::adamw
