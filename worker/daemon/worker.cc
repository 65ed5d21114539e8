// The worker daemon's loops: register, lease, heartbeat, shutdown (see worker.h).
#include "worker/daemon/worker.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include "common/file_util.h"
#include "common/log.h"
#include "common/strings.h"
#include "worker/daemon/job_paths.h"
#include "worker/daemon/wait.h"

namespace rdattn::worker {
namespace {

namespace fs = std::filesystem;

std::chrono::milliseconds ToMillis(const google::protobuf::Duration& d) {
  return std::chrono::milliseconds(d.seconds() * 1000 + d.nanos() / 1000000);
}

void SetDuration(std::chrono::milliseconds ms, google::protobuf::Duration* d) {
  d->set_seconds(ms.count() / 1000);
  d->set_nanos(static_cast<int32_t>((ms.count() % 1000) * 1000000));
}

// The first wait after a failed RegisterWorker or LeaseJob (then doubling to max_backoff).
constexpr std::chrono::milliseconds kFirstRetry{500};

bool IsConfigError(StatusCode code) {
  return code == StatusCode::kUnauthenticated || code == StatusCode::kPermissionDenied ||
         code == StatusCode::kInvalidArgument;
}

}  // namespace

Status ProbeWritable(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return UnavailableError("probe: create " + dir + ": " + ec.message());
  const std::string path = JoinPath(dir, ".rdattn-probe-" + std::to_string(::getpid()) + ".tmp");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return UnavailableError("probe: create " + path + ": " + std::strerror(errno));
  const std::string block(4096, 'p');
  std::string error;
  if (!WriteAll(fd, block.data(), block.size()))
    error = "write " + path + ": " + std::strerror(errno);
  if (error.empty() && ::fsync(fd) != 0) error = "fsync " + path + ": " + std::strerror(errno);
  if (::close(fd) != 0 && error.empty()) error = "close " + path + ": " + std::strerror(errno);
  if (::unlink(path.c_str()) != 0 && error.empty())
    error = "remove " + path + ": " + std::strerror(errno);
  if (!error.empty()) return UnavailableError("probe: " + error);
  return Status::Ok();
}

Worker::Worker(WorkerOptions options, std::unique_ptr<CoordinatorClient> client)
    : options_(std::move(options)), client_(std::move(client)) {
  absl::MutexLock lock(&mu_);
  slot_used_.assign(static_cast<size_t>(std::max(1, options_.slots)), false);
  UpdateSlotMetrics();
}

Worker::~Worker() {
  {
    absl::MutexLock lock(&mu_);
    stop_heartbeats_ = true;
    cv_.SignalAll();
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

std::string Worker::worker_id() const {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

Status Worker::LoadWorkerId() {
  std::error_code ec;
  fs::create_directories(options_.workdir, ec);
  if (ec) return InvalidArgumentError("--workdir " + options_.workdir + ": " + ec.message());
  std::string id = options_.worker_id;
  if (id.empty()) {
    std::ifstream in(JoinPath(options_.workdir, "worker_id"));
    std::string line;
    if (in && std::getline(in, line)) id = strings::Trim(line);
  }
  absl::MutexLock lock(&mu_);
  worker_id_ = id;
  return Status::Ok();
}

Status Worker::Register() {
  Backoff backoff(kFirstRetry, options_.max_backoff);
  for (int failures = 0;; ++failures) {
    pb::RegisterWorkerRequest request;
    request.set_worker_id(worker_id());
    request.set_hostname(options_.hostname);
    request.set_kind(options_.kind);
    request.set_slots(options_.slots);
    request.set_device_name(options_.device_name);
    request.set_version(options_.version);
    StatusOr<pb::RegisterWorkerResponse> response =
        client_->RegisterWorker(request, options_.rpc_timeout);
    if (response.ok()) {
      std::string id;
      {
        absl::MutexLock lock(&mu_);
        if (!response->worker_id().empty()) worker_id_ = response->worker_id();
        id = worker_id_;
        if (response->has_heartbeat_interval() &&
            ToMillis(response->heartbeat_interval()).count() > 0) {
          heartbeat_interval_ = ToMillis(response->heartbeat_interval());
        }
        if (response->has_lease_ttl() && ToMillis(response->lease_ttl()).count() > 0) {
          lease_ttl_ = ToMillis(response->lease_ttl());
        }
        reregister_ = false;
      }
      std::ofstream out(JoinPath(options_.workdir, "worker_id"), std::ios::trunc);
      out << id << "\n";
      if (!out) log::Warning("cannot write " + JoinPath(options_.workdir, "worker_id"));
      if (options_.metrics != nullptr) {
        options_.metrics->SetWorkerInfo(id, options_.hostname, options_.kind, options_.device_name,
                                        options_.version);
      }
      log::Info("registered with " +
                std::string(failures ? "the coordinator after retries" : "the coordinator") +
                " as " + id + " (" + std::to_string(options_.slots) + " " +
                (options_.kind == pb::HARDWARE_KIND_GPU ? "gpu" : "cpu") + " slot(s))");
      return Status::Ok();
    }
    if (IsConfigError(response.status().code())) {
      return response.status().WithPrefix("RegisterWorker");
    }
    if (failures % 10 == 0) {
      log::Warning("RegisterWorker: " + response.status().ToString() + " (retrying)");
    }
    if (!SleepFor(backoff.Next())) return CancelledError("shutting down");
  }
}

bool Worker::Unhealthy() const {
  absl::MutexLock lock(&mu_);
  return unhealthy_;
}

bool Worker::ProbeUntilHealthy() {
  // worker_main checks health_probe_max >= health_probe_min.
  Backoff backoff(std::max(options_.health_probe_min, std::chrono::milliseconds(1)),
                  std::max(options_.health_probe_max, options_.health_probe_min));
  for (int probes = 1;; ++probes) {
    if (!SleepFor(backoff.Next())) return false;
    Status probe = ProbeWritable(options_.workdir);
    if (probe.ok() && !options_.checkpoint_root.empty())
      probe = ProbeWritable(options_.checkpoint_root);
    if (probe.ok()) {
      absl::MutexLock lock(&mu_);
      unhealthy_ = false;
      start_failures_in_row_ = 0;
      if (options_.metrics != nullptr) options_.metrics->SetHealthy(true);
      log::Info("healthy again: the disk probe of " + options_.workdir +
                (options_.checkpoint_root.empty() ? "" : " and " + options_.checkpoint_root) +
                " passed (probe " + std::to_string(probes) + "); leasing jobs again");
      return true;
    }
    if (probes == 1 || probes % 10 == 0) {
      log::Warning("still unhealthy: " + probe.ToString() + " (probe " + std::to_string(probes) +
                   "; next in " + std::to_string(backoff.Peek().count()) + " ms)");
    }
  }
}

bool Worker::SleepFor(std::chrono::milliseconds d) {
  absl::MutexLock lock(&mu_);
  const auto wait_end = Clock::now() + d;
  while (!shutdown_ && WaitUntil(cv_, mu_, wait_end)) {
  }
  return !shutdown_;
}

int Worker::FreeSlots() const {
  return static_cast<int>(std::count(slot_used_.begin(), slot_used_.end(), false));
}

void Worker::UpdateSlotMetrics() const {
  if (options_.metrics == nullptr) return;
  const int free = FreeSlots();
  options_.metrics->SetSlots(free, static_cast<int>(slot_used_.size()) - free);
}

int Worker::ReapFinished() {
  std::vector<std::unique_ptr<JobRunner>> finished;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (!it->second.runner->done()) {
        ++it;
        continue;
      }
      for (int s : it->second.slots) slot_used_[static_cast<size_t>(s)] = false;
      // Start failures in a row make the worker unhealthy (docs/worker.md "Start failures").
      const JobRunner& runner = *it->second.runner;
      if (const std::string failure = runner.start_failure(); !failure.empty()) {
        ++start_failures_in_row_;
        if (options_.metrics != nullptr) options_.metrics->StartFailure();
        if (!unhealthy_ && options_.max_start_failures > 0 &&
            start_failures_in_row_ >= options_.max_start_failures) {
          unhealthy_ = true;
          if (options_.metrics != nullptr) options_.metrics->SetHealthy(false);
          RDATTN_LOG(kError).Job(runner.job_id())
              << "unhealthy: " << start_failures_in_row_
              << " start failures in a row (the last: " << failure
              << "); no more leases until a disk probe of " << options_.workdir
              << (options_.checkpoint_root.empty() ? "" : " and " + options_.checkpoint_root)
              << " passes";
        }
      } else if (runner.started_cleanly()) {
        start_failures_in_row_ = 0;
      }
      finished.push_back(std::move(it->second.runner));
      it = jobs_.erase(it);
    }
    UpdateSlotMetrics();
  }
  // Joined outside the lock: a runner's last act (on_done) takes mu_.
  const int n = static_cast<int>(finished.size());
  finished.clear();
  return n;
}

Status Worker::Run() {
  RDATTN_RETURN_IF_ERROR(LoadWorkerId());
  if (Status registered = Register(); !registered.ok()) {
    return registered.code() == StatusCode::kCancelled ? Status::Ok() : registered;
  }
  {
    absl::MutexLock lock(&mu_);
    UpdateSlotMetrics();
  }
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  LeaseLoop();
  // Shutdown, --once or idle: wait for the jobs still running (being stopped on shutdown).
  while (true) {
    ReapFinished();
    absl::MutexLock lock(&mu_);
    if (jobs_.empty()) break;
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(200));
  }
  {
    absl::MutexLock lock(&mu_);
    stop_heartbeats_ = true;
    cv_.SignalAll();
  }
  heartbeat_thread_.join();
  log::Info("exiting");
  return Status::Ok();
}

void Worker::LeaseLoop() {
  auto idle_since = Clock::now();
  Backoff backoff(kFirstRetry, options_.max_backoff);
  int failures = 0;
  while (true) {
    ReapFinished();
    if (Unhealthy()) {
      if (!ProbeUntilHealthy()) return;
      continue;
    }
    int free_slots = 0;
    bool any_jobs = false;
    bool reregister = false;
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return;
      const auto now = Clock::now();
      if (!jobs_.empty()) idle_since = now;
      if (options_.once && jobs_started_ > 0) {
        if (jobs_.empty()) return;
        cv_.WaitWithTimeout(&mu_, absl::Milliseconds(500));
        continue;
      }
      if (options_.exit_when_idle && jobs_.empty() &&
          now - idle_since >= *options_.exit_when_idle) {
        log::Info("idle for " + std::to_string(options_.exit_when_idle->count() / 1000.0) + " s");
        return;
      }
      free_slots = FreeSlots();
      any_jobs = !jobs_.empty();
      reregister = reregister_;
      if (free_slots < 1) {
        cv_.WaitWithTimeout(&mu_, absl::Milliseconds(1000));
        continue;
      }
    }
    if (reregister) {
      if (Status s = Register(); !s.ok()) {
        if (s.code() == StatusCode::kCancelled) return;
        log::Error(s.ToString());
        if (!SleepFor(options_.max_backoff)) return;
      }
      continue;
    }
    auto wait = options_.lease_wait;
    if (options_.exit_when_idle && !any_jobs) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          *options_.exit_when_idle - (Clock::now() - idle_since));
      wait = std::clamp(left, std::chrono::milliseconds(100), options_.lease_wait);
    }
    pb::LeaseJobRequest request;
    request.set_worker_id(worker_id());
    request.set_free_slots(free_slots);
    SetDuration(wait, request.mutable_wait());
    StatusOr<pb::LeaseJobResponse> response =
        client_->LeaseJob(request, wait + std::chrono::milliseconds(10000));
    if (!response.ok()) {
      {
        absl::MutexLock lock(&mu_);
        if (shutdown_) return;
        if (response.status().code() == StatusCode::kNotFound) {
          log::Warning("LeaseJob: the coordinator does not know this worker; registering again");
          reregister_ = true;
          continue;
        }
      }
      if (failures++ % 10 == 0)
        log::Warning("LeaseJob: " + response.status().ToString() + " (retrying)");
      if (!SleepFor(backoff.Next())) return;
      continue;
    }
    if (failures > 0) log::Info("LeaseJob: the coordinator answers again");
    failures = 0;
    backoff.Reset();
    if (!response->has_job() || response->lease_id().empty()) continue;
    StartJob(std::move(response).value());
  }
}

