#include "model/gpt.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "common/splitmix64.h"
#include "common/strings.h"
#include "model/attention.h"
#include "model/fused_ops.h"
#include "model/torch_compat.h"

namespace rdattn::model {
namespace {

// Fills `param` from N(0, std) drawn in float32 on the CPU from `gen`, whatever the parameter's
// dtype and device, so that one seed gives the same weights everywhere.
void DrawNormal(at::Tensor& param, double std, at::Generator& gen) {
  at::Tensor draw = at::empty(param.sizes(), at::TensorOptions().dtype(at::kFloat));
  draw.normal_(0.0, std, gen);
  c10::NoGradGuard no_grad;
  param.copy_(draw);
}

void Fill(at::Tensor& param, double value) {
  c10::NoGradGuard no_grad;
  param.fill_(value);
}

// RoPE tables for T positions and head width dh, rotate-half convention: dimension i pairs
// with i + dh/2. Returns cos, sin of shape [T, dh] in dtype `dt`.
std::pair<at::Tensor, at::Tensor> RopeTables(int64_t T, int64_t dh, double theta, at::ScalarType dt,
                                             at::Device device) {
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor inv_freq =
      at::pow(theta, -at::arange(0, dh, 2, f64) / static_cast<double>(dh));  // [dh/2]
  const at::Tensor pos = at::arange(T, f64);
  const at::Tensor ang = at::outer(pos, inv_freq);  // [T, dh/2]
  const at::Tensor full = at::cat({ang, ang}, -1);  // [T, dh]
  return {at::cos(full).to(device, dt), at::sin(full).to(device, dt)};
}

// residual + y·wᵀ, the writeback of a sublayer's output projection. On the CPU, with one dtype,
// it is one GEMM whose C is a copy of the residual (at::addmm, beta = 1) instead of a GEMM into
// zeros and an add over [B,T,D] (issue 26: the adds were the largest non-GEMM op of a step).
// Elsewhere (CUDA; under autocast, which would run addmm's residual in bf16) the plain sum.
// Undefined residual (an EMPTY partial): the projection alone.
at::Tensor ResidualLinear(const at::Tensor& residual, const at::Tensor& y, const at::Tensor& w) {
  if (!residual.defined()) return at::linear(y, w);
  const auto dt = residual.scalar_type();
  if (!residual.device().is_cpu() || y.scalar_type() != dt || w.scalar_type() != dt ||
      torch_compat::AutocastDtype(c10::DeviceType::CPU).has_value())
    return residual + at::linear(y, w);
  const int64_t out = w.size(0);
  return at::addmm(residual.reshape({-1, out}), y.reshape({-1, y.size(-1)}), w.t())
      .view(residual.sizes());
}

}  // namespace

LayerImpl::LayerImpl(const ModelConfig& cfg) {
  const int64_t D = cfg.width, F = cfg.ffn_hidden;
  wq = register_parameter("wq", at::empty({D, D}));
  wk = register_parameter("wk", at::empty({D, D}));
  wv = register_parameter("wv", at::empty({D, D}));
  wo = register_parameter("wo", at::empty({D, D}));
  wgate = register_parameter("wgate", at::empty({F, D}));
  wup = register_parameter("wup", at::empty({F, D}));
  wdown = register_parameter("wdown", at::empty({D, F}));
  attn_norm = register_parameter("attn_norm", at::ones({D}));
  mlp_norm = register_parameter("mlp_norm", at::ones({D}));
  if (HasDepthRead(cfg.arm)) {
    q_attn = register_parameter("q_attn", at::zeros({D}));
    attn_key_norm = register_parameter("attn_key_norm", at::ones({D}));
    q_mlp = register_parameter("q_mlp", at::zeros({D}));
    mlp_key_norm = register_parameter("mlp_key_norm", at::ones({D}));
  }
  if (HasTrainedVQuery(cfg.arm)) q_v = register_parameter("q_v", at::zeros({D}));
  if (cfg.arm == Arm::kFrozenV) q_v = register_buffer("q_v", at::zeros({D}));
  if (HasSecondQuery(cfg.arm)) q_b = register_parameter("q_b", at::zeros({D}));
}

GptImpl::GptImpl(const ModelConfig& cfg, uint64_t init_seed) : cfg_(cfg) {
  const auto errors = cfg.Validate();
  if (!errors.empty())
    throw std::invalid_argument("invalid model config: " + JoinFieldErrors(errors));
  const int64_t D = cfg.width;
  emb = register_parameter("emb", at::empty({cfg.vocab_size, D}));
  final_norm = register_parameter("final_norm", at::ones({D}));
  if (HasDepthRead(cfg.arm)) {
    q_final = register_parameter("q_final", at::zeros({D}));
    final_key_norm = register_parameter("final_key_norm", at::ones({D}));
  }
  for (int64_t l = 0; l < cfg.layers; ++l)
    layers_.push_back(register_module("l" + std::to_string(l), Layer(cfg)));
  Initialize(init_seed);
}

void GptImpl::Initialize(uint64_t init_seed) {
  // One generator, one fixed order, and only the matrices draw from it: the embedding, then per
  // layer W_Q, W_K, W_V, W_O, W_gate, W_up, W_down. Gains are 1; pseudo-queries are 0.
  at::Generator gen = at::detail::createCPUGenerator(init_seed);
  const double std = 0.02;
  const double out_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg_.layers));
  DrawNormal(emb, std, gen);
  Fill(final_norm, 1.0);
  if (q_final.defined()) Fill(q_final, 0.0);
  if (final_key_norm.defined()) Fill(final_key_norm, 1.0);
  for (auto& layer : layers_) {
    DrawNormal(layer->wq, std, gen);
    DrawNormal(layer->wk, std, gen);
    DrawNormal(layer->wv, std, gen);
    DrawNormal(layer->wo, out_std, gen);
    DrawNormal(layer->wgate, std, gen);
    DrawNormal(layer->wup, std, gen);
    DrawNormal(layer->wdown, out_std, gen);
    Fill(layer->attn_norm, 1.0);
    Fill(layer->mlp_norm, 1.0);
    for (at::Tensor* t : {&layer->q_attn, &layer->q_mlp, &layer->q_v, &layer->q_b})
      if (t->defined()) Fill(*t, 0.0);
    for (at::Tensor* t : {&layer->attn_key_norm, &layer->mlp_key_norm})
      if (t->defined()) Fill(*t, 1.0);
  }
  if (cfg_.arm == Arm::kAverageAsym) {
    // The second query breaks the symmetry of `average`; it has its own generator so that the
    // shared parameters above are unchanged.
    at::Generator asym =
        at::detail::createCPUGenerator(SplitMix64(init_seed ^ 0xA5A5A5A5ULL).Next());
    for (auto& layer : layers_) DrawNormal(layer->q_b, 0.01, asym);
  }
}

