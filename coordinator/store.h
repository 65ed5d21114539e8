// The coordinator's persistent state: one SQLite file in WAL mode with the tables sweeps, jobs,
// attempts, events and workers (schema in docs/coordinator.md). The persisted form of a sweep,
// a job and an event is its proto, serialized into a blob, plus the indexed columns the
// queries need. Data access only: the life-cycle rules are in job_state_machine, the policy in
// scheduler, the orchestration in core.
//
// Not thread-safe: the owner (Core) serializes every call, and wraps multi-step changes in
// Transaction().
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/job_state_machine.h"
#include "coordinator/scheduler.h"
#include "coordinator/sqlite_db.h"
#include "rdattn/v1/coordinator.pb.h"
#include "rdattn/v1/sweep.pb.h"

namespace rdattn::coordinator {

namespace pb = ::rdattn::v1;

// Times are unix microseconds; 0 means unset.
struct SweepRow {
  int64_t seq = 0;  // creation order (paging key); set by InsertSweep
  std::string id;
  std::string request_id;
  std::string owner;
  pb::SweepSpec spec;
  SweepState state = SweepState::kPending;
  bool cancel_requested = false;
  std::string message;  // why FAILED or CANCELLED
  int max_attempts = 1;
  int64_t create_us = 0;
  int64_t update_us = 0;
  int64_t end_us = 0;
};

struct JobRow {
  int64_t seq = 0;  // creation order; set by InsertJob
  std::string id;
  std::string sweep_id;
  std::string pair_group;
  pb::JobSpec spec;  // as expanded (attempt 0)
  JobState state = JobState::kPending;
  int attempts = 0;     // attempts started
  int preemptions = 0;  // attempts that ended PREEMPTED (not counted against max_attempts)
  int max_attempts = 1;
  int priority = 0;
  int world_size = 1;
  HardwareKind preferred_kind = HardwareKind::kAny;
  bool cancel_requested = false;
  // The current (or last) lease.
  std::string worker_id;
  HardwareKind worker_kind = HardwareKind::kAny;
  std::string lease_id;  // empty when no lease is held
  int64_t lease_expiry_us = 0;
  // Progress, from the latest metric events.
  int64_t step = 0;
  int64_t tokens = 0;
  double last_train_loss = 0;
  double last_val_nll = 0;
  double tokens_per_second = 0;
  std::string init_checksum;
  std::string last_checkpoint;
  std::string failure_reason;
  int64_t create_us = 0;
  int64_t start_us = 0;
  int64_t end_us = 0;
  int64_t update_us = 0;
  // Retries (docs/coordinator.md "Retries and backoff").
  int64_t not_before_us = 0;       // not leased before this time (backoff after a failure)
  int machine_failures = 0;        // attempts that ended MACHINE_FAILED (not counted)
  std::string last_failed_worker;  // the worker whose attempt failed last; "" after a success
};

struct AttemptRow {
  std::string job_id;
  int attempt = 0;  // 1-based
  std::string lease_id;
  std::string worker_id;
  HardwareKind worker_kind = HardwareKind::kAny;
  int64_t lease_us = 0;  // when leased
  int64_t start_us = 0;  // when the ranks started
  int64_t end_us = 0;
  std::string outcome;  // "" while open; SUCCEEDED FAILED CANCELLED PREEMPTED LEASE_EXPIRED
  int exit_code = 0;
  int term_signal = 0;
  std::string stderr_tail;
  std::string message;
};

enum class EventKind { kJobStateChange = 1, kMetric = 2, kSweepStateChange = 3, kSeedLook = 4 };

struct EventRow {
  int64_t seq = 0;  // global, strictly increasing; set by AppendEvent
  std::string sweep_id;
  std::string job_id;  // empty for sweep state changes
  EventKind kind = EventKind::kJobStateChange;
  int attempt = 0;         // metric events
  int64_t metric_seq = 0;  // metric events: MetricEvent.seq (idempotency key with job, attempt)
  int metric_kind = 0;     // metric events: MetricEvent.kind
  int64_t time_us = 0;
  pb::WatchEvent event;  // seq, sweep_id and time are filled in on read
};

struct WorkerRow {
  std::string id;
  std::string hostname;
  HardwareKind kind = HardwareKind::kCpu;
  int slots = 0;
  int free_slots = 0;
  pb::RegisterWorkerRequest registration;  // labels, device name, version
  int64_t registered_us = 0;
  int64_t last_seen_us = 0;
};

struct SweepFilter {
  std::vector<SweepState> states;  // empty: any
  std::string owner;               // empty: any
  int64_t before_seq = 0;          // only sweeps with seq < before_seq; 0: no bound
  int limit = 50;
};

// What GetSweep's summary view reads about a sweep's jobs (SweepSummary), from aggregate
// queries: its size depends on the sweep's scales and arms, never on its number of jobs.
struct SweepSummaryFacts {
  // Pair groups by state (PairGroupCounts): each group in exactly one of the four.
  int groups = 0;
  int groups_complete = 0;
  int groups_failed = 0;
  int groups_running = 0;
  int groups_waiting = 0;
  int jobs_retried = 0;  // attempts > 1
  int machine_failures = 0;
  int jobs_backing_off = 0;      // PENDING with not_before_us > now
  double tokens_per_second = 0;  // RUNNING jobs
  int jobs_with_problems = 0;    // failure_reason not empty
  // The jobs of one (scale, arm): they share a schedule (the milestones they expect).
  struct ArmGroup {
    std::string scale, arm;
    int jobs = 0;
    pb::JobSpec spec;  // the group's first job's, as expanded
  };
  std::vector<ArmGroup> arm_groups;  // by scale, arm
  struct Problem {
    std::string job_id;
    JobState state = JobState::kPending;
    int attempts = 0;
    std::string reason;  // at most 200 bytes; says so when the stored one fails its checksum
    int64_t update_us = 0;
  };
  std::vector<Problem> recent_problems;  // newest update first
};

// How Store::Open treats the file (docs/operations.md, "Stored results and the store epoch").
struct StoreOptions {
  // PRAGMA synchronous: true FULL (the WAL is fsynced at every commit, so a write that was
  // acknowledged survives a power loss), false NORMAL (only for the cost measurement).
  bool synchronous_full = true;
  // Non-empty: start a new store epoch at open, because the caller found that acknowledged
  // writes may be lost (e.g. a damaged WAL); watchers holding the old epoch are then told to
  // restart from 0. The text says why; it is logged and kept in the meta table.
  std::string new_epoch_reason;
  // Run PRAGMA quick_check before anything else and refuse (DATA_LOSS) a damaged file.
  bool quick_check = false;
};

class Store {
 public:
  // 2: kMigrationsV2 in store.cc; with it, checksums of stored results (events.digest,
  // jobs.result_digests, computed at migration for older rows) and the meta table (epoch).
  static constexpr int kSchemaVersion = 2;

