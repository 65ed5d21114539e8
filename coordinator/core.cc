// Core: the job life cycle and the shared machinery — construction and shutdown, ids, events,
// the metrics' read of the store, the scheduling state in memory, job events and the sweep state
// they imply, the jobs a sweep or a seed-policy look creates. The SweepService handlers are
// core_sweeps.cc, the WorkerService core_workers.cc, the dispatch thread core_dispatch.cc.
#include "coordinator/core.h"

#include <algorithm>
#include <set>
#include <utility>

#include "common/log.h"
#include "coordinator/proto_convert.h"
#include "coordinator/report.h"
#include "coordinator/scheduler.h"
#include "coordinator/seed_policy.h"
#include "proto/contract/contract.h"

namespace rdattn::coordinator {
namespace {

// The event row of a job's state change (`from` is JOB_STATE_UNSPECIFIED for a new job).
EventRow JobStateChangeRow(const JobRow& job, int64_t time_us, pb::JobState from, pb::JobState to,
                           const std::string& reason) {
  EventRow row;
  row.sweep_id = job.sweep_id;
  row.job_id = job.id;
  row.kind = EventKind::kJobStateChange;
  row.time_us = time_us;
  pb::JobStateChange* change = row.event.mutable_job_state_change();
  change->set_job_id(job.id);
  change->set_from_state(from);
  change->set_to_state(to);
  change->set_attempt(job.attempts);
  change->set_worker_id(job.worker_id);
  change->set_reason(reason);
  return row;
}

// The event row of a sweep's state change (`from` is SWEEP_STATE_UNSPECIFIED for a new sweep).
EventRow SweepStateChangeRow(const std::string& sweep_id, int64_t time_us, pb::SweepState from,
                             pb::SweepState to, const std::string& reason) {
  EventRow row;
  row.sweep_id = sweep_id;
  row.kind = EventKind::kSweepStateChange;
  row.time_us = time_us;
  pb::SweepStateChange* change = row.event.mutable_sweep_state_change();
  change->set_from_state(from);
  change->set_to_state(to);
  change->set_reason(reason);
  return row;
}

}  // namespace

Core::Core(std::unique_ptr<Store> store, const Clock* clock, CoreOptions options,
           CoreCounters* counters)
    : clock_(clock),
      counters_(counters),
      options_(std::move(options)),
      store_(std::move(store)),
      rng_(options_.rng_seed != 0 ? options_.rng_seed : std::random_device{}()) {
  started_us_ = NowMicros();
  dispatcher_ = std::thread([this] { DispatchLoop(); });
}

Core::~Core() { Shutdown(); }

void Core::SetReadStore(std::unique_ptr<Store> reader) {
  absl::MutexLock lock(&read_mu_);
  reader_ = std::move(reader);
}

void Core::StartReaper() {
  absl::MutexLock lock(&mu_);
  if (reaping_ || shutting_down_) return;
  reaping_ = true;
  next_reap_ = absl::Now() + options_.reap_interval;
  dispatch_cv_.Signal();
}

void Core::Shutdown() {
  std::vector<std::function<void()>> answers;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (auto& [sweep_id, w] : watches_) w.cv.SignalAll();
    dispatch_cv_.SignalAll();
  }
  if (dispatcher_.joinable()) dispatcher_.join();
  {
    // The dispatch thread has stopped: answer what it left.
    absl::MutexLock lock(&mu_);
    for (Op& op : ops_) {
      answers.push_back(
          [f = std::move(op.finish)] { f(UnavailableError("the coordinator is shutting down")); });
    }
    ops_.clear();
    for (const std::shared_ptr<LeaseWait>& w : waiters_) {
      if (w->answered) continue;
      w->answered = true;
      answers.push_back([w] { w->done(pb::LeaseJobResponse()); });
    }
    waiters_.clear();
  }
  for (auto& a : answers) a();
}

int64_t Core::NowMicros() const { return absl::ToUnixMicros(clock_->Now()); }

absl::Duration Core::WorkerLiveness() const {
  if (options_.worker_liveness > absl::ZeroDuration()) return options_.worker_liveness;
  return std::max(3 * options_.heartbeat_interval, options_.lease_ttl);
}

std::string Core::NewId(const std::string& prefix, int hex_digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = prefix;
  uint64_t bits = rng_();
  for (int i = 0; i < hex_digits; ++i) {
    if (i == 16) bits = rng_();
    id.push_back(kHex[bits & 0xf]);
    bits >>= 4;
  }
  return id;
}

