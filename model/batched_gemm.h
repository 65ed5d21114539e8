#pragma once
// Batched matrix products for the CPU attention (model/attention.cc), straight into BLAS.
//
// LibTorch 1.13's CPU bmm and baddbmm_ run one BLAS gemm per batch item too, but reach it
// through three select() views, resolve_conj and addmm's checks per item: at the attention's
// per-(sequence, head) products that is about 2–3 µs per item and ~4,000 of the ~7,000 ATen op
// calls of a cpu-small training step (docs/benchmarks.md, "Attention's batched products").
// BatchedGemm calls the same BLAS routine (sgemm_/dgemm_, the library LibTorch itself uses) with
// the operands' own strides, once per item, without creating a tensor per item.

#include <ATen/ATen.h>

namespace rdattn::model {

// c[i] = α·a[i]·b[i] (accumulate false: c is only written, as at::bmm_out) or
// c[i] += α·a[i]·b[i] (accumulate true, as c.baddbmm_(a, b, 1, α)), for a [N,m,k], b [N,k,n],
// c [N,m,n]; α is BLAS's alpha, applied to each product (exact for a power of two). Each matrix may
// be a view (narrowed, transposed) as long as one of its last two strides is 1, and c's last one
// is. Items run in parallel under at::parallel_for, one gemm call each. At one thread the bits
// are those of bmm_out / baddbmm_ wherever LibTorch itself calls BLAS (m·k·n ≥ 400); like
// at::mm's, they may change with the thread count, as BLAS's kernels do.
//
// The direct path takes float32 and float64 CPU tensors with BLAS's gemm found in the process;
// anything else (CUDA, other dtypes, layouts BLAS cannot take, an output whose byte range meets
// an input's or whose elements overlap, a BLAS without the Fortran symbols) goes through
// at::bmm_out / baddbmm_, with the same result up to rounding.
void BatchedGemm(const at::Tensor& a, const at::Tensor& b, at::Tensor& c, bool accumulate,
                 double alpha = 1.0);

// Whether BatchedGemm takes its direct path: BLAS's gemm was found in this process and the
// switch below is on.
bool BatchedGemmDirect();

// Process-wide switch of the direct path (on by default); off, every call goes through
// at::bmm_out / baddbmm_. For tests and for benchmarks that compare the two in one process
// (rdattn_model_bench --attention-aten), like SetDepthReadCpuKernel.
void SetBatchedGemmDirect(bool on);

// How many BatchedGemm calls took each path since the process started (each call counts once,
// whatever its batch size). Tests assert with it that the products they compare really ran on
// the path they name, and the benchmark reports it; a layout check that sends the attention's
// views to LibTorch would otherwise pass every bitwise comparison unnoticed.
struct BatchedGemmCalls {
  int64_t direct = 0;
  int64_t libtorch = 0;
  // The calls between two readings (later − earlier), and their sum over several spans.
  BatchedGemmCalls operator-(const BatchedGemmCalls& earlier) const {
    return {direct - earlier.direct, libtorch - earlier.libtorch};
  }
  BatchedGemmCalls& operator+=(const BatchedGemmCalls& span) {
    direct += span.direct;
    libtorch += span.libtorch;
    return *this;
  }
};
BatchedGemmCalls BatchedGemmCallCounts();

}  // namespace rdattn::model
