// Core: the SweepService side — SubmitSweep, GetSweep, ListSweeps, WatchSweep, CancelSweep and
// GetReport (docs/coordinator.md "Layout"). The job life cycle is core.cc, the WorkerService
// core_workers.cc, the dispatch thread core_dispatch.cc.
#include <absl/cleanup/cleanup.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/field_error.h"
#include "common/log.h"
#include "coordinator/core.h"
#include "coordinator/proto_convert.h"
#include "coordinator/report.h"
#include "coordinator/report_options.h"
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
  return FieldErrorStatus("page_token", "not a token this server issued");
}

}  // namespace

StatusOr<pb::SweepStatus> Core::MakeSweepStatus(const SweepRow& row, bool with_jobs) {
  return MakeSweepStatusFrom(*store_, row, with_jobs);
}

StatusOr<pb::SweepStatus> Core::MakeSweepStatusFrom(Store& store, const SweepRow& row,
                                                    bool with_jobs) {
  RDATTN_ASSIGN_OR_RETURN(SweepFacts f, store.GetSweepFacts(row.id));
  RDATTN_ASSIGN_OR_RETURN(int64_t last_seq, store.LastSweepEventSeq(row.id));
  pb::SweepStatus out = ToProto(row, f, last_seq);
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
  Status st = Tx([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
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
  if (req.sweep_id().empty()) return FieldErrorStatus("sweep_id", "required");
  const pb::SweepView view =
      req.view() == pb::SWEEP_VIEW_UNSPECIFIED ? pb::SWEEP_VIEW_FULL : req.view();
  if (!pb::SweepView_IsValid(view)) {
    return FieldErrorStatus("view", "unknown view " + std::to_string(req.view()));
  }
  if (req.page_size() < 0) {
    return FieldErrorStatus("page_size", "must be >= 0, got " + std::to_string(req.page_size()));
  }
  if (view != pb::SWEEP_VIEW_FULL && (req.page_size() != 0 || !req.page_token().empty())) {
    return FieldErrorStatus(
        req.page_size() != 0 ? "page_size" : "page_token",
        "pages are of the full view's jobs; view is " + pb::SweepView_Name(view));
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
      return FieldErrorStatus("page_size",
                              "0 asks for all " + std::to_string(sweep.job_counts().total()) +
                                  " jobs of sweep " + row.id + " in one reply, more than " +
                                  std::to_string(kMaxJobsUnpaged) +
                                  "; page through them (page_size at most " +
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
  if (req.page_size() < 0) return FieldErrorStatus("page_size", "must be >= 0");
  SweepFilter filter;
  filter.owner = req.owner();
  for (int i = 0; i < req.states_size(); ++i) {
    StatusOr<SweepState> st = SweepStateFromProto(req.states(i));
    if (!st.ok()) return FieldErrorStatus("states[" + std::to_string(i) + "]", "not a sweep state");
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
  if (req.sweep_id().empty()) return FieldErrorStatus("sweep_id", "required");
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
  if (req.sweep_id().empty()) return FieldErrorStatus("sweep_id", "required");
  absl::MutexLock lock(&mu_);
  SweepRow sweep;
  Status st = Tx([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
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
  RDATTN_ASSIGN_OR_RETURN(ReportOptions options, ParseReportOptions(req));
  options.gnuplot_binary = options_.report_gnuplot;
  options.temp_parent = options_.report_temp_dir;
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
      return FieldErrorStatus(
          "reference_arm",
          "'" + req.reference_arm() + "' is not a main arm of sweep " + source.sweep.id);
    }
  }
  return BuildReport(source, options);
}

}  // namespace rdattn::coordinator
