// Single-process tests of worker/comm: the local communicator, the bucket plan and the packing
// round trip (through a fake communicator that pretends to be one rank of four), checksums, the
// backend factory, and the NCCL backend's clean failure on a machine without a GPU.
// Multi-rank behaviour is in comm_mpi_test.cc.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "worker/comm/buckets.h"
#include "worker/comm/communicator.h"

namespace rdattn::comm {
namespace {

// One rank of a world of four whose other ranks hold the same values plus 0, 1, 2, 3 in total:
// the sum of x is 4x + 6, so the mean is x + 1.5 (exact in float and double for small x).
// Records every bucket it sees.
class FakeFourRanks final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 4; }
  std::string backend() const override { return "fake"; }
  Status AllReduceSum(at::Tensor& t) override {
    if (!t.is_contiguous()) return InvalidArgumentError("not contiguous");
    calls.push_back({t.scalar_type(), t.numel() * static_cast<int64_t>(t.element_size())});
    t.mul_(4).add_(6);
    return Status::Ok();
  }
  Status Broadcast(at::Tensor& t, int root) override {
    if (root != 0 && root != 1) return InvalidArgumentError("root");
    calls.push_back({t.scalar_type(), t.numel() * static_cast<int64_t>(t.element_size())});
    if (root == 1) t.fill_(7);  // "rank 1's" values
    return Status::Ok();
  }
  Status Barrier() override { return Status::Ok(); }

  struct Call {
    at::ScalarType dtype;
    int64_t bytes;
  };
  std::vector<Call> calls;
};

// Distinct values per tensor and element: tensor k holds 1000 k + (0, 1, 2, ...).
at::Tensor Distinct(int k, at::IntArrayRef sizes, at::ScalarType dtype) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return (at::arange(n, at::TensorOptions().dtype(dtype)) + 1000.0 * k).view(sizes);
}

std::vector<at::Tensor> MixedGrads() {
  std::vector<at::Tensor> g;
  g.push_back(Distinct(0, {7, 5}, at::kFloat));      // 140 B
  g.push_back(Distinct(1, {13}, at::kDouble));       // 104 B
  g.push_back(Distinct(2, {4, 3}, at::kFloat).t());  // non-contiguous [3, 4], 48 B
  g.push_back(Distinct(3, {}, at::kFloat));          // scalar, 4 B
  g.push_back(Distinct(4, {0, 3}, at::kDouble));     // empty
  g.push_back(Distinct(5, {2, 2, 2}, at::kDouble));  // 64 B
  g.push_back(Distinct(6, {100}, at::kFloat));       // 400 B
  g.push_back(Distinct(7, {3}, at::kDouble));        // 24 B
  return g;
}

std::vector<at::Tensor> Clone(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : ts) out.push_back(t.clone());
  return out;
}

TEST(LocalCommunicatorTest, IsWorldOfOneAndLeavesDataAlone) {
  std::unique_ptr<Communicator> c = MakeLocalCommunicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->world_size(), 1);
  EXPECT_EQ(c->backend(), "local");
  EXPECT_EQ(c->device(), at::Device(at::kCPU));
  at::Tensor t = at::arange(10, at::kFloat);
  const at::Tensor before = t.clone();
  EXPECT_TRUE(c->AllReduceSum(t).ok());
  EXPECT_TRUE(c->Broadcast(t, 0).ok());
  EXPECT_TRUE(c->Barrier().ok());
  EXPECT_TRUE(at::equal(t, before));
}

TEST(LocalCommunicatorTest, RejectsBadArguments) {
  std::unique_ptr<Communicator> c = MakeLocalCommunicator();
  at::Tensor t = at::zeros({2, 3});
  EXPECT_EQ(c->Broadcast(t, 1).code(), StatusCode::kInvalidArgument);
  at::Tensor nc = t.t();
  EXPECT_EQ(c->AllReduceSum(nc).code(), StatusCode::kInvalidArgument);
  at::Tensor undefined;
  EXPECT_EQ(c->AllReduceSum(undefined).code(), StatusCode::kInvalidArgument);
}

