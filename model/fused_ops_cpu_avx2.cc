// The fused RMSNorm / SwiGLU CPU kernels built with -mavx2 (model/fused_ops_cpu_kernel.inc),
// chosen at run time on CPUs that have AVX2 (model/fused_ops.cc). Bitwise equal to the baseline
// build.
#include "model/fused_ops_cpu_args.h"

#define RDATTN_FUSED_OPS_ISA avx2
#include "model/fused_ops_cpu_kernel.inc"
