#include "model/depth_read.h"

#include <torch/csrc/autograd/custom_function.h>

#include <utility>

#include "model/depth.h"

namespace rdattn::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Columns of the logit product of every read: [g ⊙ q_0, g ⊙ q_1] (zeros for a 1-route read).
// One shape for every read keeps BLAS on one kernel, so that the bits of a route's logits do
// not depend on how many routes the read has (a [N,D]×[D,1] product is not bitwise a column of
// a [N,D]×[D,2] one with OpenBLAS; two columns of one product are).
constexpr int64_t kProductColumns = 2;

// Shape of a per-token scalar of a source [B,T,D]: [B,T,1].
std::vector<int64_t> TokenShape(const at::Tensor& x) {
  std::vector<int64_t> s(x.sizes().begin(), x.sizes().end());
  s.back() = 1;
  return s;
}

// inputs = [x_0 … x_{K-1}, inv_rms_0 … inv_rms_{K-1}, gain, q_0 … q_{R-1}].
// Outputs [h_0 … h_{R-1}, α] with α [R,K,B,T] not differentiable.
struct DepthReadFunction : public torch::autograd::Function<DepthReadFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, int64_t K) {
    const int64_t R = static_cast<int64_t>(inputs.size()) - 2 * K - 1;
    TORCH_CHECK(K >= 1 && R >= 1 && R <= kProductColumns, "depth read: K=", K, " R=", R);
    const at::Tensor& x0 = inputs[0];
    const auto dt = x0.scalar_type();
    const int64_t D = x0.size(-1), N = x0.numel() / D;
    const at::Tensor g = inputs[2 * K].to(dt);

    // The scaled queries, one column per route: [D, 2].
    std::vector<at::Tensor> cols;
    for (int64_t r = 0; r < kProductColumns; ++r)
      cols.push_back(r < R ? g * inputs[2 * K + 1 + r].to(dt) : at::zeros_like(g));
    const at::Tensor U = at::stack(cols, 1);

    // Raw products s[r,k] = x_k · (g ⊙ q_r), one GEMM per source: [R,K,N].
    at::Tensor s = at::empty({R, K, N}, x0.options());
    std::vector<at::Tensor> inv;
    for (int64_t k = 0; k < K; ++k) {
      const at::Tensor& xk = inputs[k];
      TORCH_CHECK(xk.sizes() == x0.sizes() && xk.scalar_type() == dt,
                  "depth read: sources must share shape and dtype");
      const at::Tensor p = at::mm(xk.reshape({N, D}), U);  // [N, 2]
      s.select(1, k).copy_(p.narrow(1, 0, R).t());
      inv.push_back(inputs[K + k].reshape({N}));
    }
    const at::Tensor inv_rms = at::stack(inv, 0);  // [K,N]

    // Per route: logits, softmax over the sources, mixture of the raw sources.
    at::Tensor alpha = at::empty({R, K, N}, x0.options());
    variable_list out;
    const auto tok = TokenShape(x0);
    for (int64_t r = 0; r < R; ++r) {
      alpha.select(0, r).copy_(at::softmax(s.select(0, r) * inv_rms, 0));
      const at::Tensor a = alpha.select(0, r);
      at::Tensor h = x0 * a.select(0, 0).view(tok);
      for (int64_t k = 1; k < K; ++k) h.addcmul_(inputs[k], a.select(0, k).view(tok));
      out.push_back(std::move(h));
    }
    std::vector<int64_t> ashape = {R, K};
    ashape.insert(ashape.end(), tok.begin(), tok.end() - 1);
    const at::Tensor alpha_out = alpha.view(ashape);
    out.push_back(alpha_out);

    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["K"] = K;
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["s"] = s;
    ctx->saved_data["inv_rms"] = inv_rms;
    ctx->mark_non_differentiable({alpha_out});
    ctx->set_materialize_grads(false);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list in = ctx->get_saved_variables();
    const int64_t K = ctx->saved_data["K"].toInt();
    const int64_t R = static_cast<int64_t>(in.size()) - 2 * K - 1;
    const at::Tensor alpha = ctx->saved_data["alpha"].toTensor();      // [R,K,N]
    const at::Tensor s = ctx->saved_data["s"].toTensor();              // [R,K,N]
    const at::Tensor inv_rms = ctx->saved_data["inv_rms"].toTensor();  // [K,N]
    const at::Tensor& x0 = in[0];
    const auto dt = x0.scalar_type();
    const int64_t D = x0.size(-1), N = x0.numel() / D;
    variable_list result(in.size() + 1);  // + the non-tensor K

    std::vector<at::Tensor> G(static_cast<size_t>(R));
    bool any = false;
    for (int64_t r = 0; r < R; ++r) {
      if (r < static_cast<int64_t>(grads.size()) && grads[r].defined()) {
        G[r] = grads[r].to(dt).reshape({N, D});
        any = true;
      }
    }
    if (!any) return result;

