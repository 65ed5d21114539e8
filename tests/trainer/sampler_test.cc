// Deterministic data order: the global batch at step k is a pure function of (seed, k), the
// same at every world size; every epoch visits every window once; eval windows are fixed.
#include "worker/trainer/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace rdattn::trainer {
namespace {

TEST(SamplerTest, GlobalBatchIsAPureFunctionOfSeedAndStep) {
  const Sampler a(1000, 42, 16), b(1000, 42, 16);
  // b is queried in a different order (random access, other epochs first): same answers.
  const std::vector<int64_t> b70 = b.GlobalBatch(70), b3 = b.GlobalBatch(3);
  EXPECT_EQ(a.GlobalBatch(3), b3);
  EXPECT_EQ(a.GlobalBatch(70), b70);
  EXPECT_NE(a.GlobalBatch(3), a.GlobalBatch(4));
  EXPECT_NE(Sampler(1000, 43, 16).GlobalBatch(3), b3);
}

TEST(SamplerTest, RankSlicesAreIdenticalAtWorldSizes1_2_4) {
  const Sampler s(523, 7, 8);
  for (int64_t step : {0, 1, 65, 66, 200}) {  // 523/8: step 65 straddles an epoch boundary
    const std::vector<int64_t> global = s.GlobalBatch(step);
    for (int world : {1, 2, 4}) {
      std::vector<int64_t> joined;
      for (int r = 0; r < world; ++r) {
        const auto slice = s.RankSlice(step, r, world);
        EXPECT_EQ(slice.size(), static_cast<size_t>(8 / world));
        joined.insert(joined.end(), slice.begin(), slice.end());
      }
      EXPECT_EQ(joined, global) << "step " << step << " world " << world;
    }
  }
}

TEST(SamplerTest, EachEpochVisitsEveryWindowOnce) {
  const int64_t M = 96;
  const Sampler s(M, 3, 8);  // 12 steps per epoch
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> seen;
    for (int64_t step = epoch * 12; step < (epoch + 1) * 12; ++step) {
      const auto b = s.GlobalBatch(step);
      seen.insert(seen.end(), b.begin(), b.end());
    }
    std::sort(seen.begin(), seen.end());
    for (int64_t i = 0; i < M; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], i) << "epoch " << epoch;
  }
  EXPECT_NE(s.GlobalBatch(0), s.GlobalBatch(12)) << "epochs use different permutations";
}

TEST(SamplerTest, EvalWindowsAreTheFixedFirstWindows) {
  EXPECT_EQ(EvalWindows(10, 3), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(EvalWindows(3, 0).size(), 3u);
  EXPECT_EQ(EvalWindows(3, 10).size(), 3u);
  EXPECT_TRUE(EvalWindows(0, 5).empty());
}

TEST(SamplerTest, RejectsAnEmptyIndex) { EXPECT_THROW(Sampler(0, 1, 4), std::invalid_argument); }

}  // namespace
}  // namespace rdattn::trainer

namespace rdattn::trainer {
namespace {

TEST(WindowIndexTest, WindowsAreContextPlusOneTokensInsideOneShard) {
  const std::string dir = ::testing::TempDir();
  std::vector<uint32_t> a(10), b(7);
  for (uint32_t i = 0; i < 10; ++i) a[i] = i;
  for (uint32_t i = 0; i < 7; ++i) b[i] = 100 + i;
  ASSERT_TRUE(data::WriteShard(dir + "/wi_a.bin", a).ok());
  ASSERT_TRUE(data::WriteShard(dir + "/wi_b.bin", b).ok());
  auto sa = data::Shard::Open(dir + "/wi_a.bin", 257);
  auto sb = data::Shard::Open(dir + "/wi_b.bin", 257);
  ASSERT_TRUE(sa.ok() && sb.ok());
  const WindowIndex index({&*sa, &*sb}, 3);
  ASSERT_EQ(index.size(), 3 + 2);
  int64_t w[4];
  index.Copy(2, w);
  EXPECT_EQ(std::vector<int64_t>(w, w + 4), (std::vector<int64_t>{6, 7, 8, 9}));
  index.Copy(3, w);
  EXPECT_EQ(std::vector<int64_t>(w, w + 4), (std::vector<int64_t>{100, 101, 102, 103}));
  index.Copy(4, w);
  EXPECT_EQ(std::vector<int64_t>(w, w + 4), (std::vector<int64_t>{103, 104, 105, 106}));
  EXPECT_THROW(index.Copy(5, w), std::out_of_range);
}

}  // namespace
}  // namespace rdattn::trainer
