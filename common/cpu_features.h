// What this CPU can run, for the hand-written kernels that are compiled once for the baseline
// instruction set and once with -mavx2 (model/depth_read_cpu*, model/fused_ops*,
// worker/trainer/adamw_kernel*; the CMake function rdattn_isa_kernel_sources): they call the
// AVX2 build where HasAvx2() is true.
#pragma once

namespace rdattn::cpu {

// True on an x86-64 CPU with AVX2 (asked once, then cached); false elsewhere.
bool HasAvx2();

}  // namespace rdattn::cpu
