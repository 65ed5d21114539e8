// The raw-pointer interface of the causal attention's softmax kernels (model/attention.cc). No
// ATen and no standard-library templates: the kernels are compiled once per instruction set
// (attention_cpu_kernel.inc), and a translation unit built with -mavx2 must not emit inline
// library code that the linker could pick for the rest of the program (as fused_ops_cpu_args.h).
#pragma once

#include <cstdint>

namespace rdattn::model::attention_cpu {

// One 64-row block of the causal attention: `rows` = N·n rows of width r1 (the block's keys
// [0, r1)), row i of item b being query r0 + i, which sees keys [0, r0 + i]; the entries beyond
// are masked. Rows are independent: any split between threads gives the same bits.
//   forward:  x (the logits) becomes softmax over the row's valid keys, exact 0 beyond;
//   backward: dp becomes ds = p·(dp − Σ_j dp_j p_j) over the valid keys, exact 0 beyond.
template <typename T>
struct SoftmaxArgs {
  int64_t n;   // rows per item (the block's rows)
  int64_t r0;  // the block's first query row
  int64_t r1;  // keys per row (r0 + n): the row stride
  T* x;        // [N,n,r1]: forward in place (logits in, weights out); backward dp → ds
  const T* p;  // [N,n,r1]: backward only, the forward's weights
};

#define RDATTN_ATTENTION_CPU_KERNELS                                             \
  void SoftmaxForward(const SoftmaxArgs<float>& a, int64_t row0, int64_t row1);  \
  void SoftmaxForward(const SoftmaxArgs<double>& a, int64_t row0, int64_t row1); \
  void SoftmaxBackward(const SoftmaxArgs<float>& a, int64_t row0, int64_t row1); \
  void SoftmaxBackward(const SoftmaxArgs<double>& a, int64_t row0, int64_t row1);

namespace base {
RDATTN_ATTENTION_CPU_KERNELS
}  // namespace base
namespace avx2 {
RDATTN_ATTENTION_CPU_KERNELS
}  // namespace avx2
#undef RDATTN_ATTENTION_CPU_KERNELS

}  // namespace rdattn::model::attention_cpu
