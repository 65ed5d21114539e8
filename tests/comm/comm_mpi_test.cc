// Multi-rank conformance tests of the MPI backend and the data-parallel helpers, run by ctest
// under mpirun with 2 and 3 ranks (tests/comm/CMakeLists.txt). Inputs depend on the rank (rank r
// contributes r + 1, ...), and every rank checks its own results. Tests never ASSERT before a
// collective: a rank that skipped one would leave the others waiting. After the tests all ranks
// agree on a pass/fail flag, so every rank exits non-zero if any rank failed.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "worker/comm/buckets.h"
#include "worker/comm/communicator.h"
#include "worker/launch_env.h"

namespace rdattn::comm {
namespace {

Communicator* g_comm = nullptr;  // never null while tests run

int Rank() { return g_comm->rank(); }
int World() { return g_comm->world_size(); }

// Elements 1, 2, 3, ... times (rank + 1).
at::Tensor RankScaled(at::IntArrayRef sizes, at::ScalarType dtype) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return ((at::arange(n, at::TensorOptions().dtype(at::kDouble)) + 1) * (Rank() + 1))
      .to(dtype)
      .view(sizes);
}

TEST(MpiCommTest, WorldMatchesTheLauncher) {
  EXPECT_EQ(g_comm->backend(), "mpi");
  EXPECT_EQ(World(), launch::ReadLaunchEnv().world_size);
  EXPECT_GE(World(), 2);
  EXPECT_GE(Rank(), 0);
  EXPECT_LT(Rank(), World());
  EXPECT_TRUE(g_comm->Barrier().ok());
}

TEST(MpiCommTest, AllReduceSumIsExact) {
  const double ranks_sum = World() * (World() + 1) / 2.0;  // sum of (r + 1)
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kLong, at::kInt, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    at::Tensor t = RankScaled({5, 7}, dtype);
    const Status s = g_comm->AllReduceSum(t);
    EXPECT_TRUE(s.ok()) << s.ToString();
    // At most 35 * 6 = 210: exact in every dtype here, bfloat16 included (integers to 256).
    at::Tensor expected = ((at::arange(35, at::kDouble) + 1) * ranks_sum).to(dtype).view({5, 7});
    EXPECT_TRUE(at::equal(t, expected));
    EXPECT_EQ(t.scalar_type(), dtype);
  }
  at::Tensor empty = at::zeros({0}, at::kFloat);
  EXPECT_TRUE(g_comm->AllReduceSum(empty).ok());
}

TEST(MpiCommTest, AllReduceSumHostSumsEveryRanksDoubles) {
  double v[3] = {1.0 + g_comm->rank(), 0.5, -2.0 * g_comm->rank()};
  ASSERT_TRUE(g_comm->AllReduceSumHost(v, 3).ok());
  const double w = World();
  EXPECT_EQ(v[0], w * (w + 1) / 2);
  EXPECT_EQ(v[1], 0.5 * w);
  EXPECT_EQ(v[2], -w * (w - 1));
  EXPECT_TRUE(g_comm->AllReduceSumHost(v, 0).ok());
  EXPECT_EQ(g_comm->AllReduceSumHost(v, -1).code(), StatusCode::kInvalidArgument);
}

// A rank that arrives early at a collective waits asleep (WaitForPeers), not spinning: its CPU
// time over a 400 ms wait for the last rank stays well under the wait. A resource check, not a
// speed one: a loaded machine only lowers the CPU time a spinning rank gets.
TEST(MpiCommTest, EarlyRanksWaitWithoutSpinning) {
  if (const char* v = std::getenv("RDATTN_MPI_WAIT"); v != nullptr && std::string(v) == "spin")
    GTEST_SKIP() << "RDATTN_MPI_WAIT=spin";
  auto cpu_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  at::Tensor t = at::ones({1000}, at::kFloat);
  const bool late = g_comm->rank() == World() - 1;
  if (late) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const double cpu0 = cpu_seconds();
  const auto wall0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(g_comm->AllReduceSum(t).ok());
  const double cpu = cpu_seconds() - cpu0;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  EXPECT_TRUE(at::equal(t, at::full({1000}, static_cast<float>(World()))));
  if (!late && wall > 0.2) {
    EXPECT_LT(cpu, 0.25 * wall) << "cpu " << cpu << " s, wall " << wall;
  }
}

