// Core: the WorkerService side — registration, leases (long poll + scheduler), heartbeats,
// progress events, completion, and lease expiry.

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <set>
#include <utility>

#include "coordinator/core.h"
#include "coordinator/data_identity.h"

#include <absl/cleanup/cleanup.h>
#include "common/field_error.h"
#include "common/log.h"
#include "coordinator/proto_convert.h"
#include "coordinator/report.h"
#include "coordinator/scheduler.h"

namespace rdattn::coordinator {
namespace {

constexpr size_t kMaxStderrTailBytes = 64 * 1024;  // stored per attempt
constexpr size_t kMaxReasonTailBytes = 2 * 1024;   // quoted in failure_reason

// The last `max` bytes of `s`, marked when cut.
std::string Tail(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  return "[...]" + s.substr(s.size() - max);
}

std::string OutcomeLabel(pb::JobOutcome outcome) {
  switch (outcome) {
    case pb::JOB_OUTCOME_SUCCEEDED:
      return "SUCCEEDED";
    case pb::JOB_OUTCOME_FAILED:
      return "FAILED";
    case pb::JOB_OUTCOME_CANCELLED:
      return "CANCELLED";
    case pb::JOB_OUTCOME_PREEMPTED:
      return "PREEMPTED";
    case pb::JOB_OUTCOME_MACHINE_FAILED:
      return "MACHINE_FAILED";
    default:
      return "UNSPECIFIED";
  }
}

// A job failure: "attempt 2 on worker wk-1 failed (job failure, counted against
// max_attempts): exit code 1: <message>; stderr tail:\n...". A machine failure:
// "machine failure on wk-1 (attempt 2; 1 of 30 machine failures, not counted against
// max_attempts): exit code 74: <message>; stderr tail:\n...".
std::string FailureReason(const JobRow& job, const pb::CompleteJobRequest& req,
                          int max_machine_failures) {
  std::string r;
  if (req.outcome() == pb::JOB_OUTCOME_MACHINE_FAILED) {
    r = "machine failure on " + job.worker_id + " (attempt " + std::to_string(job.attempts) + "; " +
        std::to_string(job.machine_failures + 1) + " of " + std::to_string(max_machine_failures) +
        " machine failures, not counted against max_attempts): ";
  } else {
    r = "attempt " + std::to_string(job.attempts) + " on worker " + job.worker_id +
        " failed (job failure, counted against max_attempts): ";
  }
  if (req.term_signal() != 0) {
    r += "killed by signal " + std::to_string(req.term_signal());
  } else {
    r += "exit code " + std::to_string(req.exit_code());
  }
  if (!req.message().empty()) r += ": " + req.message();
  if (!req.stderr_tail().empty())
    r += "; stderr tail:\n" + Tail(req.stderr_tail(), kMaxReasonTailBytes);
  return r;
}

Status LeaseNotHeld(const std::string& lease_id) {
  return AbortedError("lease " + lease_id + " is not held (expired, completed or unknown)");
}

}  // namespace

StatusOr<pb::RegisterWorkerResponse> Core::RegisterWorker(const pb::RegisterWorkerRequest& req) {
  FieldErrors problems("RegisterWorkerRequest");
  if (req.kind() != pb::HARDWARE_KIND_CPU && req.kind() != pb::HARDWARE_KIND_GPU) {
    problems.Add("kind", "must be HARDWARE_KIND_CPU or HARDWARE_KIND_GPU");
  }
  if (req.slots() <= 0) problems.Add("slots", "must be > 0");
  if (!problems.empty()) return problems.ToStatus();  // the client gets them as field violations

  absl::MutexLock lock(&mu_);
  WorkerRow w;
  w.id = req.worker_id().empty() ? NewId("wk-", 8) : req.worker_id();
  w.hostname = req.hostname();
  w.kind = HardwareKindFromProto(req.kind());
  w.slots = req.slots();
  w.free_slots = req.slots();
  w.registration = req;
  w.registration.set_worker_id(w.id);
  w.registered_us = NowMicros();
  w.last_seen_us = w.registered_us;
  RDATTN_RETURN_IF_ERROR(EnsureMemoryState());
  RDATTN_RETURN_IF_ERROR(store_->UpsertWorker(w));
  OnWorkerSeen(w.id, w.kind, w.free_slots, w.last_seen_us);
  RDATTN_LOG(kInfo) << "worker " << w.id << " registered: host '" << w.hostname << "', "
                    << (w.kind == HardwareKind::kGpu ? "gpu" : "cpu") << ", " << w.slots
                    << " slots";
  NotifyWork();
  pb::RegisterWorkerResponse resp;
  resp.set_worker_id(w.id);
  SetDuration(options_.heartbeat_interval, resp.mutable_heartbeat_interval());
  SetDuration(options_.lease_ttl, resp.mutable_lease_ttl());
  return resp;
}

StatusOr<std::optional<pb::LeaseJobResponse>> Core::TryLeaseInTx(const WorkerRow& worker,
                                                                 int free_slots,
                                                                 const ClusterView& cluster,
                                                                 const CancelledFn& caller_left) {
  std::optional<pb::LeaseJobResponse> out;
  bool withdrawn = false;  // the caller left after the job was taken: rolled back
  // A caller that has left (cancelled, past its deadline) is given nothing: asked before a job
  // is taken, and again after it is taken (then the savepoint undoes the lease).
  if (caller_left && caller_left()) return out;
  Status st = InSavepoint([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
    if (queue_.size() == 0) return Status::Ok();
    WorkerOffer offer;
    offer.worker_id = worker.id;
    offer.free_slots = free_slots;
    offer.kind = worker.kind;
    std::vector<int64_t> stored;
    std::optional<JobRow> picked;
    while (!picked) {
      std::optional<PendingJob> pick = queue_.Pick(offer, cluster);
      if (!pick) return Status::Ok();
      // A job whose stored row or results fail their checksums is not leased (a rerun would
      // be told to skip milestones it cannot trust), and it must not stop every other job
      // behind it: it stays PENDING, GetSweep names the damage, the next pick goes on. It
      // leaves the queue until the queue is rebuilt from the store.
      StatusOr<JobRow> job = store_->GetJob(pick->job_id);
      StatusOr<std::vector<int64_t>> milestones =
          job.ok() ? StoredEvalMilestones(pick->job_id)
                   : StatusOr<std::vector<int64_t>>(job.status());
      if (!milestones.ok()) {
        if (milestones.status().code() != StatusCode::kDataLoss) return milestones.status();
        RDATTN_LOG(kError).Job(pick->job_id) << "not leased: " << milestones.status().message();
        queue_.Remove(pick->job_id);
        continue;
      }
      if (job->state != JobState::kPending) {
        // The queue disagrees with the store: a defect. Rebuild it and pick again.
        RDATTN_LOG(kError).Job(pick->job_id)
            << "was in the pending queue but is " << JobStateName(job->state)
            << "; rebuilding the queue";
        InvalidateMemoryState();
        RDATTN_RETURN_IF_ERROR(EnsureMemoryState());
        continue;
      }
      stored = std::move(*milestones);
      picked = std::move(*job);
    }
    JobRow& job = *picked;
    EventContext ctx;
    ctx.worker = &worker;
    ctx.reason = "leased to worker " + worker.id;
    RDATTN_RETURN_IF_ERROR(ApplyJobEvent(job, JobEvent::kLease, ctx).status());
    pb::LeaseJobResponse resp;
    *resp.mutable_job() = job.spec;
    resp.mutable_job()->set_attempt(job.attempts);
    resp.set_lease_id(job.lease_id);
    SetTimestamp(job.lease_expiry_us, resp.mutable_lease_expire_time());
    resp.set_resume_checkpoint_path(job.last_checkpoint);
    for (int64_t m : stored) resp.add_stored_eval_milestones(m);
    if (caller_left && caller_left()) {
      withdrawn = true;
      return AbortedError("the caller of LeaseJob left before its lease was committed");
    }
    out = std::move(resp);
    return Status::Ok();
  });
  if (withdrawn) {
    RDATTN_LOG(kInfo) << "lease of a job to worker " << worker.id
                      << " withdrawn: the call was cancelled or past its deadline before the "
                         "lease was committed (the job stays PENDING, no attempt is used)";
    return std::optional<pb::LeaseJobResponse>();
  }
  RDATTN_RETURN_IF_ERROR(st);
  if (out) {
    RDATTN_LOG(kDebug).Job(out->job().job_id()) << "leased to " << worker.id;
  }
  return out;
}

namespace {
Status CheckLeaseJobRequest(const pb::LeaseJobRequest& req) {
  if (req.worker_id().empty()) return FieldErrorStatus("worker_id", "required");
  if (req.free_slots() < 0) return FieldErrorStatus("free_slots", "must be >= 0");
  if (FromProto(req.wait()) < absl::ZeroDuration()) {
    return FieldErrorStatus("wait", "must be >= 0");
  }
  return Status::Ok();
}
}  // namespace

std::shared_ptr<Core::LeaseWait> Core::LeaseJobAsync(const pb::LeaseJobRequest& req,
                                                     absl::Time call_deadline,
                                                     Done<pb::LeaseJobResponse> done,
                                                     CancelledFn caller_left) {
  auto wait = std::make_shared<LeaseWait>();
  wait->caller_left = std::move(caller_left);
  Status bad = CheckLeaseJobRequest(req);
  if (!bad.ok()) {
    wait->answered = true;
    done(bad);
    return wait;
  }
  wait->req = req;
  wait->call_deadline = call_deadline;
  // The long poll waits in real time; the lease itself uses the injected clock.
  wait->wait_end = std::min(absl::Now() + std::min(FromProto(req.wait()), options_.max_lease_wait),
                            call_deadline);
  wait->done = std::move(done);
  // Admission (the worker is registered; it is seen now with its free slots) is an operation
  // of the next round; the round then offers it a job, or it waits among waiters_.
  Op op;
  op.apply = [this, wait]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
    RDATTN_ASSIGN_OR_RETURN(std::optional<WorkerRow> worker,
                            store_->GetWorker(wait->req.worker_id()));
    if (!worker) {
      return NotFoundError("worker " + wait->req.worker_id() +
                           " is not registered; register again");
    }
    const int64_t now = NowMicros();
    RDATTN_RETURN_IF_ERROR(store_->TouchWorker(worker->id, now, wait->req.free_slots()));
    OnWorkerSeen(worker->id, worker->kind, wait->req.free_slots(), now);
    wait->worker = std::move(*worker);
    waiters_.push_back(wait);
    admitted_.push_back(wait);
    earliest_wait_end_ = std::min({earliest_wait_end_, wait->wait_end, wait->call_deadline});
    if (wait->caller_left) ++sync_waiters_;
    return Status::Ok();
  };
  op.finish = [wait](const Status& st) {
    // OK: admitted; the round answers it. An error before admission (or a commit that failed)
    // is the answer.
    if (st.ok()) return;
    wait->done(st);
  };
  Enqueue(std::move(op));
  return wait;
}

