#include "model/batched_gemm.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

namespace rdattn::model {
namespace {

// The Fortran BLAS gemm, as LibTorch's own CPU BLAS calls it; the two trailing lengths are the
// hidden lengths of the character arguments (ignored by C implementations such as OpenBLAS).
template <typename T>
using GemmFn = void (*)(const char* transa, const char* transb, const int* m, const int* n,
                        const int* k, const T* alpha, const T* a, const int* lda, const T* b,
                        const int* ldb, const T* beta, T* c, const int* ldc, std::size_t,
                        std::size_t);

// Looked up once in the process's global scope (LibTorch's CPU library needs libblas.so.3, so
// it is there whenever LibTorch does its products with it); null when absent.
template <typename T>
GemmFn<T> Gemm() {
  static const GemmFn<T> fn = reinterpret_cast<GemmFn<T>>(
      dlsym(RTLD_DEFAULT, std::is_same_v<T, float> ? "sgemm_" : "dgemm_"));
  return fn;
}

bool FitsInt(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

// The BLAS view of one matrix x [.., r, c] of a batch: row-major (last stride 1) or
// column-major (middle stride 1), with its leading dimension. False when neither fits.
struct Layout {
  bool row_major = true;
  int64_t ld = 0;
};
bool LayoutOf(const at::Tensor& x, Layout* out) {
  const int64_t r = x.size(1), c = x.size(2), s_r = x.stride(1), s_c = x.stride(2);
  if (s_c == 1 && s_r >= std::max<int64_t>(1, c) && FitsInt(s_r)) {
    *out = {true, s_r};
    return true;
  }
  if (s_r == 1 && s_c >= std::max<int64_t>(1, r) && FitsInt(s_c)) {
    *out = {false, s_c};
    return true;
  }
  return false;
}

// The half-open byte range [first, end) that a tensor's elements span (every stride is
// non-negative in ATen); empty for a tensor without elements.
std::pair<std::uintptr_t, std::uintptr_t> Span(const at::Tensor& t) {
  const auto first = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  if (t.numel() == 0) return {first, first};
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {first, first + static_cast<std::uintptr_t>((last + 1) * t.element_size())};
}

// BLAS's output must not share memory with its inputs; such calls are LibTorch's to handle.
// The test is on the byte ranges the two span, so it holds for any views (narrowed rows,
// transposes), not only for dense tensors as at::get_overlap_status's does (that one answers
// "too hard" for every narrowed view, which is what the attention passes).
bool Disjoint(const at::Tensor& out, const at::Tensor& in) {
  const auto [o0, o1] = Span(out);
  const auto [i0, i1] = Span(in);
  return o1 <= i0 || i1 <= o0;
}

// No two elements of c share memory: with its dimensions of more than one element sorted by
// stride, each stride is at least the previous one times its size (the sufficient condition;
// at::has_internal_overlap answers "too hard" for narrowed views, so it cannot be used here).
bool NoInternalOverlap(const at::Tensor& c) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int64_t d = 0; d < c.dim(); ++d)
    if (c.size(d) > 1) dims.emplace_back(c.stride(d), c.size(d));
  std::sort(dims.begin(), dims.end());
  int64_t need = 1;
  for (const auto& [stride, size] : dims) {
    if (stride < need) return false;
    need = stride * size;
  }
  return true;
}

template <typename T>
void Direct(const at::Tensor& a, const at::Tensor& b, at::Tensor& c, bool accumulate, double alpha,
            const Layout& la, const Layout& lb, const Layout& lc) {
  const GemmFn<T> gemm = Gemm<T>();
  const int64_t N = c.size(0);
  const int m = static_cast<int>(c.size(1)), n = static_cast<int>(c.size(2));
  const int k = static_cast<int>(a.size(2));
  // Row-major c [m,n] is column-major cᵀ [n,m], and cᵀ = bᵀ·aᵀ: BLAS's first operand is b.
  // A row-major b [k,n] is, read column-major, the [n,k] matrix bᵀ itself (no transpose);
  // a column-major one is b (transpose). Likewise a as the second operand.
  const char ta = lb.row_major ? 'N' : 'T', tb = la.row_major ? 'N' : 'T';
  const int lda = static_cast<int>(lb.ld), ldb = static_cast<int>(la.ld);
  const int ldc = static_cast<int>(lc.ld);
  const T scale = static_cast<T>(alpha), beta = accumulate ? T(1) : T(0);
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  T* pc = c.data_ptr<T>();
  const int64_t sa = a.stride(0), sb = b.stride(0), sc = c.stride(0);
  // A grain of one item: each item is a full gemm (≥ tens of µs at the attention's sizes).
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      gemm(&ta, &tb, &n, &m, &k, &scale, pb + i * sb, &lda, pa + i * sa, &ldb, &beta, pc + i * sc,
           &ldc, 1, 1);
    }
  });
}