StatusOr<bool> Core::AppendEvent(EventRow& row) {
  RDATTN_ASSIGN_OR_RETURN(bool stored, store_->AppendEvent(row));
  if (stored) {
    auto it = watches_.find(row.sweep_id);
    if (it != watches_.end()) {
      ++it->second.gen;
      it->second.cv.SignalAll();  // its watches re-read once the transaction releases mu_
    }
  }
  return stored;
}

void Core::NotifyWork() {
  ++work_gen_;
  dispatch_cv_.Signal();
}

// --- the metrics' read --------------------------------------------------------------------

StatusOr<StateCounts> Core::ReadStateCounts(absl::Duration retention) {
  // mu_ serializes every store access, so these reads see one state without a transaction.
  absl::MutexLock lock(&mu_);
  const int64_t now = NowMicros();
  StateCounts out;
  RDATTN_ASSIGN_OR_RETURN(out.jobs, store_->CountJobsByState());
  RDATTN_ASSIGN_OR_RETURN(out.sweeps, store_->CountSweepsByState());
  RDATTN_ASSIGN_OR_RETURN(out.sweep_jobs,
                          store_->CountSweepJobs(now - absl::ToInt64Microseconds(retention)));
  RDATTN_ASSIGN_OR_RETURN(std::vector<WorkerRow> workers, store_->ListWorkers());
  const int64_t alive_since = now - absl::ToInt64Microseconds(options_.lease_ttl);
  for (const WorkerRow& w : workers) {
    StateCounts::Worker m;
    m.id = w.id;
    m.alive = w.last_seen_us >= alive_since;
    m.free_slots = std::clamp(w.free_slots, 0, std::max(0, w.slots));
    m.busy_slots = std::max(0, w.slots) - m.free_slots;
    out.workers.push_back(std::move(m));
  }
  out.checksum_failures = store_->checksum_failures();
  return out;
}

// --- the scheduling state in memory ---------------------------------------------------------

Status Core::Tx(const std::function<Status()>& fn) {
  Status st = store_->Transaction(fn);
  if (!st.ok()) InvalidateMemoryState();  // it may hold changes that were rolled back
  return st;
}

void Core::InvalidateMemoryState() {
  memory_valid_ = false;
  queue_.Clear();
  workers_.clear();
  facts_.clear();
}

Status Core::InSavepoint(const std::function<Status()>& fn) {
  const uint64_t changes = memory_changes_;
  Status st = store_->Savepoint(fn);
  if (!st.ok() && memory_changes_ != changes) InvalidateMemoryState();
  return st;
}

Status Core::EnsureMemoryState() {
  if (memory_valid_) return Status::Ok();
  queue_.Clear();
  workers_.clear();
  facts_.clear();
  RDATTN_ASSIGN_OR_RETURN(auto group_kinds, store_->ActiveGroupKinds());
  for (const auto& [group, kinds] : group_kinds) queue_.SetGroupKinds(group, kinds);
  // ListPending leaves out job rows whose checksums do not match: they are never leased.
  RDATTN_ASSIGN_OR_RETURN(std::vector<PendingJob> pending, store_->ListPending());
  for (const PendingJob& j : pending) queue_.Upsert(j);
  RDATTN_ASSIGN_OR_RETURN(std::vector<WorkerRow> workers, store_->ListWorkers());
  for (const WorkerRow& w : workers) {
    workers_[w.id] = LiveWorker{w.kind, w.free_slots, w.last_seen_us};
  }
  memory_valid_ = true;
  return Status::Ok();
}

void Core::OnJobChanged(const JobRow& job, JobState from, bool inserted) {
  ++memory_changes_;
  if (memory_valid_) {
    if (job.state == JobState::kPending) {
      PendingJob p;
      p.job_id = job.id;
      p.pair_group = job.pair_group;
      p.priority = job.priority;
      p.create_order = job.seq;
      p.world_size = job.world_size;
      p.preferred_kind = job.preferred_kind;
      p.not_before_us = job.not_before_us;
      p.last_failed_worker = job.last_failed_worker;
      queue_.Upsert(p);
    } else {
      queue_.Remove(job.id);
    }
  }
  if (job.state == JobState::kSucceeded || job.state == JobState::kFailed ||
      job.state == JobState::kCancelled) {
    milestones_.erase(job.id);
  }
  auto it = facts_.find(job.sweep_id);
  if (it == facts_.end()) return;  // read from the store when first needed
  SweepFacts& f = it->second;
  auto count = [&f](JobState s) -> int* {
    switch (s) {
      case JobState::kPending:
        return &f.pending;
      case JobState::kLeased:
        return &f.leased;
      case JobState::kRunning:
        return &f.running;
      case JobState::kSucceeded:
        return &f.succeeded;
      case JobState::kFailed:
        return &f.failed;
      case JobState::kCancelled:
        return &f.cancelled;
    }
    return nullptr;
  };
  if (inserted) {
    f.total += 1;
  } else if (int* c = count(from)) {
    *c -= 1;
  }
  if (int* c = count(job.state)) *c += 1;
  if (job.attempts > 0) f.any_started = true;
}