TEST(MpiCommTest, ArgumentErrorsAreLocalAndIdenticalOnEveryRank) {
  at::Tensor t = at::zeros({3, 4});
  at::Tensor nc = t.t();
  EXPECT_EQ(g_comm->AllReduceSum(nc).code(), StatusCode::kInvalidArgument);
  at::Tensor b = at::zeros({3}, at::kBool);
  EXPECT_EQ(g_comm->AllReduceSum(b).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g_comm->Broadcast(t, World()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g_comm->Broadcast(t, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(g_comm->Barrier().ok());  // and the group is still in step
}

TEST(MpiCommTest, BroadcastFromRootZeroAndRootOne) {
  for (int root : {0, 1}) {
    for (at::ScalarType dtype : {at::kFloat, at::kLong, at::kByte, at::kBFloat16}) {
      SCOPED_TRACE("root " + std::to_string(root) + " " + c10::toString(dtype));
      // rank r holds 10 r + i.
      at::Tensor t = (at::arange(6, at::kLong) + 10 * Rank()).to(dtype).view({2, 3});
      const Status s = g_comm->Broadcast(t, root);
      EXPECT_TRUE(s.ok()) << s.ToString();
      EXPECT_TRUE(at::equal(t, (at::arange(6, at::kLong) + 10 * root).to(dtype).view({2, 3})));
    }
  }
}

// Gradients whose mean over ranks is exact: rank r holds base + r, the mean is base + (W-1)/2.
std::vector<at::Tensor> RankGrads() {
  std::vector<at::Tensor> g;
  g.push_back(at::arange(64, at::kFloat).view({8, 8}) + Rank());           // 256 B
  g.push_back(at::arange(10, at::kDouble) * 3 + Rank());                   // 80 B
  g.push_back((at::arange(12, at::kFloat).view({3, 4}) + Rank()).t());     // non-contiguous
  g.push_back(at::full({}, 5.0, at::kDouble) + Rank());                    // scalar
  g.push_back(at::arange(1000, at::kFloat) - 500 + Rank());                // 4000 B
  g.push_back(at::arange(6, at::kDouble).view({1, 2, 3}) + 100 + Rank());  // 48 B
  return g;
}

TEST(MpiCommTest, MeanGradientsWithBucketsSmallerAndLargerThanTensors) {
  const double shift = (World() - 1) / 2.0;  // 0.5 or 1: exact
  for (int64_t bucket_bytes : {int64_t{8}, int64_t{100}, int64_t{300}, kDefaultBucketBytes}) {
    SCOPED_TRACE("bucket_bytes=" + std::to_string(bucket_bytes));
    std::vector<at::Tensor> g = RankGrads();
    std::vector<at::Tensor> expected;
    for (const at::Tensor& t : g) expected.push_back(t - Rank() + shift);
    const Status s = AllReduceMeanGradients(*g_comm, g, bucket_bytes);
    EXPECT_TRUE(s.ok()) << s.ToString();
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_TRUE(at::equal(g[i], expected[i])) << "gradient " << i << " on rank " << Rank();
    }
  }
}

std::vector<at::Tensor> RankParams(int rank) {
  std::vector<at::Tensor> p;
  p.push_back((at::randn({16, 8}, at::kFloat) + rank).requires_grad_(true));
  p.push_back((at::arange(7, at::kDouble) * (rank + 1)).requires_grad_(true));
  p.push_back((at::arange(12, at::kFloat).view({4, 3}) * (rank + 2)).t());  // non-contiguous
  p.push_back(at::full({3}, rank, at::kLong));
  return p;
}

TEST(MpiCommTest, BroadcastAndVerifyMakesEveryRankEqualToRankZero) {
  at::manual_seed(1234 + Rank());  // different random values per rank
  std::vector<at::Tensor> p = RankParams(Rank());
  at::manual_seed(1234);  // what rank 0 drew
  std::vector<at::Tensor> rank0 = RankParams(0);
  const Status s = BroadcastAndVerify(*g_comm, p);
  EXPECT_TRUE(s.ok()) << s.ToString();
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_TRUE(at::equal(p[i], rank0[i])) << "tensor " << i << " on rank " << Rank();
  }
  EXPECT_TRUE(p[0].requires_grad());
  EXPECT_EQ(TensorsChecksum(p), TensorsChecksum(rank0));
  const Status again = VerifyEqual(*g_comm, p);
  EXPECT_TRUE(again.ok()) << again.ToString();
}

TEST(MpiCommTest, BroadcastTensorsFromRootOneInTinyBuckets) {
  std::vector<at::Tensor> p = RankParams(Rank());
  const Status s = BroadcastTensors(*g_comm, p, /*root=*/1, /*bucket_bytes=*/16);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<at::Tensor> rank1 = RankParams(1);
  for (size_t i = 1; i < p.size(); ++i) {  // [0] is random
    EXPECT_TRUE(at::equal(p[i], rank1[i])) << "tensor " << i << " on rank " << Rank();
  }
}

// The test hook for "a rank's parameters differ": skip the broadcast, corrupt the last rank.
TEST(MpiCommTest, VerifyEqualFailsOnEveryRankWhenOneRankDiffers) {
  std::vector<at::Tensor> p = RankParams(0);  // deterministic parts only, below
  p.erase(p.begin());
  EXPECT_TRUE(VerifyEqual(*g_comm, p).ok());
  const int bad = World() - 1;
  if (Rank() == bad) p[0].detach().view(-1)[3] = 1e-12;
  const Status s = VerifyEqual(*g_comm, p);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  const std::string want =
      "parameters differ across ranks: rank " + std::to_string(bad) + " checksum 0x";
  EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(" vs rank 0 0x"), std::string::npos) << s.message();
  // Every rank returned the same message: check it with the function under test.
  const std::string& m = s.message();
  at::Tensor bytes =
      at::from_blob(const_cast<char*>(m.data()), {static_cast<int64_t>(m.size())}, at::kByte)
          .clone();
  at::Tensor length = at::full({1}, static_cast<int64_t>(m.size()), at::kLong);
  EXPECT_TRUE(VerifyEqual(*g_comm, {length}).ok());
  EXPECT_TRUE(VerifyEqual(*g_comm, {bytes}).ok()) << "rank " << Rank() << ": " << m;
}

