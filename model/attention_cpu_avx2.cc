// The causal attention's softmax kernels built with -mavx2 (model/attention_cpu_kernel.inc),
// chosen at run time on CPUs that have AVX2 (model/attention.cc). Bitwise equal to the baseline
// build.
#include "model/attention_cpu_args.h"

#define RDATTN_ATTENTION_ISA avx2
#include "model/attention_cpu_kernel.inc"
