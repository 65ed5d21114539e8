#include "worker/trainer/train_step.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

#include "worker/trainer/optimizer.h"

namespace rdattn::trainer {

AdamW MakeAdamW(model::Gpt& model, const OptimConfig& o) {
  std::vector<AdamWGroup> groups;
  groups.push_back({model->DecayParameters(), o.weight_decay});
  groups.push_back({model->NoDecayParameters(), 0.0});
  return AdamW(std::move(groups), AdamWHyper{o.beta1, o.beta2, o.eps});
}

namespace {

// What the background thread owns: its own copy of the sampler (its epoch cache is mutable) and
// the current step's windows.
class BatchMaker {
 public:
  BatchMaker(const WindowIndex& index, const Sampler& sampler, const ScheduleConfig& s, int rank,
             int world, int64_t first_step, bool pinned)
      : index_(index),
        sampler_(sampler),
        rank_(rank),
        world_(world),
        first_step_(first_step),
        accum_(s.grad_accum_steps),
        micro_(s.micro_batch_sequences),
        pinned_(pinned) {}

  // Micro-batch i of the run from first_step: micro-batch i mod accum of step first + i / accum.
  at::Tensor operator()(int64_t i) {
    const int64_t step = first_step_ + i / accum_, m = i % accum_;
    if (step != step_) {
      windows_ = sampler_.RankSlice(step, rank_, world_);
      step_ = step;
    }
    return MakeBatch(index_, windows_, static_cast<size_t>(m * micro_),
                     static_cast<size_t>((m + 1) * micro_), at::kCPU, pinned_);
  }

 private:
  const WindowIndex& index_;
  Sampler sampler_;
  int rank_, world_;
  int64_t first_step_, accum_, micro_;
  bool pinned_;
  int64_t step_ = -1;
  std::vector<int64_t> windows_;
};

}  // namespace

MicroBatches::MicroBatches(const WindowIndex& index, const Sampler& sampler,
                           const ScheduleConfig& s, int rank, int world, int64_t first_step,
                           const Runtime& rt)
    : device_(rt.device),
      prefetch_(
          std::max<int64_t>(s.stop_step - first_step, 0) * s.grad_accum_steps, kPrefetchDepth,
          // std::function copies the maker: shared, so the thread's state is one object.
          [maker = std::make_shared<BatchMaker>(index, sampler, s, rank, world, first_step,
                                                rt.cuda)](int64_t i) { return (*maker)(i); }) {}

at::Tensor MicroBatches::Next() {
  std::optional<at::Tensor> batch = prefetch_.Next();
  if (!batch.has_value()) throw std::out_of_range("MicroBatches: past the last micro-batch");
  // Pinned host memory: the copy is queued on the stream and the host goes on.
  return device_.is_cpu() ? *batch : batch->to(device_, /*non_blocking=*/true);
}

Accumulated ForwardBackward(model::Gpt& model, MicroBatches& batches, const ScheduleConfig& s,
                            const Runtime& rt) {
  const int64_t accum = s.grad_accum_steps;
  Accumulated acc;
  acc.loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(rt.device));
  for (int64_t m = 0; m < accum; ++m) {
    const auto t_data = Clock::now();
    const at::Tensor batch = batches.Next();  // [mb, T+1]
    acc.data_seconds += Seconds(t_data, Clock::now());
    const int64_t T = batch.size(1) - 1;
    at::Tensor loss;
    {
      AutocastGuard autocast(rt.autocast_bf16);
      loss = model::GptImpl::Loss(model->forward(batch.narrow(1, 0, T)), batch.narrow(1, 1, T)) /
             static_cast<double>(accum);
    }
    loss.backward();
    // In float64, in micro-batch order from 0: the sum loss.item<double>() would give.
    acc.loss_sum.add_(loss.detach().to(at::kDouble));
  }
  return acc;
}

Status AllReduceGradients(std::vector<at::Tensor>& params, comm::GradientBuckets& buckets,
                          comm::Communicator& comm, double* seconds) {
  const auto t_ar = Clock::now();
  if (comm.world_size() == 1) {
    for (auto& p : params)
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
  } else {
    RDATTN_RETURN_IF_ERROR(buckets.AllReduceMean(comm));
  }
  *seconds = Seconds(t_ar, Clock::now());
  return Status::Ok();
}

