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
  std::optional<size_t> i = PickJob(jobs, WorkerOffer{free_slots, kind, ""}, cluster);
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

// --- Retries: backoff and not-same-worker (docs/coordinator.md "Retries and backoff") -----

TEST(SchedulerTest, JobInBackoffIsNotLeasedUntilItEnds) {
  PendingJob waiting = Job("waiting", 9, 1);
  waiting.not_before_us = 5'000'000;
  std::vector<PendingJob> jobs = {waiting, Job("other", 0, 2)};
  ClusterView cluster;
  cluster.now_us = 4'999'999;
  EXPECT_EQ(Pick(jobs, 1, K::kCpu, cluster), "other");  // higher priority, but backing off
  EXPECT_EQ(Pick({waiting}, 1, K::kCpu, cluster), "none");
  EXPECT_EQ(NextBackoffEnd(jobs, cluster.now_us), 5'000'000);
  cluster.now_us = 5'000'000;  // the backoff ends: first again
  EXPECT_EQ(Pick(jobs, 1, K::kCpu, cluster), "waiting");
  EXPECT_EQ(NextBackoffEnd(jobs, cluster.now_us), 0);
}

TEST(SchedulerTest, NotBackToTheWorkerThatFailedItWhileAnotherCanTakeIt) {
  PendingJob failed = Job("failed", 9, 1);
  failed.last_failed_worker = "wk-a";
  std::vector<PendingJob> jobs = {failed, Job("fresh", 0, 2)};
  ClusterView cluster;
  cluster.live_workers = {{K::kCpu, 2}};
  cluster.live = {{"wk-a", K::kCpu, 1}, {"wk-b", K::kCpu, 1}};
  WorkerOffer a{1, K::kCpu, "wk-a"};
  WorkerOffer b{1, K::kCpu, "wk-b"};
  // wk-a gets the other job; wk-b gets the one wk-a failed.
  EXPECT_EQ(jobs[*PickJob(jobs, a, cluster)].job_id, "fresh");
  EXPECT_EQ(jobs[*PickJob(jobs, b, cluster)].job_id, "failed");
  EXPECT_FALSE(PickJob({failed}, a, cluster).has_value());
  // wk-b is busy (no free slot) or unhealthy (it reports 0): wk-a may take it back.
  cluster.live = {{"wk-a", K::kCpu, 1}, {"wk-b", K::kCpu, 0}};
  EXPECT_EQ(jobs[*PickJob(jobs, a, cluster)].job_id, "failed");
  // wk-b has a slot but the job's gang needs two.
  PendingJob gang = failed;
  gang.world_size = 2;
  cluster.live = {{"wk-a", K::kCpu, 2}, {"wk-b", K::kCpu, 1}};
  EXPECT_TRUE(PickJob({gang}, WorkerOffer{2, K::kCpu, "wk-a"}, cluster).has_value());
  // wk-a alone: it may retry the job.
  cluster.live = {{"wk-a", K::kCpu, 1}};
  cluster.live_workers = {{K::kCpu, 1}};
  EXPECT_TRUE(PickJob({failed}, a, cluster).has_value());
}

// The other worker must be one the kind rules allow; otherwise the two rules would block the
// job on both workers.
TEST(SchedulerTest, NotSameWorkerRespectsTheKindRules) {
  PendingJob failed = Job("failed", 0, 1, 1, "g", K::kGpu);  // the sweep prefers GPUs
  failed.last_failed_worker = "gpu-1";
  ClusterView cluster;
  cluster.live_workers = {{K::kGpu, 1}, {K::kCpu, 1}};
  cluster.live = {{"gpu-1", K::kGpu, 1}, {"cpu-1", K::kCpu, 4}};
  EXPECT_FALSE(PickJob({failed}, WorkerOffer{4, K::kCpu, "cpu-1"}, cluster).has_value());
  EXPECT_TRUE(PickJob({failed}, WorkerOffer{1, K::kGpu, "gpu-1"}, cluster).has_value());
  cluster.live.push_back({"gpu-2", K::kGpu, 1});
  cluster.live_workers[K::kGpu] = 2;
  EXPECT_FALSE(PickJob({failed}, WorkerOffer{1, K::kGpu, "gpu-1"}, cluster).has_value());
  EXPECT_TRUE(PickJob({failed}, WorkerOffer{1, K::kGpu, "gpu-2"}, cluster).has_value());
}

TEST(SchedulerTest, RetryBackoffIsExponentialJitteredAndBounded) {
  BackoffPolicy p;  // base 2 s, cap 300 s
  EXPECT_EQ(p.base_us, 2'000'000);
  EXPECT_EQ(p.cap_us, 300'000'000);
  EXPECT_EQ(RetryBackoffMicros(0, p, 0.5), 0);  // no failure, no wait
  // u = 0: the lower end d/2; u -> 1: d.
  EXPECT_EQ(RetryBackoffMicros(1, p, 0.0), 1'000'000);
  EXPECT_EQ(RetryBackoffMicros(1, p, 0.5), 1'500'000);
  EXPECT_EQ(RetryBackoffMicros(2, p, 0.0), 2'000'000);
  EXPECT_EQ(RetryBackoffMicros(3, p, 0.0), 4'000'000);
  EXPECT_EQ(RetryBackoffMicros(3, p, 0.999999), 7'999'996);
  // 2 * 2^7 = 256 s; 2 * 2^8 = 512 s > cap: capped at 300 s, jitter within [150, 300] s.
  EXPECT_EQ(RetryBackoffMicros(8, p, 0.0), 128'000'000);
  EXPECT_EQ(RetryBackoffMicros(9, p, 0.0), 150'000'000);
  EXPECT_EQ(RetryBackoffMicros(9, p, 1.0), 300'000'000);
  EXPECT_EQ(RetryBackoffMicros(1000000, p, 1.0), 300'000'000);  // no overflow
  for (int n = 1; n < 40; ++n) {
    for (double u : {0.0, 0.25, 0.5, 0.75, 0.999}) {
      const int64_t d = RetryBackoffMicros(n, p, u);
      EXPECT_GE(d, 1'000'000) << n;
      EXPECT_LE(d, 300'000'000) << n;
      EXPECT_LE(RetryBackoffMicros(n, p, u), RetryBackoffMicros(n + 1, p, u)) << n;
    }
  }
  p.base_us = 0;  // no backoff configured
  EXPECT_EQ(RetryBackoffMicros(5, p, 0.7), 0);
}

}  // namespace
}  // namespace rdattn::coordinator
