// The pending jobs in memory (pending_queue.h). Pure.
#include "coordinator/pending_queue.h"

namespace rdattn::coordinator {

void PendingQueue::Index(const PendingJob& job) {
  if (job.not_before_us > 0) {
    // Until Release() sees its time pass; Pick() releases before it looks.
    backoff_.insert({job.not_before_us, job.job_id});
    return;
  }
  const Key key = KeyOf(job);
  ready_.insert(key);
  auto kinds = group_kinds_.find(job.pair_group);
  if (kinds != group_kinds_.end()) {
    for (HardwareKind k : kinds->second) ready_ran_on_[k].insert(key);
  }
}

void PendingQueue::Unindex(const PendingJob& job) {
  backoff_.erase({job.not_before_us, job.job_id});
  const Key key = KeyOf(job);
  ready_.erase(key);
  for (auto& [kind, keys] : ready_ran_on_) keys.erase(key);
}

void PendingQueue::Upsert(const PendingJob& job) {
  Remove(job.job_id);
  PendingJob& stored = jobs_[job.job_id];
  stored = job;
  group_jobs_[job.pair_group].insert(job.job_id);
  Index(stored);
}

void PendingQueue::Remove(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Unindex(it->second);
  auto group = group_jobs_.find(it->second.pair_group);
  if (group != group_jobs_.end()) {
    group->second.erase(job_id);
    if (group->second.empty()) group_jobs_.erase(group);
  }
  jobs_.erase(it);
}

void PendingQueue::Clear() {
  jobs_.clear();
  group_jobs_.clear();
  group_kinds_.clear();
  ready_.clear();
  ready_ran_on_.clear();
  backoff_.clear();
}

void PendingQueue::SetGroupKinds(const std::string& group, const std::set<HardwareKind>& kinds) {
  std::vector<PendingJob> members;
  auto ids = group_jobs_.find(group);
  if (ids != group_jobs_.end()) {
    for (const std::string& id : ids->second) members.push_back(jobs_.at(id));
  }
  for (const PendingJob& j : members) Unindex(j);
  std::set<HardwareKind> known;
  for (HardwareKind k : kinds) {
    if (k != HardwareKind::kAny) known.insert(k);
  }
  if (known.empty()) {
    group_kinds_.erase(group);
  } else {
    group_kinds_[group] = known;
  }
  for (const PendingJob& j : members) Index(j);
}

void PendingQueue::AddGroupKind(const std::string& group, HardwareKind kind) {
  if (kind == HardwareKind::kAny) return;
  auto it = group_kinds_.find(group);
  if (it != group_kinds_.end() && it->second.count(kind) > 0) return;
  std::set<HardwareKind> kinds = it == group_kinds_.end() ? std::set<HardwareKind>{} : it->second;
  kinds.insert(kind);
  SetGroupKinds(group, kinds);
}

const std::set<HardwareKind>* PendingQueue::GroupKinds(const std::string& group) const {
  auto it = group_kinds_.find(group);
  return it == group_kinds_.end() ? nullptr : &it->second;
}

void PendingQueue::Release(int64_t now_us) {
  while (!backoff_.empty() && std::get<0>(*backoff_.begin()) <= now_us) {
    const std::string id = std::get<1>(*backoff_.begin());
    backoff_.erase(backoff_.begin());
    PendingJob& job = jobs_.at(id);
    job.not_before_us = 0;  // served: indexed as ready from now on
    Index(job);
  }
}

size_t PendingQueue::ReleaseDue(int64_t now_us) {
  const size_t before = backoff_.size();
  Release(now_us);
  return before - backoff_.size();
}

int64_t PendingQueue::NextBackoffEnd(int64_t now_us) {
  Release(now_us);
  return backoff_.empty() ? 0 : std::get<0>(*backoff_.begin());
}

bool PendingQueue::Eligible(const PendingJob& job, const WorkerOffer& worker,
                            const ClusterView& cluster, int* affinity) const {
  // The rules in PickJob's order (scheduler.cc); backoff is handled by the sets.
  if (job.world_size <= 0 || job.world_size > worker.free_slots) return false;
  const std::set<HardwareKind>* kinds = GroupKinds(job.pair_group);
  if (!KindAllows(job, worker.kind, kinds, cluster, affinity)) return false;
  if (!job.last_failed_worker.empty() && job.last_failed_worker == worker.worker_id &&
      AnotherCanTake(job, worker.worker_id, kinds, cluster)) {
    return false;
  }
  return true;
}

std::optional<PendingJob> PendingQueue::Pick(const WorkerOffer& worker,
                                             const ClusterView& cluster) {
  Release(cluster.now_us);
  // A: the best job whose group ran on this worker's kind (affinity 1): the first eligible.
  const PendingJob* best = nullptr;
  auto ran = ready_ran_on_.find(worker.kind);
  if (ran != ready_ran_on_.end()) {
    for (const Key& key : ran->second) {
      const PendingJob& job = jobs_.at(std::get<2>(key));
      int affinity = 0;
      if (Eligible(job, worker, cluster, &affinity)) {
        best = &job;
        break;
      }
    }
  }
  // B: a job of strictly higher priority beats A whatever its affinity (rule 4: priority
  // first). Any eligible job at A's priority or below loses to A (affinity, then age), and at
  // a higher priority no job has affinity (it would be in A's set before A), so the first
  // eligible one is the oldest at the best priority.
  for (const Key& key : ready_) {
    const PendingJob& job = jobs_.at(std::get<2>(key));
    if (best != nullptr && job.priority <= best->priority) break;
    int affinity = 0;
    if (Eligible(job, worker, cluster, &affinity)) {
      best = &job;
      break;
    }
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

}  // namespace rdattn::coordinator
