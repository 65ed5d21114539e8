// The raw-pointer interface of the fused CPU kernels of model/fused_ops.h (RMSNorm, SwiGLU). No
// ATen and no standard-library templates: the kernels are compiled once per instruction set
// (fused_ops_cpu_kernel.inc), and a translation unit built with -mavx2 must not emit inline
// library code that the linker could pick for the rest of the program (as depth_read_cpu_args.h).
#pragma once

#include <cstdint>

namespace rdattn::model::fused_cpu {

// Rows per task of the RMSNorm kernels, and the unit of the ordered reduction of the gain's
// gradient: chunk c's rows are summed in order into its own partial row, and the partial rows
// are added in chunk order, so the sum does not depend on the number of threads.
constexpr int64_t kNormRows = 64;

// Elements per task of the SwiGLU kernels, at least one row (elementwise: any split of the rows
// gives the same bits).
constexpr int64_t kSwiGluGrain = 32768;

// y = x · ρ · g per row of [N,D], ρ = 1 / sqrt(mean_d(x²) + eps), saved per row.
template <typename T>
struct NormForwardArgs {
  int64_t N, D;
  T eps;
  const T* x;  // [N,D]
  const T* g;  // [D]
  T* y;        // [N,D]
  T* rho;      // [N]
};

// dx = ρ (t − x̂ · mean_d(t x̂)), t = dy·g, x̂ = x·ρ; ∂L/∂g += dy·x̂, per chunk.
template <typename T>
struct NormBackwardArgs {
  int64_t N, D;
  const T* x;    // [N,D]
  const T* g;    // [D]
  const T* dy;   // [N,D]
  const T* rho;  // [N]
  T* dx;         // [N,D], or null: not needed
  T* dg_part;    // [chunks,D] zeroed, or null: not needed
};

// ρ = 1 / sqrt(mean_d(x²) + eps) per row of [N,D] (forward); dx = −dρ · ρ³ / D · x (backward).
template <typename T>
struct InvRmsArgs {
  int64_t N, D;
  T eps;
  const T* x;     // [N,D]
  T* inv;         // [N]: written by the forward, read by the backward
  const T* dinv;  // [N]: backward only
  T* dx;          // [N,D]: backward only
};

// Per row of ac = [a | b] ([N,2F], a and b its two halves): y = silu(a) · b ([N,F]); backward
// d(ac) = [dy · b · silu'(a) | dy · silu(a)] ([N,2F]).
template <typename T>
struct SwiGluArgs {
  int64_t F;
  const T* ac;  // [N,2F]
  const T* dy;  // [N,F]: backward only
  T* y;         // [N,F]: forward only
  T* dac;       // [N,2F]: backward only
};

// RMSNorm and the inverse RMS: chunks [c0, c1) of kNormRows rows. SwiGLU: rows [r0, r1). One set
// per instruction set.
#define RDATTN_FUSED_OPS_KERNELS                                                \
  void NormForward(const NormForwardArgs<float>& p, int64_t c0, int64_t c1);    \
  void NormForward(const NormForwardArgs<double>& p, int64_t c0, int64_t c1);   \
  void NormBackward(const NormBackwardArgs<float>& p, int64_t c0, int64_t c1);  \
  void NormBackward(const NormBackwardArgs<double>& p, int64_t c0, int64_t c1); \
  void InvRmsForward(const InvRmsArgs<float>& p, int64_t c0, int64_t c1);       \
  void InvRmsForward(const InvRmsArgs<double>& p, int64_t c0, int64_t c1);      \
  void InvRmsBackward(const InvRmsArgs<float>& p, int64_t c0, int64_t c1);      \
  void InvRmsBackward(const InvRmsArgs<double>& p, int64_t c0, int64_t c1);     \
  void SwiGluForward(const SwiGluArgs<float>& p, int64_t r0, int64_t r1);       \
  void SwiGluForward(const SwiGluArgs<double>& p, int64_t r0, int64_t r1);      \
  void SwiGluBackward(const SwiGluArgs<float>& p, int64_t r0, int64_t r1);      \
  void SwiGluBackward(const SwiGluArgs<double>& p, int64_t r0, int64_t r1);

namespace base {
RDATTN_FUSED_OPS_KERNELS
}  // namespace base
namespace avx2 {
RDATTN_FUSED_OPS_KERNELS
}  // namespace avx2
#undef RDATTN_FUSED_OPS_KERNELS

}  // namespace rdattn::model::fused_cpu
