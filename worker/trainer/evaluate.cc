#include "worker/trainer/evaluate.h"

#include <torch/types.h>

#include <algorithm>
#include <cmath>

#include "worker/trainer/events.h"

namespace rdattn::trainer {

StatusOr<EvalOutput> Evaluate(model::Gpt& model, const EvalSet& set, comm::Communicator& comm,
                              const Runtime& rt, Diagnostics diagnostics) {
  const bool diag = diagnostics == Diagnostics::kOn;
  torch::NoGradGuard no_grad;
  model->eval();
  std::vector<int64_t> mine;
  for (size_t i = static_cast<size_t>(comm.rank()); i < set.windows.size();
       i += static_cast<size_t>(comm.world_size()))
    mine.push_back(set.windows[i]);
  const model::ModelConfig& mc = model->config();
  model::DepthStatsAccumulator acc(mc);
  double nll_sum = 0;
  int64_t tokens = 0;
  const int64_t T = set.index.context();
  const auto mb = static_cast<size_t>(set.micro_batch);
  for (size_t b = 0; b < mine.size(); b += mb) {
    const size_t e = std::min(mine.size(), b + mb);
    const at::Tensor batch = MakeBatch(set.index, mine, b, e, rt.device);  // [n, T+1]
    model::ForwardOutput out;
    {
      AutocastGuard autocast(rt.autocast_bf16);
      out = model->Forward(batch.narrow(1, 0, T), {.capture_routes = diag});
    }
    const at::Tensor logits = out.logits.to(model::ComputeDtype(out.logits.scalar_type()));
    nll_sum += at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                                      batch.narrow(1, 1, T).reshape({-1}), {}, at::Reduction::Sum)
                   .item<double>();
    tokens += batch.size(0) * T;
    if (diag) acc.Add(out.routes);
  }
  model->train();
  const std::vector<int64_t> ks = model::CountSources(mc).attention;
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor packed = at::cat({at::tensor({nll_sum, static_cast<double>(tokens)}, f64),
                               diag ? acc.PackSums(ks) : at::empty({0}, f64)})
                          .to(rt.device);
  RDATTN_RETURN_IF_ERROR(comm.AllReduceSum(packed));
  packed = packed.cpu();
  EvalOutput r;
  r.tokens = static_cast<int64_t>(std::llround(packed[1].item<double>()));
  if (r.tokens == 0) return FailedPreconditionError("evaluation saw no tokens");
  r.nll = packed[0].item<double>() / static_cast<double>(r.tokens);
  if (diag) {
    acc.UnpackSums(packed.narrow(0, 2, packed.numel() - 2), ks);
    r.depth = acc.Finalize();
  }
  return r;
}

nlohmann::json DepthJson(const model::DepthDiagnostics& d) {
  nlohmann::json j = nlohmann::json::object();
  auto arr = [](const std::vector<double>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (double x : v) a.push_back(JsonDouble(x));
    return a;
  };
  j["route_entropy_qk_nats"] = arr(d.entropy_qk_nats);
  if (!d.js_nats.empty()) {
    j["js_nats"] = arr(d.js_nats);
    j["js_bits"] = arr(d.js_bits);
    j["js_sqrt"] = arr(d.sqrt_js);
    j["js_of_mean_nats"] = arr(d.js_of_mean_nats);
    j["route_entropy_v_nats"] = arr(d.entropy_second_nats);
    j["js_mean_nats"] = JsonDouble(d.mean_js_nats);
    j["js_mean_bits"] = JsonDouble(d.mean_js_bits);
    double s = 0;
    for (double x : d.sqrt_js) s += x;
    j["js_mean_sqrt"] =
        JsonDouble(d.sqrt_js.empty() ? 0.0 : s / static_cast<double>(d.sqrt_js.size()));
    j["js_mean_multi_source_nats"] = JsonDouble(d.mean_js_nats_multi);
  }
  return j;
}

}  // namespace rdattn::trainer