std::vector<at::Tensor> GptImpl::DecayParameters() {
  std::vector<at::Tensor> out;
  for (auto& p : parameters())
    if (p.dim() >= 2) out.push_back(p);
  return out;
}

std::vector<at::Tensor> GptImpl::NoDecayParameters() {
  std::vector<at::Tensor> out;
  for (auto& p : parameters())
    if (p.dim() < 2) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> GptImpl::SharedParameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : named_parameters()) {
    const std::string& name = item.key();
    const auto dot = name.rfind('.');
    const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
    if (leaf == "q_v" || leaf == "q_b") continue;
    out.emplace_back(name, item.value());
  }
  return out;
}

at::Tensor GptImpl::Loss(const at::Tensor& logits, const at::Tensor& targets) {
  const int64_t V = logits.size(-1);
  return at::cross_entropy_loss(logits.reshape({-1, V}).to(ComputeDtype(logits.scalar_type())),
                                targets.reshape({-1}));
}

at::Tensor GptImpl::Attention(const LayerImpl& layer, const at::Tensor& x_qk,
                              const at::Tensor& v_proj, const at::Tensor& cos,
                              const at::Tensor& sin, const at::Tensor& residual) const {
  const int64_t B = x_qk.size(0), T = x_qk.size(1), H = cfg_.heads, dh = cfg_.head_dim();
  // Q and K in one GEMM against [wq; wk] (concatenated here: the parameters stay separate), the
  // same in every arm; V is its own GEMM (never a fused QKV): V's input differs by arm, and one
  // code path keeps RD with q_v = q_attn bitwise equal to Block. The V GEMM is the caller's
  // (the rd arms' fused read computes it, with the same at::linear). RoPE rotates the 2H heads
  // in one pass; the attention reads q = heads [0,H), k = heads [H,2H) of that one tensor and
  // gives it one gradient.
  const at::Tensor qk = RopeHeads(at::linear(x_qk, at::cat({layer.wq, layer.wk})), 2 * H, cos,
                                  sin);  // [B,2H,T,dh]
  const at::Tensor v = v_proj.view({B, T, H, dh}).transpose(1, 2);
  const at::Tensor y = CausalAttention(qk, v, 1.0 / std::sqrt(static_cast<double>(dh)));
  return ResidualLinear(residual, y.transpose(1, 2).reshape({B, T, cfg_.width}), layer.wo);
}

