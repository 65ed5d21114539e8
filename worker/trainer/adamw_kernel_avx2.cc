// The fused AdamW loop built with -mavx2 (worker/trainer/adamw_kernel.inc), run on CPUs that have
// AVX2 (cpu::HasAvx2, common/cpu_features.h). Bitwise equal to the baseline build. Off x86-64 it is
// a second baseline copy that is never chosen.
#include "worker/trainer/adamw_kernel.h"

#define RDATTN_ADAMW_ISA avx2
#include "worker/trainer/adamw_kernel.inc"
