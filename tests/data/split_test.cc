#include "worker/data/split.h"

#include <gtest/gtest.h>

#include <string>

namespace rdattn::data {
namespace {

// Expected buckets from Python: int.from_bytes(hashlib.sha256(id.encode()).digest(), "big") % 1000
TEST(SplitTest, BucketIsWholeDigestModThousand) {
  EXPECT_EQ(SplitBucket(""), 549);
  EXPECT_EQ(SplitBucket("abc"), 965);
  EXPECT_EQ(SplitBucket("1790_george_washington_n.txt"), 961);
  EXPECT_EQ(SplitBucket("doc-0"), 634);
  EXPECT_EQ(SplitBucket("doc-1"), 411);
  EXPECT_EQ(SplitBucket("<urn:uuid:0000>"), 826);
  EXPECT_EQ(SplitBucket("na\xC3\xAFve"), 184);
}

TEST(SplitTest, Boundaries) {
  // doc-385 -> 991, doc-406 -> 994 (val); doc-5 -> 998, doc-661 -> 999 (test).
  EXPECT_EQ(SplitBucket("doc-385"), 991);
  EXPECT_EQ(SplitOfDocument("doc-385"), Split::kVal);
  EXPECT_EQ(SplitBucket("doc-406"), 994);
  EXPECT_EQ(SplitOfDocument("doc-406"), Split::kVal);
  EXPECT_EQ(SplitBucket("doc-5"), 998);
  EXPECT_EQ(SplitOfDocument("doc-5"), Split::kTest);
  EXPECT_EQ(SplitBucket("doc-661"), 999);
  EXPECT_EQ(SplitOfDocument("doc-661"), Split::kTest);
  EXPECT_EQ(SplitOfDocument("doc-0"), Split::kTrain);
}

TEST(SplitTest, NamesAndDeterminism) {
  EXPECT_EQ(SplitName(Split::kTrain), "train");
  EXPECT_EQ(SplitName(Split::kVal), "val");
  EXPECT_EQ(SplitName(Split::kTest), "test");
  for (int i = 0; i < 1000; ++i) {
    const std::string id = "id/" + std::to_string(i);
    ASSERT_EQ(SplitOfDocument(id), SplitOfDocument(std::string(id)));
  }
}

TEST(SplitTest, ProportionsOver100kIds) {
  int counts[3] = {0, 0, 0};
  constexpr int kN = 100000;
  for (int i = 0; i < kN; ++i)
    ++counts[static_cast<int>(SplitOfDocument("doc-" + std::to_string(i)))];
  const double val = counts[1] / double{kN}, test = counts[2] / double{kN};
  EXPECT_NEAR(val, 0.005, 0.0015);
  EXPECT_NEAR(test, 0.005, 0.0015);
  EXPECT_NEAR(counts[0] / double{kN}, 0.99, 0.003);
  // Exact counts, from the Python one-liner above.
  EXPECT_EQ(counts[0], 99051);
  EXPECT_EQ(counts[1], 483);
  EXPECT_EQ(counts[2], 466);
}

}  // namespace
}  // namespace rdattn::data