void Core::OnWorkerSeen(const std::string& id, HardwareKind kind, int free_slots, int64_t now_us) {
  if (!memory_valid_) return;
  ++memory_changes_;
  LiveWorker& w = workers_[id];
  w.kind = kind;
  w.free_slots = free_slots;
  w.last_seen_us = now_us;
}

StatusOr<SweepFacts> Core::SweepFactsOf(const std::string& sweep_id) {
  auto it = facts_.find(sweep_id);
  if (it != facts_.end()) return it->second;
  RDATTN_ASSIGN_OR_RETURN(SweepFacts f, store_->GetSweepFacts(sweep_id));
  facts_[sweep_id] = f;
  return f;
}

const std::vector<int64_t>& Core::ExpectedMilestonesOf(const JobRow& job) {
  auto it = milestones_.find(job.id);
  if (it == milestones_.end()) {
    it = milestones_.emplace(job.id, ExpectedMilestones(job.spec.run())).first;
  }
  return it->second;
}

// --- job events and sweep state ------------------------------------------------------------

StatusOr<JobState> Core::ApplyJobEvent(JobRow& job, JobEvent event, const EventContext& ctx) {
  const int64_t now = NowMicros();
  TransitionInput input;
  input.counted_attempts = job.attempts - job.preemptions - job.machine_failures;
  input.max_attempts = job.max_attempts;
  input.cancel_requested = job.cancel_requested;
  input.machine_failures = job.machine_failures;
  input.max_machine_failures = std::max(1, options_.machine_failure_factor) * job.max_attempts;
  if (ctx.no_retry) input.counted_attempts = std::max(input.counted_attempts, input.max_attempts);
  RDATTN_ASSIGN_OR_RETURN(TransitionResult t, Transition(job.state, event, input));

  for (JobAction action : t.actions) {
    switch (action) {
      case JobAction::kOpenAttempt: {
        job.attempts += 1;
        job.lease_id = NewId("ls-", 16);
        job.lease_expiry_us = now + absl::ToInt64Microseconds(options_.lease_ttl);
        job.worker_id = ctx.worker != nullptr ? ctx.worker->id : "";
        job.worker_kind = ctx.worker != nullptr ? ctx.worker->kind : HardwareKind::kAny;
        if (memory_valid_) {
          ++memory_changes_;
          queue_.AddGroupKind(job.pair_group, job.worker_kind);
        }
        AttemptRow a;
        a.job_id = job.id;
        a.attempt = job.attempts;
        a.lease_id = job.lease_id;
        a.worker_id = job.worker_id;
        a.worker_kind = job.worker_kind;
        a.lease_us = now;
        RDATTN_RETURN_IF_ERROR(store_->InsertAttempt(a));
        break;
      }
      case JobAction::kMarkStarted: {
        if (job.start_us == 0) job.start_us = now;
        RDATTN_ASSIGN_OR_RETURN(AttemptRow a, store_->GetAttempt(job.id, job.attempts));
        a.start_us = now;
        RDATTN_RETURN_IF_ERROR(store_->UpdateAttempt(a));
        break;
      }
      case JobAction::kCloseAttempt: {
        RDATTN_ASSIGN_OR_RETURN(AttemptRow a, store_->GetAttempt(job.id, job.attempts));
        a.end_us = now;
        a.outcome = ctx.outcome;
        a.exit_code = ctx.exit_code;
        a.term_signal = ctx.term_signal;
        a.stderr_tail = ctx.stderr_tail;
        a.message = ctx.message;
        RDATTN_RETURN_IF_ERROR(store_->UpdateAttempt(a));
        job.lease_id.clear();
        job.lease_expiry_us = 0;
        break;
      }
      case JobAction::kRefundAttempt:
        job.preemptions += 1;
        break;
      case JobAction::kRecordFailure:
        job.failure_reason = ctx.reason;
        break;
      case JobAction::kRequestCancel:
        job.cancel_requested = true;
        break;
      case JobAction::kFinish:
        job.end_us = now;
        if (t.new_state == JobState::kFailed && job.failure_reason.empty())
          job.failure_reason = ctx.reason;
        break;
      case JobAction::kCountMachineFailure:
        job.machine_failures += 1;
        break;
      case JobAction::kBackoff: {
        // Every attempt that ended other than preempted failed (job or machine): the backoff
        // grows with them (docs/coordinator.md "Retries and backoff").
        BackoffPolicy policy;
        policy.base_us = absl::ToInt64Microseconds(options_.retry_backoff_base);
        policy.cap_us = absl::ToInt64Microseconds(options_.retry_backoff_cap);
        const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
        job.not_before_us = now + RetryBackoffMicros(job.attempts - job.preemptions, policy, u);
        job.last_failed_worker = job.worker_id;
        break;
      }
    }
  }
  const JobState from = job.state;
  job.state = t.new_state;
  job.update_us = now;
  RDATTN_RETURN_IF_ERROR(store_->UpdateJob(job));
  OnJobChanged(job, from, /*inserted=*/false);
  if (from == t.new_state) return t.new_state;

  RDATTN_LOG(kInfo).Job(job.id) << JobStateName(from) << " -> " << JobStateName(t.new_state)
                                << " on " << JobEventName(event) << " (attempt " << job.attempts
                                << ")"
                                << (ctx.reason.empty()
                                        ? ""
                                        : ": " + ctx.reason.substr(0, ctx.reason.find('\n')));
  EventRow row = JobStateChangeRow(job, now, ToProto(from), ToProto(t.new_state), ctx.reason);
  RDATTN_RETURN_IF_ERROR(AppendEvent(row).status());
  if (t.new_state == JobState::kPending) NotifyWork();
  RDATTN_RETURN_IF_ERROR(RefreshSweepState(job.sweep_id, ctx.reason));
  return t.new_state;
}

