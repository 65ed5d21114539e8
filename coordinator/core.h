// The coordinator's core: what each RPC of SweepService and WorkerService does, without gRPC.
// It owns the store, runs the job state machine and the scheduler inside store transactions,
// assigns ids and leases, fans events out to watchers and expires leases (the reaper thread).
// service.cc only authenticates, calls one method here and maps the Status to gRPC.
//
// Thread-safe: one mutex serializes every store access (one SQLite connection). The
// WorkerService's writes arrive as operations on a queue (the *Async methods, which the gRPC
// callback handlers call): one dispatch thread applies every queued operation in one
// transaction (group commit; each operation in its own savepoint), then matches waiting
// LeaseJob polls with pending jobs (one waiter per available job: no thundering herd, no
// polling), expires leases (after the heartbeats that arrived before), and answers the calls
// outside the mutex. A waiting poll holds no thread. docs/coordinator.md "Scheduling data
// structures". WatchSweep waits on a condition variable with the mutex released. Leases and
// timestamps use the injected Clock.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "coordinator/clock.h"
#include "coordinator/job_state_machine.h"
#include "coordinator/pending_queue.h"
#include "coordinator/store.h"
#include "rdattn/v1/coordinator.pb.h"

namespace rdattn::coordinator {

struct CoreOptions {
  absl::Duration lease_ttl = absl::Seconds(60);           // a lease lives this long unrenewed
  absl::Duration heartbeat_interval = absl::Seconds(10);  // told to workers
  absl::Duration max_lease_wait = absl::Seconds(30);      // cap on LeaseJob's `wait`
  absl::Duration cancel_grace = absl::Seconds(30);        // CancelOrder.grace (≤ lease_ttl / 2)
  absl::Duration reap_interval = absl::Seconds(1);        // how often the reaper looks
  // A worker is live (for the scheduler's kind rules) while seen within this window;
  // zero: max(3 × heartbeat_interval, lease_ttl).
  absl::Duration worker_liveness = absl::ZeroDuration();
  // How often the dispatch thread asks a synchronous LeaseJob's `cancelled` while the poll
  // waits, and looks again at a backoff's end (the injected clock may move by steps).
  absl::Duration wait_slice = absl::Milliseconds(100);
  int default_max_attempts = 3;  // for sweeps with max_attempts = 0
  // Retries (docs/coordinator.md "Retries and backoff"): after a failed attempt a job waits
  // min(cap, base * 2^(failures-1)) with equal jitter (in [d/2, d]) before it is leased again.
  // Zero base: no backoff.
  absl::Duration retry_backoff_base = absl::Seconds(2);
  absl::Duration retry_backoff_cap = absl::Minutes(5);
  // Machine failures (JOB_OUTCOME_MACHINE_FAILED) do not count against max_attempts; a job
  // ends FAILED after machine_failure_factor * max_attempts of them.
  int machine_failure_factor = 10;
  // Seed of the RNG behind ids and the backoff jitter; 0: random (tests set one).
  uint64_t rng_seed = 0;
  // After the core starts, no lease expires for this long: workers get one full lease period
  // to reach a restarted coordinator before their leases are taken. Negative: lease_ttl.
  absl::Duration restart_grace = absl::Seconds(-1);
  // GetReport's plots (ReportOptions::gnuplot_binary, temp_parent): rdattn-coordinator sets
  // them from --gnuplot (resolved to an absolute path once at startup; empty: no plots) and
  // --report-temp-dir, so no request reads PATH or TMPDIR.
  std::string report_gnuplot = "gnuplot";
  std::string report_temp_dir = "/tmp";
};

// What the core counts for the metrics (docs/metrics.md, coordinator/metrics.h implements it).
// Called after the store transaction that did the thing has committed, with mu_ held: keep the
// implementation cheap and non-blocking. Thread-safe.
class CoreCounters {
 public:
  virtual ~CoreCounters() = default;
  virtual void LeasesExpired(int n) = 0;  // leases the reaper ended
  virtual void JobsRetried(int n) = 0;    // attempts that ended unsuccessfully and were requeued
  virtual void MetricEventsStored(int n) = 0;  // new (not duplicate) metric events stored
};

// The store's state for the scheduling gauges (docs/metrics.md, "Coordinator"), read at once.
struct StateCounts {
  std::map<JobState, int64_t> jobs;      // states without jobs absent
  std::map<SweepState, int64_t> sweeps;  // states without sweeps absent
  // Sweeps that are not terminal or ended less than the retention ago: their jobs by state.
  std::map<std::string, std::map<JobState, int64_t>> sweep_jobs;
  struct Worker {
    std::string id;
    bool alive = false;  // seen (heartbeat, poll, registration) within the lease time
    int free_slots = 0;
    int busy_slots = 0;
  };
  std::vector<Worker> workers;  // every registered worker, by id
  // Reads of stored rows whose checksum did not match (DATA_LOSS; such rows are left out of the
  // counts above), since the store was opened.
  int64_t checksum_failures = 0;
};

class Core {
 public:
  // `clock` is borrowed and must outlive the core. `counters` likewise, or null (no metrics).
  Core(std::unique_ptr<Store> store, const Clock* clock, CoreOptions options,
       CoreCounters* counters = nullptr);
  ~Core();  // Shutdown()
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // Makes the dispatch thread expire leases every reap_interval (after applying the
  // operations queued before). Tests may instead call ExpireLeases() directly.
  void StartReaper();
  // Answers every long poll (no job) and queued operation (UNAVAILABLE), ends every watch,
  // and stops the dispatch thread. Idempotent.
  void Shutdown();

