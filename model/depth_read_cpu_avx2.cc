// The depth-read CPU kernels built with -mavx2 (model/depth_read_cpu_kernel.inc), chosen at run
// time on CPUs that have AVX2 (model/depth_read_cpu.cc). Bitwise equal to the baseline build.
#include "model/depth_read_cpu_args.h"

#define RDATTN_DEPTH_READ_ISA avx2
#include "model/depth_read_cpu_kernel.inc"
