// The causal attention's softmax kernels for the baseline instruction set
// (model/attention_cpu_kernel.inc).
#include "model/attention_cpu_args.h"

#define RDATTN_ATTENTION_ISA base
#include "model/attention_cpu_kernel.inc"