void Core::CancelLeaseWait(const std::shared_ptr<LeaseWait>& wait) {
  if (!wait) return;
  wait->left.store(true);
  absl::MutexLock lock(&mu_);
  ++left_pending_;
  dispatch_cv_.Signal();  // the next round answers it (no job) and forgets it
}

StatusOr<pb::LeaseJobResponse> Core::LeaseJob(const pb::LeaseJobRequest& req,
                                              const CancelledFn& cancelled) {
  RDATTN_RETURN_IF_ERROR(CheckLeaseJobRequest(req));
  if (cancelled && cancelled()) return pb::LeaseJobResponse();
  // A std::mutex, not absl::Notification: ThreadSanitizer sees its order (Debian's abseil is
  // uninstrumented code).
  std::mutex m;
  std::condition_variable cv;
  bool answered = false;
  StatusOr<pb::LeaseJobResponse> result = pb::LeaseJobResponse();
  // The dispatch thread asks `cancelled` (every wait_slice while the poll waits, and inside
  // the lease's transaction); this thread does not call it again meanwhile.
  LeaseJobAsync(
      req, absl::InfiniteFuture(),
      [&](StatusOr<pb::LeaseJobResponse> r) {
        std::lock_guard<std::mutex> lock(m);
        result = std::move(r);
        answered = true;
        cv.notify_one();
      },
      cancelled);
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return answered; });
  return result;
}