  const CoreOptions& options() const { return options_; }

  // A second connection to the same file, for GetSweep and ListSweeps (Store::OpenReader): in
  // WAL mode it reads the last committed state without the writer's lock, so a slow or busy
  // reader never stalls the workers' calls. Without one, reads take the writer's lock.
  void SetReadStore(std::unique_ptr<Store> reader);

  // Returns true when the caller has gone away (e.g. grpc::ServerContext::IsCancelled).
  using CancelledFn = std::function<bool()>;
  // Sends one event of a watch; false when the stream is broken.
  using SendFn = std::function<bool(const pb::WatchEvent&)>;

  // --- SweepService. Errors per coordinator.proto.
  // `owner`: the caller's identity; when non-empty it overwrites spec.owner.
  StatusOr<pb::SubmitSweepResponse> SubmitSweep(const pb::SubmitSweepRequest& req,
                                                const std::string& owner);
  StatusOr<pb::GetSweepResponse> GetSweep(const pb::GetSweepRequest& req);
  StatusOr<pb::ListSweepsResponse> ListSweeps(const pb::ListSweepsRequest& req);
  // Streams events with seq > after_seq, then live ones. Returns OK after the sweep's terminal
  // state change (or at once when the sweep ended before after_seq), CANCELLED when
  // `cancelled` or `send` fails, UNAVAILABLE on Shutdown().
  Status WatchSweep(const pb::WatchSweepRequest& req, const SendFn& send,
                    const CancelledFn& cancelled);
  // `required_owner`: when set, a sweep of another owner is PERMISSION_DENIED.
  StatusOr<pb::CancelSweepResponse> CancelSweep(const pb::CancelSweepRequest& req,
                                                const std::optional<std::string>& required_owner);
  StatusOr<pb::GetReportResponse> GetReport(const pb::GetReportRequest& req);

  // --- WorkerService.
  StatusOr<pb::RegisterWorkerResponse> RegisterWorker(const pb::RegisterWorkerRequest& req);
  // Long poll: waits up to min(req.wait, max_lease_wait) of real time for a job that fits.
  StatusOr<pb::LeaseJobResponse> LeaseJob(const pb::LeaseJobRequest& req,
                                          const CancelledFn& cancelled);
  StatusOr<pb::HeartbeatResponse> Heartbeat(const pb::HeartbeatRequest& req);
  struct ProgressResult {
    bool stored = false;   // false: a duplicate (job, attempt, seq)
    int64_t last_seq = 0;  // highest MetricEvent.seq stored for the lease's attempt
  };
  // One message of a ReportProgress stream. A lease that is not held: ABORTED.
  StatusOr<ProgressResult> RecordProgress(const std::string& lease_id,
                                          const pb::MetricEvent& event);
  StatusOr<pb::CompleteJobResponse> CompleteJob(const pb::CompleteJobRequest& req);

