// One leased job on a worker, from lease to CompleteJob: prepares its directory and job.json,
// starts its ranks, relays their events, stops them on order, and reports how they ended.
// Each JobRunner has one supervisor thread; the worker's threads talk to it through the
// thread-safe methods below.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "rdattn/v1/coordinator.pb.h"
#include "worker/daemon/coordinator_client.h"
#include "worker/daemon/event_relay.h"
#include "worker/daemon/job_paths.h"
#include "worker/daemon/metrics.h"
#include "worker/daemon/outcome.h"
#include "worker/daemon/process.h"
#include "worker/daemon/watchdog.h"

namespace rdattn::worker {

// Worker-wide settings a job needs.
struct JobRunnerOptions {
  std::string worker_id;
  std::string workdir;          // absolute
  std::string checkpoint_root;  // absolute
  std::string train_binary;     // resolved path
  std::string mpirun;           // resolved path, or a name resolved at launch
  int threads_per_rank = 1;     // when the RunSpec leaves parallel.threads_per_rank at 0
  bool run_as_root = false;
  std::string cuda_visible_devices;  // this job's GPUs; empty: do not set
  std::chrono::milliseconds event_poll_interval{200};
  std::chrono::milliseconds drain_timeout{60000};      // to deliver the last events
  std::chrono::milliseconds complete_timeout{120000};  // to get CompleteJob through
  std::chrono::milliseconds rpc_timeout{10000};        // per CompleteJob call
  // The progress watchdog (watchdog.h): a job silent for longer than its bound is stopped
  // (SIGTERM, SIGKILL after stall_kill_grace) and reported FAILED "stalled: ...".
  WatchdogOptions watchdog;
  std::chrono::milliseconds stall_kill_grace{2000};
  // Optional (null: no metrics); outlives the runner. Gets the job's start and end and every
  // event the relay reads.
  WorkerMetrics* metrics = nullptr;
};

// The RunSpec a job's ranks get: the lease's, with the checkpoint directory (unless the spec
// has one), the threads per rank (unless the spec sets them), run and job ids, and the
// coordinator's resume checkpoint when this worker can read it. Pure apart from one stat().
pb::RunSpec ResolveRunSpec(const pb::LeaseJobResponse& lease, const JobRunnerOptions& options);

class JobRunner {
 public:
  using Clock = std::chrono::steady_clock;

  // `client` never null, outlives the runner. `on_done` runs on the supervisor thread when the
  // job is over (reported, or abandoned for a lost lease).
  JobRunner(pb::LeaseJobResponse lease, JobRunnerOptions options, CoordinatorClient* client,
            std::function<void()> on_done);
  // Joins the supervisor thread (Stop first to make that quick).
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  void Start();

  // Stops the ranks: SIGTERM now, SIGKILL after `grace`. A later call may shorten the grace;
  // the first reason is kept, except that kLeaseLost always wins (nothing is reported then).
  void Stop(StopReason reason, std::chrono::milliseconds grace, std::string why);

  // A heartbeat renewed the lease; the coordinator stored events up to `stored_seq`.
  void Renewed(Clock::time_point when, uint64_t stored_seq);
  Clock::time_point last_renewal() const;

  // For the heartbeat.
  pb::LeaseProgress Progress() const;

  const std::string& lease_id() const { return lease_.lease_id(); }
  const std::string& job_id() const { return lease_.job().job_id(); }
  int world_size() const;
  bool done() const;
  // After done(): why the attempt failed before or right at its start (docs/worker.md "Start
  // failures": the job folder could not be written with a machine errno, the ranks could not
  // be spawned, the trainer exited 74); empty when it was no start failure. And whether its
  // ranks ran and ended without a machine failure (a start that worked).
  std::string start_failure() const;
  bool started_cleanly() const;

 private:
  void Run();
  // `*machine`: the failure is the machine's (a machine errno: IsMachineErrno).
  Status Prepare(pb::RunSpec* spec, bool* machine);
  // Waits for the launcher to exit, applying stop orders.
  ExitStatus Supervise(ChildProcess* child);
  void Complete(const pb::CompleteJobRequest& request);
  bool StopRequested(StopReason* reason, std::string* why) const;
  // The watchdog's side (relay thread): one event of the attempt was read.
  void NoteEvent(const pb::MetricEvent& event);
  // The watchdog's verdict at `now` (supervisor thread); the reason when the job stalled.
  std::optional<std::string> CheckStalled(Clock::time_point now);

  const pb::LeaseJobResponse lease_;
  const JobRunnerOptions options_;
  CoordinatorClient* const client_;
  const std::function<void()> on_done_;
  const JobPaths paths_;
  // Before relay_, whose thread feeds it (declared first, destroyed last).
  mutable absl::Mutex watchdog_mu_;
  Watchdog watchdog_ ABSL_GUARDED_BY(watchdog_mu_);
  const std::unique_ptr<EventRelay> relay_;  // never null; started with the ranks

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  StopReason stop_reason_ ABSL_GUARDED_BY(mu_) = StopReason::kNone;
  std::string stop_why_ ABSL_GUARDED_BY(mu_);
  std::optional<Clock::time_point> kill_at_ ABSL_GUARDED_BY(mu_);
  bool ranks_started_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::string start_failure_ ABSL_GUARDED_BY(mu_);  // see start_failure()
  bool started_cleanly_ ABSL_GUARDED_BY(mu_) = false;
  Clock::time_point last_renewal_ ABSL_GUARDED_BY(mu_);
  uint64_t stored_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::string stalled_ ABSL_GUARDED_BY(mu_);  // the watchdog's reason, once it stopped the ranks

  std::thread thread_;
};

}  // namespace rdattn::worker