TEST(LocalCommunicatorTest, HelpersAreNoOpsAtWorldOne) {
  std::unique_ptr<Communicator> c = MakeLocalCommunicator();
  std::vector<at::Tensor> g = MixedGrads();
  const std::vector<at::Tensor> before = Clone(g);
  EXPECT_TRUE(AllReduceMeanGradients(*c, g, 16).ok());
  EXPECT_TRUE(BroadcastAndVerify(*c, g).ok());
  EXPECT_TRUE(VerifyEqual(*c, g).ok());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(at::equal(g[i], before[i])) << i;
  // Validation still applies at world size 1, so mistakes show up in single-process runs.
  std::vector<at::Tensor> with_undefined = {at::zeros({2}), at::Tensor()};
  EXPECT_EQ(AllReduceMeanGradients(*c, with_undefined).code(), StatusCode::kFailedPrecondition);
}

TEST(PlanBucketsTest, GroupsByDtypeInOrderWithinTheByteLimit) {
  const std::vector<at::Tensor> g = MixedGrads();
  // Sizes: float 140, double 104, float 48 (non-contiguous), float 4, empty, double 64,
  // float 400, double 24 bytes.
  const std::vector<std::vector<size_t>> plan = PlanBuckets(g, 200);
  // Every non-empty tensor appears exactly once; the empty one (index 4) never.
  std::vector<int> seen(g.size(), 0);
  for (const auto& b : plan) {
    ASSERT_FALSE(b.empty());
    int64_t bytes = 0;
    for (size_t i : b) {
      ++seen[i];
      EXPECT_EQ(g[i].scalar_type(), g[b.front()].scalar_type());
      bytes += g[i].numel() * static_cast<int64_t>(g[i].element_size());
    }
    EXPECT_TRUE(bytes <= 200 || b.size() == 1) << "bucket of " << bytes << " bytes";
    for (size_t k = 1; k < b.size(); ++k) EXPECT_LT(b[k - 1], b[k]);  // given order kept
  }
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(seen[i], i == 4 ? 0 : 1) << i;
  // The exact plan: float 140 + 48 + 4 = 192 fits, + 400 does not, so {0, 2, 3} and {6} (over
  // the limit, alone); double 104 + 64 + 24 = 192 fits: {1, 5, 7}. Listed by first tensor.
  const std::vector<std::vector<size_t>> expected = {{0, 2, 3}, {1, 5, 7}, {6}};
  EXPECT_EQ(plan, expected);
  // Huge buckets: one per dtype, in order of first tensor.
  EXPECT_EQ(PlanBuckets(g, kDefaultBucketBytes),
            (std::vector<std::vector<size_t>>{{0, 2, 3, 6}, {1, 5, 7}}));
  // One byte: every tensor alone, in order.
  EXPECT_EQ(PlanBuckets(g, 1),
            (std::vector<std::vector<size_t>>{{0}, {1}, {2}, {3}, {5}, {6}, {7}}));
}