  // --- WorkerService, asynchronous (the gRPC handlers): the same answers as the methods above,
  // applied by the dispatch thread in group commits. `done` is called exactly once, never with
  // the core's mutex held, possibly before the call returns.
  template <typename T>
  using Done = std::function<void(StatusOr<T>)>;
  void HeartbeatAsync(const pb::HeartbeatRequest& req, Done<pb::HeartbeatResponse> done);
  void RecordProgressAsync(const std::string& lease_id, const pb::MetricEvent& event,
                           Done<ProgressResult> done);
  void CompleteJobAsync(const pb::CompleteJobRequest& req, Done<pb::CompleteJobResponse> done);
  // A LeaseJob long poll. It waits up to min(req.wait, max_lease_wait) and never past
  // `call_deadline` (the RPC's deadline); it is answered with no job when it ends without one
  // or when CancelLeaseWait() says the caller left. A caller that left is never leased a job:
  // that is checked before a job is taken and again, inside the transaction, after.
  struct LeaseWait;
  // `caller_left` (optional) is asked by the dispatch thread too, at least every wait_slice.
  std::shared_ptr<LeaseWait> LeaseJobAsync(const pb::LeaseJobRequest& req, absl::Time call_deadline,
                                           Done<pb::LeaseJobResponse> done,
                                           CancelledFn caller_left = nullptr);
  void CancelLeaseWait(const std::shared_ptr<LeaseWait>& wait);
  struct LeaseWait {
    pb::LeaseJobRequest req;
    WorkerRow worker;               // as registered (set when the poll is admitted)
    absl::Time wait_end;            // real time: answered with no job then
    absl::Time call_deadline;       // real time: the RPC's deadline
    std::atomic<bool> left{false};  // the caller left (CancelLeaseWait)
    CancelledFn caller_left;        // also asked, only by the dispatch thread
    Done<pb::LeaseJobResponse> done;
    bool answered = false;  // guarded by the core's mutex
    // work generation at its last offer (guarded by the core's mutex); it is offered again
    // only when the generation moves (a job became PENDING or left a backoff).
    uint64_t tried_gen = ~uint64_t{0};
  };

  // Ends every lease past its expiry (requeue, or FAILED after max_attempts, or CANCELLED
  // when a cancel was pending). Returns how many. The reaper calls it.
  StatusOr<int> ExpireLeases();

  // LeaseJob calls now waiting for work (found none and are blocked in the long poll). For
  // tests that must know a poll is waiting before they make work appear.
  int WaitingLeasePolls() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(waiters_.size());
  }

  // The gauges' view of the store (one consistent read). A terminal sweep is in sweep_jobs
  // while now < its end time + `retention`.
  StatusOr<StateCounts> ReadStateCounts(absl::Duration retention);

 private:
  // What a job event needs besides the job row.
  struct EventContext {
    const WorkerRow* worker = nullptr;  // kLease
    std::string outcome;                // attempt outcome label (kCloseAttempt)
    int exit_code = 0;
    int term_signal = 0;
    std::string stderr_tail;
    std::string message;
    std::string reason;  // JobStateChange.reason, failure_reason
    // A failure of the job's input (data identity): FAILED now, whatever attempts are left,
    // since another attempt would read the same data.
    bool no_retry = false;
  };

