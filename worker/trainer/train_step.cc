#include "worker/trainer/train_step.h"

// First: torch/nn/utils/clip_grad.h does not include what it uses.
#include <torch/types.h>

#include <torch/cuda.h>
#include <torch/nn/utils/clip_grad.h>

#include <cmath>
#include <memory>
#include <utility>

#include "worker/comm/buckets.h"

namespace rdattn::trainer {

std::vector<torch::optim::OptimizerParamGroup> AdamWGroups(model::Gpt& model,
                                                           const OptimConfig& o) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const bool decay : {true, false}) {
    auto options = std::make_unique<torch::optim::AdamWOptions>();
    options->betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(decay ? o.weight_decay : 0.0);
    groups.emplace_back(decay ? model->DecayParameters() : model->NoDecayParameters(),
                        std::move(options));
  }
  return groups;
}

Accumulated ForwardBackward(model::Gpt& model, const WindowIndex& index,
                            const std::vector<int64_t>& windows, const ScheduleConfig& s,
                            const Runtime& rt) {
  const int64_t T = index.context(), accum = s.grad_accum_steps, mb = s.micro_batch_sequences;
  Accumulated acc;
  for (int64_t m = 0; m < accum; ++m) {
    const auto t_data = Clock::now();
    const at::Tensor batch = MakeBatch(index, windows, static_cast<size_t>(m * mb),
                                       static_cast<size_t>((m + 1) * mb), rt.device);  // [mb, T+1]
    acc.data_seconds += Seconds(t_data, Clock::now());
    at::Tensor loss;
    {
      AutocastGuard autocast(rt.autocast_bf16);
      loss = model::GptImpl::Loss(model->forward(batch.narrow(1, 0, T)), batch.narrow(1, 1, T)) /
             static_cast<double>(accum);
    }
    loss.backward();
    acc.loss_sum += loss.item<double>();
  }
  return acc;
}

StatusOr<std::vector<at::Tensor>> AllReduceGradients(std::vector<at::Tensor>& params,
                                                     comm::Communicator& comm, int64_t bucket_bytes,
                                                     const Runtime& rt, double* seconds) {
  std::vector<at::Tensor> grads;
  for (auto& p : params) {
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    grads.push_back(p.grad());
  }
  if (rt.cuda) torch::cuda::synchronize();
  const auto t_ar = Clock::now();
  RDATTN_RETURN_IF_ERROR(comm::AllReduceMeanGradients(comm, grads, bucket_bytes));
  if (rt.cuda) torch::cuda::synchronize();
  *seconds = Seconds(t_ar, Clock::now());
  return grads;
}

double ClipGradients(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                     double clip) {
  if (clip > 0) return torch::nn::utils::clip_grad_norm_(params, clip);
  double sq = 0;
  for (const auto& g : grads) sq += g.to(at::kDouble).pow(2).sum().item<double>();
  return std::sqrt(sq);
}

StatusOr<Vote> VoteAfterStep(comm::Communicator& comm, const Runtime& rt, double loss_sum,
                             bool stop_local, const Status& fenced, const std::string& dir) {
  at::Tensor stats = at::tensor({loss_sum, stop_local ? 1.0 : 0.0, fenced.ok() ? 0.0 : 1.0},
                                at::TensorOptions().dtype(at::kDouble))
                         .to(rt.device);
  RDATTN_RETURN_IF_ERROR(comm.AllReduceSum(stats));
  stats = stats.cpu();
  if (stats[2].item<double>() > 0)
    return fenced.ok() ? AbortedError("fenced: rank 0 saw a newer attempt's claim on " + dir)
                       : fenced;
  return Vote{stats[0].item<double>() / comm.world_size(),
              stats[1].item<double>() > 0 ? StopVote::kStop : StopVote::kContinue};
}

Status AgreeOk(comm::Communicator& comm, const Runtime& rt, const Status& local,
               const Status& elsewhere) {
  at::Tensor bad =
      at::full({1}, local.ok() ? 0.0 : 1.0, at::TensorOptions().dtype(at::kDouble)).to(rt.device);
  RDATTN_RETURN_IF_ERROR(comm.AllReduceSum(bad));
  if (bad.cpu().item<double>() > 0) return local.ok() ? elsewhere : local;
  return Status::Ok();
}

}  // namespace rdattn::trainer