TEST(MpiCommTest, LayoutMismatchFailsOnEveryRankBeforeBroadcasting) {
  std::vector<at::Tensor> p = {at::zeros({4}), at::zeros({2, 2}, at::kDouble)};
  if (Rank() == 1) p[1] = at::zeros({5}, at::kDouble);
  const Status s = BroadcastAndVerify(*g_comm, p);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("rank 1 layout"), std::string::npos) << s.message();
  EXPECT_TRUE(at::equal(p[0], at::zeros({4})));  // nothing was broadcast
}

TEST(MpiCommTest, FactoryPicksMpiUnderMpirun) {
  StatusOr<std::unique_ptr<Communicator>> c = MakeCommunicator(Backend::kAuto, Device::kCpu);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (c.ok()) {
    EXPECT_EQ((*c)->backend(), "mpi");
    EXPECT_EQ((*c)->world_size(), World());
    EXPECT_EQ((*c)->rank(), Rank());
    at::Tensor one = at::ones({1}, at::kLong);
    EXPECT_TRUE((*c)->AllReduceSum(one).ok());
    EXPECT_EQ(one.item<int64_t>(), World());
  }
  StatusOr<std::unique_ptr<Communicator>> local = MakeCommunicator(Backend::kLocal, Device::kCpu);
  EXPECT_FALSE(local.ok());
  EXPECT_NE(local.status().message().find("parallel.backend"), std::string::npos);
}

// Without a GPU, every rank gets an error (they agree before touching NCCL: no hang).
TEST(MpiCommTest, NcclWithoutGpuFailsOnEveryRank) {
  StatusOr<std::unique_ptr<Communicator>> c = MakeNcclCommunicator();
  if (c.ok()) GTEST_SKIP() << "CUDA devices present";
  EXPECT_FALSE(c.status().message().empty());
  EXPECT_TRUE(g_comm->Barrier().ok());
}

// Prints failures of ranks other than 0 with the rank in front (rank 0 prints as usual).
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s:%d\n%s\n", rank_,
                   r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
    }
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace rdattn::comm

int main(int argc, char** argv) {
  using namespace rdattn::comm;  // NOLINT
  testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(1);
  rdattn::StatusOr<std::unique_ptr<Communicator>> comm = MakeMpiCommunicator();
  if (!comm.ok()) {
    std::fprintf(stderr, "MakeMpiCommunicator: %s\n", comm.status().ToString().c_str());
    return 2;
  }
  std::unique_ptr<Communicator> owned = std::move(comm).value();
  g_comm = owned.get();
  const int rank = g_comm->rank();
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int rc = RUN_ALL_TESTS();
  at::Tensor failed = at::full({1}, rc != 0 ? 1 : 0, at::kLong);
  const rdattn::Status s = g_comm->AllReduceSum(failed);
  const int64_t failed_ranks = s.ok() ? failed.item<int64_t>() : -1;
  if (rank == 0) {
    std::printf("[comm_mpi_test] world %d: %lld rank(s) failed\n", g_comm->world_size(),
                static_cast<long long>(failed_ranks));
  }
  g_comm = nullptr;
  owned.reset();
  return failed_ranks == 0 ? 0 : 1;
}
