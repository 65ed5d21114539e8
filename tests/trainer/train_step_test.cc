// ZeroGradients / ClearGradients (worker/trainer/train_step.h): at world size 1 the gradients are
// cleared (set to none) instead of zero-filled, and the sums a step accumulates are bitwise those
// of the zero-filled gradients; once the buckets are attached, the gradients stay their slots.
#include "worker/trainer/train_step.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "worker/comm/buckets.h"

namespace rdattn::trainer {
namespace {

// Two parameters and a loss of two micro-batches, as ForwardBackward accumulates them.
struct Toy {
  at::Tensor w, b;
  std::vector<at::Tensor> params() const { return {w, b}; }
};

Toy MakeToy() {
  at::Generator gen = at::detail::createCPUGenerator(3);
  return {at::randn({7, 5}, gen).requires_grad_(true), at::randn({5}, gen).requires_grad_(true)};
}

void TwoMicroBatches(const Toy& t) {
  at::Generator gen = at::detail::createCPUGenerator(4);
  for (int mb = 0; mb < 2; ++mb) {
    const at::Tensor x = at::randn({3, 7}, gen);
    (at::tanh(at::mm(x, t.w) + t.b).pow(2).sum() * 0.5).backward();
  }
}

TEST(ZeroGradients, OneRankClearsTheGradientsAndKeepsTheSumsBitwise) {
  // The zero-filled path, as LibTorch 1.13's optimizer.zero_grad() left it (2.x's sets them to
  // none by default): defined gradients of zeros.
  Toy filled = MakeToy();
  TwoMicroBatches(filled);  // a first step defines the gradients
  for (const at::Tensor& p : filled.params()) p.mutable_grad().zero_();
  ASSERT_TRUE(filled.w.grad().defined());
  TwoMicroBatches(filled);

  Toy cleared = MakeToy();
  const AdamW cleared_opt({{cleared.params(), 0.0}}, AdamWHyper{});
  comm::GradientBuckets buckets(cleared.params());  // never attached: world size 1
  TwoMicroBatches(cleared);
  ZeroGradients(cleared_opt, buckets);
  EXPECT_FALSE(cleared.w.grad().defined());
  EXPECT_FALSE(cleared.b.grad().defined());
  TwoMicroBatches(cleared);
  EXPECT_TRUE(at::equal(cleared.w.grad(), filled.w.grad()));
  EXPECT_TRUE(at::equal(cleared.b.grad(), filled.b.grad()));
}

TEST(ZeroGradients, AttachedBucketsAreFilledAndStayTheGradients) {
  Toy t = MakeToy();
  const AdamW opt({{t.params(), 0.0}}, AdamWHyper{});
  comm::GradientBuckets buckets(t.params());
  TwoMicroBatches(t);
  buckets.Attach();
  const void* slot = t.w.grad().data_ptr();
  ZeroGradients(opt, buckets);
  ASSERT_TRUE(t.w.grad().defined());
  EXPECT_EQ(t.w.grad().data_ptr(), slot);  // still its bucket's slot, not a new tensor
  EXPECT_EQ(t.w.grad().abs().max().item<double>(), 0.0);
  EXPECT_EQ(t.b.grad().abs().max().item<double>(), 0.0);
  TwoMicroBatches(t);
  EXPECT_EQ(t.w.grad().data_ptr(), slot);  // the backward added into the slot
  EXPECT_TRUE(buckets.Attached());
}

TEST(ClearGradients, LeavesEveryParameterOfEveryGroupWithoutAGradient) {
  Toy t = MakeToy();
  const at::Tensor extra = at::ones({2}).requires_grad_(true);
  const AdamW opt({{t.params(), 0.1}, {{extra}, 0.0}}, AdamWHyper{});
  TwoMicroBatches(t);
  extra.sum().backward();
  ClearGradients(opt);
  for (const auto& p : {t.w, t.b, extra}) EXPECT_FALSE(p.grad().defined());
}

}  // namespace
}  // namespace rdattn::trainer
