#include "model/depth_read.h"

#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <string>
#include <utility>

#include "model/depth.h"
#include "model/depth_read_cpu.h"
#include "model/fused_ops.h"

namespace rdattn::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Columns of the logit product of every read: [g ⊙ q_0, g ⊙ q_1] (zeros for a 1-route read).
// One shape for every read keeps BLAS on one kernel, so that the bits of a route's logits do
// not depend on how many routes the read has (a [N,D]×[D,1] product is not bitwise a column of
// a [N,D]×[D,2] one with OpenBLAS; two columns of one product are).
constexpr int64_t kProductColumns = 2;

std::atomic<bool> cpu_kernel_enabled{true};

// The CPU kernel (model/depth_read_cpu.h) serves CPU float32/float64 reads; other devices and
// dtypes, or the kernel switched off, take the op-by-op path.
bool UseCpuKernel(const at::Tensor& x) {
  const auto dt = x.scalar_type();
  return cpu_kernel_enabled.load(std::memory_order_relaxed) && x.device().is_cpu() &&
         (dt == at::kFloat || dt == at::kDouble);
}

// Shape of a per-token scalar of a source [B,T,D]: [B,T,1].
std::vector<int64_t> TokenShape(const at::Tensor& x) {
  std::vector<int64_t> s(x.sizes().begin(), x.sizes().end());
  s.back() = 1;
  return s;
}

// The RMSNorm that follows a read, y = h · ρ · n with ρ = 1/sqrt(mean_d(h²) + eps): the same
// ops as RmsNorm (model/depth.h).
at::Tensor Normalise(const at::Tensor& h, const at::Tensor& n, double eps, at::Tensor* rho) {
  *rho = at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  at::Tensor y = h * *rho;
  return y.mul_(n);
}

// The backward of Normalise, on [N,D] views: returns dh from dy, with ∂L/∂n accumulated into
// *dn (if defined). `h` is the recomputed mixture and is overwritten (with h·ρ); `tmp` is
// scratch of h's shape.
at::Tensor NormaliseBackward(const at::Tensor& dy, at::Tensor& h, const at::Tensor& rho,
                             const at::Tensor& n, at::Tensor* dn, at::Tensor& tmp) {
  h.mul_(rho);  // ĥ = h·ρ
  if (dn->defined()) {
    at::mul_out(tmp, dy, h);
    dn->add_(tmp.sum(0));
  }
  at::Tensor t = dy * n;  // becomes dh = ρ (t − ĥ · mean_d(t ĥ))
  at::mul_out(tmp, t, h);
  const at::Tensor m = tmp.mean(-1, /*keepdim=*/true);
  t.addcmul_(h, m, -1.0);
  return t.mul_(rho);
}

// The mixture of route r: Σ_k α[r,k] · x_k.
at::Tensor Mix(at::TensorList x, const at::Tensor& a, int64_t K, const std::vector<int64_t>& tok) {
  at::Tensor h = x[0] * a.select(0, 0).view(tok);
  for (int64_t k = 1; k < K; ++k) h.addcmul_(x[k], a.select(0, k).view(tok));
  return h;
}