at::Tensor GptImpl::Mlp(const LayerImpl& layer, const at::Tensor& x,
                        const at::Tensor& residual) const {
  // silu(x·W_gateᵀ) ⊙ (x·W_upᵀ): one GEMM against the gate and up weights stacked inside forward
  // (the parameters stay two) gives [gate | up], one fused pass (model/fused_ops.h) forms the
  // product, and its backward's one ∂L/∂[gate | up] makes one dX GEMM, with no add of two
  // (issue 26). One code path for every arm, so that rd with q_v = q_attn stays bitwise equal to
  // block (T6).
  const at::Tensor ac = at::linear(x, at::cat({layer.wgate, layer.wup}));  // [B,T,2F]
  return ResidualLinear(residual, FusedSwiGlu(ac), layer.wdown);
}

ForwardOutput GptImpl::ForwardStandard(const at::Tensor& e, const at::Tensor& cos,
                                       const at::Tensor& sin) {
  // The pre-norms and the final norm are the fused RMSNorm (model/fused_ops.h): one pass per row
  // forward and backward instead of pow, mean, rsqrt and three products and their backwards.
  at::Tensor x = e;
  for (auto& layer : layers_) {
    const at::Tensor h = FusedRmsNorm(x, layer->attn_norm, cfg_.norm_eps);
    x = Attention(*layer, h, at::linear(h, layer->wv), cos, sin, x);
    x = Mlp(*layer, FusedRmsNorm(x, layer->mlp_norm, cfg_.norm_eps), x);
  }
  ForwardOutput out;
  out.logits = at::linear(FusedRmsNorm(x, final_norm, cfg_.norm_eps), emb);
  return out;
}