Status Core::RefreshSweepState(const std::string& sweep_id, const std::string& reason) {
  RDATTN_ASSIGN_OR_RETURN(SweepRow sweep, store_->GetSweep(sweep_id));
  RDATTN_ASSIGN_OR_RETURN(SweepFacts facts, SweepFactsOf(sweep_id));
  // A seed policy looks when every job of the current seeds has ended; a look that continues
  // adds jobs, so the sweep stays RUNNING (docs/sweeps.md "Seed policy").
  const bool all_ended =
      facts.total > 0 && facts.succeeded + facts.failed + facts.cancelled == facts.total;
  if (all_ended && !sweep.cancel_requested && sweep.spec.has_seed_policy() &&
      !IsTerminal(sweep.state)) {
    RDATTN_ASSIGN_OR_RETURN(std::optional<pb::SequentialState> seq,
                            store_->GetSequential(sweep_id));
    if (seq && !seq->stopped()) {
      RDATTN_RETURN_IF_ERROR(
          Tx([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return RunSeedLook(sweep, *seq); }));
      RDATTN_ASSIGN_OR_RETURN(facts, SweepFactsOf(sweep_id));
    }
  }
  facts.cancel_requested = sweep.cancel_requested;
  const SweepState next = DeriveSweepState(facts);
  if (next == sweep.state) return Status::Ok();
  const int64_t now = NowMicros();
  const SweepState from = sweep.state;
  sweep.state = next;
  sweep.update_us = now;
  if (IsTerminal(next)) sweep.end_us = now;
  if (next == SweepState::kFailed && sweep.message.empty()) {
    sweep.message =
        std::to_string(facts.failed) + " of " + std::to_string(facts.total) + " jobs FAILED";
  }
  RDATTN_RETURN_IF_ERROR(store_->UpdateSweep(sweep));
  RDATTN_LOG(kInfo) << "sweep " << sweep_id << ": " << SweepStateName(from) << " -> "
                    << SweepStateName(next);
  EventRow row =
      SweepStateChangeRow(sweep_id, now, ToProto(from), ToProto(next),
                          IsTerminal(next) && !sweep.message.empty() ? sweep.message : reason);
  return AppendEvent(row).status();
}

