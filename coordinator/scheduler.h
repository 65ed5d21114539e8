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
};

struct WorkerOffer {
  int free_slots = 0;
  HardwareKind kind = HardwareKind::kCpu;
};

struct ClusterView {
  // Kinds each pair group has already run on (only groups that have run appear).
  std::map<std::string, std::set<HardwareKind>> group_kinds;
  // Live workers by kind (the asking worker included).
  std::map<HardwareKind, int> live_workers;
};

// Index into `pending` of the job to lease, or nullopt when none fits.
std::optional<size_t> PickJob(const std::vector<PendingJob>& pending, const WorkerOffer& worker,
                              const ClusterView& cluster);

}  // namespace rdattn::coordinator
