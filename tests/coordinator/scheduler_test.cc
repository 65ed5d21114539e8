// Placement policy: priority, age, gang admission, hardware kind preferences.
#include "coordinator/scheduler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rdattn::coordinator {
namespace {

using K = HardwareKind;

PendingJob Job(const std::string& id, int priority, int64_t order, int world_size = 1,
               const std::string& group = "", K pref = K::kAny) {
  PendingJob j;
  j.job_id = id;
  j.pair_group = group.empty() ? id : group;
  j.priority = priority;
  j.create_order = order;
  j.world_size = world_size;
  j.preferred_kind = pref;
  return j;
}

std::string Pick(const std::vector<PendingJob>& jobs, int free_slots, K kind,
                 const ClusterView& cluster = {}) {
  std::optional<size_t> i = PickJob(jobs, WorkerOffer{free_slots, kind}, cluster);
  return i ? jobs[*i].job_id : "none";
}

TEST(SchedulerTest, NothingPending) { EXPECT_EQ(Pick({}, 8, K::kCpu), "none"); }

TEST(SchedulerTest, HighestPriorityFirstThenOldest) {
  std::vector<PendingJob> jobs = {Job("old-low", 0, 1), Job("new-high", 5, 3),
                                  Job("old-high", 5, 2)};
  EXPECT_EQ(Pick(jobs, 1, K::kCpu), "old-high");
  jobs = {Job("b", 0, 2), Job("a", 0, 1), Job("c", 0, 3)};
  EXPECT_EQ(Pick(jobs, 1, K::kCpu), "a");
  jobs = {Job("neg", -1, 1), Job("zero", 0, 9)};
  EXPECT_EQ(Pick(jobs, 1, K::kCpu), "zero");
}

TEST(SchedulerTest, GangNeedsAllSlotsAtOnce) {
  std::vector<PendingJob> jobs = {Job("big", 9, 1, /*world_size=*/4), Job("small", 0, 2, 2)};
  EXPECT_EQ(Pick(jobs, 4, K::kGpu), "big");
  EXPECT_EQ(Pick(jobs, 3, K::kGpu), "small");  // big does not fit: no partial gangs
  EXPECT_EQ(Pick(jobs, 1, K::kGpu), "none");
  EXPECT_EQ(Pick(jobs, 0, K::kGpu), "none");
  EXPECT_EQ(Pick({Job("bad", 0, 1, 0)}, 8, K::kCpu), "none");  // world size 0 is never placed
}

TEST(SchedulerTest, SweepPreferredKindWhileSuchWorkersLive) {
  std::vector<PendingJob> jobs = {Job("gpu-job", 5, 1, 1, "", K::kGpu), Job("any-job", 0, 2)};
  ClusterView cluster;
  cluster.live_workers = {{K::kCpu, 1}, {K::kGpu, 2}};
  EXPECT_EQ(Pick(jobs, 1, K::kCpu, cluster), "any-job");
  EXPECT_EQ(Pick(jobs, 1, K::kGpu, cluster), "gpu-job");
  // No live GPU worker: the preference yields.
  cluster.live_workers = {{K::kCpu, 1}, {K::kGpu, 0}};
  EXPECT_EQ(Pick(jobs, 1, K::kCpu, cluster), "gpu-job");
}

TEST(SchedulerTest, PairGroupStaysOnItsKind) {
  // Group g1 already ran on GPU; g2 has not run.
  std::vector<PendingJob> jobs = {Job("g1-rd", 0, 1, 1, "g1"), Job("g2-block", 0, 2, 1, "g2")};
  ClusterView cluster;
  cluster.group_kinds = {{"g1", {K::kGpu}}};
  cluster.live_workers = {{K::kCpu, 1}, {K::kGpu, 1}};
  EXPECT_EQ(Pick(jobs, 1, K::kCpu, cluster), "g2-block");  // g1 waits for a GPU worker
  EXPECT_EQ(Pick(jobs, 1, K::kGpu, cluster), "g1-rd");
  // Only g1 pending and a GPU worker alive: the CPU worker gets nothing.
  EXPECT_EQ(Pick({jobs[0]}, 1, K::kCpu, cluster), "none");
  // Every GPU worker gone: the group moves rather than starve.
  cluster.live_workers = {{K::kCpu, 1}};
  EXPECT_EQ(Pick({jobs[0]}, 1, K::kCpu, cluster), "g1-rd");
}

TEST(SchedulerTest, AffinityBreaksTiesBeforeAgeButNotPriority) {
  ClusterView cluster;
  cluster.group_kinds = {{"warm", {K::kCpu}}};
  cluster.live_workers = {{K::kCpu, 2}};
  std::vector<PendingJob> jobs = {Job("cold-old", 0, 1, 1, "cold"),
                                  Job("warm-new", 0, 5, 1, "warm")};
  EXPECT_EQ(Pick(jobs, 1, K::kCpu, cluster), "warm-new");
  jobs.push_back(Job("cold-urgent", 1, 9, 1, "cold2"));
  EXPECT_EQ(Pick(jobs, 1, K::kCpu, cluster), "cold-urgent");
}

TEST(SchedulerTest, GroupOnBothKindsAcceptsEither) {
  ClusterView cluster;
  cluster.group_kinds = {{"g", {K::kCpu, K::kGpu}}};
  cluster.live_workers = {{K::kCpu, 1}, {K::kGpu, 1}};
  std::vector<PendingJob> jobs = {Job("g-x", 0, 1, 1, "g")};
  EXPECT_EQ(Pick(jobs, 1, K::kCpu, cluster), "g-x");
  EXPECT_EQ(Pick(jobs, 1, K::kGpu, cluster), "g-x");
}

}  // namespace
}  // namespace rdattn::coordinator