std::atomic<bool> direct_enabled{true};
std::atomic<int64_t> direct_calls{0}, libtorch_calls{0};

}  // namespace

bool BatchedGemmDirect() {
  return direct_enabled.load() && Gemm<float>() != nullptr && Gemm<double>() != nullptr;
}

void SetBatchedGemmDirect(bool on) { direct_enabled.store(on); }

BatchedGemmCalls BatchedGemmCallCounts() {
  return {direct_calls.load(std::memory_order_relaxed),
          libtorch_calls.load(std::memory_order_relaxed)};
}

void BatchedGemm(const at::Tensor& a, const at::Tensor& b, at::Tensor& c, bool accumulate,
                 double alpha) {
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3 && c.dim() == 3, "BatchedGemm: a ", a.sizes(), ", b ",
              b.sizes(), ", c ", c.sizes(), " are not all [N,rows,cols]");
  TORCH_CHECK(a.size(0) == c.size(0) && b.size(0) == c.size(0) && a.size(1) == c.size(1) &&
                  b.size(2) == c.size(2) && a.size(2) == b.size(1),
              "BatchedGemm: shapes a ", a.sizes(), " · b ", b.sizes(), " do not give c ",
              c.sizes());
  TORCH_CHECK(alpha == 1.0 || c.is_floating_point(), "BatchedGemm: alpha ", alpha,
              " on a non-floating output (", c.scalar_type(), ")");
  const at::ScalarType dt = c.scalar_type();
  Layout la, lb, lc;
  const bool direct = direct_enabled.load() && a.is_cpu() && b.is_cpu() && c.is_cpu() &&
                      (dt == at::kFloat || dt == at::kDouble) && a.scalar_type() == dt &&
                      b.scalar_type() == dt && !a.is_conj() && !b.is_conj() && !c.is_conj() &&
                      FitsInt(c.size(1)) && FitsInt(c.size(2)) && FitsInt(a.size(2)) &&
                      c.numel() > 0 && LayoutOf(a, &la) && LayoutOf(b, &lb) && LayoutOf(c, &lc) &&
                      lc.row_major && Disjoint(c, a) && Disjoint(c, b) && NoInternalOverlap(c) &&
                      (dt == at::kFloat ? Gemm<float>() != nullptr : Gemm<double>() != nullptr);
  if (!direct) {
    libtorch_calls.fetch_add(1, std::memory_order_relaxed);
    if (accumulate) {
      c.baddbmm_(a, b, 1, alpha);
    } else {
      at::bmm_out(c, a, b);
      if (alpha != 1.0) c.mul_(alpha);
    }
    return;
  }
  direct_calls.fetch_add(1, std::memory_order_relaxed);
  if (dt == at::kFloat) {
    Direct<float>(a, b, c, accumulate, alpha, la, lb, lc);
  } else {
    Direct<double>(a, b, c, accumulate, alpha, la, lb, lc);
  }
}

}  // namespace rdattn::model