StatusOr<pb::HeartbeatResponse> Core::Heartbeat(const pb::HeartbeatRequest& req) {
  if (req.worker_id().empty()) return FieldErrorStatus("worker_id", "required");
  return RunInTx<pb::HeartbeatResponse>(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return HeartbeatInTx(req); });
}

void Core::HeartbeatAsync(const pb::HeartbeatRequest& req, Done<pb::HeartbeatResponse> done) {
  if (req.worker_id().empty()) return done(FieldErrorStatus("worker_id", "required"));
  EnqueueInTx<pb::HeartbeatResponse>(
      [this, req]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return HeartbeatInTx(req); },
      std::move(done));
}

StatusOr<pb::HeartbeatResponse> Core::HeartbeatInTx(const pb::HeartbeatRequest& req) {
  RDATTN_ASSIGN_OR_RETURN(std::optional<WorkerRow> worker, store_->GetWorker(req.worker_id()));
  if (!worker)
    return NotFoundError("worker " + req.worker_id() + " is not registered; register again");
  pb::HeartbeatResponse resp;
  const absl::Duration grace = std::min(options_.cancel_grace, options_.lease_ttl / 2);
  Status st = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
    const int64_t now = NowMicros();
    RDATTN_RETURN_IF_ERROR(store_->TouchWorker(worker->id, now, std::max(0, req.free_slots())));
    OnWorkerSeen(worker->id, worker->kind, std::max(0, req.free_slots()), now);
    for (const pb::LeaseProgress& lp : req.leases()) {
      RDATTN_ASSIGN_OR_RETURN(std::optional<JobRow> job, store_->FindJobByLease(lp.lease_id()));
      if (!job || job->worker_id != worker->id) {
        resp.add_lost_lease_ids(lp.lease_id());
        continue;
      }
      if (lp.ranks_started() && job->state == JobState::kLeased) {
        EventContext ctx;
        ctx.reason = "ranks started on worker " + worker->id;
        RDATTN_RETURN_IF_ERROR(ApplyJobEvent(*job, JobEvent::kStart, ctx).status());
      }
      if (job->cancel_requested) {
        // Not renewed: the worker stops the ranks and calls CompleteJob(CANCELLED) before the
        // lease runs out; otherwise the reaper ends the job CANCELLED.
        pb::CancelOrder* order = resp.add_cancel_orders();
        order->set_lease_id(lp.lease_id());
        order->set_job_id(job->id);
        RDATTN_ASSIGN_OR_RETURN(SweepRow sweep, store_->GetSweep(job->sweep_id));
        order->set_reason(sweep.message.empty() ? "cancelled" : sweep.message);
        SetDuration(grace, order->mutable_grace());
        continue;
      }
      job->lease_expiry_us = now + absl::ToInt64Microseconds(options_.lease_ttl);
      if (lp.step() > 0 || lp.tokens() > 0) {
        job->step = std::max(job->step, lp.step());
        job->tokens = std::max(job->tokens, lp.tokens());
      }
      job->update_us = now;
      RDATTN_RETURN_IF_ERROR(store_->UpdateJob(*job));
      pb::LeaseRenewal* renewal = resp.add_renewed();
      renewal->set_lease_id(lp.lease_id());
      SetTimestamp(job->lease_expiry_us, renewal->mutable_expire_time());
      RDATTN_ASSIGN_OR_RETURN(int64_t last, store_->MaxMetricSeq(job->id, job->attempts));
      renewal->set_last_stored_event_seq(static_cast<uint64_t>(last));
    }
    return Status::Ok();
  }();
  RDATTN_RETURN_IF_ERROR(st);
  SetDuration(options_.heartbeat_interval, resp.mutable_heartbeat_interval());
  RDATTN_LOG(kDebug) << "heartbeat from " << worker->id << ": " << req.leases_size() << " leases, "
                     << resp.lost_lease_ids_size() << " lost, " << resp.cancel_orders_size()
                     << " cancel orders";
  return resp;
}