TEST(BucketsTest, MeanGradientsRoundTripsThroughAnyBucketSize) {
  for (int64_t bucket_bytes :
       {int64_t{1}, int64_t{16}, int64_t{64}, int64_t{200}, int64_t{1000}, kDefaultBucketBytes}) {
    SCOPED_TRACE("bucket_bytes=" + std::to_string(bucket_bytes));
    FakeFourRanks fake;
    std::vector<at::Tensor> g = MixedGrads();
    const std::vector<at::Tensor> before = Clone(g);
    ASSERT_TRUE(AllReduceMeanGradients(fake, g, bucket_bytes).ok());
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_TRUE(at::equal(g[i], before[i] + 1.5)) << "tensor " << i;
      EXPECT_EQ(g[i].sizes(), before[i].sizes());
      EXPECT_EQ(g[i].scalar_type(), before[i].scalar_type());
    }
    EXPECT_FALSE(g[2].is_contiguous());  // written through, not replaced
    // One all-reduce per bucket of the plan, in plan order, of the bucket's dtype and size.
    const std::vector<std::vector<size_t>> plan = PlanBuckets(g, bucket_bytes);
    ASSERT_EQ(fake.calls.size(), plan.size());
    for (size_t b = 0; b < plan.size(); ++b) {
      int64_t bytes = 0;
      for (size_t i : plan[b]) bytes += g[i].numel() * static_cast<int64_t>(g[i].element_size());
      EXPECT_EQ(fake.calls[b].bytes, bytes) << "bucket " << b;
      EXPECT_EQ(fake.calls[b].dtype, g[plan[b].front()].scalar_type()) << "bucket " << b;
      EXPECT_TRUE(bytes <= bucket_bytes || plan[b].size() == 1) << "bucket " << b;
    }
  }
}

TEST(BucketsTest, TinyBucketsMakeManyBucketsOfManyTensors) {
  // 60 small tensors alternating float/double: 24-byte buckets hold two float [3] (12 B each)
  // but one double [3] (24 B).
  std::vector<at::Tensor> g;
  for (int k = 0; k < 60; ++k) g.push_back(Distinct(k, {3}, k % 2 ? at::kDouble : at::kFloat));
  const std::vector<at::Tensor> before = Clone(g);
  FakeFourRanks fake;
  ASSERT_TRUE(AllReduceMeanGradients(fake, g, 24).ok());
  EXPECT_EQ(fake.calls.size(), 45u);  // 15 float buckets of 2, 30 double buckets of 1
  for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(at::equal(g[i], before[i] + 1.5)) << i;
}

TEST(BucketsTest, PackedBucketsReuseOneBufferPerDtype) {
  ReleaseBucketBuffers();
  EXPECT_EQ(BucketBufferBytes(), 0);
  FakeFourRanks fake;
  std::vector<at::Tensor> g = MixedGrads();
  const std::vector<at::Tensor> before = Clone(g);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(AllReduceMeanGradients(fake, g, 200).ok());
    // Packed buckets are float {0,2,3} (192 B) and double {1,5,7} (192 B); {6} is in place.
    EXPECT_EQ(BucketBufferBytes(), 192 + 192) << "step " << step;
  }
  for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(at::equal(g[i], before[i] + 4.5)) << i;
  ReleaseBucketBuffers();
  EXPECT_EQ(BucketBufferBytes(), 0);
}

// Parameters shaped like MixedGrads, their gradients set to its values (one left undefined).
std::vector<at::Tensor> ParamsWithGrads(int undefined) {
  std::vector<at::Tensor> grads = MixedGrads(), params;
  for (size_t i = 0; i < grads.size(); ++i) {
    at::Tensor p = at::zeros(grads[i].sizes(), grads[i].options()).requires_grad_(true);
    if (static_cast<int>(i) != undefined) p.mutable_grad() = grads[i].clone();  // keeps strides
    params.push_back(p);
  }
  return params;
}