  // Opens or creates the database at `path`, sets WAL mode, synchronous=FULL (see
  // StoreOptions) and a busy timeout, and creates, migrates or checks the schema. A file with a
  // newer schema is FAILED_PRECONDITION; an unreadable one UNAVAILABLE or DATA_LOSS.
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& path,
                                               const StoreOptions& options = {});

  // A read-only connection to a store that Open() has created or migrated (PRAGMA
  // query_only): for reads beside the writer's connection (WAL: they see the last commit and
  // do not block it). A file of another schema version is FAILED_PRECONDITION.
  static StatusOr<std::unique_ptr<Store>> OpenReader(const std::string& path);

  // PRAGMA quick_check: OK, or DATA_LOSS with what SQLite found (its first lines).
  Status QuickCheck();
  // The store epoch: a random id kept in the meta table, new when the store is created and
  // whenever Open was told that acknowledged writes may be lost. (epoch, event seq) is never
  // handed out twice.
  const std::string& epoch() const { return epoch_; }
  // Reads whose stored checksum did not match (each one a DATA_LOSS error), since open.
  int64_t checksum_failures() const { return checksum_failures_; }

  // Runs `fn` inside BEGIN IMMEDIATE ... COMMIT; rolls back when it returns an error.
  Status Transaction(const std::function<Status()>& fn);
  // Inside a transaction: runs `fn` in a SAVEPOINT and undoes its writes (only) when it
  // fails; the transaction goes on. Outside one: Transaction(fn).
  Status Savepoint(const std::function<Status()>& fn);
  // PRAGMA journal_mode ("wal" after Open on a file).
  StatusOr<std::string> JournalMode();

