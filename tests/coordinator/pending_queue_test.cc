// The in-memory pending queue gives exactly PickJob's answer (scheduler.h's rules) on random
// clusters, while jobs come and go, groups gain kinds and backoffs end.
#include "coordinator/pending_queue.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace rdattn::coordinator {
namespace {

using K = HardwareKind;

TEST(PendingQueueTest, EmptyPicksNothing) {
  PendingQueue q;
  EXPECT_FALSE(q.Pick(WorkerOffer{4, K::kCpu, "w"}, ClusterView{}).has_value());
  EXPECT_EQ(q.NextBackoffEnd(0), 0);
}

TEST(PendingQueueTest, BackoffHoldsAJobUntilItsTime) {
  PendingQueue q;
  PendingJob j;
  j.job_id = "a";
  j.pair_group = "g";
  j.not_before_us = 100;
  q.Upsert(j);
  ClusterView c;
  c.now_us = 99;
  EXPECT_FALSE(q.Pick(WorkerOffer{1, K::kCpu, "w"}, c).has_value());
  EXPECT_EQ(q.NextBackoffEnd(99), 100);
  c.now_us = 100;
  ASSERT_TRUE(q.Pick(WorkerOffer{1, K::kCpu, "w"}, c).has_value());
  EXPECT_EQ(q.NextBackoffEnd(100), 0);
  q.Remove("a");
  EXPECT_EQ(q.size(), 0U);
  EXPECT_FALSE(q.Pick(WorkerOffer{1, K::kCpu, "w"}, c).has_value());
}

// Random jobs, group histories, live workers and offers; after every change the queue and
// PickJob over the same jobs must name the same job.
TEST(PendingQueueTest, SameAnswerAsPickJobOnRandomClusters) {
  std::mt19937_64 rng(12345);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const K kinds[] = {K::kAny, K::kCpu, K::kGpu};
  int compared = 0, picked = 0;
  for (int round = 0; round < 300; ++round) {
    PendingQueue q;
    std::vector<PendingJob> pending;
    std::map<std::string, std::set<K>> group_kinds;
    int64_t next_order = 1;
    int64_t now = 1000;
    auto add_job = [&] {
      PendingJob j;
      j.job_id = "j" + std::to_string(next_order);
      j.pair_group = "g" + std::to_string(uni(0, 5));
      j.priority = uni(-1, 2);
      j.create_order = next_order++;
      j.world_size = uni(0, 4);
      j.preferred_kind = kinds[uni(0, 2)];
      j.not_before_us = uni(0, 2) == 0 ? now + uni(-50, 50) : 0;
      j.last_failed_worker = uni(0, 2) == 0 ? "w" + std::to_string(uni(0, 3)) : "";
      pending.push_back(j);
      q.Upsert(j);
    };
    for (int i = uni(0, 25); i > 0; --i) add_job();
    for (int step = 0; step < 30; ++step) {
      switch (uni(0, 4)) {
        case 0:
          add_job();
          break;
        case 1:
          if (!pending.empty()) {
            const size_t i = static_cast<size_t>(uni(0, static_cast<int>(pending.size()) - 1));
            q.Remove(pending[i].job_id);
            pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
          }
          break;
        case 2: {
          const std::string g = "g" + std::to_string(uni(0, 5));
          const K k = uni(0, 1) == 0 ? K::kCpu : K::kGpu;
          group_kinds[g].insert(k);
          q.AddGroupKind(g, k);
          break;
        }
        case 3:
          now += uni(0, 40);
          break;
        default:
          break;
      }
      ClusterView cluster;
      cluster.now_us = now;
      cluster.group_kinds = group_kinds;
      for (int w = 0; w < 4; ++w) {
        if (uni(0, 3) == 0) continue;  // not live
        const K k = uni(0, 1) == 0 ? K::kCpu : K::kGpu;
        cluster.live_workers[k] += 1;
        cluster.live.push_back(OtherWorker{"w" + std::to_string(w), k, uni(0, 4)});
      }
      const WorkerOffer offer{uni(0, 4), uni(0, 1) == 0 ? K::kCpu : K::kGpu,
                              "w" + std::to_string(uni(0, 3))};
      std::optional<size_t> want = PickJob(pending, offer, cluster);
      std::optional<PendingJob> got = q.Pick(offer, cluster);
      ASSERT_EQ(want.has_value(), got.has_value()) << "round " << round << " step " << step;
      if (want) {
        ASSERT_EQ(pending[*want].job_id, got->job_id) << "round " << round << " step " << step;
        ++picked;
      }
      ++compared;
      // The backoff ends agree too (PickJob's helper reads the same jobs).
      ASSERT_EQ(NextBackoffEnd(pending, now), q.NextBackoffEnd(now));
      ASSERT_EQ(q.size(), pending.size());
    }
  }
  EXPECT_EQ(compared, 300 * 30);
  EXPECT_GT(picked, compared / 4) << "the random clusters must exercise real picks";
}

}  // namespace
}  // namespace rdattn::coordinator