void ZeroGradients(const AdamW& optimizer, comm::GradientBuckets& buckets) {
  if (buckets.Attached()) {
    buckets.Zero();
  } else {
    ClearGradients(optimizer);
  }
}

void ClearGradients(const AdamW& optimizer) {
  for (const AdamWGroup& group : optimizer.groups())
    for (const at::Tensor& p : group.params) p.mutable_grad() = at::Tensor();
}

at::Tensor ClipGradients(const std::vector<at::Tensor>& params, double clip) {
  // CPU: one pass per gradient for the norm, one for the scaling, instead of ~2 ATen ops per
  // gradient (issue 11); the ops below remain for CUDA.
  if (std::optional<at::Tensor> norm = FusedClipGradients(params, clip)) return *norm;
  if (clip <= 0) {
    at::Tensor sq;  // Σ over gradients of Σ g², in float64, in order
    for (const auto& p : params) {
      if (!p.grad().defined()) continue;
      at::Tensor part = p.grad().to(at::kDouble).pow(2).sum();
      sq = sq.defined() ? sq.add_(part) : part;
    }
    return sq.defined() ? sq.sqrt() : at::zeros({}, at::TensorOptions().dtype(at::kDouble));
  }
  // torch::nn::utils::clip_grad_norm_(params, clip) of LibTorch 1.13 (norm type 2, no
  // finiteness check), op for op, minus its final item().
  std::vector<at::Tensor> with_grad;
  for (const auto& p : params)
    if (p.grad().defined()) with_grad.push_back(p);
  if (with_grad.empty()) return at::zeros({}, at::TensorOptions().dtype(at::kDouble));
  std::vector<at::Tensor> norms;
  norms.reserve(with_grad.size());
  for (const auto& p : with_grad) norms.emplace_back(p.grad().data().norm(2.0));
  at::Tensor total = norms.size() == 1 ? norms[0] : at::stack(norms).norm(2.0);
  const at::Tensor coef = at::clamp(clip / (total + 1e-6), c10::nullopt, 1.0);
  for (auto& p : with_grad) p.grad().data().mul_(coef);
  return total;
}

StepVoter::StepVoter(comm::Communicator& comm, bool deferred) : comm_(comm), deferred_(deferred) {}

StatusOr<StopVote> StepVoter::Vote(int64_t completed, const at::Tensor& loss_sum, bool stop_local,
                                   const Status& fenced, const std::string& dir) {
  // Host mode: [loss sum, stop, fence]; deferred: [stop, fence], the loss stays on the device.
  double flags[3] = {0.0, stop_local ? 1.0 : 0.0, fenced.ok() ? 0.0 : 1.0};
  double* votes = flags + 1;
  if (deferred_) {
    pending_.push_back(completed);
    sums_.push_back(loss_sum);
    RDATTN_RETURN_IF_ERROR(comm_.AllReduceSumHost(votes, 2));
  } else {
    flags[0] = loss_sum.item<double>();
    RDATTN_RETURN_IF_ERROR(comm_.AllReduceSumHost(flags, 3));
    ready_.push_back({completed, flags[0] / comm_.world_size()});
  }
  if (votes[1] > 0)
    return fenced.ok() ? AbortedError("fenced: rank 0 saw a newer attempt's claim on " + dir)
                       : fenced;
  return votes[0] > 0 ? StopVote::kStop : StopVote::kContinue;
}

StatusOr<std::vector<StepLoss>> StepVoter::TakeLosses() {
  std::vector<StepLoss> out;
  if (!deferred_) {
    out.swap(ready_);
    return out;
  }
  if (pending_.empty()) return out;
  at::Tensor sums = at::stack(sums_);  // [k] float64 on the device
  RDATTN_RETURN_IF_ERROR(comm_.AllReduceSum(sums));
  const at::Tensor host = sums.cpu();  // the one wait on the device
  const double* v = host.data_ptr<double>();
  for (size_t i = 0; i < pending_.size(); ++i)
    out.push_back({pending_[i], v[i] / comm_.world_size()});
  pending_.clear();
  sums_.clear();
  return out;
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
