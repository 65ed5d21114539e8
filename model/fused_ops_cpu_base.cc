// The fused RMSNorm / SwiGLU CPU kernels for the baseline instruction set
// (model/fused_ops_cpu_kernel.inc).
#include "model/fused_ops_cpu_args.h"

#define RDATTN_FUSED_OPS_ISA base
#include "model/fused_ops_cpu_kernel.inc"
