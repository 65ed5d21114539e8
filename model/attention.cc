#include "model/attention.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include "model/attention_cpu_args.h"
#include "model/batched_gemm.h"
#include "model/cpu_kernel_dispatch.h"
#include "model/torch_compat.h"

namespace rdattn::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- RoPE ---------------------------------------------------------------------------------------

// One head row of the rotation below, d = 2·half elements.
template <typename scalar_t, bool kInverse>
void RotateOne(const scalar_t* __restrict a, scalar_t* __restrict o, const scalar_t* __restrict c,
               const scalar_t* __restrict s, int64_t half) {
  // __restrict: without it the compiler must assume `o` may alias the inputs and does not
  // vectorise the loop (2.3× slower at cpu-bench sizes).
  for (int64_t i = 0; i < half; ++i) {
    const scalar_t a1 = a[i], a2 = a[i + half];
    if constexpr (kInverse) {
      o[i] = a1 * c[i] + a2 * s[i + half];
      o[i + half] = a2 * c[i + half] + (-a1) * s[i];
    } else {
      o[i] = a1 * c[i] + (-a2) * s[i];
      o[i + half] = a2 * c[i + half] + a1 * s[i + half];
    }
  }
}

// One pass of the rotation between the projection layout [B,T,H,d] and the head layout
// [B,H,T,d]. Forward (kInverse = false), from [B,T,H,d] to [B,H,T,d], per pair (i, i + d/2):
//   y1 = x1·c1 + (−x2)·s1,  y2 = x2·c2 + x1·s2
// which is x·cos + RotateHalf(x)·sin element by element, with the same roundings. Backward
// (kInverse = true), from [B,H,T,d] to [B,T,H,d]: the gradient of that map is the inverse
// rotation, dx1 = dy1·c1 + dy2·s2, dx2 = dy2·c2 + (−dy1)·s1.
template <typename scalar_t, bool kInverse>
void RotateHeads(const scalar_t* in, scalar_t* out, const scalar_t* cos, const scalar_t* sin,
                 int64_t B, int64_t T, int64_t H, int64_t d) {
  // Rows of one (b, t): H·d elements each; a grain of a few hundred rows keeps threads busy.
  at::parallel_for(0, B * T, 256, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / T, t = row % T;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t proj = (row * H + h) * d;          // [B,T,H,d]
        const int64_t head = ((b * H + h) * T + t) * d;  // [B,H,T,d]
        RotateOne<scalar_t, kInverse>(in + (kInverse ? head : proj), out + (kInverse ? proj : head),
                                      cos + t * d, sin + t * d, d / 2);
      }
    }
  });
}

// in: [B,T,H·d] (forward) or [B,H,T,d] (backward), contiguous; returns the other layout.
at::Tensor RotateHeadsTensor(const at::Tensor& in, bool inverse, int64_t B, int64_t T, int64_t H,
                             int64_t d, const at::Tensor& cos, const at::Tensor& sin) {
  at::Tensor out =
      inverse ? at::empty({B, T, H * d}, in.options()) : at::empty({B, H, T, d}, in.options());
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "RotateHeads", [&] {
    const scalar_t* src = in.data_ptr<scalar_t>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    const scalar_t* c = cos.data_ptr<scalar_t>();
    const scalar_t* s = sin.data_ptr<scalar_t>();
    if (inverse)
      RotateHeads<scalar_t, true>(src, dst, c, s, B, T, H, d);
    else
      RotateHeads<scalar_t, false>(src, dst, c, s, B, T, H, d);
  });
  return out;
}