void Worker::StartJob(pb::LeaseJobResponse lease) {
  const int world_size = std::max(1, lease.job().run().parallel().world_size());
  absl::ReleasableMutexLock lock(&mu_);
  const int free_slots = FreeSlots();
  if (world_size > free_slots) {
    // The coordinator gave more than free_slots (a scheduler bug): hand the job back.
    const bool never = world_size > options_.slots;
    pb::CompleteJobRequest request;
    request.set_worker_id(worker_id_);
    request.set_lease_id(lease.lease_id());
    request.set_job_id(lease.job().job_id());
    request.set_outcome(never ? pb::JOB_OUTCOME_FAILED : pb::JOB_OUTCOME_PREEMPTED);
    request.set_exit_code(-1);
    request.set_message("the job needs " + std::to_string(world_size) + " slots; this worker has " +
                        std::to_string(options_.slots) + ", " + std::to_string(free_slots) +
                        " free");
    ++jobs_started_;  // for --once: this lease was the job
    lock.Release();
    RDATTN_LOG(kWarning).Job(lease.job().job_id()) << request.message();
    StatusOr<pb::CompleteJobResponse> r = client_->CompleteJob(request, options_.rpc_timeout);
    if (!r.ok()) log::Warning("CompleteJob: " + r.status().ToString());
    return;
  }
  Running running;
  std::vector<std::string> devices;
  for (size_t i = 0; i < slot_used_.size() && static_cast<int>(running.slots.size()) < world_size;
       ++i) {
    if (slot_used_[i]) continue;
    slot_used_[i] = true;
    running.slots.push_back(static_cast<int>(i));
    devices.push_back(i < options_.gpu_ids.size() ? options_.gpu_ids[i] : std::to_string(i));
  }
  JobRunnerOptions job;
  job.worker_id = worker_id_;
  job.workdir = options_.workdir;
  job.checkpoint_root = options_.checkpoint_root;
  job.train_binary = options_.train_binary;
  job.mpirun = options_.mpirun;
  job.threads_per_rank = options_.threads_per_rank;
  job.run_as_root = ::geteuid() == 0;
  if (options_.kind == pb::HARDWARE_KIND_GPU) {
    for (size_t i = 0; i < devices.size(); ++i)
      job.cuda_visible_devices += (i ? "," : "") + devices[i];
  }
  job.event_poll_interval = options_.event_poll_interval;
  job.rpc_timeout = options_.rpc_timeout;
  job.watchdog = options_.watchdog;
  job.complete_timeout = std::max(job.complete_timeout, options_.unreachable_grace);
  job.drain_timeout = std::max(job.drain_timeout, options_.unreachable_grace);
  job.metrics = options_.metrics;
  UpdateSlotMetrics();
  const std::string lease_id = lease.lease_id();
  // When the job is over its slots are free at once (the next LeaseJob and heartbeat say so);
  // the runner itself is joined later by ReapFinished.
  running.runner = std::make_unique<JobRunner>(std::move(lease), std::move(job), client_.get(),
                                               [this, lease_id] {
                                                 absl::MutexLock lock(&mu_);
                                                 auto it = jobs_.find(lease_id);
                                                 if (it != jobs_.end()) {
                                                   for (int s : it->second.slots)
                                                     slot_used_[static_cast<size_t>(s)] = false;
                                                   it->second.slots.clear();
                                                 }
                                                 UpdateSlotMetrics();
                                                 cv_.SignalAll();
                                               });
  if (shutdown_)
    running.runner->Stop(StopReason::kShutdown, options_.stop_grace, "worker shutdown");
  running.runner->Start();
  jobs_[lease_id] = std::move(running);
  ++jobs_started_;
}

