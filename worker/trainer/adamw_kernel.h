// The fused AdamW loop of AdamW::Step (worker/trainer/optimizer.h), and the gradient-clipping
// loops of FusedClipGradients, on raw pointers, one copy per instruction set
// (worker/trainer/adamw_kernel.inc): the baseline build and an AVX2 build chosen at run time. The
// loop is bound by its two divisions and square root per element, which AVX2 does 8 floats (4
// doubles) at a time, twice the baseline's SSE2 width.
#pragma once

#include <cstdint>

namespace rdattn::trainer::adamw {

// One tensor's scalars, in double as torch 1.13's AdamW::step computes them; the loop casts each
// to the tensor's dtype, as ATen casts a double Scalar.
struct Coefficients {
  bool apply_decay = false;  // weight_decay ≠ 0 (torch skips its mul_ otherwise)
  double decay = 1;          // 1 − lr·wd
  double beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  double sqrt_bias2 = 1;  // sqrt(1 − β2^t)
  double eps = 0;
  double neg_step = 0;  // −lr / (1 − β1^t): addcdiv_'s value
};

// Step: elements [0, n) of one parameter p, its gradient g and its moments m, v (no overlap).
// SumSquares: Σ x² in float64, element i into lane i mod 8, the 8 lanes added in a fixed tree.
// Scale: x *= coef cast to x's dtype. Bitwise the same in every build: the same IEEE operations
// in the same order, no contraction.
#define RDATTN_ADAMW_DECLARE(isa)                                                                \
  namespace isa {                                                                                \
  void Step(float* p, const float* g, float* m, float* v, int64_t n, const Coefficients& c);     \
  void Step(double* p, const double* g, double* m, double* v, int64_t n, const Coefficients& c); \
  double SumSquares(const float* x, int64_t n);                                                  \
  double SumSquares(const double* x, int64_t n);                                                 \
  void Scale(float* x, int64_t n, double coef);                                                  \
  void Scale(double* x, int64_t n, double coef);                                                 \
  }
RDATTN_ADAMW_DECLARE(base)
RDATTN_ADAMW_DECLARE(avx2)
#undef RDATTN_ADAMW_DECLARE

}  // namespace rdattn::trainer::adamw
