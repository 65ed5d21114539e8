#include "model/depth.h"

#include <cmath>
#include <map>
#include <utility>

namespace rdattn::model {

at::ScalarType ComputeDtype(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& gain, double eps) {
  const auto dt = ComputeDtype(x.scalar_type());
  const at::Tensor xf = x.to(dt);
  const at::Tensor inv_rms = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return xf * inv_rms * gain.to(dt);
}

at::Tensor StackSources(const std::vector<at::Tensor>& sources) {
  TORCH_CHECK(!sources.empty(), "depth read with no sources");
  at::ScalarType dt = ComputeDtype(sources.front().scalar_type());
  for (const auto& s : sources)
    if (s.scalar_type() == at::kDouble) dt = at::kDouble;
  std::vector<at::Tensor> cast;
  cast.reserve(sources.size());
  for (const auto& s : sources) cast.push_back(s.to(dt));
  return at::stack(cast, 0);
}

at::Tensor DepthKeys(const at::Tensor& stacked, const at::Tensor& key_gain, double eps) {
  return RmsNorm(stacked, key_gain, eps);
}

DepthMix DepthMixture(const at::Tensor& stacked, const at::Tensor& keys, const at::Tensor& query) {
  TORCH_CHECK(stacked.dim() == 4, "sources must be [K,B,T,D], got ", stacked.sizes());
  const at::Tensor logits = (keys * query.to(keys.scalar_type())).sum(-1);  // [K,B,T]
  DepthMix out;
  out.alpha = at::softmax(logits, 0);
  out.output = (out.alpha.unsqueeze(-1) * stacked).sum(0);
  return out;
}

DepthMix DepthRead(const std::vector<at::Tensor>& sources, const at::Tensor& query,
                   const at::Tensor& key_gain, double eps) {
  const at::Tensor stacked = StackSources(sources);
  return DepthMixture(stacked, DepthKeys(stacked, key_gain, eps), query);
}

at::Tensor JsDivergence(const at::Tensor& p, const at::Tensor& q) {
  const at::Tensor pd = p.to(at::kDouble), qd = q.to(at::kDouble);
  const at::Tensor m = 0.5 * (pd + qd);
  const at::Tensor lm = at::log(at::clamp_min(m, 1e-12));
  const at::Tensor kl_p = (pd * (at::log(at::clamp_min(pd, 1e-12)) - lm)).sum(0);
  const at::Tensor kl_q = (qd * (at::log(at::clamp_min(qd, 1e-12)) - lm)).sum(0);
  // Rounding can leave a tiny negative value when p == q; JS is non-negative by definition.
  return at::clamp_min(0.5 * kl_p + 0.5 * kl_q, 0.0);
}

at::Tensor Entropy(const at::Tensor& p) {
  const at::Tensor pd = p.to(at::kDouble);
  return -(pd * at::log(at::clamp_min(pd, 1e-12))).sum(0);
}

DepthStatsAccumulator::DepthStatsAccumulator(int64_t layers)
    : layers_(layers), per_layer_(static_cast<size_t>(layers)) {}

DepthStatsAccumulator::DepthStatsAccumulator(const ModelConfig& cfg)
    : DepthStatsAccumulator(cfg.layers) {
  if (HasVRoute(cfg.arm)) second_route_ = "v";
  if (HasSecondQuery(cfg.arm)) second_route_ = "b";
}

void DepthStatsAccumulator::Add(const std::vector<RouteRecord>& routes) {
  // Group this batch's records by layer.
  std::map<int64_t, const RouteRecord*> qk, second, mlp;
  const RouteRecord* fin = nullptr;
  for (const auto& r : routes) {
    switch (r.site) {
      case RouteSite::kAttnQK:
        qk[r.layer] = &r;
        break;
      case RouteSite::kAttnV:
        second[r.layer] = &r;
        second_route_ = "v";
        break;
      case RouteSite::kAttnB:
        second[r.layer] = &r;
        second_route_ = "b";
        break;
      case RouteSite::kMlp:
        mlp[r.layer] = &r;
        break;
      case RouteSite::kFinal:
        fin = &r;
        break;
    }
  }
  if (qk.empty()) return;
  int64_t batch_tokens = 0;
  for (const auto& [layer, rec] : qk) {
    TORCH_CHECK(layer >= 0 && layer < layers_, "route layer out of range: ", layer);
    Layer& L = per_layer_[static_cast<size_t>(layer)];
    const at::Tensor p = rec->alpha.to(at::kDouble).flatten(1);  // [K, tokens]
    batch_tokens = p.size(1);
    L.k = p.size(0);
    L.ent_qk += Entropy(p).sum().item<double>();
    const at::Tensor psum = p.sum(1);
    L.sum_qk = L.sum_qk.defined() ? L.sum_qk + psum : psum;
    auto it = second.find(layer);
    if (it != second.end()) {
      const at::Tensor q = it->second->alpha.to(at::kDouble).flatten(1);
      const at::Tensor js = JsDivergence(p, q);
      L.js += js.sum().item<double>();
      L.sqrt_js += at::sqrt(js).sum().item<double>();
      L.ent_second += Entropy(q).sum().item<double>();
      const at::Tensor qsum = q.sum(1);
      L.sum_second = L.sum_second.defined() ? L.sum_second + qsum : qsum;
    }
    auto im = mlp.find(layer);
    if (im != mlp.end())
      L.ent_mlp += Entropy(im->second->alpha.to(at::kDouble).flatten(1)).sum().item<double>();
  }
  if (fin != nullptr)
    ent_final_ += Entropy(fin->alpha.to(at::kDouble).flatten(1)).sum().item<double>();
  tokens_ += batch_tokens;
}

at::Tensor DepthStatsAccumulator::PackSums(const std::vector<int64_t>& num_sources) const {
  TORCH_CHECK(static_cast<int64_t>(num_sources.size()) == layers_,
              "num_sources must have one entry per layer");
  std::vector<double> v;
  v.push_back(static_cast<double>(tokens_));
  v.push_back(ent_final_);
  for (size_t l = 0; l < per_layer_.size(); ++l) {
    const Layer& L = per_layer_[l];
    v.insert(v.end(), {L.js, L.sqrt_js, L.ent_qk, L.ent_second, L.ent_mlp});
    for (const at::Tensor* sum : {&L.sum_qk, &L.sum_second}) {
      for (int64_t k = 0; k < num_sources[l]; ++k)
        v.push_back(sum->defined() && k < sum->numel() ? (*sum)[k].item<double>() : 0.0);
    }
  }
  return at::tensor(v, at::TensorOptions().dtype(at::kDouble));
}

void DepthStatsAccumulator::UnpackSums(const at::Tensor& packed,
                                       const std::vector<int64_t>& num_sources) {
  const at::Tensor p = packed.to(at::kCPU, at::kDouble).contiguous();
  const double* v = p.data_ptr<double>();
  int64_t i = 0;
  tokens_ = static_cast<int64_t>(std::llround(v[i++]));
  ent_final_ = v[i++];
  for (size_t l = 0; l < per_layer_.size(); ++l) {
    Layer& L = per_layer_[l];
    L.k = num_sources[l];
    L.js = v[i++];
    L.sqrt_js = v[i++];
    L.ent_qk = v[i++];
    L.ent_second = v[i++];
    L.ent_mlp = v[i++];
    for (at::Tensor* sum : {&L.sum_qk, &L.sum_second}) {
      *sum =
          at::from_blob(const_cast<double*>(v + i), {L.k}, at::TensorOptions().dtype(at::kDouble))
              .clone();
      i += L.k;
    }
  }
  TORCH_CHECK(i == p.numel(), "packed depth statistics have the wrong size");
}

DepthDiagnostics DepthStatsAccumulator::Finalize() const {
  DepthDiagnostics d;
  d.second_route = second_route_;
  d.tokens = tokens_;
  if (tokens_ == 0) return d;
  const double n = static_cast<double>(tokens_);
  const bool has_second = !second_route_.empty();
  double js_all = 0, js_multi = 0;
  int64_t multi = 0;
  for (const Layer& L : per_layer_) {
    d.num_sources.push_back(L.k);
    d.entropy_qk_nats.push_back(L.ent_qk / n);
    d.entropy_mlp_nats.push_back(L.ent_mlp / n);
    if (!has_second) continue;
    const double js = L.js / n;
    d.js_nats.push_back(js);
    d.js_bits.push_back(js / std::log(2.0));
    d.sqrt_js.push_back(L.sqrt_js / n);
    d.entropy_second_nats.push_back(L.ent_second / n);
    double jm = 0;
    if (L.sum_qk.defined() && L.sum_second.defined())
      jm =
          JsDivergence((L.sum_qk / n).unsqueeze(1), (L.sum_second / n).unsqueeze(1)).item<double>();
    d.js_of_mean_nats.push_back(jm);
    js_all += js;
    if (L.k >= 2) {
      js_multi += js;
      ++multi;
    }
  }
  d.entropy_final_nats = ent_final_ / n;
  if (has_second && !per_layer_.empty()) {
    d.mean_js_nats = js_all / static_cast<double>(per_layer_.size());
    d.mean_js_bits = d.mean_js_nats / std::log(2.0);
    d.mean_js_nats_multi = multi > 0 ? js_multi / static_cast<double>(multi) : 0.0;
  }
  return d;
}

}  // namespace rdattn::model
