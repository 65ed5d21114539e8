// Placement: which pending job a worker that asks for work gets. Pure: no I/O, no clock, no
// proto types; the service gathers the inputs from the store. The rule (docs/coordinator.md):
//
//   1. Gang admission: a job needs world_size slots, all at once; it is eligible only when
//      world_size <= the worker's free slots.
//   2. Hardware preference of the sweep: a job whose sweep prefers kind K is not given to a
//      worker of another kind while some live worker of kind K exists.
//   3. One kind per pair group: once a pair group has run (any attempt of any of its jobs) on
//      kind K, its jobs are not given to a worker of another kind while some live worker of
//      kind K exists. When none is left, the group may move (and then uses both kinds).
//   4. Among the eligible jobs: highest priority first; then jobs whose pair group already ran
//      on this worker's kind; then the oldest (submission order, then expansion order).
//   0. Before all of these (docs/coordinator.md "Retries and backoff"): a job in backoff
//      (not_before_us > now) is not leased; and a job is not given to the worker that failed
//      it last while another live worker could take it now (free slots >= its world size, and
//      rules 2 and 3 allow that worker's kind). Once no other worker can, it may come back.
//
// There is no reservation for big gangs: a steady stream of small jobs at the same priority
// can delay a job that needs every slot of a worker. Raise its priority to put it first.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace rdattn::coordinator {

enum class HardwareKind { kAny, kCpu, kGpu };  // kAny: no preference / unknown

struct PendingJob {
  std::string job_id;
  std::string pair_group;
  int priority = 0;
  int64_t create_order = 0;  // smaller = older
  int world_size = 1;        // slots it needs (gang)
  HardwareKind preferred_kind = HardwareKind::kAny;
  int64_t not_before_us = 0;       // backoff: not leased before this time (0: none)
  std::string last_failed_worker;  // the worker whose attempt failed last ("" none)
};

struct WorkerOffer {
  int free_slots = 0;
  HardwareKind kind = HardwareKind::kCpu;
  std::string worker_id;  // the asking worker (rule 0)
};

// A live worker other than the asking one, as last seen (rule 0).
struct OtherWorker {
  std::string id;
  HardwareKind kind = HardwareKind::kCpu;
  int free_slots = 0;  // an unhealthy worker reports 0
};

struct ClusterView {
  // Kinds each pair group has already run on (only groups that have run appear).
  std::map<std::string, std::set<HardwareKind>> group_kinds;
  // Live workers by kind (the asking worker included).
  std::map<HardwareKind, int> live_workers;
  // Every live worker with its free slots (the asking worker may be listed; it is skipped).
  std::vector<OtherWorker> live;
  int64_t now_us = 0;  // for not_before_us
};

// Index into `pending` of the job to lease, or nullopt when none fits.
std::optional<size_t> PickJob(const std::vector<PendingJob>& pending, const WorkerOffer& worker,
                              const ClusterView& cluster);

// The rules' building blocks (PickJob and PendingQueue::Pick share them). `group_kinds`: the
// kinds the job's pair group has run on (null or empty: it has not run).
// Rules 2 and 3: may the job go to a worker of `kind`? *affinity = 1 when its group ran on it.
bool KindAllows(const PendingJob& job, HardwareKind kind, const std::set<HardwareKind>* group_kinds,
                const ClusterView& cluster, int* affinity);
// Rule 0, second half: some live worker other than `self` could take the job now.
bool AnotherCanTake(const PendingJob& job, const std::string& self,
                    const std::set<HardwareKind>* group_kinds, const ClusterView& cluster);

// The earliest not_before_us of `pending` that is later than `now_us`; 0 when none. A waiting
// LeaseJob asks the scheduler again at that time.
int64_t NextBackoffEnd(const std::vector<PendingJob>& pending, int64_t now_us);

// --- Retry backoff (docs/coordinator.md "Retries and backoff") ----------------------------

struct BackoffPolicy {
  int64_t base_us = 2'000'000;   // after the first failed attempt
  int64_t cap_us = 300'000'000;  // never longer
};

// The wait before attempt n+1 of a job whose `failures` (>= 1) attempts failed (job or machine
// failures, not preemptions): d = min(cap, base * 2^(failures-1)), then "equal jitter": d/2 +
// u * d/2 with `u` in [0, 1) from the caller's RNG. So it is in [d/2, d], never above the cap,
// and retries of the jobs that one fault failed together spread out. Pure.
int64_t RetryBackoffMicros(int failures, const BackoffPolicy& policy, double u);

}  // namespace rdattn::coordinator
