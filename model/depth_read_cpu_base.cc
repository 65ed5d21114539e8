// The depth-read CPU kernels for the baseline instruction set (model/depth_read_cpu_kernel.inc).
#include "model/depth_read_cpu_args.h"

#define RDATTN_DEPTH_READ_ISA base
#include "model/depth_read_cpu_kernel.inc"