class RopeHeadsFunction : public torch::autograd::Function<RopeHeadsFunction> {
 public:
  // x: [B,T,H·d] contiguous; cos, sin: [T,d] contiguous, same dtype, no gradient (tables).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t heads,
                            const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["heads"] = heads;
    const int64_t B = x.size(0), T = x.size(1), d = x.size(2) / heads;
    return RotateHeadsTensor(x, false, B, T, heads, d, cos, sin);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor dy = grads[0].contiguous();  // [B,H,T,d]
    const int64_t B = dy.size(0), H = dy.size(1), T = dy.size(2), d = dy.size(3);
    TORCH_CHECK(ctx->saved_data["heads"].toInt() == H, "RopeHeads: gradient shape");
    return {RotateHeadsTensor(dy, true, B, T, H, d, saved[0], saved[1]), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// ---- causal attention ---------------------------------------------------------------------------

// Query rows per block. A block's GEMMs cover its keys [0, r1): 64 rows leave 5/8 of the full
// [T,T] product at T = 256 while each GEMM keeps a useful size ([64, r1] × [r1, 64]).
constexpr int64_t kRowBlock = 64;

std::atomic<bool> g_softmax_baseline_only{false};

// The block's causal softmax runs in rdattn's kernel (model/attention_cpu_kernel.inc) for
// contiguous CPU float32/float64 blocks; anything else (CUDA, bf16 under autocast) in ATen ops.
bool SoftmaxKernelTensor(const at::Tensor& t) {
  const auto dt = t.scalar_type();
  return t.device().is_cpu() && (dt == at::kFloat || dt == at::kDouble) && t.is_contiguous();
}

// Rows of a block per parallel task: at least ~16k elements each.
int64_t SoftmaxGrain(int64_t r1) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(r1, 1)); }

template <typename Args>
void RunSoftmax(void (*avx2)(const Args&, int64_t, int64_t),
                void (*base)(const Args&, int64_t, int64_t), const Args& a, int64_t rows) {
  RunIsaKernel(avx2, base, a, rows, SoftmaxGrain(a.r1),
               g_softmax_baseline_only.load(std::memory_order_relaxed));
}

}  // namespace

void CausalSoftmaxForward(at::Tensor& logits, int64_t r0) {
  const int64_t n = logits.size(1), r1 = logits.size(2);
  if (SoftmaxKernelTensor(logits)) {
    AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "CausalSoftmaxForward", [&] {
      const attention_cpu::SoftmaxArgs<scalar_t> a{n, r0, r1, logits.data_ptr<scalar_t>(), nullptr};
      RunSoftmax(attention_cpu::avx2::SoftmaxForward, attention_cpu::base::SoftmaxForward, a,
                 logits.size(0) * n);
    });
    return;
  }
  // ATen's composition: −inf above the diagonal of the block's own keys, then the softmax.
  const at::Tensor above =
      at::full({n, n}, -std::numeric_limits<double>::infinity(), logits.options()).triu(1);
  logits.narrow(2, r0, n).add_(above);
  logits = at::_softmax(logits, -1, false);
}

void CausalSoftmaxBackward(at::Tensor& dp, const at::Tensor& p, int64_t r0) {
  if (SoftmaxKernelTensor(dp) && SoftmaxKernelTensor(p) && p.scalar_type() == dp.scalar_type()) {
    AT_DISPATCH_FLOATING_TYPES(dp.scalar_type(), "CausalSoftmaxBackward", [&] {
      const attention_cpu::SoftmaxArgs<scalar_t> a{dp.size(1), r0, dp.size(2),
                                                   dp.data_ptr<scalar_t>(), p.data_ptr<scalar_t>()};
      RunSoftmax(attention_cpu::avx2::SoftmaxBackward, attention_cpu::base::SoftmaxBackward, a,
                 dp.size(0) * dp.size(1));
    });
    return;
  }
  // Masked entries have p = 0, hence a zero logit gradient.
  dp = at::_softmax_backward_data(dp, p, -1, p.scalar_type());
}