void Worker::HeartbeatLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      const auto wait_end = Clock::now() + heartbeat_interval_;
      while (!stop_heartbeats_ && WaitUntil(cv_, mu_, wait_end)) {
      }
      if (stop_heartbeats_) return;
    }
    HeartbeatOnce();
    if (options_.metrics != nullptr) options_.metrics->Purge(Clock::now());
  }
}

void Worker::HeartbeatOnce() {
  pb::HeartbeatRequest request;
  {
    absl::MutexLock lock(&mu_);
    request.set_worker_id(worker_id_);
    for (const auto& [lease_id, running] : jobs_) {
      if (!running.runner->done()) *request.add_leases() = running.runner->Progress();
    }
    // An unhealthy worker takes no job: the scheduler must not count on it (not-same-worker).
    request.set_free_slots(unhealthy_ ? 0 : FreeSlots());
  }
  const auto sent_at = Clock::now();
  // A heartbeat that hangs (a coordinator host gone, a connect that never completes) must not
  // hold back the next one past the coordinator's restart grace.
  std::chrono::milliseconds deadline;
  {
    absl::MutexLock lock(&mu_);
    deadline = std::min(std::max(2 * heartbeat_interval_, std::chrono::milliseconds(2000)),
                        options_.rpc_timeout);
  }
  StatusOr<pb::HeartbeatResponse> response = client_->Heartbeat(request, deadline);
  if (options_.metrics != nullptr) {
    if (response.ok()) {
      options_.metrics->HeartbeatSucceeded(std::chrono::system_clock::now());
    } else {
      options_.metrics->HeartbeatFailed();
    }
  }
  absl::MutexLock lock(&mu_);
  const StatusCode code = response.ok() ? StatusCode::kOk : response.status().code();
  const bool unreachable =
      code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded;
  if (unreachable && !unreachable_) {
    log::Warning("the coordinator cannot be reached (" + response.status().ToString() + "); " +
                 std::to_string(jobs_.size()) + " job(s) keep running for up to " +
                 std::to_string(options_.unreachable_grace.count() / 1000) +
                 " s, their events kept");
  } else if (!unreachable && unreachable_) {
    log::Info("the coordinator answers again");
  }
  unreachable_ = unreachable;
  if (unreachable) {
    log::Debug(
        "Heartbeat after " +
        std::to_string(
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - sent_at).count()) +
        " ms: " + response.status().ToString());
    client_->Reconnect();
  }
  if (!response.ok()) {
    if (response.status().code() == StatusCode::kNotFound) {
      log::Warning("Heartbeat: the coordinator does not know this worker; registering again");
      reregister_ = true;
      cv_.SignalAll();
    } else if (!unreachable) {  // an unreachable coordinator is logged once, above
      log::Warning("Heartbeat: " + response.status().ToString());
    }
  } else {
    if (response->has_heartbeat_interval() &&
        ToMillis(response->heartbeat_interval()).count() > 0) {
      heartbeat_interval_ = ToMillis(response->heartbeat_interval());
    }
    // A lease the coordinator answered for and did not call lost counts as renewed, whether or
    // not it is listed in `renewed` (which carries the stored-event acknowledgements).
    const std::set<std::string> lost(response->lost_lease_ids().begin(),
                                     response->lost_lease_ids().end());
    for (const pb::LeaseProgress& sent : request.leases()) {
      auto it = jobs_.find(sent.lease_id());
      if (it != jobs_.end() && lost.count(sent.lease_id()) == 0)
        it->second.runner->Renewed(sent_at, 0);
    }
    for (const pb::LeaseRenewal& renewal : response->renewed()) {
      auto it = jobs_.find(renewal.lease_id());
      if (it != jobs_.end()) it->second.runner->Renewed(sent_at, renewal.last_stored_event_seq());
    }
    for (const pb::CancelOrder& order : response->cancel_orders()) {
      auto it = jobs_.find(order.lease_id());
      if (it == jobs_.end()) continue;
      const auto grace = order.has_grace() ? ToMillis(order.grace()) : options_.cancel_grace;
      it->second.runner->Stop(StopReason::kCancel, grace, order.reason());
    }
    for (const std::string& lost : response->lost_lease_ids()) {
      auto it = jobs_.find(lost);
      if (it == jobs_.end()) continue;
      // Someone else may run the job already: no checkpoint from us, no CompleteJob.
      it->second.runner->Stop(StopReason::kLeaseLost, std::chrono::milliseconds(0),
                              "the coordinator no longer knows the lease");
    }
  }
  // A coordinator that answers but has not renewed a lease for a whole TTL has let it expire:
  // stop the ranks (they checkpoint; the fence stops them writing once a newer attempt runs).
  // A coordinator that cannot be reached (restarting) gives the workers a lease period after
  // it is back, so the ranks keep running for up to unreachable_grace.
  const auto now = Clock::now();
  const auto limit = unreachable_ ? std::max(lease_ttl_, options_.unreachable_grace) : lease_ttl_;
  for (auto& [lease_id, running] : jobs_) {
    if (running.runner->done() || now - running.runner->last_renewal() < limit) continue;
    running.runner->Stop(StopReason::kLeaseExpired, options_.cancel_grace,
                         "lease not renewed for " + std::to_string(limit.count() / 1000.0) + " s" +
                             (unreachable_ ? " (the coordinator cannot be reached)" : ""));
  }
}

void Worker::RequestShutdown() {
  absl::MutexLock lock(&mu_);
  if (!shutdown_) {
    shutdown_ = true;
    log::Info("shutting down: stopping " + std::to_string(jobs_.size()) + " job(s)");
    client_->AbortLeasePolls();
    for (auto& [lease_id, running] : jobs_) {
      running.runner->Stop(StopReason::kShutdown, options_.stop_grace, "worker shutdown");
    }
  } else {
    log::Warning("shutting down now: killing the ranks");
    for (auto& [lease_id, running] : jobs_) {
      running.runner->Stop(StopReason::kShutdown, std::chrono::milliseconds(0), "worker shutdown");
    }
  }
  cv_.SignalAll();
}

}  // namespace rdattn::worker
