// Placement policy (rule in scheduler.h). Pure.
#include "coordinator/scheduler.h"

#include <tuple>

namespace rdattn::coordinator {
namespace {

bool LiveWorkerOfKind(const ClusterView& cluster, HardwareKind kind) {
  auto it = cluster.live_workers.find(kind);
  return it != cluster.live_workers.end() && it->second > 0;
}

// Some live worker has one of `kinds`.
bool AnyLive(const ClusterView& cluster, const std::set<HardwareKind>& kinds) {
  for (HardwareKind k : kinds) {
    if (LiveWorkerOfKind(cluster, k)) return true;
  }
  return false;
}

}  // namespace

std::optional<size_t> PickJob(const std::vector<PendingJob>& pending, const WorkerOffer& worker,
                              const ClusterView& cluster) {
  std::optional<size_t> best;
  // Sort key of the best so far: (priority, affinity, -create_order), larger is better.
  std::tuple<int, int, int64_t> best_key{};
  for (size_t i = 0; i < pending.size(); ++i) {
    const PendingJob& job = pending[i];
    // 1. Gang admission.
    if (job.world_size <= 0 || job.world_size > worker.free_slots) continue;
    // 2. The sweep's preferred kind, while a worker of that kind is alive.
    if (job.preferred_kind != HardwareKind::kAny && job.preferred_kind != worker.kind &&
        LiveWorkerOfKind(cluster, job.preferred_kind)) {
      continue;
    }
    // 3. One kind per pair group, while a worker of the group's kind is alive.
    int affinity = 0;
    auto group = cluster.group_kinds.find(job.pair_group);
    if (group != cluster.group_kinds.end() && !group->second.empty()) {
      if (group->second.count(worker.kind) > 0) {
        affinity = 1;
      } else if (AnyLive(cluster, group->second)) {
        continue;
      }
    }
    // 4. Priority, then affinity, then age.
    std::tuple<int, int, int64_t> key{job.priority, affinity, -job.create_order};
    if (!best || key > best_key) {
      best = i;
      best_key = key;
    }
  }
  return best;
}

}  // namespace rdattn::coordinator