namespace {

// A row range of every (sequence, head) item of x [B,H,R,C] (any strides, last one 1) as the
// [N,rows,cols] operand of BatchedGemm: rows [r, r + m), transposed or not. One as_strided per
// operand instead of a chain of narrow/select/transpose views.
struct Rows {
  const at::Tensor& x;
  int64_t r, m;
  bool transposed = false;
};

// Whether x's items (b, h) are evenly spaced, so that all B·H of them are one batch.
bool Flat(const at::Tensor& x) { return x.size(1) == 1 || x.stride(0) == x.size(1) * x.stride(1); }

// The items of sequence s (or, flat, of all sequences) of `o`.
at::Tensor Items(const Rows& o, int64_t s, bool flat) {
  const at::Tensor& x = o.x;
  const int64_t n = flat ? x.size(0) * x.size(1) : x.size(1);
  const int64_t offset = x.storage_offset() + (flat ? 0 : s * x.stride(0)) + o.r * x.stride(2);
  if (o.transposed)
    return x.as_strided({n, x.size(3), o.m}, {x.stride(1), x.stride(3), x.stride(2)}, offset);
  return x.as_strided({n, o.m, x.size(3)}, {x.stride(1), x.stride(2), x.stride(3)}, offset);
}

// c = α·a·b (accumulate: c += α·a·b) for every (sequence, head) item of [B,H,·,·] operands: one
// BatchedGemm over all B·H items where every operand allows it, else one per sequence (V, Y and
// their gradients live in the projection layout [B,T,H,d], whose items are not evenly spaced).
void Product(const Rows& a, const Rows& b, const Rows& c, bool accumulate, double alpha = 1.0) {
  const bool flat = Flat(a.x) && Flat(b.x) && Flat(c.x);
  const int64_t sequences = flat ? 1 : c.x.size(0);
  for (int64_t s = 0; s < sequences; ++s) {
    at::Tensor out = Items(c, s, flat);
    BatchedGemm(Items(a, s, flat), Items(b, s, flat), out, accumulate, alpha);
  }
}

// The query and key heads of CausalAttentionFunction's inputs: q = a and k = b, or, joint,
// heads [0, H) and [H, 2H) of a [B,2H,T,d] (H = v's heads).
at::Tensor Query(const at::Tensor& a, bool joint, const at::Tensor& v) {
  return joint ? a.narrow(1, 0, v.size(1)) : a;
}
at::Tensor Key(const at::Tensor& a, const at::Tensor& b, bool joint, const at::Tensor& v) {
  return joint ? a.narrow(1, v.size(1), v.size(1)) : b;
}

class CausalAttentionFunction : public torch::autograd::Function<CausalAttentionFunction> {
 public:
  // a, b, v: [B,·,T,d] with any strides whose last is 1 (V is a view of the projection
  // [B,T,H·d]). Separate: q = a, k = b, each [B,H,T,d]. Joint: a is [B,2H,T,d], q its heads
  // [0,H) and k its heads [H,2H), and the backward gives a's gradient as one tensor (no
  // zero-filled slice gradients added up); b is a again (LibTorch 1.13's Function takes no
  // undefined input) and gets no gradient. Returns [B,H,T,d] as a view of a
  // [B,T,H,d] tensor, so that the caller's transpose back to [B,T,H·d] is a view too. Saves a,
  // b, v and each block's weights [B·H,n,r1].
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b,
                            const at::Tensor& v, double scale, bool joint) {
    const at::Tensor q = Query(a, joint, v), k = Key(a, b, joint, v);
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2);
    // The scale is the products' BLAS alpha (no pass over q or the logits). With scale = 2⁻³
    // (d = 64) it is exact: the logits equal (q·kᵀ)·scale and (q·scale)·kᵀ bit for bit, and so
    // do the gradients below.
    at::Tensor y = at::empty({B, T, H, v.size(3)}, v.options()).transpose(1, 2);
    std::vector<at::Tensor> saved = {a, b, v};
    for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
      const int64_t n = std::min(kRowBlock, T - r0), r1 = r0 + n;
      at::Tensor p = at::empty({B * H, n, r1}, q.options());
      Product({q, r0, n}, {k, 0, r1, true}, {p.view({B, H, n, r1}), 0, n}, false, scale);
      CausalSoftmaxForward(p, r0);
      Product({p.view({B, H, n, r1}), 0, n}, {v, 0, r1}, {y, r0, n}, false);
      saved.push_back(std::move(p));
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["joint"] = joint;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b_in = saved[1], &v = saved[2];
    const bool joint = ctx->saved_data["joint"].toBool();
    const at::Tensor q = Query(a, joint, v), k = Key(a, b_in, joint, v);
    const double scale = ctx->saved_data["scale"].toDouble();
    // dy arrives as the caller's [B,T,H·d] gradient seen as [B,H,T,d]: taken as it is.
    const at::Tensor dy = grads[0].stride(3) == 1 ? grads[0] : grads[0].contiguous();
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2);
    // Joint: dq and dk are the two halves of one gradient for a.
    const at::Tensor da = at::empty_like(a), db = joint ? at::Tensor() : at::empty_like(b_in);
    const at::Tensor dq = Query(da, joint, v), dk = Key(da, db, joint, v);
    at::Tensor dv = at::empty_like(v);  // V's strides: the projection's layout
    // Last block first: it sees every key, so its products write the whole of dk and dv (no
    // zero fill; BatchedGemm's write mode never reads the output, unlike baddbmm with beta = 0
    // in LibTorch 1.13's small-size kernel) and the earlier blocks add into their leading rows.
    const int64_t blocks = (T + kRowBlock - 1) / kRowBlock;
    for (int64_t b = blocks - 1; b >= 0; --b) {
      const int64_t r0 = b * kRowBlock, n = std::min(kRowBlock, T - r0), r1 = r0 + n;
      const at::Tensor& p = saved[static_cast<size_t>(3 + b)];
      at::Tensor ds = at::empty({B * H, n, r1}, dy.options());
      Product({dy, r0, n}, {v, 0, r1, true}, {ds.view({B, H, n, r1}), 0, n}, false);
      CausalSoftmaxBackward(ds, p, r0);  // dp → ds in place
      const at::Tensor ds4 = ds.view({B, H, n, r1}), p4 = p.view({B, H, n, r1});
      Product({ds4, 0, n}, {k, 0, r1}, {dq, r0, n}, false, scale);
      // The last block writes all of dk and dv (r1 = T); the earlier ones add into their rows.
      const bool add = b != blocks - 1;
      Product({ds4, 0, n, true}, {q, r0, n}, {dk, 0, r1}, add, scale);
      Product({p4, 0, n, true}, {dy, r0, n}, {dv, 0, r1}, add);
    }
    return {da, db, dv, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor RopeHeadsReference(const at::Tensor& x, int64_t heads, const at::Tensor& cos,
                              const at::Tensor& sin) {
  const at::Tensor h = x.view({x.size(0), x.size(1), heads, -1}).transpose(1, 2);
  return h * cos + RotateHalf(h) * sin;
}

at::Tensor RopeHeads(const at::Tensor& x, int64_t heads, const at::Tensor& cos,
                     const at::Tensor& sin) {
  const auto dt = x.scalar_type();
  const bool fused = x.is_cpu() && (dt == at::kFloat || dt == at::kDouble) && x.dim() == 3 &&
                     cos.is_cpu() && sin.is_cpu() && cos.scalar_type() == dt &&
                     sin.scalar_type() == dt && !cos.requires_grad() && !sin.requires_grad();
  if (!fused) return RopeHeadsReference(x, heads, cos, sin);
  const int64_t d = x.size(2) / heads;
  TORCH_CHECK(d * heads == x.size(2) && d % 2 == 0, "RopeHeads: width ", x.size(2),
              " is not heads × an even head width");
  TORCH_CHECK(
      cos.dim() == 2 && cos.size(0) == x.size(1) && cos.size(1) == d && sin.sizes() == cos.sizes(),
      "RopeHeads: tables ", cos.sizes(), " for ", x.sizes());
  return RopeHeadsFunction::apply(x.contiguous(), heads, cos.contiguous(), sin.contiguous());
}

at::Tensor CausalAttentionReference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    double scale) {
  const int64_t T = q.size(-2);
  const at::Tensor att = at::matmul(q, k.transpose(-2, -1)) * scale;
  const at::Tensor mask =
      at::ones({T, T}, at::TensorOptions().dtype(at::kBool).device(q.device())).triu(1);
  return at::matmul(
      at::softmax(att.masked_fill(mask, -std::numeric_limits<double>::infinity()), -1), v);
}

