// The pending jobs in memory, indexed for the scheduler (docs/coordinator.md "Scheduling data
// structures"). Pure: no I/O, no clock. The core keeps one, rebuilt from the store at start
// (and after a transaction that rolled back), and updates it on every job state change, so a
// lease costs O(log J) instead of reading and sorting every pending job.
//
// Pick() gives exactly PickJob()'s answer (scheduler.h's rules; a test compares the two on
// random inputs). Its indexes:
//   ready_          every pending job out of backoff, by (priority desc, creation order);
//   ready_ran_on_   the same jobs split by the kinds their pair group has run on, so the
//                   best job with affinity (rule 4) is the first eligible entry of one set;
//   backoff_        jobs in backoff by not_before_us; they move to ready_ when it has passed.
// Pick scans each set from the front and stops at the first eligible job, so its cost is
// O(log J) plus the jobs it has to skip (a gang too big for the worker, another kind's jobs).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "coordinator/scheduler.h"

namespace rdattn::coordinator {

class PendingQueue {
 public:
  // Adds the job, or replaces it (same job_id).
  void Upsert(const PendingJob& job);
  void Remove(const std::string& job_id);
  void Clear();
  // The kinds a pair group has run on (replaces what was known); AddGroupKind adds one.
  void SetGroupKinds(const std::string& group, const std::set<HardwareKind>& kinds);
  void AddGroupKind(const std::string& group, HardwareKind kind);
  // Known kinds of a group (null: none known).
  const std::set<HardwareKind>* GroupKinds(const std::string& group) const;

  // The job PickJob(every pending job, worker, cluster) would pick, with cluster.group_kinds
  // taken from this queue (SetGroupKinds/AddGroupKind); nullopt when none fits.
  std::optional<PendingJob> Pick(const WorkerOffer& worker, const ClusterView& cluster);
  // Moves the jobs whose backoff ended by now_us to the ready sets; returns how many.
  size_t ReleaseDue(int64_t now_us);
  // The earliest not_before_us later than now_us; 0 when none.
  int64_t NextBackoffEnd(int64_t now_us);

  size_t size() const { return jobs_.size(); }
  bool Contains(const std::string& job_id) const { return jobs_.count(job_id) > 0; }

 private:
  // (-priority, create_order, job_id): smaller is better.
  using Key = std::tuple<int, int64_t, std::string>;
  static Key KeyOf(const PendingJob& j) { return Key{-j.priority, j.create_order, j.job_id}; }
  void Index(const PendingJob& job);
  void Unindex(const PendingJob& job);
  // Moves jobs whose backoff ended by now_us into the ready sets.
  void Release(int64_t now_us);
  bool Eligible(const PendingJob& job, const WorkerOffer& worker, const ClusterView& cluster,
                int* affinity) const;

  std::map<std::string, PendingJob> jobs_;                     // by id
  std::map<std::string, std::set<std::string>> group_jobs_;    // group -> pending ids
  std::map<std::string, std::set<HardwareKind>> group_kinds_;  // group -> kinds run on
  std::set<Key> ready_;                                        // out of backoff
  std::map<HardwareKind, std::set<Key>> ready_ran_on_;         // by a kind run on
  std::set<std::tuple<int64_t, std::string>> backoff_;         // (not_before, id)
};

}  // namespace rdattn::coordinator