namespace {
Status CheckProgress(const std::string& lease_id, const pb::MetricEvent& event) {
  if (lease_id.empty()) return FieldErrorStatus("lease_id", "required");
  if (event.seq() == 0) return FieldErrorStatus("event.seq", "must be >= 1");
  return Status::Ok();
}
}  // namespace

StatusOr<Core::ProgressResult> Core::RecordProgress(const std::string& lease_id,
                                                    const pb::MetricEvent& event) {
  RDATTN_RETURN_IF_ERROR(CheckProgress(lease_id, event));
  StatusOr<ProgressResult> result = RunInTx<ProgressResult>(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return RecordProgressInTx(lease_id, event); });
  if (result.ok()) CountProgress(*result);
  return result;
}

void Core::RecordProgressAsync(const std::string& lease_id, const pb::MetricEvent& event,
                               Done<ProgressResult> done) {
  Status bad = CheckProgress(lease_id, event);
  if (!bad.ok()) return done(bad);
  EnqueueInTx<ProgressResult>([this, lease_id, event]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                                  mu_) { return RecordProgressInTx(lease_id, event); },
                              [this, done = std::move(done)](StatusOr<ProgressResult> r) {
                                if (r.ok()) CountProgress(*r);
                                done(std::move(r));
                              });
}