namespace {
std::atomic<AttentionKernel> g_attention_kernel{AttentionKernel::kAuto};
}  // namespace

void SetAttentionKernel(AttentionKernel kernel) {
  if (kernel == AttentionKernel::kSdpa)
    TORCH_CHECK(torch_compat::HasSdpa(), "attention kernel sdpa: this LibTorch (",
                torch_compat::TorchVersion(),
                ") has no scaled_dot_product_attention with a scale "
                "(2.1 or newer has it)");
  g_attention_kernel.store(kernel);
}

AttentionKernel GetAttentionKernel() { return g_attention_kernel.load(); }

void ForceBaselineSoftmaxKernel(bool on) { g_softmax_baseline_only.store(on); }

bool UsesSdpa(c10::DeviceType device) {
  switch (g_attention_kernel.load()) {
    case AttentionKernel::kSdpa:
      return true;
    case AttentionKernel::kRdattn:
      return false;
    case AttentionKernel::kAuto:
      break;
  }
  return device == c10::DeviceType::CUDA && torch_compat::HasSdpa();
}

std::string_view AttentionKernelName(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kRdattn:
      return "rdattn";
    case AttentionKernel::kSdpa:
      return "sdpa";
    case AttentionKernel::kAuto:
      break;
  }
  return "auto";
}