    // dz[r,k] = α (dα − Σ_j α_j dα_j), dα[r,k] = G_r · x_k per token.
    at::Tensor dz = at::zeros({R, K, N}, x0.options());
    at::Tensor tmp = at::empty({N, D}, x0.options());
    at::Tensor dalpha = at::empty({K, N}, x0.options());
    for (int64_t r = 0; r < R; ++r) {
      if (!G[r].defined()) continue;
      for (int64_t k = 0; k < K; ++k) {
        at::mul_out(tmp, G[r], in[k].reshape({N, D}));
        at::Tensor row = dalpha.select(0, k);
        at::sum_out(row, tmp, {-1});
      }
      const at::Tensor a = alpha.select(0, r);
      dz.select(0, r).copy_(a * (dalpha - (a * dalpha).sum(0, /*keepdim=*/true)));
    }
    const at::Tensor W = dz * inv_rms;  // ∂L/∂s: [R,K,N]

    const at::Tensor g = in[2 * K].to(dt);
    std::vector<at::Tensor> q;
    for (int64_t r = 0; r < R; ++r) q.push_back(in[2 * K + 1 + r].to(dt));
    std::vector<at::Tensor> cols;
    for (int64_t r = 0; r < R; ++r) cols.push_back(g * q[r]);
    const at::Tensor U = at::stack(cols, 1);  // [D,R]

    bool need_u = ctx->needs_input_grad(2 * K);
    for (int64_t r = 0; r < R; ++r) need_u = need_u || ctx->needs_input_grad(2 * K + 1 + r);
    at::Tensor dU = need_u ? at::zeros({D, R}, x0.options()) : at::Tensor();
    const auto tok = TokenShape(x0);
    for (int64_t k = 0; k < K; ++k) {
      const at::Tensor xk = in[k].reshape({N, D});
      const at::Tensor Wk = W.select(1, k).t();  // [N,R]
      if (ctx->needs_input_grad(k)) {
        at::Tensor dx = at::mm(Wk, U.t());  // [N,D]: the logits' path, Σ_r W[r,k] u_r
        for (int64_t r = 0; r < R; ++r)
          if (G[r].defined()) dx.addcmul_(G[r], alpha.select(0, r).select(0, k).view({N, 1}));
        result[k] = dx.view(in[k].sizes());
      }
      if (ctx->needs_input_grad(K + k))
        result[K + k] = (dz.select(1, k) * s.select(1, k)).sum(0).view(tok).to(in[K + k].dtype());
      if (need_u) dU.addmm_(xk.t(), Wk);
    }
    if (need_u) {
      if (ctx->needs_input_grad(2 * K)) {
        at::Tensor dg = at::zeros_like(g);
        for (int64_t r = 0; r < R; ++r) dg.addcmul_(dU.select(1, r), q[r]);
        result[2 * K] = dg.to(in[2 * K].dtype());
      }
      for (int64_t r = 0; r < R; ++r)
        if (ctx->needs_input_grad(2 * K + 1 + r))
          result[2 * K + 1 + r] = (dU.select(1, r) * g).to(in[2 * K + 1 + r].dtype());
    }
    return result;
  }
};

}  // namespace

DepthSource MakeDepthSource(const at::Tensor& x, double eps) {
  DepthSource s;
  s.x = x.to(ComputeDtype(x.scalar_type()));
  s.inv_rms = at::rsqrt(s.x.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return s;
}

void DepthSources::SetPartial(const at::Tensor& partial) {
  partial_ = partial;
  partial_source_ = DepthSource{};
}

void DepthSources::PushPartial() {
  TORCH_CHECK(partial_.defined(), "block boundary with an EMPTY partial");
  if (!partial_source_.x.defined()) partial_source_ = MakeDepthSource(partial_, eps_);
  blocks_.push_back(std::move(partial_source_));
  SetPartial(at::Tensor());
}

std::vector<DepthSource> DepthSources::Sources() {
  std::vector<DepthSource> out = blocks_;
  if (partial_.defined()) {
    if (!partial_source_.x.defined()) partial_source_ = MakeDepthSource(partial_, eps_);
    out.push_back(partial_source_);
  }
  return out;
}

std::vector<at::Tensor> DepthSources::RawSources() const {
  std::vector<at::Tensor> out;
  for (const auto& b : blocks_) out.push_back(b.x);
  if (partial_.defined()) out.push_back(partial_);
  return out;
}

DepthReadResult FusedDepthRead(const std::vector<DepthSource>& sources,
                               const std::vector<at::Tensor>& queries, const at::Tensor& gain) {
  TORCH_CHECK(!sources.empty(), "depth read with no sources");
  TORCH_CHECK(!queries.empty() && static_cast<int64_t>(queries.size()) <= kProductColumns,
              "depth read takes 1 or 2 routes, got ", queries.size());
  const auto K = static_cast<int64_t>(sources.size());
  std::vector<at::Tensor> inputs;
  inputs.reserve(2 * sources.size() + 1 + queries.size());
  for (const auto& s : sources) inputs.push_back(s.x);
  for (const auto& s : sources) inputs.push_back(s.inv_rms);
  inputs.push_back(gain);
  for (const auto& q : queries) inputs.push_back(q);
  variable_list out = DepthReadFunction::apply(at::TensorList(inputs), K);
  DepthReadResult res;
  const auto R = static_cast<int64_t>(queries.size());
  for (int64_t r = 0; r < R; ++r) {
    res.outputs.push_back(out[r]);
    res.alphas.push_back(out[R].select(0, r));
  }
  return res;
}

}  // namespace rdattn::model