void Core::CountProgress(const ProgressResult& r) {
  if (counters_ != nullptr && r.stored) counters_->MetricEventsStored(1);
}

StatusOr<Core::ProgressResult> Core::RecordProgressInTx(const std::string& lease_id,
                                                        const pb::MetricEvent& event) {
  ProgressResult result;
  Status st = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
    RDATTN_ASSIGN_OR_RETURN(std::optional<JobRow> found, store_->FindJobByLease(lease_id));
    if (!found) return LeaseNotHeld(lease_id);
    JobRow& job = *found;
    if (!event.job_id().empty() && event.job_id() != job.id) {
      return FieldErrorStatus("event.job_id", event.job_id() + " is not the lease's job " + job.id);
    }
    if (event.attempt() != 0 && event.attempt() != job.attempts) {
      return FieldErrorStatus("event.attempt", std::to_string(event.attempt()) +
                                                   " is not the lease's attempt " +
                                                   std::to_string(job.attempts));
    }
    // The first event of a lease means the ranks run.
    if (job.state == JobState::kLeased) {
      EventContext ctx;
      ctx.reason = "first progress event from worker " + job.worker_id;
      RDATTN_RETURN_IF_ERROR(ApplyJobEvent(job, JobEvent::kStart, ctx).status());
    }
    EventRow row;
    row.sweep_id = job.sweep_id;
    row.job_id = job.id;
    row.kind = EventKind::kMetric;
    row.attempt = job.attempts;
    row.metric_seq = static_cast<int64_t>(event.seq());
    row.metric_kind = event.kind();
    row.time_us = NowMicros();
    pb::MetricEvent* ev = row.event.mutable_metric_event();
    *ev = event;
    ev->set_job_id(job.id);
    ev->set_attempt(job.attempts);
    RDATTN_ASSIGN_OR_RETURN(result.stored, AppendEvent(row));
    if (result.stored) {
      switch (event.kind()) {
        case pb::MetricEvent::KIND_INIT:
          if (!event.init_param_checksum().empty()) job.init_checksum = event.init_param_checksum();
          break;
        case pb::MetricEvent::KIND_TRAIN_STEP:
          job.last_train_loss = event.train_loss();
          job.tokens_per_second = event.tokens_per_second();
          break;
        case pb::MetricEvent::KIND_EVAL:
          job.last_val_nll = event.val_nll();
          break;
        case pb::MetricEvent::KIND_CHECKPOINT:
          if (!event.checkpoint_path().empty()) job.last_checkpoint = event.checkpoint_path();
          break;
        default:
          break;
      }
      if (event.kind() != pb::MetricEvent::KIND_FAILED &&
          event.kind() != pb::MetricEvent::KIND_UNSPECIFIED) {
        job.step = event.step();
        job.tokens = event.tokens();
      }
      job.update_us = row.time_us;
      RDATTN_RETURN_IF_ERROR(store_->UpdateJob(job));
      // Data identity (data_identity.h): an attempt that reads other data than the job's first
      // attempt or the other arms of its pair fails the job now; retrying reads the same data.
      if (event.kind() == pb::MetricEvent::KIND_INIT) {
        RDATTN_ASSIGN_OR_RETURN(const std::string changed,
                                CheckInitDataIdentity(*store_, job, event));
        if (!changed.empty()) {
          EventContext ctx;
          ctx.outcome = "FAILED";
          ctx.message = changed;
          ctx.reason = changed +
                       " (not retried: another attempt would read the same data; restore the "
                       "shard or prepare the data again, then submit the sweep again)";
          ctx.no_retry = true;
          RDATTN_RETURN_IF_ERROR(ApplyJobEvent(job, JobEvent::kCompleteFailed, ctx).status());
        }
      }
    }
    RDATTN_ASSIGN_OR_RETURN(result.last_seq, store_->MaxMetricSeq(job.id, job.attempts));
    return Status::Ok();
  }();
  RDATTN_RETURN_IF_ERROR(st);
  return result;
}

