// The rdattn-worker daemon's main loop: registers with the coordinator, long-polls LeaseJob
// while it has free slots, runs each leased job in a JobRunner (several at once when slots
// allow; a job of world size W takes W slots), heartbeats every lease, applies cancel orders
// and lost leases, and on shutdown stops its ranks (they checkpoint) and reports PREEMPTED.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "rdattn/v1/coordinator.pb.h"
#include "worker/daemon/coordinator_client.h"
#include "worker/daemon/job_runner.h"
#include "worker/daemon/metrics.h"

namespace rdattn::worker {

struct WorkerOptions {
  std::string hostname;
  std::string worker_id;        // empty: from <workdir>/worker_id, else assigned by the coordinator
  std::string workdir;          // absolute; created
  std::string checkpoint_root;  // absolute
  std::string train_binary;     // resolved
  std::string mpirun = "mpirun";
  int slots = 1;
  pb::HardwareKind kind = pb::HARDWARE_KIND_CPU;
  std::string device_name;
  std::string version;
  int threads_per_rank = 1;
  // Device ids of the slots on a GPU worker (slot i -> gpu_ids[i]); empty: 0 .. slots-1.
  std::vector<std::string> gpu_ids;
  bool once = false;                                        // lease one job, exit when it is over
  std::optional<std::chrono::milliseconds> exit_when_idle;  // exit after this long without a job
  std::chrono::milliseconds lease_wait{20000};              // LeaseJobRequest.wait
  std::chrono::milliseconds rpc_timeout{10000};             // unary calls other than LeaseJob
  std::chrono::milliseconds stop_grace{30000};              // SIGTERM -> SIGKILL on worker shutdown
  std::chrono::milliseconds cancel_grace{10000};            // when a cancel order gives none
  std::chrono::milliseconds event_poll_interval{200};
  std::chrono::milliseconds max_backoff{10000};  // between failed calls
  // While the coordinator cannot be reached (restarting, network), ranks keep running and
  // their events are kept for resending, for up to this long; then they checkpoint and stop.
  // Reports (CompleteJob) are retried as long.
  std::chrono::milliseconds unreachable_grace{30 * 60 * 1000};
  // Start failures (docs/worker.md "Start failures"): after this many attempts in a row that
  // failed before or right at their start, the worker stops leasing and reports 0 free slots
  // until a probe (a small file created, fsynced and removed in the workdir and the checkpoint
  // root) passes; probes back off from health_probe_min to health_probe_max. 0: never.
  int max_start_failures = 3;
  std::chrono::milliseconds health_probe_min{1000};
  std::chrono::milliseconds health_probe_max{60000};
  // The progress watchdog of every job (watchdog.h; docs/operations.md "Progress watchdog").
  WatchdogOptions watchdog;
  // Optional (null: no metrics); outlives the worker. The worker feeds it (identity, slots,
  // heartbeats, its jobs) and purges finished jobs' series from the heartbeat loop.
  WorkerMetrics* metrics = nullptr;
};

// Creates, writes, fsyncs and removes a small file in `dir`: OK when the folder can take a
// job's files now; else the error names the path and the reason (e.g. "No space left on
// device").
Status ProbeWritable(const std::string& dir);

class Worker {
 public:
  // `client` never null.
  Worker(WorkerOptions options, std::unique_ptr<CoordinatorClient> client);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs until shutdown, --once or --exit-when-idle. Returns OK, or the registration error the
  // operator must fix (UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT) or a workdir error.
  Status Run();

  // From any thread (the signal thread): stop leasing, SIGTERM the ranks (SIGKILL after
  // stop_grace), report their jobs, return from Run. A second call kills the ranks now.
  void RequestShutdown();

 private:
  using Clock = std::chrono::steady_clock;

  Status LoadWorkerId();
  // Registers (again), retrying transient errors with backoff until shutdown.
  Status Register();
  void LeaseLoop();
  void StartJob(pb::LeaseJobResponse lease);
  void HeartbeatLoop();
  void HeartbeatOnce();
  // Joins and forgets finished runners, freeing their slots. Returns how many.
  int ReapFinished();
  int FreeSlots() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateSlotMetrics() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sleeps up to `d`, or until shutdown / a job ends. Returns false on shutdown.
  bool SleepFor(std::chrono::milliseconds d);
  bool Unhealthy() const;
  // Probes the disks with backoff until they pass (true) or the worker shuts down (false).
  bool ProbeUntilHealthy();
  std::string worker_id() const;

  const WorkerOptions options_;
  const std::unique_ptr<CoordinatorClient> client_;

  struct Running {
    std::unique_ptr<JobRunner> runner;
    std::vector<int> slots;  // indices into slot_used_
  };

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_heartbeats_ ABSL_GUARDED_BY(mu_) = false;
  bool reregister_ ABSL_GUARDED_BY(mu_) = false;  // the coordinator forgot us (NOT_FOUND)
  std::chrono::milliseconds heartbeat_interval_ ABSL_GUARDED_BY(mu_){5000};
  std::chrono::milliseconds lease_ttl_ ABSL_GUARDED_BY(mu_){30000};
  bool unreachable_ ABSL_GUARDED_BY(mu_) = false;  // the last heartbeat got no answer
  std::vector<bool> slot_used_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Running> jobs_ ABSL_GUARDED_BY(mu_);  // by lease id
  int jobs_started_ ABSL_GUARDED_BY(mu_) = 0;
  int start_failures_in_row_ ABSL_GUARDED_BY(mu_) = 0;
  bool unhealthy_ ABSL_GUARDED_BY(mu_) = false;  // no leases, 0 free slots told; probing

  std::thread heartbeat_thread_;
};

}  // namespace rdattn::worker
