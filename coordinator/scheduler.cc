// Placement policy (rule in scheduler.h). Pure.
#include "coordinator/scheduler.h"

#include <algorithm>
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

bool KindAllows(const PendingJob& job, HardwareKind kind, const std::set<HardwareKind>* group_kinds,
                const ClusterView& cluster, int* affinity) {
  if (job.preferred_kind != HardwareKind::kAny && job.preferred_kind != kind &&
      LiveWorkerOfKind(cluster, job.preferred_kind)) {
    return false;
  }
  *affinity = 0;
  if (group_kinds != nullptr && !group_kinds->empty()) {
    if (group_kinds->count(kind) > 0) {
      *affinity = 1;
    } else if (AnyLive(cluster, *group_kinds)) {
      return false;
    }
  }
  return true;
}

bool AnotherCanTake(const PendingJob& job, const std::string& self,
                    const std::set<HardwareKind>* group_kinds, const ClusterView& cluster) {
  for (const OtherWorker& w : cluster.live) {
    if (w.id == self || w.free_slots < job.world_size) continue;
    int unused = 0;
    if (KindAllows(job, w.kind, group_kinds, cluster, &unused)) return true;
  }
  return false;
}

namespace {

const std::set<HardwareKind>* GroupKinds(const PendingJob& job, const ClusterView& cluster) {
  auto group = cluster.group_kinds.find(job.pair_group);
  return group == cluster.group_kinds.end() ? nullptr : &group->second;
}

}  // namespace

int64_t NextBackoffEnd(const std::vector<PendingJob>& pending, int64_t now_us) {
  int64_t next = 0;
  for (const PendingJob& job : pending) {
    if (job.not_before_us > now_us && (next == 0 || job.not_before_us < next))
      next = job.not_before_us;
  }
  return next;
}

int64_t RetryBackoffMicros(int failures, const BackoffPolicy& policy, double u) {
  if (failures <= 0 || policy.base_us <= 0) return 0;
  const int64_t cap = std::max(policy.cap_us, int64_t{0});
  int64_t d = policy.base_us;
  for (int i = 1; i < failures && d < cap; ++i) d = d > cap / 2 ? cap : d * 2;
  d = std::min(d, cap);
  u = std::clamp(u, 0.0, 1.0);
  const int64_t half = d / 2;
  return std::min(d, half + static_cast<int64_t>(u * static_cast<double>(d - half)));
}

std::optional<size_t> PickJob(const std::vector<PendingJob>& pending, const WorkerOffer& worker,
                              const ClusterView& cluster) {
  std::optional<size_t> best;
  // Sort key of the best so far: (priority, affinity, -create_order), larger is better.
  std::tuple<int, int, int64_t> best_key{};
  for (size_t i = 0; i < pending.size(); ++i) {
    const PendingJob& job = pending[i];
    // 1. Gang admission.
    if (job.world_size <= 0 || job.world_size > worker.free_slots) continue;
    // 0. Backoff after a failed attempt.
    if (job.not_before_us > cluster.now_us) continue;
    // 2. The sweep's preferred kind, while a worker of that kind is alive.
    // 3. One kind per pair group, while a worker of the group's kind is alive.
    int affinity = 0;
    const std::set<HardwareKind>* kinds = GroupKinds(job, cluster);
    if (!KindAllows(job, worker.kind, kinds, cluster, &affinity)) continue;
    // 0. Not back to the worker that just failed it while another one can take it.
    if (!job.last_failed_worker.empty() && job.last_failed_worker == worker.worker_id &&
        AnotherCanTake(job, worker.worker_id, kinds, cluster)) {
      continue;
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