namespace {
StatusOr<JobEvent> CompleteEvent(const pb::CompleteJobRequest& req) {
  if (req.lease_id().empty()) return FieldErrorStatus("lease_id", "required");
  JobEvent event;
  switch (req.outcome()) {
    case pb::JOB_OUTCOME_SUCCEEDED:
      event = JobEvent::kCompleteSucceeded;
      break;
    case pb::JOB_OUTCOME_FAILED:
      event = JobEvent::kCompleteFailed;
      break;
    case pb::JOB_OUTCOME_CANCELLED:
      event = JobEvent::kCompleteCancelled;
      break;
    case pb::JOB_OUTCOME_PREEMPTED:
      event = JobEvent::kCompletePreempted;
      break;
    case pb::JOB_OUTCOME_MACHINE_FAILED:
      event = JobEvent::kCompleteMachineFailed;
      break;
    default:
      return FieldErrorStatus("outcome",
                              "must be SUCCEEDED, FAILED, CANCELLED, PREEMPTED or MACHINE_FAILED");
  }
  return event;
}
}  // namespace

StatusOr<pb::CompleteJobResponse> Core::CompleteJob(const pb::CompleteJobRequest& req) {
  RDATTN_ASSIGN_OR_RETURN(JobEvent event, CompleteEvent(req));
  StatusOr<pb::CompleteJobResponse> resp = RunInTx<pb::CompleteJobResponse>(
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return CompleteJobInTx(req, event); });
  if (resp.ok()) CountCompletion(*resp);
  return resp;
}