// inputs = [x_0 … x_{K-1}, inv_rms_0 … inv_rms_{K-1}, gain, q_0 … q_{R-1}, (norm gain), (W)].
// norm: 0 = none, outputs [h_0 … h_{R-1}]; 1 = each route normalised, [y_0 … y_{R-1}];
// 2 = the mean of the two routes normalised, [y]; 3 = as 1 with R = 2, and route 1's output
// projected, [y_0, y_1·Wᵀ] with W the last input (rd's V projection, so that y_1 is not saved).
// Then α, [R,K,B,T], not differentiable.
struct DepthReadFunction : public torch::autograd::Function<DepthReadFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, int64_t K, int64_t norm,
                               double norm_eps) {
    const int64_t R =
        static_cast<int64_t>(inputs.size()) - 2 * K - 1 - (norm > 0 ? 1 : 0) - (norm == 3 ? 1 : 0);
    TORCH_CHECK(K >= 1 && R >= 1 && R <= kProductColumns, "depth read: K=", K, " R=", R);
    TORCH_CHECK(norm >= 0 && norm <= 3 && (norm < 2 || R == 2), "depth read: norm mode ", norm);
    const at::Tensor& x0 = inputs[0];
    const auto dt = x0.scalar_type();
    const int64_t D = x0.size(-1), N = x0.numel() / D;
    const at::Tensor g = inputs[2 * K].to(dt);

    // The scaled queries, one column per route: [D, 2].
    std::vector<at::Tensor> cols;
    for (int64_t r = 0; r < kProductColumns; ++r)
      cols.push_back(r < R ? g * inputs[2 * K + 1 + r].to(dt) : at::zeros_like(g));
    const at::Tensor U = at::stack(cols, 1);
    const bool kernel = UseCpuKernel(x0);

    // Raw products s[r,k] = x_k · (g ⊙ q_r), [R,K,N]: the kernel computes them itself; op by op,
    // one GEMM per source.
    at::Tensor s = at::empty({R, K, N}, x0.options());
    std::vector<at::Tensor> inv;
    for (int64_t k = 0; k < K; ++k) {
      const at::Tensor& xk = inputs[k];
      TORCH_CHECK(xk.sizes() == x0.sizes() && xk.scalar_type() == dt,
                  "depth read: sources must share shape and dtype");
      if (!kernel) {
        const at::Tensor p = at::mm(xk.reshape({N, D}), U);  // [N, 2]
        s.select(1, k).copy_(p.narrow(1, 0, R).t());
      }
      inv.push_back(inputs[K + k].reshape({N}));
    }
    const at::Tensor inv_rms = at::stack(inv, 0);  // [K,N]

    // Per route: logits, softmax over the sources, mixture of the raw sources.
    at::Tensor alpha = at::empty({R, K, N}, x0.options());
    variable_list out;
    const auto tok = TokenShape(x0);
    // With a norm, each route is normalised as soon as it is mixed (one h alive at a time).
    const at::Tensor n = norm > 0 ? inputs[2 * K + 1 + R].to(dt).contiguous() : at::Tensor();
    std::vector<at::Tensor> rho;
    if (kernel) {
      // One pass over each source for every route (model/depth_read_cpu.h).
      std::vector<at::Tensor> xs, y(static_cast<size_t>(norm == 2 ? 1 : R));
      for (int64_t k = 0; k < K; ++k) xs.push_back(inputs[k].reshape({N, D}).contiguous());
      for (auto& t : y) t = at::empty({N, D}, x0.options());
      for (int64_t i = 0; i < (norm == 0 ? 0 : norm == 2 ? 1 : R); ++i)
        rho.push_back(at::empty({N}, x0.options()));
      cpu::ReadForward({K, R, N, D, norm, norm_eps}, xs, U.narrow(1, 0, R).t().contiguous(),
                       inv_rms.to(dt).contiguous(), n, s, alpha, y, rho);
      for (auto& t : y) out.push_back(t.view(x0.sizes()));
      if (norm == 3) out[1] = at::linear(out[1], inputs.back());
    }
    for (int64_t r = 0; r < R && !kernel; ++r) {
      alpha.select(0, r).copy_(at::softmax(s.select(0, r) * inv_rms, 0));
      at::Tensor h = Mix(inputs, alpha.select(0, r), K, tok);
      if (norm == 1 || norm == 3) {
        rho.emplace_back();
        h = Normalise(h, n, norm_eps, &rho.back());
      }
      if (norm == 3 && r == 1) h = at::linear(h, inputs.back());
      out.push_back(std::move(h));
    }
    if (norm == 2 && !kernel) {
      rho.emplace_back();
      out = {Normalise(0.5 * (out[0] + out[1]), n, norm_eps, &rho.back())};
    }
    std::vector<int64_t> ashape = {R, K};
    ashape.insert(ashape.end(), tok.begin(), tok.end() - 1);
    const at::Tensor alpha_out = alpha.view(ashape);
    out.push_back(alpha_out);

    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["K"] = K;
    ctx->saved_data["norm"] = norm;
    for (size_t i = 0; i < rho.size(); ++i) ctx->saved_data["rho" + std::to_string(i)] = rho[i];
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["s"] = s;
    ctx->saved_data["inv_rms"] = inv_rms;
    ctx->saved_data["kernel"] = kernel;
    ctx->saved_data["norm_eps"] = norm_eps;
    ctx->mark_non_differentiable({alpha_out});
    ctx->set_materialize_grads(false);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list in = ctx->get_saved_variables();
    const int64_t K = ctx->saved_data["K"].toInt();
    const int64_t norm = ctx->saved_data["norm"].toInt();
    const int64_t R =
        static_cast<int64_t>(in.size()) - 2 * K - 1 - (norm > 0 ? 1 : 0) - (norm == 3 ? 1 : 0);
    const at::Tensor alpha = ctx->saved_data["alpha"].toTensor();      // [R,K,N]
    const at::Tensor s = ctx->saved_data["s"].toTensor();              // [R,K,N]
    const at::Tensor inv_rms = ctx->saved_data["inv_rms"].toTensor();  // [K,N]
    const at::Tensor& x0 = in[0];
    const auto dt = x0.scalar_type();
    const int64_t D = x0.size(-1), N = x0.numel() / D;
    variable_list result(in.size() + 3);  // + the non-tensors K, norm, norm_eps
    const auto tok = TokenShape(x0);

    // ∂L/∂h_r: the output gradients, through the norm (recomputing h from α) if there is one.
    // Routes are processed one at a time: one ∂L/∂h_r and one recomputed h alive at a time.
    const int64_t outputs = norm == 2 ? 1 : R;
    bool any = false;
    for (int64_t i = 0; i < outputs; ++i)
      any = any || (i < static_cast<int64_t>(grads.size()) && grads[i].defined());
    if (!any) return result;
    const auto opts = x0.options();
    const auto ni = static_cast<size_t>(2 * K + 1 + R);  // the norm gain, if any
    const size_t wi = in.size() - 1;                     // the V projection (norm == 3)
    const at::Tensor n = norm > 0 ? in[ni].to(dt).contiguous() : at::Tensor();
    const bool need_dn = norm > 0 && ctx->needs_input_grad(ni);
    auto rho = [&](int64_t i) {
      return ctx->saved_data["rho" + std::to_string(i)].toTensor().reshape({N, 1});
    };
    auto dy = [&](int64_t i) { return grads[i].to(dt).reshape({N, D}); };

    const at::Tensor g = in[2 * K].to(dt);
    std::vector<at::Tensor> q;
    for (int64_t r = 0; r < R; ++r) q.push_back(in[2 * K + 1 + r].to(dt));
    std::vector<at::Tensor> cols;
    for (int64_t r = 0; r < R; ++r) cols.push_back(g * q[r]);
    const at::Tensor U = at::stack(cols, 1);  // [D,R]

    bool need_u = ctx->needs_input_grad(2 * K);
    for (int64_t r = 0; r < R; ++r) need_u = need_u || ctx->needs_input_grad(2 * K + 1 + r);
    at::Tensor dU;  // ∂L/∂u_r as columns, [D,R] (need_u)
    if (ctx->saved_data["kernel"].toBool()) {
      // The CPU kernel: ∂L/∂x_k (both paths), ∂L/∂inv_rms, ∂L/∂u and ∂L/∂n in one pass.
      std::vector<at::Tensor> xs, dys(static_cast<size_t>(outputs)), rhos;
      for (int64_t k = 0; k < K; ++k) xs.push_back(in[k].reshape({N, D}).contiguous());
      // (norm == 3: route 1's gradient is the projection's, taken back through W below.)
      for (int64_t i = 0; i < outputs; ++i)
        if (i < static_cast<int64_t>(grads.size()) && grads[i].defined() && !(norm == 3 && i == 1))
          dys[i] = dy(i).contiguous();
      for (int64_t i = 0; i < (norm == 0 ? 0 : outputs); ++i)
        rhos.push_back(rho(i).reshape({N}).contiguous());
      cpu::ReadGrads gr;
      at::Tensor dv;  // norm == 3: ∂L/∂(route 1's projected output), [N, out]
      if (norm == 3 && grads.size() > 1 && grads[1].defined()) {
        dv = grads[1].to(dt).reshape({N, in[wi].size(0)});
        dys[1] = at::mm(dv, in[wi].to(dt));
        if (ctx->needs_input_grad(wi)) gr.y1 = at::empty({N, D}, opts);
      }
      bool need_inv = false;
      for (int64_t k = 0; k < K; ++k) {
        gr.dx.push_back(ctx->needs_input_grad(k) ? at::empty({N, D}, opts) : at::Tensor());
        need_inv = need_inv || ctx->needs_input_grad(K + k);
      }
      if (need_u) gr.du = at::empty({R, D}, opts);
      if (need_inv) gr.dinv = at::empty({K, N}, opts);
      if (need_dn) gr.dn = at::empty({D}, opts);
      cpu::ReadBackward({K, R, N, D, norm, ctx->saved_data["norm_eps"].toDouble()}, xs, s,
                        inv_rms.contiguous(), alpha, n, rhos, U.t().contiguous(), dys, gr);
      for (int64_t k = 0; k < K; ++k) {
        if (gr.dx[k].defined()) result[k] = gr.dx[k].view(in[k].sizes());
        if (ctx->needs_input_grad(K + k))
          result[K + k] = gr.dinv.select(0, k).view(tok).to(in[K + k].dtype());
      }
      if (need_dn) result[ni] = gr.dn.to(in[ni].dtype());
      if (gr.y1.defined()) result[wi] = at::mm(dv.t(), gr.y1).to(in[wi].scalar_type());
      if (need_u) dU = gr.du.t();
    } else {
      // Op by op (devices other than the CPU).
      at::Tensor dn = need_dn ? at::zeros_like(n) : at::Tensor();
      at::Tensor tmp = at::empty({N, D}, opts);
      at::Tensor shared;  // norm == 2: both routes get ½ ∂L/∂h̄
      if (norm == 2 && grads[0].defined()) {
        at::Tensor h = Mix(in, alpha.select(0, 0), K, tok).view({N, D});
        h = 0.5 * (h + Mix(in, alpha.select(0, 1), K, tok).view({N, D}));
        shared = NormaliseBackward(dy(0), h, rho(0), n, &dn, tmp).mul_(0.5);
      }
      // dz[r,k] = α (dα − Σ_j α_j dα_j), dα[r,k] = G_r · x_k per token; the value path of
      // ∂L/∂x_k, Σ_r α[r,k] G_r, accumulates route by route.
      at::Tensor dz = at::zeros({R, K, N}, opts);
      at::Tensor dalpha = at::empty({K, N}, opts);
      std::vector<at::Tensor> dx(static_cast<size_t>(K));
      for (int64_t r = 0; r < R; ++r) {
        at::Tensor G;
        if (norm == 0 && grads[r].defined()) {
          G = dy(r);
        } else if ((norm == 1 || norm == 3) && grads[r].defined()) {
          at::Tensor h = Mix(in, alpha.select(0, r), K, tok).view({N, D});
          at::Tensor d = grads[r].to(dt);
          if (norm == 3 && r == 1) {
            // Through the projection: recompute y_1 = h·ρ·n (the forward's ops), then
            // ∂L/∂W = dvᵀ y_1 and ∂L/∂y_1 = dv W.
            const at::Tensor& w = in[wi];
            d = d.reshape({N, w.size(0)});
            {
              at::Tensor y = h * rho(r);
              y.mul_(n);
              if (ctx->needs_input_grad(wi)) result[wi] = at::mm(d.t(), y).to(w.scalar_type());
            }
            d = at::mm(d, w.to(dt));
          }
          G = NormaliseBackward(d.reshape({N, D}), h, rho(r), n, &dn, tmp);
        } else if (norm == 2) {
          G = shared;
        }
        if (!G.defined()) continue;
        const at::Tensor a = alpha.select(0, r);
        for (int64_t k = 0; k < K; ++k) {
          at::mul_out(tmp, G, in[k].reshape({N, D}));
          at::Tensor row = dalpha.select(0, k);
          at::sum_out(row, tmp, {-1});
          if (ctx->needs_input_grad(k)) {
            const at::Tensor ak = a.select(0, k).view({N, 1});
            if (dx[k].defined()) {
              dx[k].addcmul_(G, ak);
            } else {
              dx[k] = G * ak;
            }
          }
        }
        dz.select(0, r).copy_(a * (dalpha - (a * dalpha).sum(0, /*keepdim=*/true)));
      }
      if (dn.defined()) result[ni] = dn.to(in[ni].dtype());
      const at::Tensor W = dz * inv_rms;  // ∂L/∂s: [R,K,N]
      if (need_u) dU = at::zeros({D, R}, opts);
      for (int64_t k = 0; k < K; ++k) {
        const at::Tensor Wk = W.select(1, k).t();  // [N,R]
        if (ctx->needs_input_grad(k)) {
          // The logits' path: Σ_r W[r,k] u_r.
          if (dx[k].defined()) {
            dx[k].addmm_(Wk, U.t());
          } else {
            dx[k] = at::mm(Wk, U.t());
          }
          result[k] = dx[k].view(in[k].sizes());
          dx[k] = at::Tensor();
        }
        if (ctx->needs_input_grad(K + k))
          result[K + k] = (dz.select(1, k) * s.select(1, k)).sum(0).view(tok).to(in[K + k].dtype());
        if (need_u) dU.addmm_(in[k].reshape({N, D}).t(), Wk);
      }
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

void SetDepthReadCpuKernel(bool on) { cpu_kernel_enabled.store(on); }

bool DepthReadCpuKernel() { return cpu_kernel_enabled.load(); }

DepthSource MakeDepthSource(const at::Tensor& x, double eps) {
  DepthSource s;
  s.x = x.to(ComputeDtype(x.scalar_type()));
  s.inv_rms = FusedInvRms(s.x, eps);  // model/fused_ops.h
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
                               const std::vector<at::Tensor>& queries, const at::Tensor& gain,
                               const ReadNorm& norm) {
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
  int64_t mode = 0;
  if (norm.gain.defined()) {
    TORCH_CHECK(!norm.mean_of_routes || queries.size() == 2, "mean_of_routes needs a 2-route read");
    inputs.push_back(norm.gain);
    mode = norm.mean_of_routes ? 2 : 1;
    if (norm.v_projection.defined()) {
      TORCH_CHECK(queries.size() == 2 && !norm.mean_of_routes,
                  "v_projection needs a 2-route read with a norm per route");
      inputs.push_back(norm.v_projection);
      mode = 3;
    }
  }
  variable_list out = DepthReadFunction::apply(at::TensorList(inputs), K, mode, norm.eps);
  DepthReadResult res;
  const auto R = static_cast<int64_t>(queries.size());
  res.outputs.assign(out.begin(), out.end() - 1);
  for (int64_t r = 0; r < R; ++r) res.alphas.push_back(out.back().select(0, r));
  return res;
}

}  // namespace rdattn::model
