// The training loop of one rank (docs/architecture.md "The training loop"). TrainImpl sets up the
// run (data, model, optimizer, fence, resume), then loops: learning rate, forward and backward
// over the micro-batches, gradient all-reduce and clipping, the optimizer step, one small
// all-reduce for the mean loss and the stop vote, the TRAIN_STEP event, and what After()
// decides (evaluate, checkpoint, finish, preempt). Not here: evaluation (evaluate.cc), event
// fields (events.cc), where to resume (resume.cc), the checkpoint format (checkpoint.cc), model
// files (model_file.cc), the device (runtime.cc), the schedule (lr_schedule.cc), the parts of a
// step (train_step.cc).
#include "worker/trainer/trainer.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <utility>

#include "common/cpu_features.h"  // provides: BlasCore
#include "common/log.h"
#include "model/gpt.h"
#include "worker/comm/buckets.h"           // provides: BroadcastAndVerify, GradientBuckets
#include "worker/data/shard.h"             // provides: data::Shard
#include "worker/trainer/checkpoint.h"     // provides: CheckpointMeta, Save/LoadCheckpoint
#include "worker/trainer/data_identity.h"  // provides: WithShardDigests, AllShards
#include "worker/trainer/evaluate.h"       // provides: Evaluate, DepthJson
#include "worker/trainer/fence.h"          // provides: AttemptFence
#include "worker/trainer/lr_schedule.h"    // provides: LearningRate
#include "worker/trainer/model_file.h"     // provides: LoadRunCheckpoint
#include "worker/trainer/optimizer.h"      // provides: AdamW
#include "worker/trainer/resume.h"         // provides: PlanResume
#include "worker/trainer/runtime.h"        // provides: Runtime, AutocastGuard, MakeBatch
#include "worker/trainer/sampler.h"        // provides: Sampler, WindowIndex, OpenShards
#include "worker/trainer/step_actions.h"   // provides: After
#include "worker/trainer/train_step.h"     // provides: MicroBatches, ForwardBackward, StepVoter…

