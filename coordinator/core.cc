// Core: shared machinery (job events, sweep state, ids, the reaper) and the SweepService side.
// The WorkerService side is in core_workers.cc.
#include "coordinator/core.h"

#include <absl/cleanup/cleanup.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <utility>

#include "common/log.h"
#include "coordinator/proto_convert.h"
#include "coordinator/report.h"
#include "coordinator/scheduler.h"
#include "coordinator/seed_policy.h"
#include "coordinator/sweep_summary.h"
#include "proto/contract/contract.h"

namespace rdattn::coordinator {
namespace {

constexpr int kDefaultPageSize = 50;
constexpr int kMaxPageSize = 500;
constexpr int kWatchBatch = 256;
constexpr char kPageTokenPrefix[] = "before:";

StatusOr<int64_t> ParsePageToken(const std::string& token) {
  if (token.empty()) return int64_t{0};
  const std::string prefix = kPageTokenPrefix;
  if (token.compare(0, prefix.size(), prefix) == 0) {
    const std::string digits = token.substr(prefix.size());
    if (!digits.empty() && digits.size() < 19 &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const int64_t seq = std::stoll(digits);
      if (seq > 0) return seq;
    }
  }
  return InvalidArgumentError("page_token: not a token this server issued");
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

  RDATTN_LOG(kInfo) << "job " << job.id << ": " << JobStateName(from) << " -> "
                    << JobStateName(t.new_state) << " on " << JobEventName(event) << " (attempt "
                    << job.attempts << ")"
                    << (ctx.reason.empty() ? ""
                                           : ": " + ctx.reason.substr(0, ctx.reason.find('\n')));
  EventRow row;
  row.sweep_id = job.sweep_id;
  row.job_id = job.id;
  row.kind = EventKind::kJobStateChange;
  row.time_us = now;
  pb::JobStateChange* change = row.event.mutable_job_state_change();
  change->set_job_id(job.id);
  change->set_from_state(ToProto(from));
  change->set_to_state(ToProto(t.new_state));
  change->set_attempt(job.attempts);
  change->set_worker_id(job.worker_id);
  change->set_reason(ctx.reason);
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
      RDATTN_RETURN_IF_ERROR(Tx([&] { return RunSeedLook(sweep, *seq); }));
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
  EventRow row;
  row.sweep_id = sweep_id;
  row.kind = EventKind::kSweepStateChange;
  row.time_us = now;
  pb::SweepStateChange* change = row.event.mutable_sweep_state_change();
  change->set_from_state(ToProto(from));
  change->set_to_state(ToProto(next));
  change->set_reason(IsTerminal(next) && !sweep.message.empty() ? sweep.message : reason);
  return AppendEvent(row).status();
}

StatusOr<pb::SweepStatus> Core::MakeSweepStatus(const SweepRow& row, bool with_jobs) {
  return MakeSweepStatusFrom(*store_, row, with_jobs);
}

StatusOr<pb::SweepStatus> Core::MakeSweepStatusFrom(Store& store, const SweepRow& row,
                                                    bool with_jobs) {
  pb::SweepStatus out;
  out.set_sweep_id(row.id);
  *out.mutable_spec() = row.spec;
  out.set_state(ToProto(row.state));
  out.set_message(row.message);
  SetTimestamp(row.create_us, out.mutable_create_time());
  SetTimestamp(row.update_us, out.mutable_update_time());
  if (row.end_us != 0) SetTimestamp(row.end_us, out.mutable_end_time());
  RDATTN_ASSIGN_OR_RETURN(SweepFacts f, store.GetSweepFacts(row.id));
  pb::JobCounts* c = out.mutable_job_counts();
  c->set_total(f.total);
  c->set_pending(f.pending);
  c->set_leased(f.leased);
  c->set_running(f.running);
  c->set_succeeded(f.succeeded);
  c->set_failed(f.failed);
  c->set_cancelled(f.cancelled);
  RDATTN_ASSIGN_OR_RETURN(int64_t last_seq, store.LastSweepEventSeq(row.id));
  out.set_last_event_seq(static_cast<uint64_t>(last_seq));
  if (row.spec.has_seed_policy()) {
    RDATTN_ASSIGN_OR_RETURN(std::optional<pb::SequentialState> seq, store.GetSequential(row.id));
    if (seq) *out.mutable_sequential() = std::move(*seq);
  }
  if (!with_jobs) return out;
  RDATTN_ASSIGN_OR_RETURN(std::vector<JobRow> jobs, store.ListJobs(row.id));
  const int64_t now = NowMicros();
  for (const JobRow& j : jobs) *out.add_jobs() = MakeJobStatus(j, now);
  return out;
}

// --- SweepService --------------------------------------------------------------------------

Status Core::InsertSweep(SweepRow& row, const std::vector<pb::JobSpec>& jobs) {
  RDATTN_RETURN_IF_ERROR(store_->InsertSweep(row));
  EventRow created;
  created.sweep_id = row.id;
  created.kind = EventKind::kSweepStateChange;
  created.time_us = row.create_us;
  created.event.mutable_sweep_state_change()->set_to_state(pb::SWEEP_STATE_PENDING);
  created.event.mutable_sweep_state_change()->set_reason("submitted");
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
    EventRow ev;
    ev.sweep_id = row.id;
    ev.job_id = job.id;
    ev.kind = EventKind::kJobStateChange;
    ev.time_us = now_us;
    pb::JobStateChange* change = ev.event.mutable_job_state_change();
    change->set_job_id(job.id);
    change->set_to_state(pb::JOB_STATE_PENDING);
    change->set_reason(reason);
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

StatusOr<pb::SubmitSweepResponse> Core::SubmitSweep(const pb::SubmitSweepRequest& req,
                                                    const std::string& owner) {
  pb::SweepSpec spec = req.spec();
  if (!owner.empty()) spec.set_owner(owner);
  std::vector<FieldError> problems;
  if (req.request_id().empty() && !req.validate_only())
    problems.push_back({"request_id", "required"});

  pb::SubmitSweepResponse resp;
  if (!req.request_id().empty() && !req.validate_only()) {
    absl::MutexLock lock(&mu_);
    RDATTN_ASSIGN_OR_RETURN(std::optional<SweepRow> existing,
                            store_->FindSweepByRequestId(req.request_id()));
    if (existing) {
      if (!google::protobuf::util::MessageDifferencer::Equals(existing->spec, spec)) {
        return Status(StatusCode::kAlreadyExists, "request_id: " + req.request_id() +
                                                      " was used for a different spec (sweep " +
                                                      existing->id + ")");
      }
      RDATTN_ASSIGN_OR_RETURN(*resp.mutable_sweep(),
                              MakeSweepStatus(*existing, /*with_jobs=*/false));
      resp.set_created(false);
      return resp;
    }
  }

  std::string sweep_id;
  if (!req.validate_only()) {
    absl::MutexLock lock(&mu_);
    sweep_id = NewId("sw-", 8);
  }
  FieldErrorsOr<std::vector<pb::JobSpec>> jobs = contract::ExpandSweep(spec, sweep_id);
  if (!jobs.ok() || !problems.empty()) {
    if (!jobs.ok() && jobs.errors().empty()) return jobs.status();  // not about a field
    problems.insert(problems.end(), jobs.errors().begin(), jobs.errors().end());
    return FieldErrorStatus(problems);  // the RPC's one INVALID_ARGUMENT text
  }
  // A seed policy's boundaries: computed once here (a Monte Carlo, outside the lock) and stored.
  std::optional<pb::SequentialState> sequential;
  if (spec.has_seed_policy()) {
    StatusOr<pb::SequentialState> design = DesignSeedPolicy(spec.seed_policy());
    if (!design.ok()) return design.status();
    sequential = std::move(design).value();
  }
  if (req.validate_only()) {
    *resp.mutable_sweep()->mutable_spec() = spec;
    if (sequential) *resp.mutable_sweep()->mutable_sequential() = *sequential;
    for (const pb::JobSpec& j : *jobs) *resp.add_planned_jobs() = j;
    resp.set_created(false);
    return resp;
  }

  absl::MutexLock lock(&mu_);
  SweepRow row;
  row.id = sweep_id;
  row.request_id = req.request_id();
  row.owner = spec.owner();
  row.spec = spec;
  row.state = SweepState::kPending;
  row.max_attempts = spec.max_attempts() > 0 ? spec.max_attempts() : options_.default_max_attempts;
  row.create_us = NowMicros();
  row.update_us = row.create_us;
  std::optional<SweepRow> raced;
  Status st = Tx([&]() -> Status {
    // A concurrent submission with the same request_id may have won while we expanded.
    RDATTN_ASSIGN_OR_RETURN(raced, store_->FindSweepByRequestId(req.request_id()));
    if (raced) return Status::Ok();
    RDATTN_RETURN_IF_ERROR(InsertSweep(row, *jobs));
    if (sequential) RDATTN_RETURN_IF_ERROR(store_->PutSequential(row.id, *sequential));
    return Status::Ok();
  });
  RDATTN_RETURN_IF_ERROR(st);
  if (raced) {
    if (!google::protobuf::util::MessageDifferencer::Equals(raced->spec, spec)) {
      return Status(StatusCode::kAlreadyExists, "request_id: " + req.request_id() +
                                                    " was used for a different spec (sweep " +
                                                    raced->id + ")");
    }
    RDATTN_ASSIGN_OR_RETURN(*resp.mutable_sweep(), MakeSweepStatus(*raced, false));
    resp.set_created(false);
    return resp;
  }
  RDATTN_LOG(kInfo) << "sweep " << row.id << " submitted by '" << row.owner << "': " << jobs->size()
                    << " jobs";
  RDATTN_ASSIGN_OR_RETURN(*resp.mutable_sweep(), MakeSweepStatus(row, false));
  resp.set_created(true);
  return resp;
}

StatusOr<pb::GetSweepResponse> Core::GetSweep(const pb::GetSweepRequest& req) {
  if (req.sweep_id().empty()) return InvalidArgumentError("sweep_id: required");
  const pb::SweepView view =
      req.view() == pb::SWEEP_VIEW_UNSPECIFIED ? pb::SWEEP_VIEW_FULL : req.view();
  if (!pb::SweepView_IsValid(view)) {
    return InvalidArgumentError("view: unknown view " + std::to_string(req.view()));
  }
  if (req.page_size() < 0) {
    return InvalidArgumentError("page_size: must be >= 0, got " + std::to_string(req.page_size()));
  }
  if (view != pb::SWEEP_VIEW_FULL && (req.page_size() != 0 || !req.page_token().empty())) {
    return InvalidArgumentError(std::string(req.page_size() != 0 ? "page_size" : "page_token") +
                                ": pages are of the full view's jobs; view is " +
                                pb::SweepView_Name(view));
  }
  RDATTN_ASSIGN_OR_RETURN(const int64_t after_seq,
                          ParseJobPageToken(req.sweep_id(), req.page_token()));
  return WithReadStore([&](Store& store) -> StatusOr<pb::GetSweepResponse> {
    RDATTN_ASSIGN_OR_RETURN(SweepRow row, store.GetSweep(req.sweep_id()));
    pb::GetSweepResponse resp;
    RDATTN_ASSIGN_OR_RETURN(*resp.mutable_sweep(),
                            MakeSweepStatusFrom(store, row, /*with_jobs=*/false));
    pb::SweepStatus& sweep = *resp.mutable_sweep();
    const int64_t now = NowMicros();
    if (view == pb::SWEEP_VIEW_SUMMARY) {
      RDATTN_ASSIGN_OR_RETURN(*sweep.mutable_summary(), ReadSweepSummary(store, row.id, now));
    }
    if (view != pb::SWEEP_VIEW_FULL) return resp;
    // A page of jobs in creation order (docs/coordinator.md "Reading big sweeps"). page_size 0:
    // every job, as before paging, while that fits one reply.
    if (req.page_size() == 0 && sweep.job_counts().total() > kMaxJobsUnpaged) {
      return InvalidArgumentError(
          "page_size: 0 asks for all " + std::to_string(sweep.job_counts().total()) +
          " jobs of sweep " + row.id + " in one reply, more than " +
          std::to_string(kMaxJobsUnpaged) + "; page through them (page_size at most " +
          std::to_string(kMaxJobsPerPage) + ", then next_page_token)");
    }
    const int page =
        req.page_size() == 0 ? kMaxJobsUnpaged : std::min(req.page_size(), kMaxJobsPerPage);
    RDATTN_ASSIGN_OR_RETURN(std::vector<JobRow> jobs,
                            store.ListJobsPage(row.id, after_seq, page + 1));
    const bool more = static_cast<int>(jobs.size()) > page;
    if (more) jobs.resize(page);
    for (const JobRow& j : jobs) *sweep.add_jobs() = MakeJobStatus(j, now);
    if (more) resp.set_next_page_token(JobPageToken(row.id, jobs.back().seq));
    return resp;
  });
}

StatusOr<pb::ListSweepsResponse> Core::ListSweeps(const pb::ListSweepsRequest& req) {
  if (req.page_size() < 0) return InvalidArgumentError("page_size: must be >= 0");
  SweepFilter filter;
  filter.owner = req.owner();
  for (int i = 0; i < req.states_size(); ++i) {
    StatusOr<SweepState> st = SweepStateFromProto(req.states(i));
    if (!st.ok())
      return InvalidArgumentError("states[" + std::to_string(i) + "]: not a sweep state");
    filter.states.push_back(*st);
  }
  RDATTN_ASSIGN_OR_RETURN(filter.before_seq, ParsePageToken(req.page_token()));
  const int page =
      req.page_size() == 0 ? kDefaultPageSize : std::min(req.page_size(), kMaxPageSize);
  filter.limit = page + 1;  // one more tells whether there is a next page

  return WithReadStore([&](Store& store) -> StatusOr<pb::ListSweepsResponse> {
    RDATTN_ASSIGN_OR_RETURN(std::vector<SweepRow> rows, store.ListSweeps(filter));
    pb::ListSweepsResponse resp;
    const bool more = static_cast<int>(rows.size()) > page;
    if (more) rows.resize(page);
    for (const SweepRow& r : rows) {
      RDATTN_ASSIGN_OR_RETURN(*resp.add_sweeps(),
                              MakeSweepStatusFrom(store, r, req.view() == pb::SWEEP_VIEW_FULL));
    }
    if (more) resp.set_next_page_token(kPageTokenPrefix + std::to_string(rows.back().seq));
    return resp;
  });
}

Status Core::WatchSweep(const pb::WatchSweepRequest& req, const SendFn& send,
                        const CancelledFn& cancelled) {
  if (req.sweep_id().empty()) return InvalidArgumentError("sweep_id: required");
  int64_t cursor = static_cast<int64_t>(std::min<uint64_t>(req.after_seq(), INT64_MAX));
  SweepWatches* watch = nullptr;  // the sweep's entry in watches_ (std::map: it stays put)
  {
    absl::MutexLock lock(&mu_);
    RDATTN_RETURN_IF_ERROR(store_->GetSweep(req.sweep_id()).status());
    // A resume point of another store epoch names other events (the store was rolled back or
    // replaced since): tell the watcher rather than skip what it never saw.
    if (!req.store_epoch().empty() && req.store_epoch() != store_->epoch()) {
      return FailedPreconditionError(
          "store_epoch: the watch resumes after seq " + std::to_string(req.after_seq()) +
          " of store epoch " + req.store_epoch() + ", but the store is now in epoch " +
          store_->epoch() +
          " (it was rolled back or replaced, and event numbers may have been handed out "
          "again): restart the watch from seq 0 with no store_epoch");
    }
    watch = &watches_[req.sweep_id()];
    ++watch->watches;
  }
  absl::Cleanup leave = [&] {
    absl::MutexLock lock(&mu_);
    if (--watch->watches == 0) watches_.erase(req.sweep_id());
  };
  uint64_t seen_gen = 0;
  bool read_now = true;  // at the start, and after a batch (there may be more)
  while (true) {
    if (cancelled && cancelled()) return CancelledError("watch cancelled by the client");
    std::vector<EventRow> batch;
    {
      absl::MutexLock lock(&mu_);
      if (shutting_down_) return UnavailableError("coordinator shutting down; resume the watch");
      if (!read_now && watch->gen == seen_gen) {
        watch->cv.WaitWithTimeout(&mu_, options_.wait_slice);
        if (shutting_down_) return UnavailableError("coordinator shutting down; resume the watch");
        if (watch->gen == seen_gen) continue;  // a slice passed: look at `cancelled` again
      }
      seen_gen = watch->gen;
      read_now = false;
      RDATTN_ASSIGN_OR_RETURN(batch, store_->ReadEvents(req.sweep_id(), cursor, kWatchBatch));
      for (EventRow& e : batch) e.event.set_store_epoch(store_->epoch());
      if (batch.empty()) {
        RDATTN_ASSIGN_OR_RETURN(SweepRow sweep, store_->GetSweep(req.sweep_id()));
        if (IsTerminal(sweep.state)) return Status::Ok();  // nothing more will come
        continue;
      }
    }
    for (const EventRow& e : batch) {
      if (!send(e.event)) return CancelledError("watch stream closed by the client");
      cursor = e.seq;
      if (e.event.has_sweep_state_change()) {
        StatusOr<SweepState> to = SweepStateFromProto(e.event.sweep_state_change().to_state());
        if (to.ok() && IsTerminal(*to)) return Status::Ok();
      }
    }
    read_now = true;
  }
}

StatusOr<pb::CancelSweepResponse> Core::CancelSweep(
    const pb::CancelSweepRequest& req, const std::optional<std::string>& required_owner) {
  if (req.sweep_id().empty()) return InvalidArgumentError("sweep_id: required");
  absl::MutexLock lock(&mu_);
  SweepRow sweep;
  Status st = Tx([&]() -> Status {
    RDATTN_ASSIGN_OR_RETURN(sweep, store_->GetSweep(req.sweep_id()));
    if (required_owner && sweep.owner != *required_owner) {
      return Status(
          StatusCode::kPermissionDenied,
          "sweep " + sweep.id + " belongs to another owner; researchers cancel only their own");
    }
    if (IsTerminal(sweep.state)) {
      return FailedPreconditionError("sweep " + sweep.id + " already ended " +
                                     std::string(SweepStateName(sweep.state)));
    }
    const std::string reason = req.reason().empty() ? "cancelled" : "cancelled: " + req.reason();
    if (!sweep.cancel_requested) {
      sweep.cancel_requested = true;
      sweep.message = reason;
      sweep.update_us = NowMicros();
      RDATTN_RETURN_IF_ERROR(store_->UpdateSweep(sweep));
      RDATTN_LOG(kInfo) << "sweep " << sweep.id << ": " << reason;
    }
    RDATTN_ASSIGN_OR_RETURN(std::vector<JobRow> jobs, store_->ListJobs(sweep.id));
    for (JobRow& job : jobs) {
      if (IsTerminal(job.state) || job.cancel_requested) continue;
      EventContext ctx;
      ctx.reason = reason;
      RDATTN_RETURN_IF_ERROR(ApplyJobEvent(job, JobEvent::kCancel, ctx).status());
    }
    RDATTN_RETURN_IF_ERROR(RefreshSweepState(sweep.id, reason));
    RDATTN_ASSIGN_OR_RETURN(sweep, store_->GetSweep(sweep.id));
    return Status::Ok();
  });
  RDATTN_RETURN_IF_ERROR(st);
  pb::CancelSweepResponse resp;
  RDATTN_ASSIGN_OR_RETURN(*resp.mutable_sweep(), MakeSweepStatus(sweep, false));
  return resp;
}

StatusOr<pb::GetReportResponse> Core::GetReport(const pb::GetReportRequest& req) {
  if (req.sweep_id().empty()) return InvalidArgumentError("sweep_id: required");
  if (!(req.confidence_level() >= 0 && req.confidence_level() < 1)) {
    return InvalidArgumentError("confidence_level: must be in (0, 1), or 0 for 0.95");
  }
  if (req.bootstrap_resamples() < 0 || req.bootstrap_resamples() > kMaxBootstrapResamples) {
    return InvalidArgumentError("bootstrap_resamples: must be in [1, " +
                                std::to_string(kMaxBootstrapResamples) + "], or 0 for " +
                                std::to_string(kDefaultBootstrapResamples));
  }
  if (!(std::isfinite(req.target_delta_nll()) && req.target_delta_nll() >= 0)) {
    return InvalidArgumentError("target_delta_nll: must be a finite number of nats >= 0 (0: none)");
  }
  ReportOptions options;
  options.target_delta = req.target_delta_nll();
  for (int i = 0; i < req.formats_size(); ++i) {
    const std::string& f = req.formats(i);
    if (f != "md" && f != "csv" && f != "json") {
      return InvalidArgumentError("formats[" + std::to_string(i) +
                                  "]: expected md, csv or json, got '" + f + "'");
    }
    options.formats.insert(f);
  }
  options.omit_files = req.omit_files();
  options.gnuplot_binary = options_.report_gnuplot;
  options.temp_parent = options_.report_temp_dir;
  options.reference_arm = req.reference_arm();
  options.confidence_level =
      req.confidence_level() == 0 ? kDefaultConfidenceLevel : req.confidence_level();
  options.bootstrap_resamples =
      req.bootstrap_resamples() == 0 ? kDefaultBootstrapResamples : req.bootstrap_resamples();
  // Copy what the report needs under the lock; the statistics and rendering run without it.
  ReportSource source;
  {
    absl::MutexLock lock(&mu_);
    RDATTN_ASSIGN_OR_RETURN(source.sweep, store_->GetSweep(req.sweep_id()));
    RDATTN_ASSIGN_OR_RETURN(source.jobs, store_->ListJobs(req.sweep_id()));
    for (int kind : {pb::MetricEvent::KIND_INIT, pb::MetricEvent::KIND_TRAIN_STEP,
                     pb::MetricEvent::KIND_EVAL, pb::MetricEvent::KIND_FINISHED}) {
      RDATTN_ASSIGN_OR_RETURN(std::vector<EventRow> events,
                              store_->ReadMetricEvents(req.sweep_id(), kind));
      for (EventRow& e : events) source.events.push_back(std::move(e));
    }
    RDATTN_ASSIGN_OR_RETURN(source.sequential, store_->GetSequential(req.sweep_id()));
  }
  std::sort(source.events.begin(), source.events.end(),
            [](const EventRow& a, const EventRow& b) { return a.seq < b.seq; });
  options.now_us = NowMicros();
  if (!req.reference_arm().empty()) {
    const pb::SweepSpec& spec = source.sweep.spec;
    const bool known =
        std::find(spec.arms().begin(), spec.arms().end(), req.reference_arm()) != spec.arms().end();
    if (!known) {
      return InvalidArgumentError("reference_arm: '" + req.reference_arm() +
                                  "' is not a main arm of sweep " + source.sweep.id);
    }
  }
  return BuildReport(source, options);
}

}  // namespace rdattn::coordinator