  StatusOr<JobState> ApplyJobEvent(JobRow& job, JobEvent event, const EventContext& ctx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status RefreshSweepState(const std::string& sweep_id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores an event and wakes the watchers; false for a duplicate metric event.
  StatusOr<bool> AppendEvent(EventRow& row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes the long polls: a job became PENDING or a worker freed slots.
  void NotifyWork() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StatusOr<pb::SweepStatus> MakeSweepStatus(const SweepRow& row, bool with_jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same from `store` (the writer's under mu_, or the read connection under read_mu_).
  StatusOr<pb::SweepStatus> MakeSweepStatusFrom(Store& store, const SweepRow& row, bool with_jobs);
  // Runs fn(store) on the read connection under read_mu_, or on the writer's store under mu_
  // when there is none.
  template <typename F>
  auto WithReadStore(F&& fn) -> decltype(fn(std::declval<Store&>())) {
    {
      absl::MutexLock lock(&read_mu_);
      if (reader_) return fn(*reader_);
    }
    absl::MutexLock lock(&mu_);
    return fn(*store_);
  }
  Status InsertSweep(SweepRow& row, const std::vector<pb::JobSpec>& jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts PENDING jobs of the sweep, each with a state-change event saying `reason`.
  Status InsertJobs(const SweepRow& row, const std::vector<pb::JobSpec>& jobs, int64_t now_us,
                    const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A look of the sweep's seed policy (every job of its current seeds has ended): decides,
  // adds the next seeds' jobs or stops, stores `state` with the look and emits its event.
  Status RunSeedLook(const SweepRow& sweep, pb::SequentialState& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `*backoff_end_us`: when nothing was leased, the earliest end of a pending job's backoff
  // (0: none), at which a waiting poll asks again. `caller_left` is asked once more after the
  // job is taken, inside the transaction: when the caller has gone (cancelled, past its
  // deadline) the lease is rolled back, so no job is LEASED to nobody, and nullopt is returned.
  StatusOr<std::optional<pb::LeaseJobResponse>> TryLeaseInTx(const WorkerRow& worker,
                                                             int free_slots,
                                                             const ClusterView& cluster,
                                                             const CancelledFn& caller_left)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The bodies of the WorkerService calls, inside an open transaction.
  StatusOr<pb::HeartbeatResponse> HeartbeatInTx(const pb::HeartbeatRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StatusOr<ProgressResult> RecordProgressInTx(const std::string& lease_id,
                                              const pb::MetricEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StatusOr<pb::CompleteJobResponse> CompleteJobInTx(const pb::CompleteJobRequest& req,
                                                    JobEvent event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- The dispatch thread (docs/coordinator.md "Scheduling data structures").
  struct Op {
    // Runs inside the round's transaction (in a savepoint of its own); its status goes to
    // `finish` after the commit (or the commit's error).
    std::function<Status()> apply;
    std::function<void(const Status&)> finish;  // outside mu_
  };
  void Enqueue(Op op) ABSL_LOCKS_EXCLUDED(mu_);
  // A WorkerService call's body (one of the *InTx methods) in a transaction of its own: the
  // synchronous API.
  template <typename T>
  StatusOr<T> RunInTx(const std::function<StatusOr<T>()>& body) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    RDATTN_RETURN_IF_ERROR(EnsureMemoryState());
    StatusOr<T> result = T();
    RDATTN_RETURN_IF_ERROR(Tx([&]() -> Status {
      result = body();
      return result.status();
    }));
    return result;
  }
  // The same body as an operation of the next dispatch round; `done` gets its answer (or the
  // round's commit error) after the commit.
  template <typename T>
  void EnqueueInTx(std::function<StatusOr<T>()> body, Done<T> done) ABSL_LOCKS_EXCLUDED(mu_) {
    auto result = std::make_shared<StatusOr<T>>(T());
    Op op;
    op.apply = [body = std::move(body), result] {
      *result = body();
      return result->status();
    };
    op.finish = [result, done = std::move(done)](const Status& st) {
      if (!st.ok()) return done(st);
      done(std::move(*result));
    };
    Enqueue(std::move(op));
  }
  // The counters of a committed progress event or completion.
  void CountProgress(const ProgressResult& r);
  void CountCompletion(const pb::CompleteJobResponse& r);
  void DispatchLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // One round: the queued operations, lease expiry when due, then matching. Returns what to
  // call once mu_ is released.
  std::vector<std::function<void()>> DispatchRound() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `fn` in a savepoint: its writes are undone when it fails, and the memory state is
  // marked stale when it changed.
  Status InSavepoint(const std::function<Status()>& fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StatusOr<int> ExpireLeasesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The body of ExpireLeasesLocked inside an open transaction: leases expired, jobs requeued.
  Status ExpireLeasesInTx(int* expired, int* retried) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NewId(const std::string& prefix, int hex_digits) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NowMicros() const;
  absl::Duration WorkerLiveness() const;

  // What a job lacks for SUCCEEDED (docs/operations.md, "What SUCCEEDED guarantees"): "" when
  // it has every milestone's val NLL and, with test shards, its test NLL.
  StatusOr<std::string> MissingResults(const JobRow& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The milestones (tokens) of the job whose KIND_EVAL is stored, any attempt.
  StatusOr<std::vector<int64_t>> StoredEvalMilestones(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- The scheduling state in memory (docs/coordinator.md "Scheduling data structures"):
  // the pending jobs indexed for the scheduler, the workers' liveness and free slots, each
  // sweep's job counts and each job's expected milestones. Updated inside each transaction,
  // together with the rows; a transaction that fails (rolled back) marks it stale, and it is
  // rebuilt from the store before its next use, so it never disagrees with committed rows.
  struct LiveWorker {
    HardwareKind kind = HardwareKind::kCpu;
    int free_slots = 0;
    int64_t last_seen_us = 0;
  };
  // Runs fn in a store transaction; when it fails, the memory state is marked stale.
  Status Tx(const std::function<Status()>& fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rebuilds the pending queue and the workers from the store when stale.
  Status EnsureMemoryState() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void InvalidateMemoryState() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A job row was inserted (`inserted`) or its state went from `from` to job.state.
  void OnJobChanged(const JobRow& job, JobState from, bool inserted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnWorkerSeen(const std::string& id, HardwareKind kind, int free_slots, int64_t now_us)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sweep's job counts (kept up to date in memory once read).
  StatusOr<SweepFacts> SweepFactsOf(const std::string& sweep_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const std::vector<int64_t>& ExpectedMilestonesOf(const JobRow& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* clock_;            // never null
  CoreCounters* const counters_;  // null: metrics off
  const CoreOptions options_;
  int64_t started_us_ = 0;  // clock time at construction (restart grace)

  absl::Mutex mu_;
  std::unique_ptr<Store> store_ ABSL_GUARDED_BY(mu_);  // never null
  absl::Mutex read_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::unique_ptr<Store> reader_ ABSL_GUARDED_BY(read_mu_);  // null: reads use store_
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // The dispatch thread's inputs: queued operations, waiting polls, and the work generation
  // (NotifyWork() calls: a job became PENDING or a worker freed slots) it last matched at.
  uint64_t work_gen_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t matched_gen_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Op> ops_ ABSL_GUARDED_BY(mu_);
  std::list<std::shared_ptr<LeaseWait>> waiters_ ABSL_GUARDED_BY(mu_);  // oldest first
  // What tells the dispatch thread that a pass over the waiters is due (it is not, otherwise:
  // an idle round costs nothing per waiting poll): polls admitted this round, cancellations
  // told, the earliest end of a wait or call deadline, synchronous callers to ask.
  std::vector<std::shared_ptr<LeaseWait>> admitted_ ABSL_GUARDED_BY(mu_);
  int left_pending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time earliest_wait_end_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  int sync_waiters_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time next_sync_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool reaping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time next_reap_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t memory_changes_ ABSL_GUARDED_BY(mu_) = 0;  // OnJobChanged/OnWorkerSeen calls
  absl::CondVar dispatch_cv_;                         // something for the dispatch thread
  std::thread dispatcher_;
  // The watches of one sweep. An event wakes only its own sweep's watches: one CondVar for all
  // of them made every stored event wake (and re-query) every watch of every sweep.
  struct SweepWatches {
    int watches = 0;   // WatchSweep calls holding the entry; erased when the last one ends
    uint64_t gen = 0;  // events stored for the sweep while the entry exists
    absl::CondVar cv;  // gen moved, or shutdown
  };
  std::map<std::string, SweepWatches> watches_ ABSL_GUARDED_BY(mu_);  // by sweep id
  bool memory_valid_ ABSL_GUARDED_BY(mu_) = false;
  PendingQueue queue_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, LiveWorker> workers_ ABSL_GUARDED_BY(mu_);  // by id
  std::map<std::string, SweepFacts> facts_ ABSL_GUARDED_BY(mu_);    // by sweep id (cache)
  std::map<std::string, std::vector<int64_t>> milestones_ ABSL_GUARDED_BY(mu_);  // by job id
};

}  // namespace rdattn::coordinator