ForwardOutput GptImpl::Forward(const at::Tensor& tokens, const ForwardOptions& opts) {
  TORCH_CHECK(tokens.dim() == 2, "tokens must be [B,T], got ", tokens.sizes());
  const int64_t T = tokens.size(1);
  TORCH_CHECK(T >= 1 && T <= cfg_.context, "sequence length ", T,
              " outside [1, context=", cfg_.context, "]");
  const at::Tensor e = at::embedding(emb, tokens);  // [B,T,D]
  auto [cos, sin] = RopeTables(T, cfg_.head_dim(), cfg_.rope_theta, ComputeDtype(emb.scalar_type()),
                               emb.device());
  if (cfg_.arm == Arm::kStandard) return ForwardStandard(e, cos, sin);

  ForwardOutput out;
  auto record = [&](int64_t layer, RouteSite site, const at::Tensor& alpha) {
    if (opts.capture_routes) out.routes.push_back({layer, site, alpha.detach()});
  };
  const int64_t P = cfg_.layers_per_block();
  const double eps = cfg_.norm_eps, key_eps = cfg_.key_norm_eps;
  // The sources of this forward pass, b_0 = e, b_1, … and the current block's partial sum,
  // each cast and RMS-normalised once (model/depth_read.h).
  DepthSources sources(key_eps);
  sources.SetPartial(e);
  at::Tensor partial = e;  // the current block's partial sum (undefined = EMPTY)
  // One read of 1 or 2 routes over blocks ++ [partial], followed by the RMSNorm with gain
  // `norm` of each route (or of the mean of the two routes): the fused operator, or the plain
  // composition (the tests' reference).
  // With `v_projection`, route 1's output is projected by it (the V projection of the rd arms).
  auto read = [&](const std::vector<at::Tensor>& queries, const at::Tensor& key_gain,
                  const at::Tensor& norm, bool mean_of_routes = false,
                  const at::Tensor& v_projection = {}) {
    if (!opts.plain_depth_read)
      return FusedDepthRead(sources.Sources(), queries, key_gain,
                            ReadNorm{norm, eps, mean_of_routes, v_projection});
    const at::Tensor stacked = StackSources(sources.RawSources());
    const at::Tensor keys = DepthKeys(stacked, key_gain, key_eps);
    DepthReadResult res;
    for (const auto& q : queries) {
      DepthMix m = DepthMixture(stacked, keys, q);
      res.outputs.push_back(std::move(m.output));
      res.alphas.push_back(std::move(m.alpha));
    }
    if (mean_of_routes) res.outputs = {0.5 * (res.outputs[0] + res.outputs[1])};
    for (auto& h : res.outputs) h = RmsNorm(h, norm, eps);
    if (v_projection.defined()) res.outputs[1] = at::linear(res.outputs[1], v_projection);
    return res;
  };

  for (int64_t l = 0; l < cfg_.layers; ++l) {
    LayerImpl& layer = *layers_[static_cast<size_t>(l)];
    // (a) attention-side read over blocks ++ [partial], before the boundary push, and the
    // attention pre-norm. The routes share the keys (one key gain) and one logit product; the
    // same pre-norm module is applied to each route separately.
    at::Tensor x_qk, v_proj;  // the Q/K input and x_V·W_Vᵀ
    switch (cfg_.arm) {
      case Arm::kBlock: {
        const DepthReadResult r = read({layer.q_attn}, layer.attn_key_norm, layer.attn_norm);
        record(l, RouteSite::kAttnQK, r.alphas[0]);
        x_qk = r.outputs[0];
        v_proj = at::linear(x_qk, layer.wv);
        break;
      }
      case Arm::kRd:
      case Arm::kTied:
      case Arm::kFrozenV: {
        // V route: its own query over the same keys. Tied binds the V query to q_attn;
        // Frozen-V's is 0.
        const at::Tensor& qv = cfg_.arm == Arm::kTied ? layer.q_attn : layer.q_v;
        // The V projection is folded into the read (its input x_V is recomputed in the
        // backward, not saved); the GEMM is the same at::linear as Block's.
        const DepthReadResult r =
            read({layer.q_attn, qv}, layer.attn_key_norm, layer.attn_norm, false, layer.wv);
        record(l, RouteSite::kAttnQK, r.alphas[0]);
        record(l, RouteSite::kAttnV, r.alphas[1]);
        x_qk = r.outputs[0];
        v_proj = r.outputs[1];
        break;
      }
      case Arm::kAverage:
      case Arm::kAverageAsym: {
        const DepthReadResult r =
            read({layer.q_attn, layer.q_b}, layer.attn_key_norm, layer.attn_norm, true);
        record(l, RouteSite::kAttnQK, r.alphas[0]);
        record(l, RouteSite::kAttnB, r.alphas[1]);
        x_qk = r.outputs[0];
        v_proj = at::linear(x_qk, layer.wv);
        break;
      }
      case Arm::kStandard:
        TORCH_CHECK(false, "unreachable");
    }
    // (b) block boundary.
    if (l % P == 0) {
      sources.PushPartial();
      partial = at::Tensor();
    }
    // (c, d) attention sublayer and writeback.
    partial = Attention(layer, x_qk, v_proj, cos, sin, partial);
    sources.SetPartial(partial);
    // (e, f, g) MLP-side read, MLP, writeback.
    const DepthReadResult m = read({layer.q_mlp}, layer.mlp_key_norm, layer.mlp_norm);
    record(l, RouteSite::kMlp, m.alphas[0]);
    partial = Mlp(layer, m.outputs[0], partial);
    sources.SetPartial(partial);
  }
  // Final read over [b_0 … b_N], then the final norm and the tied head.
  if (opts.capture_final_sources) out.final_sources = sources.RawSources();
  const DepthReadResult f = read({q_final}, final_key_norm, final_norm);
  record(-1, RouteSite::kFinal, f.alphas[0]);
  out.logits = at::linear(f.outputs[0], emb);
  return out;
}

uint64_t ParameterChecksum(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  strings::Fnv1a64 h(strings::Fnv1a64::kRdattnChecksumBasis);
  for (const auto& [name, t] : named) {
    h.Mix(name);
    for (int64_t s : t.sizes()) h.Mix(&s, sizeof(s));
    const at::Tensor c = t.detach().to(at::kCPU, at::kFloat).contiguous();
    h.Mix(c.data_ptr<float>(), static_cast<size_t>(c.numel()) * sizeof(float));
  }
  return h.value();
}

}  // namespace rdattn::model
