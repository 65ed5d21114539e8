// The training loop of one rank (rdattn-train): builds the model from the init seed, checks
// that every rank starts from rank 0's weights, trains with gradient accumulation and bucketed
// all-reduce, evaluates at token milestones, checkpoints, and emits metric events (rank 0).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runspec/run_config.h"
#include "worker/comm/communicator.h"
#include "worker/trainer/events.h"

namespace rdattn::trainer {

struct TrainOptions {
  // Per-rank peak FLOP/s for MFU; 0 picks the documented default of the device (docs/events.md).
  double peak_flops_per_rank = 0;
  // Test hook: after this many steps in this process, behave as on SIGTERM (checkpoint, then
  // return kPreempted). 0: off.
  int64_t stop_after_steps = 0;
  // The job's attempt (--attempt; 0 standalone): attempts > 0 fence the checkpoint directory
  // (worker/trainer/fence.h).
  int attempt = 0;
  // Set by the SIGTERM handler; every rank agrees on the step at which to stop.
  const std::atomic<bool>* stop_requested = nullptr;
  EventSink* events = nullptr;  // rank 0's sink; ignored on other ranks
  // Set when the run failed because of the machine, not the job: a checkpoint that cannot be
  // written (ENOSPC, EIO, EDQUOT, EROFS, ...) or rank 0's events file (rdattn-train exits 74).
  bool* machine_failure = nullptr;
  // Called on rank 0 with the loss of every step (tests).
  std::vector<double>* losses = nullptr;
};

enum class TrainOutcome { kFinished, kPreempted };

StatusOr<TrainOutcome> Train(const RunConfig& cfg, comm::Communicator& comm,
                             const TrainOptions& opts);

// Mean next-token NLL (nats/token) of a checkpoint or an exported safetensors file on the given
// shards' windows (all, or the first `windows`). Prints nothing; single process.
struct EvalResult {
  double nll = 0;
  int64_t tokens = 0;
  int64_t windows = 0;
  std::string arm;
};
StatusOr<EvalResult> EvaluateFile(const std::string& model_path,
                                  const std::vector<std::string>& shards, int64_t windows,
                                  int64_t micro_batch);

// Writes a checkpoint's weights and config to a safetensors file.
Status ExportCheckpoint(const std::string& checkpoint_path, const std::string& out_path);

// Default per-rank peak FLOP/s for MFU: CUDA bf16 dense peak by device name (H100/H200:
// 989e12, A100: 312e12), else 1e12 × threads for CPU fp32 (a nominal figure, documented).
double DefaultPeakFlops(bool cuda, const std::string& device_name, int threads);

}  // namespace rdattn::trainer