TEST(GradientBucketsTest, SameMeansAndBucketsAsAllReduceMeanGradientsWithoutCopies) {
  for (int64_t bucket_bytes : {int64_t{1}, int64_t{64}, int64_t{200}, kDefaultBucketBytes}) {
    SCOPED_TRACE("bucket_bytes=" + std::to_string(bucket_bytes));
    std::vector<at::Tensor> params = ParamsWithGrads(/*undefined=*/5);
    std::vector<at::Tensor> expected;
    for (const at::Tensor& p : params)
      expected.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
    FakeFourRanks reference;
    ASSERT_TRUE(AllReduceMeanGradients(reference, expected, bucket_bytes).ok());

    FakeFourRanks fake;
    GradientBuckets buckets(params, bucket_bytes);
    EXPECT_EQ(buckets.bytes(), 0);  // nothing allocated before the first use
    ASSERT_TRUE(buckets.AllReduceMean(fake).ok());
    EXPECT_TRUE(buckets.Attached());
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(at::equal(params[i].grad(), expected[i])) << "tensor " << i;
      EXPECT_EQ(params[i].grad().sizes(), params[i].sizes());
    }
    // The same collectives as the packing path: one per bucket, same dtypes and sizes.
    ASSERT_EQ(fake.calls.size(), reference.calls.size());
    for (size_t b = 0; b < fake.calls.size(); ++b) {
      EXPECT_EQ(fake.calls[b].bytes, reference.calls[b].bytes) << "bucket " << b;
      EXPECT_EQ(fake.calls[b].dtype, reference.calls[b].dtype) << "bucket " << b;
    }
    EXPECT_EQ(buckets.num_buckets(), fake.calls.size());
    // Steps after the first reuse the same memory: no allocation, gradients stay in the slots.
    std::vector<const void*> flat_ptrs, grad_ptrs;
    for (const at::Tensor& f : buckets.flats()) flat_ptrs.push_back(f.data_ptr());
    for (const at::Tensor& p : params) grad_ptrs.push_back(p.grad().data_ptr());
    const int64_t bytes = buckets.bytes();
    for (int step = 0; step < 3; ++step) {
      buckets.Zero();
      for (const at::Tensor& p : params) EXPECT_EQ(p.grad().count_nonzero().item<int64_t>(), 0);
      ASSERT_TRUE(buckets.AllReduceMean(fake).ok());
      for (const at::Tensor& p : params) EXPECT_TRUE(at::equal(p.grad(), at::full_like(p, 1.5)));
    }
    EXPECT_EQ(buckets.bytes(), bytes);
    for (size_t b = 0; b < flat_ptrs.size(); ++b)
      EXPECT_EQ(buckets.flats()[b].data_ptr(), flat_ptrs[b]);
    for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(params[i].grad().data_ptr(), grad_ptrs[i]);
  }
}

TEST(GradientBucketsTest, BackwardAccumulatesIntoTheSlotsAndZeroGradStillWorks) {
  at::manual_seed(3);
  const at::Tensor w = at::randn({4, 3}).requires_grad_(true);
  const at::Tensor b = at::randn({3}).requires_grad_(true);
  const at::Tensor x = at::randn({5, 4});
  auto backward = [&] { (x.mm(w) + b).pow(2).sum().backward(); };
  backward();
  const at::Tensor gw = w.grad().clone(), gb = b.grad().clone();
  GradientBuckets buckets({w, b}, kDefaultBucketBytes);
  buckets.Attach();  // keeps the values
  ASSERT_EQ(buckets.num_buckets(), 1u);
  EXPECT_TRUE(at::equal(w.grad(), gw));
  EXPECT_TRUE(at::equal(b.grad(), gb));
  const void* slot = w.grad().data_ptr();
  buckets.Zero();
  backward();
  backward();  // accumulates in place, into the slot
  EXPECT_EQ(w.grad().data_ptr(), slot);
  EXPECT_TRUE(at::allclose(w.grad(), 2 * gw));
  EXPECT_TRUE(at::allclose(b.grad(), 2 * gb));
  // optimizer.zero_grad() does detach_() then zero_() on every gradient: it must still work.
  for (const at::Tensor& p : {w, b}) {
    EXPECT_NO_THROW(p.mutable_grad().detach_());
    p.mutable_grad().zero_();
  }
  EXPECT_TRUE(buckets.Attached());
  EXPECT_EQ(buckets.flats()[0].count_nonzero().item<int64_t>(), 0);
}

