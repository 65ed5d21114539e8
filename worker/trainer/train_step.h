// The parts of one training step and the collectives around it, each small and in the order
// the loop (trainer.cc) calls them: the optimizer's groups, forward and backward over the
// micro-batches, the gradient all-reduce, clipping, the vote after the step, and the agreement
// of all ranks on a rank's status. No events, no checkpoints, no schedule here.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/gpt.h"
#include "runspec/run_config.h"
#include "worker/comm/buckets.h"
#include "worker/comm/communicator.h"
#include "worker/trainer/optimizer.h"
#include "worker/trainer/prefetcher.h"
#include "worker/trainer/runtime.h"
#include "worker/trainer/sampler.h"
#include "worker/trainer/step_actions.h"

namespace rdattn::trainer {

using Clock = std::chrono::steady_clock;
inline double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The trainer's AdamW: two groups, weight decay on matrices only, the config's betas and eps. No
// learning rate: the loop sets it before each step (LearningRate).
AdamW MakeAdamW(model::Gpt& model, const OptimConfig& o);

// This rank's micro-batches of steps [first_step, stop_step), in training order, made up to
// kPrefetchDepth micro-batches ahead by a background thread (Prefetcher) while the loop computes:
// window copies out of the shards into [micro_batch_sequences, context+1] int64 host tensors
// (pinned when the run is on CUDA, then copied to the device without blocking). The same windows in
// the same order as making them in the loop, so losses are bitwise unchanged. The sampler is
// copied: the thread never shares the loop's.
inline constexpr size_t kPrefetchDepth = 2;
class MicroBatches {
 public:
  MicroBatches(const WindowIndex& index, const Sampler& sampler, const ScheduleConfig& s, int rank,
               int world, int64_t first_step, const Runtime& rt);
  // The next micro-batch on the run's device. Throws past the last one, and rethrows an error of
  // the thread that made it.
  at::Tensor Next();

 private:
  at::Device device_;
  Prefetcher<at::Tensor> prefetch_;
};

// Forward and backward over this rank's windows of the step, in grad_accum_steps micro-batches
// taken from `batches`; the gradients accumulate (each loss is divided by their number).
// Nothing here waits for the device: the loss sum stays a tensor.
struct Accumulated {
  at::Tensor loss_sum;      // float64 scalar on the device: the sum of the divided losses
  double data_seconds = 0;  // waiting for the micro-batches (the prefetcher is usually ahead)
};
Accumulated ForwardBackward(model::Gpt& model, MicroBatches& batches, const ScheduleConfig& s,
                            const Runtime& rt);

// Every parameter's gradient averaged over the ranks: world size 1 only zero-fills the gradients
// a step did not produce; otherwise the gradients live in `buckets` (persistent flat buckets,
// attached on the first call) and are all-reduced in place there. `seconds` is the call's host
// wall time (on CUDA it includes waiting for the backward: the NCCL backend waits on the stream).
// A collective.
Status AllReduceGradients(std::vector<at::Tensor>& params, comm::GradientBuckets& buckets,
                          comm::Communicator& comm, double* seconds);

// Before the backward: every gradient to zero. Once the buckets are attached (world size > 1):
// one fill per bucket, the gradients being views of them. Before that, and always at world size
// 1: ClearGradients, so that the backward's first gradient of each parameter becomes its .grad
// as it is (autograd takes the buffer when nothing else holds it) instead of being added into a
// zero-filled one: no fill, no add pass. The sums are the same numbers (0 + g = g).
void ZeroGradients(const AdamW& optimizer, comm::GradientBuckets& buckets);

// Drops the gradient of every parameter of every group (PyTorch 2's zero_grad(set_to_none=True)).
void ClearGradients(const AdamW& optimizer);

// Clips the gradients to global L2 norm `clip` when it is > 0 and returns the norm before
// clipping as a device scalar without reading it (clip_grad_norm_'s return value waits for the
// device). clip ≤ 0: the norm only, in float64. On the CPU (float32/float64 gradients):
// FusedClipGradients (optimizer.h), clip_grad_norm_'s formula with the norm summed in float64 in
// a fixed order. Otherwise exactly the operations of torch::nn::utils::clip_grad_norm_.
at::Tensor ClipGradients(const std::vector<at::Tensor>& params, double clip);

// The vote after every step, and the per-step mean losses over ranks.
// - Host (CPU runs): one all-reduce of three host doubles per step (this rank's loss sum, the stop
//   flag, rank 0's fence flag); each step's loss is known at its step.
// - Deferred (CUDA runs): the flags alone go through Communicator::AllReduceSumHost, which never
//   waits on the device; the loss sums stay on the device and TakeLosses() reduces and reads all
//   pending ones at once. The loop calls it at the logging cadence and before evaluation,
//   checkpoints and the end, so a non-finite loss is still reported with its own step, only
//   later.
// A fenced vote returns `fenced` on rank 0 and ABORTED (naming `dir`) on the others.
struct StepLoss {
  int64_t step = 0;  // completed steps
  double loss = 0;   // mean over the global batch
};
class StepVoter {
 public:
  StepVoter(comm::Communicator& comm, bool deferred);
  bool deferred() const { return deferred_; }
  // A collective.
  StatusOr<StopVote> Vote(int64_t completed, const at::Tensor& loss_sum, bool stop_local,
                          const Status& fenced, const std::string& dir);
  // The steps voted since the last call, in order. A collective when deferred.
  StatusOr<std::vector<StepLoss>> TakeLosses();

 private:
  comm::Communicator& comm_;
  bool deferred_;
  std::vector<StepLoss> ready_;   // host mode: read at the vote
  std::vector<int64_t> pending_;  // deferred: their steps
  std::vector<at::Tensor> sums_;  // deferred: this rank's loss sums, on the device
};

// Every rank learns whether all ranks succeeded; a failure anywhere fails everywhere: `local` on
// the ranks that failed, `elsewhere` on the others. A collective.
Status AgreeOk(comm::Communicator& comm, const Runtime& rt, const Status& local,
               const Status& elsewhere);

}  // namespace rdattn::trainer
