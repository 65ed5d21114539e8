// Fused operators of the transformer sublayers (issue 11): RMSNorm, the SwiGLU product and the
// inverse RMS of a depth-read source, each a custom autograd function whose CPU float32/float64
// forward and backward are one pass of a hand-written loop (model/fused_ops_cpu_kernel.inc)
// instead of a chain of small ATen ops (pow, mean, rsqrt, mul, silu, their backwards and the
// temporaries between them).
//
// Why: on the CPU, the standard arm's training step spent ~30 ms of ~300 outside its GEMMs in
// these elementwise ops, each a full pass over a [tokens, D] or [tokens, F] tensor.
//
// Other devices and dtypes (CUDA, bf16, fp16), or the kernels switched off, take the plain
// composition: RmsNorm (model/depth.h), InvRms and SwiGlu below. The plain composition is the
// reference the tests hold the kernels to.
//
// Bits: the kernels are compiled for the baseline instruction set and for AVX2 and chosen at run
// time; both builds give the same bits, and so do all thread counts (sums over D use 8 fixed
// lanes added in a fixed tree; the gain's gradient is summed over fixed chunks of rows in
// order). Results differ from the plain composition's in the last bits only (its reductions
// and its exp are ATen's).
#pragma once

#include <ATen/core/Tensor.h>

namespace rdattn::model {

// g ⊙ x / sqrt(mean_d(x²) + eps) over the last axis, as RmsNorm (model/depth.h): same result
// dtype (float64 stays float64, the rest computes in float32). The backward saves x (by
// reference) and the per-row inverse RMS only.
at::Tensor FusedRmsNorm(const at::Tensor& x, const at::Tensor& gain, double eps);

// 1 / sqrt(mean_d(x²) + eps) over the last axis, keeping it ([..., D] -> [..., 1]): the key norm
// of a depth-read source (model/depth_read.h). The backward saves x (by reference) and the
// result, and computes ∂L/∂x = −∂L/∂ρ · ρ³ · x / D in one pass. InvRms is the plain composition
// (rsqrt, mean, pow).
at::Tensor FusedInvRms(const at::Tensor& x, double eps);
at::Tensor InvRms(const at::Tensor& x, double eps);

// silu(a) ⊙ b, the gated product of the SwiGLU MLP, for ac = [a | b] the output of one GEMM with
// the gate and up weights stacked ([..., 2F] -> [..., F]; a = ac[..., :F], b = ac[..., F:]). The
// backward saves ac (by reference), recomputes the sigmoid and writes ∂L/∂ac in one pass: one
// tensor, so that autograd runs one dX GEMM for both projections. SwiGlu is the plain
// composition (at::silu on one half times the other). The last axis must be even.
at::Tensor FusedSwiGlu(const at::Tensor& ac);
at::Tensor SwiGlu(const at::Tensor& ac);

// Switches the CPU kernels off (the plain composition everywhere) or back on; on by default.
// For tests and benchmarks.
void SetFusedCpuKernels(bool on);
bool FusedCpuKernels();

// The kernels run in an AVX2 build on CPUs that have AVX2, else in the baseline build; both
// give the same bits. Tests force the baseline build to check that.
void ForceBaselineFusedKernels(bool on);

}  // namespace rdattn::model
