// The attention sublayer's custom autograd functions (model/attention.h) against their plain
// compositions: values and float64 gradients, over lengths around the row-block boundaries.
#include "model/attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "model/batched_gemm.h"
#include "tests/model/test_util.h"

namespace rdattn::model {
namespace {

using testing::MaxRelDiff;

at::Tensor Randn(at::IntArrayRef sizes, at::ScalarType dt, at::Generator& gen) {
  return at::randn(sizes, gen, at::TensorOptions().dtype(dt)).requires_grad_(true);
}

// RoPE tables as the model builds them (rotate-half: the angle of i and i + d/2 agree), here
// with an arbitrary phase per position so that every entry matters.
std::pair<at::Tensor, at::Tensor> Tables(int64_t T, int64_t d, at::ScalarType dt) {
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor ang = at::outer(at::arange(T, f64) + 0.3, at::linspace(1.0, 0.01, d / 2, f64));
  const at::Tensor full = at::cat({ang, ang}, -1);
  return {at::cos(full).to(dt), at::sin(full).to(dt)};
}

// Gradients of <out, w> with respect to `inputs`, for a fixed random cotangent w.
std::vector<at::Tensor> Grads(const at::Tensor& out, const at::Tensor& w,
                              const std::vector<at::Tensor>& inputs) {
  return torch::autograd::grad({(out * w).sum()}, inputs);
}

TEST(AttentionTest, RopeHeadsMatchesThePlainCompositionInFloat64) {
  at::Generator gen = at::detail::createCPUGenerator(11);
  for (int64_t T : {1, 5, 17}) {
    const int64_t B = 2, H = 3, d = 8;
    const at::Tensor x = Randn({B, T, H * d}, at::kDouble, gen);
    const auto [cos, sin] = Tables(T, d, at::kDouble);
    const at::Tensor fused = RopeHeads(x, H, cos, sin);
    const at::Tensor plain = RopeHeadsReference(x, H, cos, sin);
    ASSERT_EQ(fused.sizes(), (std::vector<int64_t>{B, H, T, d}));
    EXPECT_TRUE(fused.is_contiguous());
    // Same products and sums per element: equal up to the compiler's contraction choices.
    EXPECT_LE(MaxRelDiff(fused, plain), 1e-15) << "T=" << T;
    const at::Tensor w = at::randn(plain.sizes(), gen, plain.options());
    const at::Tensor g_fused = Grads(fused, w, {x})[0];
    const at::Tensor g_plain = Grads(plain, w, {x})[0];
    EXPECT_LE(MaxRelDiff(g_fused, g_plain), 1e-14) << "T=" << T;
  }
}

TEST(AttentionTest, RopeHeadsGradientMatchesFiniteDifferences) {
  // Independent of autograd: the directional derivative of <RopeHeads(x), w> along u.
  at::Generator gen = at::detail::createCPUGenerator(12);
  const int64_t B = 1, T = 4, H = 2, d = 6;
  const at::Tensor x = Randn({B, T, H * d}, at::kDouble, gen);
  const auto [cos, sin] = Tables(T, d, at::kDouble);
  const at::Tensor w = at::randn({B, H, T, d}, gen, x.options().requires_grad(false));
  const at::Tensor u = at::randn(x.sizes(), gen, x.options().requires_grad(false));
  const at::Tensor g = Grads(RopeHeads(x, H, cos, sin), w, {x})[0];
  torch::NoGradGuard no_grad;
  const double eps = 1e-6;
  const double fd = ((RopeHeads(x + eps * u, H, cos, sin) * w).sum() -
                     (RopeHeads(x - eps * u, H, cos, sin) * w).sum())
                        .item<double>() /
                    (2 * eps);
  EXPECT_NEAR((g * u).sum().item<double>(), fd, 1e-8);
}

TEST(AttentionTest, RopeHeadsInFloat32AgreesWithThePlainComposition) {
  at::Generator gen = at::detail::createCPUGenerator(13);
  const at::Tensor x = Randn({2, 9, 4 * 16}, at::kFloat, gen);
  const auto [cos, sin] = Tables(9, 16, at::kFloat);
  EXPECT_LE(MaxRelDiff(RopeHeads(x, 4, cos, sin), RopeHeadsReference(x, 4, cos, sin)), 1e-6);
}

// ATen's masked softmax of a row block [N,n,r1] whose rows start at query r0, and its gradient.
at::Tensor MaskedSoftmax(const at::Tensor& logits, int64_t r0) {
  const int64_t n = logits.size(1), r1 = logits.size(2);
  const at::Tensor mask =
      (at::arange(r1).unsqueeze(0) > (at::arange(n) + r0).unsqueeze(1)).to(at::kBool);
  return at::softmax(logits.masked_fill(mask, -std::numeric_limits<double>::infinity()), -1);
}

at::Tensor BlockLogits(int64_t N, int64_t n, int64_t r0, at::ScalarType dt, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return 3.0 * at::randn({N, n, r0 + n}, gen, at::TensorOptions().dtype(at::kDouble)).to(dt);
}

TEST(AttentionTest, SoftmaxKernelMatchesATensMaskedSoftmax) {
  // Blocks at the start, in the middle, and a short last block; float64 to rounding, float32
  // to its precision (the Cephes exp is within ~1 ulp). Beyond each row's keys: exact zeros.
  for (const auto dt : {at::kDouble, at::kFloat}) {
    const double tol_y = dt == at::kDouble ? 1e-15 : 1e-6;
    const double tol_g = dt == at::kDouble ? 1e-14 : 1e-5;
    for (const auto& [n, r0] : {std::pair<int64_t, int64_t>{64, 0}, {64, 128}, {7, 128}, {1, 0}}) {
      const std::string what = std::string(dt == at::kDouble ? "float64" : "float32") +
                               " n=" + std::to_string(n) + " r0=" + std::to_string(r0);
      const at::Tensor logits = BlockLogits(3, n, r0, dt, 51 + static_cast<uint64_t>(n + r0));
      const at::Tensor ref = MaskedSoftmax(logits, r0);
      at::Tensor p = logits.clone();
      CausalSoftmaxForward(p, r0);
      EXPECT_LE(MaxRelDiff(p, ref), tol_y) << what;
      const at::Tensor masked = at::arange(r0 + n).unsqueeze(0) > (at::arange(n) + r0).unsqueeze(1);
      EXPECT_TRUE(at::equal(p.masked_select(masked.expand_as(p)),
                            at::zeros({p.masked_select(masked.expand_as(p)).numel()}, p.options())))
          << what;
      const at::Tensor dp = BlockLogits(3, n, r0, dt, 61 + static_cast<uint64_t>(n + r0));
      const at::Tensor ref_ds = at::_softmax_backward_data(dp, ref, -1, ref.scalar_type());
      at::Tensor ds = dp.clone();
      CausalSoftmaxBackward(ds, p, r0);
      EXPECT_LE(MaxRelDiff(ds, ref_ds), tol_g) << what;
      EXPECT_TRUE(at::equal(ds.masked_select(masked.expand_as(ds)),
                            at::zeros({p.masked_select(masked.expand_as(p)).numel()}, p.options())))
          << what;
    }
  }
}

TEST(AttentionTest, SoftmaxKernelPassesNaNsAndExtremeLogitsLikeATen) {
  for (const auto dt : {at::kDouble, at::kFloat}) {
    // Row 3 (4 keys) holds a NaN: that row is NaN, the others are not. Row 5 spans 200 in its
    // logits: the far keys get weight ~0, the row still sums to 1.
    at::Tensor logits = BlockLogits(1, 8, 0, dt, 71);
    logits[0][3][1] = std::numeric_limits<double>::quiet_NaN();
    logits[0][5][0] = -200.0;
    logits[0][5][2] = 100.0;
    at::Tensor p = logits.clone();
    CausalSoftmaxForward(p, 0);
    EXPECT_TRUE(p[0][3].narrow(0, 0, 4).isnan().all().item<bool>());
    EXPECT_FALSE(p[0].narrow(0, 0, 3).isnan().any().item<bool>());
    EXPECT_FALSE(p[0].narrow(0, 4, 4).isnan().any().item<bool>());
    EXPECT_LE(p[0][5][0].item<double>(), 1e-37);
    EXPECT_NEAR(p[0][5].sum().item<double>(), 1.0, 1e-6);
    EXPECT_LE(MaxRelDiff(p.narrow(1, 4, 4), MaskedSoftmax(logits, 0).narrow(1, 4, 4)),
              dt == at::kDouble ? 1e-15 : 1e-6);
  }
}

// The softmax kernel's bits depend neither on the instruction set it runs in (AVX2 or the
// baseline build) nor on the number of threads, forward and backward, float32 and float64. On a
// CPU without AVX2 both runs take the baseline build and that comparison holds trivially.
TEST(AttentionTest, SoftmaxKernelBitsDoNotDependOnInstructionSetOrThreadCount) {
  const int threads_was = at::get_num_threads();
  for (const auto dt : {at::kFloat, at::kDouble}) {
    // 6·64 rows of 192 keys: several parallel tasks (about 16k elements each).
    const at::Tensor logits = BlockLogits(6, 64, 128, dt, 81);
    const at::Tensor dp = BlockLogits(6, 64, 128, dt, 82);
    auto run = [&](bool baseline, int threads) {
      ForceBaselineSoftmaxKernel(baseline);
      at::set_num_threads(threads);
      at::Tensor p = logits.clone();
      CausalSoftmaxForward(p, 128);
      at::Tensor ds = dp.clone();
      CausalSoftmaxBackward(ds, p, 128);
      ForceBaselineSoftmaxKernel(false);
      at::set_num_threads(threads_was);
      return std::vector<at::Tensor>{p, ds};
    };
    const auto ref = run(false, 1), baseline = run(true, 1), threaded = run(false, 3);
    const char* what = dt == at::kFloat ? "float32" : "float64";
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_TRUE(at::equal(ref[i], baseline[i])) << what << " baseline, tensor " << i;
      EXPECT_TRUE(at::equal(ref[i], threaded[i])) << what << " 3 threads, tensor " << i;
    }
  }
}

TEST(AttentionTest, CausalAttentionMatchesThePlainCompositionInFloat64) {
  at::Generator gen = at::detail::createCPUGenerator(21);
  // Lengths below, at and across the 64-row blocks.
  for (int64_t T : {1, 7, 63, 64, 65, 130}) {
    const int64_t B = 2, H = 2, d = 8;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const at::Tensor q = Randn({B, H, T, d}, at::kDouble, gen);
    const at::Tensor k = Randn({B, H, T, d}, at::kDouble, gen);
    const at::Tensor v = Randn({B, H, T, d}, at::kDouble, gen);
    const at::Tensor fused = CausalAttention(q, k, v, scale);
    const at::Tensor plain = CausalAttentionReference(q, k, v, scale);
    ASSERT_EQ(fused.sizes(), plain.sizes());
    EXPECT_LE(MaxRelDiff(fused, plain), 1e-13) << "T=" << T;
    const at::Tensor w = at::randn(plain.sizes(), gen, plain.options());
    const auto g_fused = Grads(fused, w, {q, k, v});
    const auto g_plain = Grads(plain, w, {q, k, v});
    for (size_t i = 0; i < 3; ++i)
      EXPECT_LE(MaxRelDiff(g_fused[i], g_plain[i]), 1e-12) << "T=" << T << " input " << i;
  }
}

TEST(AttentionTest, CausalAttentionGradientMatchesFiniteDifferences) {
  at::Generator gen = at::detail::createCPUGenerator(22);
  const int64_t B = 1, H = 2, T = 70, d = 4;
  const std::vector<at::Tensor> in = {Randn({B, H, T, d}, at::kDouble, gen),
                                      Randn({B, H, T, d}, at::kDouble, gen),
                                      Randn({B, H, T, d}, at::kDouble, gen)};
  const at::Tensor w = at::randn({B, H, T, d}, gen, at::TensorOptions().dtype(at::kDouble));
  const auto g = Grads(CausalAttention(in[0], in[1], in[2], 0.5), w, in);
  torch::NoGradGuard no_grad;
  const double eps = 1e-6;
  for (size_t i = 0; i < 3; ++i) {
    const at::Tensor u = at::randn(in[i].sizes(), gen, w.options());
    auto f = [&](double sign) {
      std::vector<at::Tensor> x = in;
      x[i] = in[i] + sign * eps * u;
      return (CausalAttention(x[0], x[1], x[2], 0.5) * w).sum().item<double>();
    };
    EXPECT_NEAR((g[i] * u).sum().item<double>(), (f(1) - f(-1)) / (2 * eps), 1e-7) << i;
  }
}

TEST(AttentionTest, DirectBlasProductsGiveTheBitsOfLibTorchsBmm) {
  // BatchedGemm's direct path against LibTorch's bmm/baddbmm_ (SetBatchedGemmDirect(false)) in
  // the whole function, float32, one thread, scale 1/8: values and every gradient bitwise,
  // over one and several row blocks, V a strided view as in the model.
  ASSERT_TRUE(BatchedGemmDirect());
  at::Generator gen = at::detail::createCPUGenerator(27);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  for (int64_t T : {40, 64, 150}) {
    const int64_t B = 2, H = 3, d = 64;
    const at::Tensor q = at::randn({B, H, T, d}, gen, f32).requires_grad_(true);
    const at::Tensor k = at::randn({B, H, T, d}, gen, f32).requires_grad_(true);
    const at::Tensor x = at::randn({B, T, H, d}, gen, f32).requires_grad_(true);
    const at::Tensor w = at::randn({B, H, T, d}, gen, f32);
    std::vector<std::vector<at::Tensor>> runs;
    for (bool direct : {true, false}) {
      SetBatchedGemmDirect(direct);
      const BatchedGemmCalls before = BatchedGemmCallCounts();
      const at::Tensor y = CausalAttention(q, k, x.transpose(1, 2), 0.125);
      std::vector<at::Tensor> r = Grads(y, w, {q, k, x});
      r.push_back(y.detach());
      runs.push_back(r);
      // Each run took the path it names in every product: the views the attention passes
      // (narrowed rows, transposed K and V) are ones BLAS can take.
      const BatchedGemmCalls calls = BatchedGemmCallCounts() - before;
      EXPECT_GT(direct ? calls.direct : calls.libtorch, 0) << "T=" << T << " direct=" << direct;
      EXPECT_EQ(direct ? calls.libtorch : calls.direct, 0) << "T=" << T << " direct=" << direct;
    }
    SetBatchedGemmDirect(true);
    for (size_t i = 0; i < runs[0].size(); ++i)
      EXPECT_TRUE(at::equal(runs[0][i], runs[1][i]))
          << "T=" << T << " output " << i << " max rel " << MaxRelDiff(runs[0][i], runs[1][i]);
  }
}

TEST(AttentionTest, CausalAttentionTakesStridedInputs) {
  // The model passes V as a transposed view of the projection [B,T,H,d].
  at::Generator gen = at::detail::createCPUGenerator(23);
  const int64_t B = 2, H = 3, T = 66, d = 8;
  const at::Tensor x = at::randn({B, T, H, d}, gen, at::TensorOptions().dtype(at::kDouble));
  const at::Tensor v = x.transpose(1, 2);
  const at::Tensor q = at::randn({B, H, T, d}, gen, x.options());
  const at::Tensor k = at::randn({B, H, T, d}, gen, x.options());
  EXPECT_LE(MaxRelDiff(CausalAttention(q, k, v, 0.25), CausalAttentionReference(q, k, v, 0.25)),
            1e-13);
}

TEST(AttentionTest, CausalAttentionWorksInTheProjectionLayout) {
  // V a view of the projection [B,T,H,d] and q, k heads of one [B,2H,T,d] tensor (items not
  // evenly spaced: the products go per sequence): the output is a view of a [B,T,H,d] tensor
  // (the caller's reshape to [B,T,H·d] copies nothing), and values and every gradient match the
  // plain composition in float64, over one and several row blocks.
  at::Generator gen = at::detail::createCPUGenerator(25);
  for (int64_t T : {9, 130}) {
    const int64_t B = 3, H = 2, d = 8;
    const auto f64 = at::TensorOptions().dtype(at::kDouble);
    const at::Tensor x = at::randn({B, T, H, d}, gen, f64).requires_grad_(true);
    const at::Tensor qk = at::randn({B, 2 * H, T, d}, gen, f64).requires_grad_(true);
    const at::Tensor q = qk.narrow(1, 0, H), k = qk.narrow(1, H, H), v = x.transpose(1, 2);
    const at::Tensor y = CausalAttention(q, k, v, 0.25);
    const at::Tensor plain = CausalAttentionReference(q, k, v, 0.25);
    EXPECT_TRUE(y.transpose(1, 2).is_contiguous()) << "T=" << T;
    EXPECT_LE(MaxRelDiff(y, plain), 1e-13) << "T=" << T;
    const at::Tensor w = at::randn(plain.sizes(), gen, f64);
    const auto g = Grads(y, w, {qk, x});
    const auto g_plain = Grads(plain, w, {qk, x});
    for (size_t i = 0; i < 2; ++i)
      EXPECT_LE(MaxRelDiff(g[i], g_plain[i]), 1e-12) << "T=" << T << " input " << i;
  }
}

TEST(AttentionTest, JointQueryKeyHeadsGiveTheSeparateResultAndOneGradient) {
  // CausalAttention(qk, v), q and k the two halves of one [B,2H,T,d] (the model's Q-and-K
  // projection): values and gradients of qk match the plain composition in float64, and at one
  // thread they are bitwise those of CausalAttention(q, k, v) on contiguous copies of the halves
  // (the same products per (sequence, head), one BatchedGemm per sequence instead of one for
  // all). qk's gradient is one tensor from the attention itself, not slices added into zeros.
  const int threads_was = at::get_num_threads();
  at::set_num_threads(1);
  at::Generator gen = at::detail::createCPUGenerator(26);
  for (int64_t T : {5, 130}) {
    const int64_t B = 2, H = 3, d = 8;
    const auto f64 = at::TensorOptions().dtype(at::kDouble);
    // qk made by an op (as RoPE's output): the attention's first input edge leads straight to
    // that op's node, with no slice backward in between.
    const at::Tensor qk =
        at::randn({B, 2 * H, T, d}, gen, f64).requires_grad_(true) * at::scalar_tensor(1.0, f64);
    const at::Tensor x = at::randn({B, T, H, d}, gen, f64).requires_grad_(true);
    const at::Tensor v = x.transpose(1, 2);
    const at::Tensor y = CausalAttention(qk, v, 0.25);
    ASSERT_NE(qk.grad_fn(), nullptr);
    EXPECT_EQ(y.grad_fn()->next_edges()[0].function, qk.grad_fn());
    const at::Tensor q = qk.narrow(1, 0, H).contiguous().detach().requires_grad_(true);
    const at::Tensor k = qk.narrow(1, H, H).contiguous().detach().requires_grad_(true);
    const at::Tensor y_sep = CausalAttention(q, k, v, 0.25);
    const at::Tensor plain =
        CausalAttentionReference(qk.narrow(1, 0, H), qk.narrow(1, H, H), v, 0.25);
    EXPECT_TRUE(at::equal(y, y_sep)) << "T=" << T;
    EXPECT_LE(MaxRelDiff(y, plain), 1e-13) << "T=" << T;
    const at::Tensor w = at::randn(plain.sizes(), gen, f64);
    const auto g = Grads(y, w, {qk, x});
    const auto g_sep = Grads(y_sep, w, {q, k, x});
    const auto g_plain = Grads(plain, w, {qk, x});
    EXPECT_TRUE(at::equal(g[0], at::cat({g_sep[0], g_sep[1]}, 1))) << "T=" << T;
    EXPECT_TRUE(at::equal(g[1], g_sep[2])) << "T=" << T;
    for (size_t i = 0; i < 2; ++i)
      EXPECT_LE(MaxRelDiff(g[i], g_plain[i]), 1e-12) << "T=" << T << " input " << i;
  }
  at::set_num_threads(threads_was);
}

TEST(AttentionTest, JointQueryKeyHeadsRejectAMismatchedWidth) {
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  EXPECT_THROW(CausalAttention(at::zeros({1, 5, 4, 8}, f64), at::zeros({1, 3, 4, 8}, f64), 0.5),
               c10::Error);
}

TEST(AttentionTest, CausalAttentionInFloat32WithAPowerOfTwoScaleKeepsTheLogits) {
  // scale = 1/8 is folded into q exactly: the first row (a single key) is v's first row
  // bitwise, and the rest agrees with the plain composition to float32 rounding.
  at::Generator gen = at::detail::createCPUGenerator(24);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor q = at::randn({1, 4, 256, 64}, gen, f32);
  const at::Tensor k = at::randn({1, 4, 256, 64}, gen, f32);
  const at::Tensor v = at::randn({1, 4, 256, 64}, gen, f32);
  const at::Tensor fused = CausalAttention(q, k, v, 0.125);
  EXPECT_TRUE(at::equal(fused.select(2, 0), v.select(2, 0)));
  EXPECT_LE(MaxRelDiff(fused, CausalAttentionReference(q, k, v, 0.125)), 1e-5);
}

}  // namespace
}  // namespace rdattn::model