void Core::CompleteJobAsync(const pb::CompleteJobRequest& req, Done<pb::CompleteJobResponse> done) {
  StatusOr<JobEvent> event = CompleteEvent(req);
  if (!event.ok()) return done(event.status());
  EnqueueInTx<pb::CompleteJobResponse>(
      [this, req, event = *event]()
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return CompleteJobInTx(req, event); },
      [this, done = std::move(done)](StatusOr<pb::CompleteJobResponse> r) {
        if (r.ok()) CountCompletion(*r);
        done(std::move(r));
      });
}

void Core::CountCompletion(const pb::CompleteJobResponse& r) {
  if (counters_ != nullptr && r.will_retry()) counters_->JobsRetried(1);
}

StatusOr<pb::CompleteJobResponse> Core::CompleteJobInTx(const pb::CompleteJobRequest& req,
                                                        JobEvent event) {
  pb::CompleteJobResponse resp;
  Status st = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
    RDATTN_ASSIGN_OR_RETURN(std::optional<JobRow> found, store_->FindJobByLease(req.lease_id()));
    if (!found) return LeaseNotHeld(req.lease_id());
    JobRow& job = *found;
    if (!req.worker_id().empty() && req.worker_id() != job.worker_id) {
      return AbortedError("lease " + req.lease_id() + " is held by another worker");
    }
    if (!req.job_id().empty() && req.job_id() != job.id) {
      return FieldErrorStatus("job_id", req.job_id() + " is not the lease's job " + job.id);
    }
    if (!req.checkpoint_path().empty()) job.last_checkpoint = req.checkpoint_path();
    // SUCCEEDED means every result is stored; a run that says it finished without them (its
    // events lost with a dead worker) is a failed attempt, retried with the reason.
    std::string incomplete;
    if (event == JobEvent::kCompleteSucceeded) {
      RDATTN_ASSIGN_OR_RETURN(incomplete, MissingResults(job));
      if (!incomplete.empty()) event = JobEvent::kCompleteFailed;
    }
    EventContext ctx;
    ctx.outcome = OutcomeLabel(req.outcome());
    ctx.exit_code = req.exit_code();
    ctx.term_signal = req.term_signal();
    ctx.stderr_tail = Tail(req.stderr_tail(), kMaxStderrTailBytes);
    ctx.message = req.message();
    switch (event) {
      case JobEvent::kCompleteFailed:
        if (!incomplete.empty()) {
          ctx.outcome = "INCOMPLETE";
          ctx.reason = "attempt " + std::to_string(job.attempts) + " on worker " + job.worker_id +
                       " reported SUCCEEDED, but " + incomplete;
          ctx.message = ctx.reason + (req.message().empty() ? "" : "; worker: " + req.message());
          RDATTN_LOG(kWarning).Job(job.id) << ctx.reason;
        } else {
          ctx.reason = FailureReason(
              job, req, std::max(1, options_.machine_failure_factor) * job.max_attempts);
        }
        break;
      case JobEvent::kCompleteMachineFailed:
        ctx.reason = FailureReason(job, req,
                                   std::max(1, options_.machine_failure_factor) * job.max_attempts);
        RDATTN_LOG(kWarning).Job(job.id) << ctx.reason.substr(0, ctx.reason.find('\n'));
        break;
      case JobEvent::kCompletePreempted:
        ctx.reason =
            "attempt " + std::to_string(job.attempts) + " preempted on worker " + job.worker_id;
        break;
      case JobEvent::kCompleteCancelled:
        ctx.reason = "stopped on a cancel order";
        break;
      default:
        ctx.reason = "completed on worker " + job.worker_id;
        break;
    }
    RDATTN_ASSIGN_OR_RETURN(JobState next, ApplyJobEvent(job, event, ctx));
    resp.set_job_state(ToProto(next));
    resp.set_will_retry(next == JobState::kPending);
    return Status::Ok();
  }();
  RDATTN_RETURN_IF_ERROR(st);
  return resp;
}