TEST(GradientBucketsTest, ReattachesAReplacedGradient) {
  std::vector<at::Tensor> params = ParamsWithGrads(/*undefined=*/-1);
  GradientBuckets buckets(params, 200);
  buckets.Attach();
  params[0].mutable_grad() = at::ones_like(params[0]);  // someone replaced it
  EXPECT_FALSE(buckets.Attached());
  FakeFourRanks fake;
  ASSERT_TRUE(buckets.AllReduceMean(fake).ok());
  EXPECT_TRUE(buckets.Attached());
  EXPECT_TRUE(at::equal(params[0].grad(), at::full_like(params[0], 2.5)));
  params[1].mutable_grad() = at::Tensor();  // or reset
  buckets.Zero();
  EXPECT_TRUE(buckets.Attached());
  EXPECT_TRUE(at::equal(params[1].grad(), at::zeros_like(params[1])));
}

TEST(BucketsTest, MeanGradientsRejectsBadInputBeforeCommunicating) {
  FakeFourRanks fake;
  std::vector<at::Tensor> undefined = {at::zeros({3}), at::Tensor()};
  const Status s = AllReduceMeanGradients(fake, undefined);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("gradient 1"), std::string::npos) << s.message();
  std::vector<at::Tensor> ints = {at::zeros({3}, at::kLong)};
  EXPECT_EQ(AllReduceMeanGradients(fake, ints).code(), StatusCode::kInvalidArgument);
  std::vector<at::Tensor> ok = {at::zeros({3})};
  EXPECT_EQ(AllReduceMeanGradients(fake, ok, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(fake.calls.empty());
}

TEST(BucketsTest, BroadcastWritesThroughParametersThatRequireGrad) {
  FakeFourRanks fake;
  std::vector<at::Tensor> p = {at::zeros({4, 4}).requires_grad_(true),
                               at::zeros({3, 2}, at::kDouble).requires_grad_(true),
                               at::zeros({2, 3}).t()};  // non-contiguous
  ASSERT_TRUE(BroadcastTensors(fake, p, /*root=*/1, 32).ok());
  for (const at::Tensor& t : p) EXPECT_TRUE(at::all(t == 7).item<bool>());
  EXPECT_TRUE(p[0].requires_grad());
  EXPECT_EQ(BroadcastTensors(fake, p, 4).code(), StatusCode::kInvalidArgument);
}

TEST(ChecksumTest, DependsOnValuesDtypesShapesAndOrderOnly) {
  const at::Tensor a = at::arange(12, at::kFloat).view({3, 4});
  const at::Tensor b = at::arange(5, at::kDouble);
  const uint64_t h = TensorsChecksum({a, b});
  EXPECT_EQ(h, TensorsChecksum({a.clone(), b.clone()}));
  EXPECT_EQ(h, TensorsChecksum({a.t().contiguous().t(), b}));  // strides do not matter
  EXPECT_NE(h, TensorsChecksum({b, a}));
  EXPECT_NE(h, TensorsChecksum({a.view({4, 3}), b}));
  EXPECT_NE(h, TensorsChecksum({a.to(at::kDouble), b}));
  at::Tensor a2 = a.clone();
  a2.view(-1)[7] = std::nextafter(7.0f, 8.0f);  // one ulp
  EXPECT_NE(h, TensorsChecksum({a2, b}));
  EXPECT_NE(TensorsChecksum({at::zeros({1})}), TensorsChecksum({-at::zeros({1})}));  // bits
  EXPECT_NE(TensorsChecksum({}), TensorsChecksum({at::Tensor()}));
}

TEST(FactoryTest, NamesTheFieldForUnknownOrUnavailableBackends) {
  // An unknown backend name is parallel.backend's parse error (tests/runspec/run_config_test.cc);
  // an unresolved device is a caller's mistake, named too.
  StatusOr<std::unique_ptr<Communicator>> unresolved =
      MakeCommunicator(Backend::kAuto, Device::kAuto);
  ASSERT_FALSE(unresolved.ok());
  EXPECT_EQ(unresolved.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unresolved.status().message().find("parallel.device"), std::string::npos);
  StatusOr<std::unique_ptr<Communicator>> nccl_on_cpu =
      MakeCommunicator(Backend::kNccl, Device::kCpu);
  ASSERT_FALSE(nccl_on_cpu.ok());
  EXPECT_NE(nccl_on_cpu.status().message().find("parallel.backend"), std::string::npos);
  if (!MpiBuilt()) {
    StatusOr<std::unique_ptr<Communicator>> mpi = MakeCommunicator(Backend::kMpi, Device::kCpu);
    ASSERT_FALSE(mpi.ok());
    EXPECT_EQ(mpi.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(mpi.status().message().find("parallel.backend"), std::string::npos);
  }
}

TEST(FactoryTest, LocalAndAuto) {
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("PMI_SIZE");
  unsetenv("SLURM_NTASKS");
  unsetenv("WORLD_SIZE");
  StatusOr<std::unique_ptr<Communicator>> local = MakeCommunicator(Backend::kLocal, Device::kCpu);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_EQ((*local)->backend(), "local");
  // auto on CPU: the MPI singleton (rank 0 of 1) when MPI is built, else local.
  StatusOr<std::unique_ptr<Communicator>> autod = MakeCommunicator(Backend::kAuto, Device::kCpu);
  ASSERT_TRUE(autod.ok()) << autod.status().ToString();
  EXPECT_EQ((*autod)->backend(), MpiBuilt() ? "mpi" : "local");
  EXPECT_EQ((*autod)->world_size(), 1);
  EXPECT_EQ((*autod)->rank(), 0);
  at::Tensor t = at::arange(5, at::kDouble);
  EXPECT_TRUE((*autod)->AllReduceSum(t).ok());
  EXPECT_TRUE(at::equal(t, at::arange(5, at::kDouble)));
  EXPECT_TRUE((*autod)->Barrier().ok());
  // A launcher that started two ranks rules out "local".
  setenv("SLURM_NTASKS", "2", 1);
  StatusOr<std::unique_ptr<Communicator>> local2 = MakeCommunicator(Backend::kLocal, Device::kCpu);
  ASSERT_FALSE(local2.ok());
  EXPECT_NE(local2.status().message().find("parallel.backend"), std::string::npos);
  unsetenv("SLURM_NTASKS");
}

// On a machine without a GPU (or driver) the NCCL backend must fail cleanly — it checks the CUDA
// runtime before NCCL — and a build without NCCL says so.
TEST(NcclTest, WithoutAGpuReturnsAnErrorInsteadOfCrashing) {
  StatusOr<std::unique_ptr<Communicator>> c = MakeNcclCommunicator();
  if (c.ok()) {
    // A GPU machine: a world of one.
    EXPECT_EQ((*c)->backend(), "nccl");
    EXPECT_EQ((*c)->world_size(), 1);
    EXPECT_TRUE((*c)->device().is_cuda());
    at::Tensor cpu = at::zeros({4});
    EXPECT_EQ((*c)->AllReduceSum(cpu).code(), StatusCode::kInvalidArgument);
    GTEST_SKIP() << "a CUDA device is present; the no-GPU path was not exercised";
  }
  EXPECT_FALSE(c.status().message().empty());
  std::printf("MakeNcclCommunicator without a GPU: %s\n", c.status().ToString().c_str());
  if (NcclBuilt()) {
    EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition) << c.status().ToString();
    EXPECT_NE(c.status().message().find("cuda"), std::string::npos) << c.status().ToString();
  } else {
    EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented) << c.status().ToString();
    EXPECT_NE(c.status().message().find("no NCCL"), std::string::npos);
  }
  StatusOr<std::unique_ptr<Communicator>> via_factory =
      MakeCommunicator(Backend::kNccl, Device::kCuda);
  ASSERT_FALSE(via_factory.ok());
  EXPECT_NE(via_factory.status().message().find("parallel.backend"), std::string::npos);
}

}  // namespace
}  // namespace rdattn::comm
