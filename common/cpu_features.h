// What this CPU can run, for the hand-written kernels that are compiled once for the baseline
// instruction set and once with -mavx2 (model/depth_read_cpu*, model/fused_ops*,
// worker/trainer/adamw_kernel*; the CMake function rdattn_isa_kernel_sources): they call the
// AVX2 build where HasAvx2() is true. And which OpenBLAS kernels the process runs.
#pragma once

#include <string>

namespace rdattn::cpu {

// True on an x86-64 CPU with AVX2 (asked once, then cached); false elsewhere.
bool HasAvx2();

// OpenBLAS as Debian builds it carries kernels for every x86-64 core and picks one when it is
// loaded, from the CPU's family and model. A CPU newer than the OpenBLAS release is not in its
// table and may get the slowest kernels: bookworm's 0.3.21 runs its Prescott (SSE3) kernels on
// 5th-generation Xeons (family 6, model 0xCF), where an fp32 GEMM is 4-5x slower than with
// its AVX-512 kernels. OpenBLAS's documented override is the environment variable
// OPENBLAS_CORETYPE, read once when the library loads, before main.
//
// Call this first in main, before any thread or MPI starts. When OPENBLAS_CORETYPE is unset,
// the process runs OpenBLAS, and OpenBLAS chose a core below what this CPU runs, it sets
// OPENBLAS_CORETYPE to the best core the CPU runs (SkylakeX with AVX-512 F/BW/VL/DQ, Haswell
// with AVX2 and FMA, Sandybridge with AVX), sets RDATTN_BLAS_CORE to "CHOSEN (OpenBLAS chose
// DETECTED)", and executes the program again (its own path, read from /proc/self/exe, so the
// process keeps its name; the same argv; the same pid).
// It returns when there is nothing to do, under valgrind, or if the exec fails (with a
// warning: the run is correct, only slower). An OPENBLAS_CORETYPE that is set, even empty, is
// the user's choice and is left alone.
void UseBestBlasKernels(char** argv);

// The best OpenBLAS core this CPU runs ("SkylakeX", "Haswell", "Sandybridge"), or nullptr.
const char* BestBlasCore();

// The core UseBestBlasKernels sets when OpenBLAS chose `detected` on a CPU whose best core is
// `best`, or nullptr when there is nothing to do: `detected` already runs instructions as wide
// as `best`'s, either is null, or either is a name not in OpenBLAS 0.3's x86-64 table.
const char* BlasCoreToSet(const char* detected, const char* best);

// "" without OpenBLAS; else the core OpenBLAS runs, with how it was chosen when not by
// OpenBLAS itself: "SkylakeX", "SkylakeX (OPENBLAS_CORETYPE)", "SkylakeX (set by rdattn:
// OpenBLAS chose Prescott)".
std::string BlasCore();

}  // namespace rdattn::cpu
