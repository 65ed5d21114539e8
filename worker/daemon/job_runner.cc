// A leased job from start to CompleteJob (see job_runner.h).
#include "worker/daemon/job_runner.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/file_util.h"
#include "common/log.h"
#include "proto/contract/contract.h"
#include "worker/daemon/wait.h"

namespace rdattn::worker {
namespace {

namespace fs = std::filesystem;

constexpr int kStderrTailLines = 40;
constexpr size_t kStderrTailBytes = 4096;

bool Retryable(StatusCode code) {
  return code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded ||
         code == StatusCode::kResourceExhausted || code == StatusCode::kUnknown;
}

// `watch` (never empty) gets every event too: the progress watchdog.
EventRelay::Options RelayOptions(const pb::LeaseJobResponse& lease, const JobPaths& paths,
                                 const JobRunnerOptions& options,
                                 std::function<void(const pb::MetricEvent&)> watch) {
  EventRelay::Options o;
  o.events_path = paths.events;
  o.lease_id = lease.lease_id();
  o.job_id = lease.job().job_id();
  o.run_id = lease.job().run().run_id().empty() ? lease.job().job_id() : lease.job().run().run_id();
  o.attempt = lease.job().attempt();
  o.poll_interval = options.event_poll_interval;
  WorkerMetrics* metrics = options.metrics;
  o.on_event = [metrics, job_id = o.job_id,
                watch = std::move(watch)](const pb::MetricEvent& event) {
    if (metrics != nullptr) metrics->Observe(job_id, event);
    watch(event);
  };
  if (metrics != nullptr) o.on_parse_error = [metrics] { metrics->EventParseError(); };
  return o;
}

Watchdog::Kind WatchKind(pb::MetricEvent::Kind kind) {
  switch (kind) {
    case pb::MetricEvent::KIND_INIT:
      return Watchdog::Kind::kInit;
    case pb::MetricEvent::KIND_TRAIN_STEP:
      return Watchdog::Kind::kTrainStep;
    case pb::MetricEvent::KIND_EVAL:
      return Watchdog::Kind::kEval;
    case pb::MetricEvent::KIND_CHECKPOINT:
      return Watchdog::Kind::kCheckpoint;
    case pb::MetricEvent::KIND_FINISHED:
      return Watchdog::Kind::kFinished;
    case pb::MetricEvent::KIND_FAILED:
      return Watchdog::Kind::kFailed;
    case pb::MetricEvent::KIND_WARNING:
      return Watchdog::Kind::kWarning;
    default:
      return Watchdog::Kind::kOther;
  }
}

// Where the job's evaluations and checkpoints fall (the trainer's After(): step_actions.cc), for
// the watchdog. A spec that does not parse (the coordinator validated it) gives none.
WatchdogSchedule ScheduleOf(const pb::RunSpec& run) {
  WatchdogSchedule schedule;
  const FieldErrorsOr<RunConfig> cfg = contract::ParseRunSpec(run);
  if (!cfg.ok()) return schedule;
  schedule.eval_steps = cfg->schedule.milestone_steps;
  schedule.checkpoint_every_steps = cfg->checkpoint.every_steps;
  schedule.stop_step = cfg->schedule.stop_step;
  schedule.event_every_steps = cfg->train_event_every_steps;
  return schedule;
}

// The start of the message of a line about one attempt (its job is the line's job= field).
std::string AttemptName(const pb::LeaseJobResponse& lease) {
  return "attempt " + std::to_string(lease.job().attempt());
}

}  // namespace

pb::RunSpec ResolveRunSpec(const pb::LeaseJobResponse& lease, const JobRunnerOptions& options) {
  const pb::JobSpec& job = lease.job();
  pb::RunSpec spec = job.run();
  if (spec.job_id().empty()) spec.set_job_id(job.job_id());
  if (spec.run_id().empty()) spec.set_run_id(job.job_id());
  if (spec.sweep_id().empty()) spec.set_sweep_id(job.sweep_id());
  if (spec.checkpoint().dir().empty()) {
    spec.mutable_checkpoint()->set_dir(CheckpointDirFor(options.checkpoint_root, job.job_id()));
  }
  if (spec.parallel().threads_per_rank() <= 0) {
    spec.mutable_parallel()->set_threads_per_rank(std::max(1, options.threads_per_rank));
  }
  // The trainer resumes from the newest readable checkpoint of its directory and of the
  // coordinator's (a previous attempt's, perhaps written on another worker), and evaluates
  // again the milestones the coordinator lacks (worker/trainer/trainer.cc, PlanResume).
  pb::CheckpointSpec* ckpt = spec.mutable_checkpoint();
  ckpt->set_coordinator_checkpoint(lease.resume_checkpoint_path());
  ckpt->clear_stored_eval_milestones();
  for (int64_t m : lease.stored_eval_milestones()) ckpt->add_stored_eval_milestones(m);
  ckpt->set_stored_evals_known(true);
  return spec;
}

JobRunner::JobRunner(pb::LeaseJobResponse lease, JobRunnerOptions options,
                     CoordinatorClient* client, std::function<void()> on_done)
    : lease_(std::move(lease)),
      options_(std::move(options)),
      client_(client),
      on_done_(std::move(on_done)),
      paths_(MakeJobPaths(options_.workdir, lease_.job().job_id(), lease_.job().attempt())),
      watchdog_(options_.watchdog),
      relay_(std::make_unique<EventRelay>(
          RelayOptions(lease_, paths_, options_,
                       [this](const pb::MetricEvent& event) { NoteEvent(event); }),
          client_)),
      last_renewal_(Clock::now()) {}

JobRunner::~JobRunner() {
  if (thread_.joinable()) thread_.join();
}

void JobRunner::Start() {
  thread_ = std::thread([this] { Run(); });
}

int JobRunner::world_size() const {
  return std::max(1, lease_.job().run().parallel().world_size());
}

bool JobRunner::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

std::string JobRunner::start_failure() const {
  absl::MutexLock lock(&mu_);
  return start_failure_;
}

bool JobRunner::started_cleanly() const {
  absl::MutexLock lock(&mu_);
  return started_cleanly_;
}

void JobRunner::Stop(StopReason reason, std::chrono::milliseconds grace, std::string why) {
  absl::MutexLock lock(&mu_);
  const auto kill_at = Clock::now() + std::max(grace, std::chrono::milliseconds(0));
  if (stop_reason_ == StopReason::kNone || reason == StopReason::kLeaseLost) {
    if (stop_reason_ != reason) {
      RDATTN_LOG(kInfo).Job(job_id())
          << AttemptName(lease_) << ": stopping (" << StopReasonName(reason)
          << (why.empty() ? "" : ": " + why) << ")";
    }
    stop_reason_ = reason;
    stop_why_ = std::move(why);
  }
  if (!kill_at_.has_value() || kill_at < *kill_at_) kill_at_ = kill_at;
  cv_.SignalAll();
}

bool JobRunner::StopRequested(StopReason* reason, std::string* why) const {
  absl::MutexLock lock(&mu_);
  *reason = stop_reason_;
  *why = stop_why_;
  return stop_reason_ != StopReason::kNone;
}

void JobRunner::Renewed(Clock::time_point when, uint64_t stored_seq) {
  {
    absl::MutexLock lock(&mu_);
    last_renewal_ = std::max(last_renewal_, when);
    stored_seq_ = std::max(stored_seq_, stored_seq);
  }
  relay_->Acknowledge(stored_seq);
}

JobRunner::Clock::time_point JobRunner::last_renewal() const {
  absl::MutexLock lock(&mu_);
  return last_renewal_;
}

pb::LeaseProgress JobRunner::Progress() const {
  const RelayProgress relayed = relay_->progress();
  pb::LeaseProgress p;
  p.set_lease_id(lease_.lease_id());
  p.set_job_id(lease_.job().job_id());
  p.set_step(relayed.step);
  p.set_tokens(relayed.tokens);
  p.set_last_event_seq(relayed.last_seq);
  absl::MutexLock lock(&mu_);
  p.set_ranks_started(ranks_started_);
  return p;
}

Status JobRunner::Prepare(pb::RunSpec* spec, bool* machine) {
  *machine = false;
  std::error_code ec;
  fs::create_directories(paths_.dir, ec);
  if (ec) {
    *machine = IsMachineErrno(ec.value());
    return InternalError("create " + paths_.dir + ": " + ec.message());
  }
  // A lease of the same attempt run here before (a restarted worker): start clean, so that
  // event seqs start at 1 again and the stderr tail is this run's.
  for (const std::string& stale : {paths_.events, paths_.stderr_log, paths_.stdout_log}) {
    fs::remove(stale, ec);
  }
  fs::create_directories(spec->checkpoint().dir(), ec);
  if (ec) {
    *machine = IsMachineErrno(ec.value());
    return InternalError("create " + spec->checkpoint().dir() + ": " + ec.message());
  }
  const nlohmann::json json = contract::RunSpecToJson(*spec);
  if (json.is_null()) return InvalidArgumentError("the job's RunSpec cannot be written as JSON");
  int err = 0;
  Status written = WriteFileAtomically(paths_.job_json, json.dump(2) + "\n", 0644, &err);
  if (!written.ok()) *machine = IsMachineErrno(err);
  return written;
}

ExitStatus JobRunner::Supervise(ChildProcess* child) {
  // SIGTERM is repeated every second until the kill time: a rank that was being forked when the
  // first one came (mpirun still starting them) would otherwise miss it. The trainer's handler
  // only sets a flag, so repeats are harmless.
  constexpr auto kTermRepeat = std::chrono::seconds(1);
  // The progress watchdog is checked every loop (50 ms), the event file's mtime every second and
  // before a stall is called: a write is progress even when the relay has not read it (its
  // thread may be blocked on a hung coordinator's stream), so only silent ranks are stopped.
  constexpr auto kEventsStatInterval = std::chrono::seconds(1);
  auto note_file_written = [this](Clock::time_point now) {
    struct stat st {};
    if (::stat(paths_.events.c_str(), &st) != 0) return;
    const auto mtime = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::seconds(st.st_mtim.tv_sec) +
            std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
    const auto age = std::max(std::chrono::system_clock::now() - mtime,
                              std::chrono::system_clock::duration::zero());
    absl::MutexLock lock(&watchdog_mu_);
    watchdog_.Activity(now - std::chrono::duration_cast<Clock::duration>(age));
  };
  std::optional<Clock::time_point> last_term;
  bool kill_sent = false;
  std::optional<Clock::time_point> stall_kill_at;  // the watchdog stopped the ranks
  Clock::time_point next_stat = Clock::now() + kEventsStatInterval;
  {
    absl::MutexLock lock(&watchdog_mu_);
    watchdog_.SetSchedule(ScheduleOf(lease_.job().run()));
    watchdog_.Start(Clock::now());
  }
  while (true) {
    if (std::optional<ExitStatus> exit = child->Wait(std::chrono::milliseconds(50))) return *exit;
    StopReason reason;
    std::optional<Clock::time_point> kill_at;
    {
      absl::MutexLock lock(&mu_);
      reason = stop_reason_;
      kill_at = kill_at_;
    }
    const auto now = Clock::now();
    // Only while nothing else stops the ranks: a stopping rank may checkpoint in silence.
    if (reason == StopReason::kNone && !stall_kill_at.has_value()) {
      if (now >= next_stat) {
        note_file_written(now);
        next_stat = now + kEventsStatInterval;
      }
      std::optional<std::string> stalled = CheckStalled(now);
      if (stalled.has_value()) {
        note_file_written(now);
        stalled = CheckStalled(now);
      }
      if (stalled.has_value()) {
        RDATTN_LOG(kWarning).Job(job_id())
            << AttemptName(lease_) << ": " << *stalled << "; stopping its ranks (SIGTERM, SIGKILL "
            << options_.stall_kill_grace.count() << " ms later)";
        if (options_.metrics != nullptr) options_.metrics->JobStalled();
        {
          absl::MutexLock lock(&mu_);
          stalled_ = *stalled;
        }
        stall_kill_at = now + options_.stall_kill_grace;
      }
    }
    if (stall_kill_at.has_value() && (!kill_at.has_value() || *stall_kill_at < *kill_at)) {
      kill_at = stall_kill_at;
    }
    if (reason == StopReason::kNone && !stall_kill_at.has_value()) continue;
    if (kill_at.has_value() && now >= *kill_at) {
      if (!kill_sent) {
        RDATTN_LOG(kWarning).Job(job_id())
            << AttemptName(lease_) << ": ranks still running; SIGKILL";
      }
      child->KillAll();
      kill_sent = true;
    } else if (!last_term.has_value() || now - *last_term >= kTermRepeat) {
      child->SignalRanks(SIGTERM);
      last_term = now;
    }
  }
}

void JobRunner::NoteEvent(const pb::MetricEvent& event) {
  const auto now = Clock::now();
  absl::MutexLock lock(&watchdog_mu_);
  watchdog_.Event(WatchKind(event.kind()), event.step(), now);
}

std::optional<std::string> JobRunner::CheckStalled(Clock::time_point now) {
  absl::MutexLock lock(&watchdog_mu_);
  return watchdog_.Check(now);
}

void JobRunner::Run() {
  const pb::JobSpec& job = lease_.job();
  RDATTN_LOG(kInfo).Job(job_id()) << "lease " << lease_.lease_id() << ": " << AttemptName(lease_)
                                  << ", " << world_size() << " rank(s), dir " << paths_.dir;
  pb::CompleteJobRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_lease_id(lease_.lease_id());
  request.set_job_id(job.job_id());

  auto fail = [&](const std::string& message) {
    request.set_outcome(pb::JOB_OUTCOME_FAILED);
    request.set_exit_code(-1);
    request.set_message(message);
    Complete(request);
  };
  // This machine cannot start the job (docs/worker.md "Start failures"): MACHINE_FAILED, not
  // counted against the job's max_attempts, and a start failure for the worker's health.
  auto machine_fail = [&](const std::string& message) {
    RDATTN_LOG(kWarning).Job(job_id()) << AttemptName(lease_) << ": machine failure: " << message;
    {
      absl::MutexLock lock(&mu_);
      start_failure_ = message;
    }
    request.set_outcome(pb::JOB_OUTCOME_MACHINE_FAILED);
    request.set_exit_code(-1);
    request.set_message(message);
    Complete(request);
  };

  pb::RunSpec spec = ResolveRunSpec(lease_, options_);
  if (const std::string& theirs = lease_.resume_checkpoint_path(); !theirs.empty()) {
    // One of the job's own directory may be gone for a newer one (keep_last): nothing to say.
    std::error_code ec;
    const bool own = fs::path(theirs).parent_path().lexically_normal() ==
                     fs::path(spec.checkpoint().dir()).lexically_normal();
    if (!own && (!fs::is_regular_file(theirs, ec) || ::access(theirs.c_str(), R_OK) != 0)) {
      RDATTN_LOG(kWarning).Job(job_id())
          << AttemptName(lease_) << ": the lease's checkpoint " << theirs
          << " is not readable on this worker; the trainer resumes from " << spec.checkpoint().dir()
          << " (or from scratch) and reports it";
    }
  }
  bool machine = false;
  if (Status prepared = Prepare(&spec, &machine); !prepared.ok()) {
    if (machine) return machine_fail("cannot prepare the job: " + prepared.ToString());
    return fail("cannot prepare the job: " + prepared.ToString());
  }
  StopReason reason;
  std::string why;
  if (StopRequested(&reason, &why)) {
    if (reason == StopReason::kLeaseLost) return Complete(request);
    request.set_outcome(reason == StopReason::kCancel ? pb::JOB_OUTCOME_CANCELLED
                                                      : pb::JOB_OUTCOME_PREEMPTED);
    request.set_message("stopped before the ranks started (" + std::string(StopReasonName(reason)) +
                        (why.empty() ? "" : ": " + why) + ")");
    return Complete(request);
  }

  LaunchSpec launch;
  launch.train_binary = options_.train_binary;
  launch.world_size = world_size();
  launch.threads_per_rank = spec.parallel().threads_per_rank();
  launch.job_json = paths_.job_json;
  launch.events = paths_.events;
  launch.attempt = job.attempt();
  launch.run_as_root = options_.run_as_root;
  launch.cuda_visible_devices = options_.cuda_visible_devices;
  launch.supervisor = SelfAsSupervisor();
  if (launch.world_size > 1) {
    StatusOr<std::string> mpirun = FindExecutable(options_.mpirun);
    if (!mpirun.ok()) return fail("cannot start the ranks: mpirun: " + mpirun.status().message());
    launch.mpirun = *mpirun;
  }
  ChildProcess::Options spawn;
  spawn.command = BuildCommandLine(launch);
  spawn.stdout_path = paths_.stdout_log;
  spawn.stderr_path = paths_.stderr_log;
  spawn.launcher_is_mpirun = launch.world_size > 1;
  StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(spawn);
  if (!child.ok()) return machine_fail("cannot start the ranks: " + child.status().ToString());
  RDATTN_LOG(kInfo).Job(job_id()) << AttemptName(lease_) << ": started pid " << (*child)->pid()
                                  << ": " << FormatCommandLine(spawn.command);
  if (options_.metrics != nullptr) options_.metrics->JobStarted(job);
  relay_->Start();
  {
    absl::MutexLock lock(&mu_);
    ranks_started_ = true;
  }

  const ExitStatus exit = Supervise(child->get());
  child->reset();
  StopRequested(&reason, &why);
  RDATTN_LOG(kInfo).Job(job_id()) << AttemptName(lease_) << ": ranks ended: " << DescribeExit(exit);
  if (reason == StopReason::kLeaseLost) {
    relay_->Abandon();
    return Complete(request);
  }
  const Status drained = relay_->Drain(Clock::now() + options_.drain_timeout);
  const RelayProgress relayed = relay_->progress();

  pb::JobOutcome outcome = OutcomeFor(exit, reason);
  std::string message = DescribeExit(exit);
  if (reason != StopReason::kNone) {
    message +=
        "; stopped: " + std::string(StopReasonName(reason)) + (why.empty() ? "" : ": " + why);
  }
  if (outcome == pb::JOB_OUTCOME_SUCCEEDED && !relayed.finished) {
    outcome = pb::JOB_OUTCOME_FAILED;
    message += "; but no KIND_FINISHED event was written";
  }
  // The watchdog stopped them (no stop order did): FAILED "stalled: ...", retried like any
  // failure, whatever their exit, unless they finished the job after all.
  std::string stalled;
  {
    absl::MutexLock lock(&mu_);
    stalled = stalled_;
  }
  if (!stalled.empty() && reason == StopReason::kNone && outcome != pb::JOB_OUTCOME_SUCCEEDED) {
    outcome = pb::JOB_OUTCOME_FAILED;
    message = stalled + "; ranks " + message;
  }
  if (!drained.ok()) message += "; events: " + drained.ToString();
  if (relayed.bad_lines > 0)
    message += "; " + std::to_string(relayed.bad_lines) + " bad event line(s) skipped";
  {
    // Exit 74: the trainer could not write (a full disk, an I/O error); a start failure for the
    // worker's health. A run that ended otherwise on its own was a start that worked.
    absl::MutexLock lock(&mu_);
    if (outcome == pb::JOB_OUTCOME_MACHINE_FAILED) {
      message = "machine failure: the trainer exited " + std::to_string(kTrainExitMachineFailed) +
                " (" + message + ")";
      start_failure_ = message;
    } else if (reason == StopReason::kNone) {
      started_cleanly_ = true;
    }
  }
  request.set_outcome(outcome);
  request.set_exit_code(exit.exit_code);
  request.set_term_signal(exit.term_signal);
  request.set_checkpoint_path(relayed.checkpoint_path);
  request.set_last_event_seq(relayed.last_seq);
  request.set_message(message);
  if (outcome != pb::JOB_OUTCOME_SUCCEEDED) {
    StatusOr<std::string> tail =
        ReadFileTail(paths_.stderr_log, kStderrTailLines, kStderrTailBytes);
    request.set_stderr_tail(tail.ok() ? *tail
                                      : "(stderr.log unreadable: " + tail.status().message() + ")");
  }
  Complete(request);
}

void JobRunner::Complete(const pb::CompleteJobRequest& request) {
  const auto deadline = Clock::now() + options_.complete_timeout;
  Backoff backoff(std::chrono::milliseconds(500), std::chrono::milliseconds(5000));
  StopReason reason;
  std::string why;
  if (options_.metrics != nullptr) {
    // The ranks are over: the job ended here, however the report goes.
    const bool lost = StopRequested(&reason, &why) && reason == StopReason::kLeaseLost;
    const std::string_view outcome = lost ? kOutcomeLeaseLost : OutcomeLabel(request.outcome());
    bool started = false;
    {
      absl::MutexLock lock(&mu_);
      started = ranks_started_;
    }
    if (started) {
      options_.metrics->JobEnded(job_id(), outcome, Clock::now());
    } else {
      options_.metrics->JobFinishedUnstarted(outcome);
    }
  }
  while (true) {
    if (StopRequested(&reason, &why) && reason == StopReason::kLeaseLost) {
      RDATTN_LOG(kWarning).Job(job_id())
          << AttemptName(lease_) << ": lease " << lease_.lease_id() << " lost; not reported";
      break;
    }
    StatusOr<pb::CompleteJobResponse> response =
        client_->CompleteJob(request, options_.rpc_timeout);
    if (response.ok()) {
      RDATTN_LOG(kInfo).Job(job_id())
          << AttemptName(lease_) << ": reported " << pb::JobOutcome_Name(request.outcome()) << " ("
          << request.message() << "); job is now " << pb::JobState_Name(response->job_state())
          << (response->will_retry() ? ", will retry" : "");
      break;
    }
    if (!Retryable(response.status().code()) || Clock::now() + backoff.Peek() >= deadline) {
      RDATTN_LOG(kWarning).Job(job_id())
          << AttemptName(lease_) << ": CompleteJob " << pb::JobOutcome_Name(request.outcome())
          << " failed: " << response.status().ToString();
      break;
    }
    absl::MutexLock lock(&mu_);
    const auto wait_end = Clock::now() + backoff.Next();
    while (stop_reason_ != StopReason::kLeaseLost && WaitUntil(cv_, mu_, wait_end)) {
    }
  }
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }
  if (on_done_) on_done_();
}

}  // namespace rdattn::worker