namespace {

// Under autocast, ATen's bmm would run the products in the autocast dtype (bf16), whatever
// dtype RoPE's tables gave q and k; BatchedGemm is not an autocast op, so the inputs take that
// dtype here (as autocast casts them: float32 and reduced floats, never float64).
at::Tensor PrepareOperand(const at::Tensor& t) {
  const std::optional<at::ScalarType> cast = torch_compat::AutocastDtype(t.device().type());
  const bool eligible = t.is_floating_point() && t.scalar_type() != at::kDouble;
  const at::Tensor r = cast.has_value() && eligible ? t.to(*cast) : t;
  return r.stride(3) == 1 ? r : r.contiguous();  // BatchedGemm's operands: rows of stride 1
}

}  // namespace

at::Tensor CausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           double scale) {
  // LibTorch's fused causal attention (flash / memory-efficient on CUDA, its flash CPU kernel on
  // the CPU), when selected (SetAttentionKernel) or by default on CUDA with LibTorch >= 2.1.
  if (UsesSdpa(q.device().type())) return torch_compat::CausalSdpa(q, k, v, scale);
  return CausalAttentionFunction::apply(PrepareOperand(q), PrepareOperand(k), PrepareOperand(v),
                                        scale, false);
}

at::Tensor CausalAttention(const at::Tensor& qk, const at::Tensor& v, double scale) {
  const int64_t H = v.size(1);
  TORCH_CHECK(qk.dim() == 4 && v.dim() == 4 && qk.size(1) == 2 * H, "CausalAttention: qk ",
              qk.sizes(), " is not the [B,2H,T,d] query and key heads of v ", v.sizes());
  if (UsesSdpa(qk.device().type()))
    return torch_compat::CausalSdpa(qk.narrow(1, 0, H), qk.narrow(1, H, H), v, scale);
  const at::Tensor a = PrepareOperand(qk);
  return CausalAttentionFunction::apply(a, a, PrepareOperand(v), scale, true);
}

}  // namespace rdattn::model
