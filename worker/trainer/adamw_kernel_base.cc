// The fused AdamW loop for the baseline instruction set (worker/trainer/adamw_kernel.inc).
#include "worker/trainer/adamw_kernel.h"

#define RDATTN_ADAMW_ISA base
#include "worker/trainer/adamw_kernel.inc"
