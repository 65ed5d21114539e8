// The CPU kernels of the fused depth read (model/depth_read.h): one pass over each source per
// token computes every route's logit products s = x_k·u_r, softmax, mixture and folded RMSNorm
// (forward), and every route's ∂L/∂α, the softmax backward, ∂L/∂x_k and the query-side
// ∂L/∂u_r = Σ_k Σ_n W[r,k,n] x_k[n] (backward). These products were BLAS GEMMs of shapes
// [B·T,D]×[D,2] and [D,B·T]×[B·T,R], which BLAS runs at a few GFLOP/s (8 ms of a 270 ms
// cpu-bench step for block's 42 dU products alone); here they reuse the source row that the
// token's mixture reads anyway.
//
// Why a kernel: on CPU the read is memory-bound, and the op-by-op form reads every source once
// per route and per op (mul, addcmul, pow, mean, sum…). Here a second route (rd's V read) costs
// one more multiply-add per element of a source already in cache, not a second pass.
//
// The kernels themselves (model/depth_read_cpu_kernel.inc) are compiled twice, for the
// baseline instruction set and for AVX2, and chosen at run time.
//
// Bits: each route's arithmetic is the same sequence of IEEE operations whatever the number of
// routes and whatever the other route holds (no reassociation; the file is compiled with
// -ffp-contract=off so no multiply-add is fused differently in the 1- and 2-route code), so a
// route of a 1-route read and the same route of a 2-route read are bitwise equal (T6).
// Reductions over tokens (∂L/∂u and the norm gain's gradient) go through fixed chunks summed in
// order, so results do not depend on the number of threads.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace rdattn::model::cpu {

// Output modes, as DepthReadFunction's `norm`: 0 none, 1 RMSNorm per route, 2 RMSNorm of the
// mean of the two routes, 3 as 1 (route 1 is projected by the caller).
struct ReadShape {
  int64_t K = 0, R = 0, N = 0, D = 0;
  int64_t norm = 0;
  double eps = 0;
};

// x: K contiguous [N,D] sources; u: [R,D] the scaled queries g⊙q_r; inv: [K,N] inverse RMS;
// n: the norm gain [D] (mode > 0). Fills s [R,K,N] (the raw products x_k·u_r), alpha [R,K,N],
// outputs (mode 2: one, else R) [N,D], and rho (one per normalised output) [N].
void ReadForward(const ReadShape& sh, const std::vector<at::Tensor>& x, const at::Tensor& u,
                 const at::Tensor& inv, const at::Tensor& n, at::Tensor& s, at::Tensor& alpha,
                 std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& rho);

struct ReadGrads {
  std::vector<at::Tensor> dx;  // [N,D] per source; undefined: not needed
  at::Tensor du;               // [R,D]: ∂L/∂u_r; undefined: not needed
  at::Tensor dinv;             // [K,N]; undefined: not needed
  at::Tensor dn;               // [D]; undefined: not needed
  at::Tensor y1;               // [N,D] mode 3: route 1's recomputed RMSNorm output; or undefined
};

// dy: per output (mode 2: one, else R), [N,D] or undefined (no gradient); mode 3's route 1 is
// the gradient already taken back through the projection. u: [R,D] the scaled queries g⊙q_r.
// The tensors of `g` that are defined on entry are filled (allocated by the caller).
void ReadBackward(const ReadShape& sh, const std::vector<at::Tensor>& x, const at::Tensor& s,
                  const at::Tensor& inv, const at::Tensor& alpha, const at::Tensor& n,
                  const std::vector<at::Tensor>& rho, const at::Tensor& u,
                  const std::vector<at::Tensor>& dy, ReadGrads& g);

// The kernels run in an AVX2 build on CPUs that have AVX2, else in the baseline build; both
// give the same bits. Tests force the baseline build to check that.
void ForceBaselineKernels(bool on);

}  // namespace rdattn::model::cpu