  // --- sweeps
  Status InsertSweep(SweepRow& row);  // sets row.seq; duplicate id or request_id: ALREADY_EXISTS
  Status UpdateSweep(const SweepRow& row);             // state, cancel, message, times
  StatusOr<SweepRow> GetSweep(const std::string& id);  // NOT_FOUND
  StatusOr<std::optional<SweepRow>> FindSweepByRequestId(const std::string& request_id);
  StatusOr<std::vector<SweepRow>> ListSweeps(const SweepFilter& filter);  // newest first
  // A sweep's seed policy state (design and looks): insert or replace; nullopt when none.
  Status PutSequential(const std::string& sweep_id, const pb::SequentialState& state);
  StatusOr<std::optional<pb::SequentialState>> GetSequential(const std::string& sweep_id);

  // --- jobs
  Status InsertJob(JobRow& row);                   // sets row.seq
  Status UpdateJob(const JobRow& row);             // every mutable column
  StatusOr<JobRow> GetJob(const std::string& id);  // NOT_FOUND
  StatusOr<std::optional<JobRow>> FindJobByLease(const std::string& lease_id);
  StatusOr<std::vector<JobRow>> ListJobs(const std::string& sweep_id);           // creation order
  StatusOr<std::vector<JobRow>> ListJobsOfGroup(const std::string& pair_group);  // creation order
  StatusOr<std::vector<JobRow>> ListExpiredLeases(int64_t now_us);
  StatusOr<std::vector<PendingJob>> ListPending();
  // Kinds every pair group with a job that has not ended (PENDING, LEASED, RUNNING) has run
  // on (from its attempts): the scheduler's group kinds when it is rebuilt.
  StatusOr<std::map<std::string, std::set<HardwareKind>>> ActiveGroupKinds();
  StatusOr<SweepFacts> GetSweepFacts(const std::string& sweep_id);
  // At most `limit` jobs of the sweep with seq > after_seq, in creation order (a page of
  // GetSweep's full view; index jobs_by_sweep).
  StatusOr<std::vector<JobRow>> ListJobsPage(const std::string& sweep_id, int64_t after_seq,
                                             int limit);
  // The summary view's counts (SweepSummaryFacts), with at most `max_problems` recent problems.
  // `now_us` tells a retry backoff that has not ended yet. Indexes jobs_summary (one pass over
  // the sweep's pair groups), jobs_by_state (running jobs), jobs_with_problems; the (scale, arm)
  // groups are cached until the sweep's number of jobs changes.
  StatusOr<SweepSummaryFacts> GetSweepSummaryFacts(const std::string& sweep_id, int64_t now_us,
                                                   int max_problems);
  // Milestone (tokens) -> jobs of the sweep whose KIND_EVAL for it is stored (any attempt, each
  // job once). Incremental: a per-sweep cache (the last kSummaryCacheSweeps sweeps asked) is
  // brought up to date with the EVAL events stored since the previous call (partial index
  // events_eval_by_sweep), so a repeated call reads only what is new. An event that fails its
  // checksum is counted in checksum_failures() and left out.
  StatusOr<std::map<int64_t, int>> CountStoredEvalMilestones(const std::string& sweep_id);
  // Metrics (docs/metrics.md): jobs and sweeps counted by state (states with no row absent).
  StatusOr<std::map<JobState, int64_t>> CountJobsByState();
  StatusOr<std::map<SweepState, int64_t>> CountSweepsByState();
  // Jobs by state of every sweep that is not terminal or ended after `ended_after_us`. Every
  // such sweep appears (with an empty map if it has no job).
  StatusOr<std::map<std::string, std::map<JobState, int64_t>>> CountSweepJobs(
      int64_t ended_after_us);

  // --- attempts
  Status InsertAttempt(const AttemptRow& row);
  Status UpdateAttempt(const AttemptRow& row);
  StatusOr<AttemptRow> GetAttempt(const std::string& job_id, int attempt);  // NOT_FOUND