StatusOr<std::vector<int64_t>> Core::StoredEvalMilestones(const std::string& job_id) {
  RDATTN_ASSIGN_OR_RETURN(std::vector<EventRow> evals,
                          store_->ReadJobMetricEvents(job_id, pb::MetricEvent::KIND_EVAL));
  std::set<int64_t> out;
  for (const EventRow& e : evals) {
    const pb::MetricEvent& m = e.event.metric_event();
    out.insert(m.milestone_tokens() > 0 ? m.milestone_tokens() : m.tokens());
  }
  return std::vector<int64_t>(out.begin(), out.end());
}

StatusOr<std::string> Core::MissingResults(const JobRow& job) {
  const pb::RunSpec& run = job.spec.run();
  std::string missing;
  if (run.data().val_shards_size() > 0) {
    RDATTN_ASSIGN_OR_RETURN(std::vector<int64_t> stored, StoredEvalMilestones(job.id));
    const std::set<int64_t> have(stored.begin(), stored.end());
    std::string lacking;
    for (int64_t m : ExpectedMilestonesOf(job)) {
      if (have.count(m) == 0) lacking += (lacking.empty() ? "" : ", ") + std::to_string(m);
    }
    if (!lacking.empty())
      missing = "the val NLL of milestone(s) " + lacking + " (tokens) is not stored";
  }
  if (run.data().test_shards_size() > 0) {
    RDATTN_ASSIGN_OR_RETURN(std::vector<EventRow> finished,
                            store_->ReadJobMetricEvents(job.id, pb::MetricEvent::KIND_FINISHED));
    const bool have_test = std::any_of(finished.begin(), finished.end(), [](const EventRow& e) {
      return e.event.metric_event().eval_tokens() > 0;
    });
    if (!have_test)
      missing += std::string(missing.empty() ? "" : "; ") + "the test NLL is not stored";
  }
  return missing;
}

StatusOr<int> Core::ExpireLeases() {
  absl::MutexLock lock(&mu_);
  return ExpireLeasesLocked();
}

StatusOr<int> Core::ExpireLeasesLocked() {
  int expired = 0;
  int retried = 0;
  RDATTN_RETURN_IF_ERROR(EnsureMemoryState());
  RDATTN_RETURN_IF_ERROR(Tx([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
    return ExpireLeasesInTx(&expired, &retried);
  }));
  if (counters_ != nullptr) {
    if (expired > 0) counters_->LeasesExpired(expired);
    if (retried > 0) counters_->JobsRetried(retried);
  }
  return expired;
}

Status Core::ExpireLeasesInTx(int* expired, int* retried) {
  *expired = 0;
  *retried = 0;
  // A restarted coordinator gives workers one lease period to reach it before it takes leases.
  const absl::Duration grace =
      options_.restart_grace < absl::ZeroDuration() ? options_.lease_ttl : options_.restart_grace;
  if (NowMicros() < started_us_ + absl::ToInt64Microseconds(grace)) return Status::Ok();
  RDATTN_ASSIGN_OR_RETURN(std::vector<JobRow> jobs, store_->ListExpiredLeases(NowMicros()));
  for (JobRow& job : jobs) {
    EventContext ctx;
    ctx.outcome = "LEASE_EXPIRED";
    ctx.reason = "lease expired on worker " + job.worker_id + " (attempt " +
                 std::to_string(job.attempts) + ")";
    RDATTN_LOG(kWarning).Job(job.id) << ctx.reason;
    RDATTN_ASSIGN_OR_RETURN(JobState next, ApplyJobEvent(job, JobEvent::kLeaseExpired, ctx));
    ++*expired;
    if (next == JobState::kPending) ++*retried;
  }
  return Status::Ok();
}

}  // namespace rdattn::coordinator
