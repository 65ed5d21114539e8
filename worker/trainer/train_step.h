// The parts of one training step and the collectives around it, each small and in the order
// the loop (trainer.cc) calls them: the optimizer's groups, forward and backward over the
// micro-batches, the gradient all-reduce, clipping, the vote after the step, and the agreement
// of all ranks on a rank's status. No events, no checkpoints, no schedule here.
#pragma once

#include <torch/optim/adamw.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/run_config.h"
#include "common/status.h"
#include "model/gpt.h"
#include "worker/comm/communicator.h"
#include "worker/trainer/runtime.h"
#include "worker/trainer/sampler.h"
#include "worker/trainer/step_actions.h"

namespace rdattn::trainer {

using Clock = std::chrono::steady_clock;
inline double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// AdamW's two groups: weight decay on matrices only. No learning rate: the loop sets every
// group's lr before each step (LearningRate), so the options' own lr is never used.
std::vector<torch::optim::OptimizerParamGroup> AdamWGroups(model::Gpt& model, const OptimConfig& o);

// Forward and backward over this rank's windows of the step, in grad_accum_steps micro-batches
// of micro_batch_sequences; the gradients accumulate (each loss is divided by their number).
struct Accumulated {
  double loss_sum = 0;  // of the divided losses: this rank's mean loss
  double data_seconds = 0;
};
Accumulated ForwardBackward(model::Gpt& model, const WindowIndex& index,
                            const std::vector<int64_t>& windows, const ScheduleConfig& s,
                            const Runtime& rt);

// Every parameter's gradient (zeros where the step reached none), averaged over the ranks in
// buckets; `seconds` is the all-reduce's wall time, CUDA synchronised on both sides. A collective.
StatusOr<std::vector<at::Tensor>> AllReduceGradients(std::vector<at::Tensor>& params,
                                                     comm::Communicator& comm, int64_t bucket_bytes,
                                                     const Runtime& rt, double* seconds);

// The global L2 norm of the gradients before clipping; clipped to `clip` when it is > 0.
double ClipGradients(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                     double clip);

// One small all-reduce after the step: the mean loss over ranks, whether any rank must stop, and
// whether rank 0 saw a newer attempt's fence: then `fenced` on rank 0 and ABORTED (naming `dir`)
// on the others. A collective.
struct Vote {
  double loss = 0;
  StopVote stop = StopVote::kContinue;
};
StatusOr<Vote> VoteAfterStep(comm::Communicator& comm, const Runtime& rt, double loss_sum,
                             bool stop_local, const Status& fenced, const std::string& dir);

// Every rank learns whether all ranks succeeded; a failure anywhere fails everywhere: `local` on
// the ranks that failed, `elsewhere` on the others. A collective.
Status AgreeOk(comm::Communicator& comm, const Runtime& rt, const Status& local,
               const Status& elsewhere);

}  // namespace rdattn::trainer