// --- sweeps and jobs created --------------------------------------------------------------

Status Core::InsertSweep(SweepRow& row, const std::vector<pb::JobSpec>& jobs) {
  RDATTN_RETURN_IF_ERROR(store_->InsertSweep(row));
  EventRow created = SweepStateChangeRow(row.id, row.create_us, pb::SWEEP_STATE_UNSPECIFIED,
                                         pb::SWEEP_STATE_PENDING, "submitted");
  RDATTN_RETURN_IF_ERROR(AppendEvent(created).status());
  return InsertJobs(row, jobs, row.create_us, "submitted");
}

Status Core::InsertJobs(const SweepRow& row, const std::vector<pb::JobSpec>& jobs, int64_t now_us,
                        const std::string& reason) {
  for (const pb::JobSpec& spec : jobs) {
    JobRow job;
    job.id = spec.job_id();
    job.sweep_id = row.id;
    job.pair_group = spec.pair_group();
    job.spec = spec;
    if (job.spec.priority() == 0) job.spec.set_priority(row.spec.priority());
    if (job.spec.hardware_kind() == pb::HARDWARE_KIND_UNSPECIFIED) {
      job.spec.set_hardware_kind(row.spec.hardware_kind());
    }
    job.state = JobState::kPending;
    job.max_attempts = row.max_attempts;
    job.priority = job.spec.priority();
    job.world_size = std::max(1, spec.run().parallel().world_size());
    job.preferred_kind = HardwareKindFromProto(job.spec.hardware_kind());
    job.create_us = now_us;
    job.update_us = now_us;
    RDATTN_RETURN_IF_ERROR(store_->InsertJob(job));
    OnJobChanged(job, JobState::kPending, /*inserted=*/true);
    // A new job: attempt 0, no worker.
    EventRow ev =
        JobStateChangeRow(job, now_us, pb::JOB_STATE_UNSPECIFIED, pb::JOB_STATE_PENDING, reason);
    RDATTN_RETURN_IF_ERROR(AppendEvent(ev).status());
  }
  NotifyWork();
  return Status::Ok();
}

Status Core::RunSeedLook(const SweepRow& sweep, pb::SequentialState& state) {
  ReportSource source;
  source.sweep = sweep;
  RDATTN_ASSIGN_OR_RETURN(source.jobs, store_->ListJobs(sweep.id));
  RDATTN_ASSIGN_OR_RETURN(source.events,
                          store_->ReadMetricEvents(sweep.id, pb::MetricEvent::KIND_EVAL));
  std::set<uint64_t> seeds;
  for (const JobRow& j : source.jobs) seeds.insert(j.spec.seed());
  const stats::ReportTables tables =
      stats::BuildTables(MakeStatsInput(source, ""), ReportBootstrapSeed(sweep.id),
                         /*resamples=*/100, kDefaultConfidenceLevel);
  pb::SeedLook look =
      EvaluateLook(sweep.spec.seed_policy(), state, tables, static_cast<int>(seeds.size()));
  const int64_t now = NowMicros();
  if (look.decision() == "continue") {
    pb::SweepSpec more = sweep.spec;
    more.clear_seed_policy();
    for (uint64_t s : look.added_seeds()) more.add_seeds(s);
    StatusOr<std::vector<pb::JobSpec>> jobs = contract::ExpandSweep(more, sweep.id);
    if (!jobs.ok()) {
      // The initial seeds' jobs expanded with the same spec, so this is not expected; stop
      // rather than loop, and say why.
      look.set_decision("stop");
      look.set_reason("cannot add seeds: " + jobs.status().message());
      look.clear_added_seeds();
    } else {
      RDATTN_RETURN_IF_ERROR(InsertJobs(
          sweep, *jobs, now, "added by seed policy look " + std::to_string(look.look())));
    }
  }
  if (look.decision() != "continue") {
    state.set_stopped(true);
    state.set_stopped_at_look(look.look());
  }
  *state.add_looks() = look;
  RDATTN_RETURN_IF_ERROR(store_->PutSequential(sweep.id, state));
  RDATTN_LOG(kInfo) << "sweep " << sweep.id << ": " << contract::DescribeSeedLook(look);
  EventRow row;
  row.sweep_id = sweep.id;
  row.kind = EventKind::kSeedLook;
  row.time_us = now;
  *row.event.mutable_seed_look() = look;
  return AppendEvent(row).status();
}

}  // namespace rdattn::coordinator
