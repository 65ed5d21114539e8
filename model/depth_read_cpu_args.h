// The raw-pointer interface of the depth-read CPU kernels (model/depth_read_cpu.h). No ATen and
// no standard-library templates: the kernels are compiled once per instruction set
// (depth_read_cpu_kernel.inc), and a translation unit built with -mavx2 must not emit inline
// library code that the linker could pick for the rest of the program.
#pragma once

#include <cstdint>

namespace rdattn::model::cpu {

// Tokens per task, and the unit of the ordered reduction of the norm gain's gradient.
constexpr int64_t kChunk = 64;

// Shapes: K sources, R routes, N tokens, width D; mode as DepthReadFunction's `norm`.
template <typename T>
struct ForwardArgs {
  int64_t K, R, N, D, mode;
  T eps;
  const T* const* x;  // K × [N,D]
  const T* u;         // [R,D]: the scaled queries g⊙q_r
  const T* inv;       // [K,N]
  const T* n;         // [D] or null
  T* s;               // [R,K,N]: the raw products x_k·u_r (written)
  T* alpha;           // [R,K,N]
  T* const* out;      // outputs × [N,D]
  T* const* rho;      // normalised outputs × [N]
};

template <typename T>
struct BackwardArgs {
  int64_t K, R, N, D, mode;
  const T* const* x;    // K × [N,D]
  const T* const* dy;   // outputs × [N,D], null: no gradient
  const T* const* rho;  // normalised outputs × [N]
  const T* s;           // [R,K,N]
  const T* inv;         // [K,N]
  const T* alpha;       // [R,K,N]
  const T* n;           // [D] or null
  const T* u;           // [R,D]
  T* const* dx;         // K × [N,D], null: not needed
  T* dinv;              // [K,N] or null
  T* du_part;           // [chunks,R,D] zeroed, or null: ∂L/∂u_r = Σ_k Σ_n W[r,k,n] x_k[n]
  T* dn_part;           // [chunks,D] zeroed, or null
  T* y1;                // [N,D] or null
};

// Per-task scratch: a, dz, wv [R·K]; z [K]; h, G [R·D]; hb [D]; xr [K] (a token's source rows).
template <typename T>
struct Scratch {
  T *a, *dz, *wv, *z, *h, *G, *hb;
  const T** xr;
};

// Chunks [c0, c1) of kChunk tokens. One set per instruction set.
#define RDATTN_DEPTH_READ_KERNELS                                                               \
  void Forward(const ForwardArgs<float>& p, const Scratch<float>& w, int64_t c0, int64_t c1);   \
  void Forward(const ForwardArgs<double>& p, const Scratch<double>& w, int64_t c0, int64_t c1); \
  void Backward(const BackwardArgs<float>& p, const Scratch<float>& w, int64_t c0, int64_t c1); \
  void Backward(const BackwardArgs<double>& p, const Scratch<double>& w, int64_t c0, int64_t c1);

namespace base {
RDATTN_DEPTH_READ_KERNELS
}  // namespace base
namespace avx2 {
RDATTN_DEPTH_READ_KERNELS
}  // namespace avx2
#undef RDATTN_DEPTH_READ_KERNELS

}  // namespace rdattn::model::cpu