  // --- events
  // Stores the event and sets row.seq. A metric event whose (job_id, attempt, metric_seq) is
  // already stored is not stored again: returns false and leaves row.seq 0.
  StatusOr<bool> AppendEvent(EventRow& row);
  // Events of a sweep with seq > after_seq, in seq order, at most `limit`.
  StatusOr<std::vector<EventRow>> ReadEvents(const std::string& sweep_id, int64_t after_seq,
                                             int limit);
  // Metric events of a sweep of one MetricEvent kind, in seq order.
  StatusOr<std::vector<EventRow>> ReadMetricEvents(const std::string& sweep_id, int metric_kind);
  // One job's metric events of one MetricEvent.kind, every attempt, in storage order.
  StatusOr<std::vector<EventRow>> ReadJobMetricEvents(const std::string& job_id, int metric_kind);
  StatusOr<int64_t> LastEventSeq();                                        // 0 when none
  StatusOr<int64_t> LastSweepEventSeq(const std::string& sweep_id);        // 0 when none
  StatusOr<int64_t> MaxMetricSeq(const std::string& job_id, int attempt);  // 0 when none

  // --- workers
  Status UpsertWorker(const WorkerRow& row);
  StatusOr<std::optional<WorkerRow>> GetWorker(const std::string& id);
  Status TouchWorker(const std::string& id, int64_t now_us, int free_slots);
  StatusOr<std::vector<WorkerRow>> ListWorkers();  // by id

 private:
  explicit Store(std::unique_ptr<SqliteDb> db) : db_(std::move(db)) {}
  Status Init(const StoreOptions& options);
  // Migration to version 2: the checksums of the rows written before it.
  Status BackfillChecksums();
  Status InitEpoch(const StoreOptions& options);
  // `r`, with a DATA_LOSS error (a checksum that does not match, a blob that does not parse)
  // counted in checksum_failures_.
  template <typename T>
  StatusOr<T> Counted(StatusOr<T> r) {
    if (!r.ok() && r.status().code() == StatusCode::kDataLoss) ++checksum_failures_;
    return r;
  }
  StatusOr<JobRow> ReadJob(SqliteStmt& stmt);
  // The jobs matching `where`, in seq order; its ?1, ?2, ... are bound to `args` in order.
  template <typename... Args>
  StatusOr<std::vector<JobRow>> QueryJobs(const std::string& where, const Args&... args);

  // What GetSweepSummaryFacts and CountStoredEvalMilestones keep of one sweep between calls.
  struct SummaryCache {
    int arm_groups_jobs = -1;  // the sweep's jobs when arm_groups was read; -1: not read
    std::vector<SweepSummaryFacts::ArmGroup> arm_groups;
    int64_t evals_after_seq = 0;                        // EVAL events up to here are counted
    std::set<std::pair<uint64_t, int64_t>> evals_seen;  // (FNV-1a of the job id, milestone)
    std::map<int64_t, int> eval_jobs;                   // milestone -> jobs
    uint64_t last_use = 0;
  };
  static constexpr size_t kSummaryCacheSweeps = 4;  // the sweeps asked last
  void TrimSummaryCache();
  std::map<std::string, SummaryCache> summary_cache_;  // by sweep id
  uint64_t summary_cache_uses_ = 0;

  std::unique_ptr<SqliteDb> db_;  // never null
  bool in_transaction_ = false;
  std::string epoch_;
  int64_t checksum_failures_ = 0;
  // The event numbers' high-water mark, kept outside SQLite in `<path>.seqmark` ("EPOCH SEQ"):
  // every seq of this epoch handed out so far is <= seq_reserved_, written (fsync) before the
  // transaction that uses a number above the previous mark commits. At open, the events'
  // AUTOINCREMENT counter is raised to the mark of the same epoch, so that a rollback nobody
  // could detect (a WAL cut at a frame boundary) still never hands out a number twice.
  std::string path_;  // "" or ":memory:": no mark
  int64_t seq_reserved_ = 0;
  static constexpr int64_t kSeqBlock = 65536;  // one fsynced mark per 65,536 events
  Status ApplySeqMark();
  Status ReserveSeqs(int64_t seq);
};

}  // namespace rdattn::coordinator