namespace rdattn::trainer {
namespace {

// What every rank learns of one rank's failure code (0 none; only that rank passes non-zero).
StatusOr<int> AgreeOnFailure(comm::Communicator& comm, int local) {
  double v = local;
  RDATTN_RETURN_IF_ERROR(comm.AllReduceSumHost(&v, 1));
  return static_cast<int>(v);
}

StatusOr<TrainOutcome> TrainImpl(const RunConfig& cfg, comm::Communicator& comm,
                                 const TrainOptions& opts) {
  const int rank = comm.rank(), world = comm.world_size();
  EventSink* events = rank == 0 ? opts.events : nullptr;
  auto emit = [events](const char* kind, nlohmann::json fields) {
    if (events != nullptr) events->Emit(kind, std::move(fields));
  };
  if (world != cfg.parallel.world_size)
    return FailedPreconditionError("parallel.world_size: the run wants " +
                                   std::to_string(cfg.parallel.world_size) +
                                   " ranks but the launcher started " + std::to_string(world));
  if (cfg.parallel.threads_per_rank > 0) at::set_num_threads(cfg.parallel.threads_per_rank);
  RetainFreedHostMemory();  // no page faults for the activations of every step (runtime.h)
  RDATTN_ASSIGN_OR_RETURN(const Runtime rt, ResolveRuntime(cfg.parallel, comm));
  const ScheduleConfig& s = cfg.schedule;

  // --- Data: every token id is checked against the model's vocabulary when a shard is opened.
  const auto vocab = static_cast<uint32_t>(cfg.model.vocab_size);
  RDATTN_ASSIGN_OR_RETURN(const std::vector<data::Shard> train_shards,
                          OpenShards(cfg.data.train_shards, vocab, "data.train_shards"));
  RDATTN_ASSIGN_OR_RETURN(const std::vector<data::Shard> val_shards,
                          OpenShards(cfg.data.val_shards, vocab, "data.val_shards"));
  RDATTN_ASSIGN_OR_RETURN(const std::vector<data::Shard> test_shards,
                          OpenShards(cfg.data.test_shards, vocab, "data.test_shards"));
  // Data identity (data_identity.h): every shard's content digest, checked against its manifest,
  // for the INIT event; before each result, the check that no shard changed on disk since.
  RDATTN_ASSIGN_OR_RETURN(const std::vector<data::ShardDigest> shard_digests,
                          data::DigestAndVerifyAll(train_shards, val_shards, test_shards));
  const std::vector<const data::Shard*> all_shards =
      AllShards(train_shards, val_shards, test_shards);
  auto data_unchanged = [&]() -> Status {
    return AgreeOk(comm, rt, data::CheckShardsUnchanged(all_shards, shard_digests),
                   AbortedError("a shard changed on disk on another rank"));
  };
  const int64_t T = cfg.model.context;
  const WindowIndex train_index(Pointers(train_shards), T), val_index(Pointers(val_shards), T),
      test_index(Pointers(test_shards), T);
  if (train_index.size() == 0)
    return InvalidArgumentError(
        "data.train_shards: no window of context+1 = " + std::to_string(T + 1) + " tokens");
  const Sampler sampler(train_index.size(), cfg.data.data_seed, s.global_batch_sequences);
  const std::vector<int64_t> val_windows = EvalWindows(val_index.size(), cfg.data.val_windows);
  const std::vector<int64_t> test_windows = EvalWindows(test_index.size(), cfg.data.test_windows);

  // --- Model: built from the init seed on every rank, then rank 0's weights are broadcast and
  // verified equal everywhere.
  model::Gpt model(cfg.model, cfg.init_seed);
  model->to(rt.device, rt.param_dtype);
  std::vector<at::Tensor> params = model->parameters();
  RDATTN_RETURN_IF_ERROR(comm::BroadcastAndVerify(comm, params).WithPrefix("initial parameters"));
  AdamW optimizer = MakeAdamW(model, cfg.optim);

  // --- Fencing: this attempt claims the checkpoint directory; an older attempt still running
  // (its worker gone) sees the claim and writes nothing more.
  // The event gate shares the fence: the sink outlives this function (rdattn-train writes its
  // KIND_FAILED after it returns), and a fenced rank writes no event at all.
  const auto fence = std::make_shared<const AttemptFence>(cfg.checkpoint.dir, opts.attempt);
  // A claim that cannot be written (a full or read-only disk) is the machine's failure.
  const Status claimed = rank == 0 ? fence->Claim() : Status::Ok();
  const int claim_failure = claimed.ok() ? 0 : (claimed.code() == StatusCode::kUnavailable ? 2 : 1);
  RDATTN_ASSIGN_OR_RETURN(const int claim_agreed, AgreeOnFailure(comm, claim_failure));
  if (claim_agreed >= 2 && opts.machine_failure != nullptr) *opts.machine_failure = true;
  if (claim_agreed != 0) {
    if (rank == 0) return claimed;
    return claim_agreed >= 2 ? UnavailableError("rank 0 could not claim the checkpoint directory")
                             : AbortedError("another rank failed");
  }
  if (events != nullptr) events->SetGate(FenceGate(fence));

  // --- Resume: the newest checkpoint that reads (a corrupt or truncated one is skipped, with a
  // warning), and the milestones whose evaluation is not stored.
  CheckpointMeta meta;
  meta.config = ResolvedConfigJson(cfg);
  meta.spec = RunSpecJson(cfg);
  meta.fingerprint = NumericFingerprint(cfg);
  meta.init_checksum = Hex64(model::ParameterChecksum(model->SharedParameters()));
  meta.attempt = opts.attempt;
  std::vector<std::string> warnings;
  RDATTN_ASSIGN_OR_RETURN(const ResumePlan plan,
                          PlanResume(cfg, meta, EvalMilestones(s), &warnings));
  int64_t start_step = 0;
  if (!plan.path.empty()) {
    CheckpointMeta loaded;
    RDATTN_RETURN_IF_ERROR(LoadCheckpoint(plan.path, model, &optimizer, &loaded));
    start_step = loaded.step;
    meta.init_checksum = loaded.init_checksum;
    meta.evaluated_milestones = loaded.evaluated_milestones;
  }
  for (const std::string& w : warnings) log::Warning(w);

  const model::FlopCounts flops = model::CountFlops(cfg.model);
  const double peak = opts.peak_flops_per_rank > 0
                          ? opts.peak_flops_per_rank
                          : DefaultPeakFlops(rt.cuda, rt.device_name, at::get_num_threads());
  const Hardware where{.gpu = rt.cuda,
                       .device_name = rt.device_name,
                       .world_size = world,
                       .blas_core = rt.cuda ? std::string() : cpu::BlasCore()};
  int64_t param_count = 0;
  for (const auto& p : params) param_count += p.numel();
  emit("INIT",
       WithShardDigests(InitEvent(where, {.step = start_step,
                                          .tokens = start_step * s.global_batch_tokens,
                                          .param_count = param_count,
                                          .flops_per_token = flops.training(),
                                          .peak_flops_per_second = peak,
                                          .init_param_checksum = meta.init_checksum,
                                          .data_order_checksum = Hex64(DataOrderChecksum(
                                              sampler, cfg.data.data_seed, s.total_steps))}),
                        shard_digests));
  for (const std::string& w : warnings) emit("WARNING", WarningEvent(start_step, w));

  // --- The two things a step's actions do: write a checkpoint (rank 0; every rank learns
  // whether it worked) and evaluate a model at a milestone (every rank; recorded in the meta).
  std::vector<int64_t> keep_steps;  // the milestones' checkpoints are never pruned
  for (const EvalMilestone& m : EvalMilestones(s)) keep_steps.push_back(m.step);
  // A checkpoint that cannot be written (UNAVAILABLE from SaveCheckpoint: ENOSPC, EIO, ...) is
  // the machine's failure (exit 74), on every rank; the previous checkpoint stays the one to
  // resume from, and the error says which it is.
  std::string last_checkpoint = plan.path;
  auto write_checkpoint = [&](int64_t completed) -> Status {
    meta.step = completed;
    meta.tokens = completed * s.global_batch_tokens;
    StatusOr<std::string> saved = std::string();
    if (rank == 0)
      saved = SaveCheckpoint(cfg.checkpoint.dir, meta, model, &optimizer, cfg.checkpoint.keep_last,
                             keep_steps, [fence] { return fence->Check(); });
    const bool machine = !saved.ok() && saved.status().code() == StatusCode::kUnavailable;
    const int failure = saved.ok() ? 0 : (machine ? 2 : 1);
    RDATTN_ASSIGN_OR_RETURN(const int agreed, AgreeOnFailure(comm, failure));
    if (agreed == 0) {
      last_checkpoint = *saved;
      emit("CHECKPOINT", CheckpointEvent(completed, meta.tokens, *saved));
      return Status::Ok();
    }
    if (agreed >= 2 && opts.machine_failure != nullptr) *opts.machine_failure = true;
    const std::string previous =
        last_checkpoint.empty() ? "; there is no previous checkpoint (a resume starts at step 0)"
                                : "; the previous checkpoint " + last_checkpoint +
                                      " is intact and a resume starts from it";
    if (rank == 0)
      return agreed >= 2 ? Status(saved.status().code(), saved.status().message() + previous)
                         : saved.status();
    return agreed >= 2 ? UnavailableError("rank 0 could not write the checkpoint of step " +
                                          std::to_string(completed) + " (the machine's disk)")
                       : InternalError("rank 0 failed to write a checkpoint");
  };
  auto evaluate = [&](model::Gpt& evaluated, int64_t completed, int64_t milestone) -> Status {
    if (val_windows.empty()) return Status::Ok();
    const bool diag = model::HasDepthRead(cfg.model.arm);
    RDATTN_ASSIGN_OR_RETURN(
        const EvalOutput ev,
        Evaluate(
            evaluated,
            {.index = val_index, .windows = val_windows, .micro_batch = s.micro_batch_sequences},
            comm, rt, diag ? Diagnostics::kOn : Diagnostics::kOff));
    RDATTN_RETURN_IF_ERROR(data_unchanged());  // the NLL is of the data digested at INIT
    auto& done = meta.evaluated_milestones;
    if (std::find(done.begin(), done.end(), milestone) == done.end()) done.push_back(milestone);
    emit("EVAL", EvalEvent({.step = completed,
                            .tokens = completed * s.global_batch_tokens,
                            .milestone_tokens = milestone,
                            .val_nll = ev.nll,
                            .eval_tokens = ev.tokens,
                            .depth = diag ? DepthJson(ev.depth) : nlohmann::json::object()}));
    return Status::Ok();
  };

  // Milestones at or before the resume point whose evaluation is not stored (an attempt that
  // died before its events got through): evaluated again, deterministically, from the model
  // as it was at the milestone (its checkpoint; the current model when it is the resume point).
  for (const EvalMilestone& m : plan.missing) {
    if (m.step == start_step) {
      RDATTN_RETURN_IF_ERROR(evaluate(model, m.step, m.tokens));
      continue;
    }
    std::string at = ReadableCheckpointOfStep(cfg.checkpoint.dir, m.step);
    if (at.empty()) at = CheckpointPath(cfg.checkpoint.dir, m.step, opts.attempt);  // names it
    RDATTN_ASSIGN_OR_RETURN(
        model::Gpt past,
        LoadRunCheckpoint(cfg, rt, at, "re-evaluating milestone " + std::to_string(m.tokens)));
    RDATTN_RETURN_IF_ERROR(evaluate(past, m.step, m.tokens));
  }

  // --- The loop. The micro-batches are made ahead by a background thread (MicroBatches); the
  // gradients live in persistent flat buckets from the first all-reduce on (world size > 1); on
  // CUDA nothing waits for the device except the gradient all-reduce (the NCCL backend waits for
  // its stream) and the loss read-out at the logging cadence (StepVoter).
  model->train();
  MicroBatches batches(train_index, sampler, s, rank, world, start_step, rt);
  comm::GradientBuckets buckets(params, cfg.parallel.allreduce_bucket_bytes);
  StepVoter voter(comm, /*deferred=*/rt.cuda);
  int64_t steps_here = 0;
  auto t_read = Clock::now();  // deferred: when the first step not yet read out began
  for (int64_t step = start_step; step < s.stop_step; ++step) {
    log::SetStep(step + 1);  // the step being trained: the next TRAIN_STEP event's step
    const auto t_step = Clock::now();
    // This step's learning rate, the same for every group.
    const double lr = LearningRate(cfg.optim, s, step);
    optimizer.SetLearningRate(lr);
    ZeroGradients(optimizer, buckets);

    // Forward and backward over this rank's slice of the global batch, then the gradients
    // averaged over ranks, clipped, and the update.
    const Accumulated acc = ForwardBackward(model, batches, s, rt);
    double allreduce_s = 0;
    RDATTN_RETURN_IF_ERROR(AllReduceGradients(params, buckets, comm, &allreduce_s));
    const at::Tensor grad_norm = ClipGradients(params, cfg.optim.grad_clip);
    optimizer.Step();  // torch's AdamW math, one pass per tensor on the CPU

    // The stop vote (SIGTERM, --stop-after-steps) with the mean loss; rank 0 also looks at the
    // fence: a newer attempt has claimed the checkpoint directory.
    ++steps_here;
    // Rank 0's events file cannot be written (ENOSPC on its path): the machine's failure. Rank 0
    // votes to stop, so that every rank stops at this step (a checkpoint first, as on SIGTERM);
    // then they agree on why (below). Rank 0 alone must not leave: the others would wait in the
    // next collective and rank 0 in MPI_Finalize.
    const bool events_failed = events != nullptr && !events->status().ok();
    const bool stop_local = (opts.stop_requested != nullptr && opts.stop_requested->load()) ||
                            (opts.stop_after_steps > 0 && steps_here >= opts.stop_after_steps) ||
                            events_failed;
    const int64_t completed = step + 1;
    RDATTN_ASSIGN_OR_RETURN(
        const StopVote stop_vote,
        voter.Vote(completed, acc.loss_sum, stop_local, rank == 0 ? fence->Check() : Status::Ok(),
                   cfg.checkpoint.dir));
    const bool log_step = completed % cfg.train_event_every_steps == 0 ||
                          completed == s.stop_step || step == start_step;
    const StepActions next = After(completed, s, cfg.checkpoint, stop_vote);
    // Deferred (CUDA): the losses are read at the next event, evaluation, checkpoint or end.
    if (voter.deferred() && !log_step && next.actions.empty() && next.then == AfterStep::kContinue)
      continue;
    RDATTN_ASSIGN_OR_RETURN(const std::vector<StepLoss> losses, voter.TakeLosses());
    // CPU: this step's wall time. Deferred: the mean over the steps just read out.
    const double step_s = voter.deferred()
                              ? Seconds(t_read, Clock::now()) / static_cast<double>(losses.size())
                              : Seconds(t_step, Clock::now());
    double loss = 0;
    for (const StepLoss& l : losses) {
      if (rank == 0 && opts.losses != nullptr) opts.losses->push_back(l.loss);
      if (!std::isfinite(l.loss)) {
        const std::string error = "train loss is not finite at step " + std::to_string(l.step);
        emit("FAILED", FailedEvent(l.step, l.loss, error));
        return InternalError(error);
      }
      loss = l.loss;
    }
    if (events != nullptr && log_step)
      emit("TRAIN_STEP", TrainStepEvent(where, {.step = completed,
                                                .tokens = completed * s.global_batch_tokens,
                                                .train_loss = loss,
                                                .lr = lr,
                                                .grad_norm = grad_norm.item<double>(),
                                                .batch_tokens = s.global_batch_tokens,
                                                .step_seconds = step_s,
                                                .data_seconds = acc.data_seconds,
                                                .allreduce_seconds = allreduce_s,
                                                .flops_per_token = flops.training(),
                                                .peak_flops_per_second = peak,
                                                .peak_memory_bytes = PeakRssBytes()}));

    // Evaluate at a milestone, checkpoint, finish or stop early (step_actions.h).
    for (const StepAction& a : next.actions)
      RDATTN_RETURN_IF_ERROR(a.kind == StepAction::Kind::kEvaluate
                                 ? evaluate(model, completed, a.milestone_tokens)
                                 : write_checkpoint(completed));
    if (next.then == AfterStep::kFinish) break;
    if (next.then == AfterStep::kPreempt) {
      const bool lost = events != nullptr && !events->status().ok();
      RDATTN_ASSIGN_OR_RETURN(const int agreed, AgreeOnFailure(comm, lost ? 2 : 0));
      if (agreed == 0) return TrainOutcome::kPreempted;
      if (opts.machine_failure != nullptr) *opts.machine_failure = true;
      return rank == 0 ? events->status()
                       : UnavailableError("rank 0's events file cannot be written");
    }
    t_read = Clock::now();
  }

  // --- The end of the run: test NLL over the test windows.
  FinishedFields fin;
  fin.step = s.stop_step;
  fin.tokens = s.stop_step * s.global_batch_tokens;
  fin.peak_memory_bytes = PeakRssBytes();  // before the test evaluation, as always
  if (!test_windows.empty()) {
    RDATTN_ASSIGN_OR_RETURN(
        const EvalOutput test,
        Evaluate(
            model,
            {.index = test_index, .windows = test_windows, .micro_batch = s.micro_batch_sequences},
            comm, rt, Diagnostics::kOff));
    fin.test_nll = test.nll;
    fin.eval_tokens = test.tokens;
  }
  RDATTN_RETURN_IF_ERROR(data_unchanged());
  emit("FINISHED", FinishedEvent(where, fin));
  return TrainOutcome::kFinished;
}

}  // namespace

double DefaultPeakFlops(bool cuda, const std::string& device_name, int threads) {
  if (cuda) {
    if (device_name.find("H100") != std::string::npos ||
        device_name.find("H200") != std::string::npos)
      return 989e12;
    if (device_name.find("A100") != std::string::npos) return 312e12;
    return 989e12;
  }
  return 80e9 * std::max(threads, 1);
}

StatusOr<TrainOutcome> Train(const RunConfig& cfg, comm::Communicator& comm,
                             const TrainOptions& opts) {
  try {
    return TrainImpl(cfg, comm, opts);
  } catch (const std::exception& e) {
    return InternalError(std::string("training failed: ") + e.what());
  }
}

}  // namespace rdattn::trainer
