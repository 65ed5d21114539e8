// The depth read (T1, T2, gradient check) and the route diagnostics (T8 at the operator level).
#include "model/depth.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

namespace rdattn::model {
namespace {

const auto kF64 = torch::TensorOptions().dtype(torch::kDouble);

TEST(DepthReadTest, T1UniformAtInitIsTheMeanOfRawSources) {
  torch::manual_seed(1);
  std::vector<at::Tensor> sources;
  for (int k = 0; k < 5; ++k) sources.push_back(torch::randn({2, 3, 8}) * (k + 1) + k);
  const DepthMix m = DepthRead(sources, torch::zeros({8}), torch::ones({8}), 1e-6);
  const at::Tensor mean = torch::stack(sources).mean(0);
  EXPECT_LT((m.output - mean).abs().max().item<double>(), 1e-6);
  EXPECT_LT((m.alpha - 0.2).abs().max().item<double>(), 1e-7);
  // Values are raw: the mean of the normalised sources would be far away.
  const at::Tensor normed_mean = RmsNorm(torch::stack(sources), torch::ones({8}), 1e-6).mean(0);
  EXPECT_GT((m.output - normed_mean).abs().max().item<double>(), 0.1);
}

TEST(DepthReadTest, T2ScaleProbe) {
  const at::Tensor s0 = torch::tensor({1.0, 0.0, 0.0, 0.0}, kF64).view({1, 1, 4});
  const at::Tensor s1 = torch::tensor({0.0, 1.0, 0.0, 0.0}, kF64).view({1, 1, 4});
  const at::Tensor w = torch::tensor({2.0, 0.0, 0.0, 0.0}, kF64);
  const at::Tensor stacked = StackSources({s0, s1});
  const at::Tensor keys = DepthKeys(stacked, torch::ones({4}, kF64), 1e-6);
  const at::Tensor logits = (keys * w).sum(-1).flatten();
  EXPECT_NEAR(logits[0].item<double>(), 3.999992, 1e-6);
  EXPECT_NEAR(logits[1].item<double>(), 0.0, 1e-12);
  const DepthMix m = DepthMixture(stacked, keys, w);
  EXPECT_NEAR(m.alpha.flatten()[0].item<double>(), 0.9820136, 1e-7);
  EXPECT_NEAR(m.alpha.flatten()[1].item<double>(), 0.0179864, 1e-7);
  const at::Tensor h = m.output.flatten();
  EXPECT_NEAR(h[0].item<double>(), 0.9820136, 1e-7);
  EXPECT_NEAR(h[1].item<double>(), 0.0179864, 1e-7);
  EXPECT_EQ(h[2].item<double>(), 0.0);
  EXPECT_EQ(h[3].item<double>(), 0.0);
  // A 1/√D scale would have given 0.8808: make sure the probe can tell.
  EXPECT_GT(std::abs(m.alpha.flatten()[0].item<double>() - 0.8808), 0.05);
}

TEST(DepthReadTest, SingleSourceReturnsItUnchangedAndQueryGetsNoGradient) {
  const at::Tensor s = torch::randn({2, 3, 6}, kF64);
  const at::Tensor w = torch::randn({6}, kF64).requires_grad_(true);
  const DepthMix m = DepthRead({s}, w, torch::ones({6}, kF64), 1e-6);
  EXPECT_TRUE(torch::equal(m.output, s));
  m.output.sum().backward();
  EXPECT_EQ(w.grad().abs().max().item<double>(), 0.0);
}

// Central finite differences of f = Σ R(w, g; sources) ⊙ C against autograd, in float64.
TEST(DepthReadTest, GradientMatchesFiniteDifferencesInFloat64) {
  torch::manual_seed(7);
  const int64_t K = 3, B = 2, T = 3, D = 5;
  at::Tensor src = torch::randn({K, B, T, D}, kF64).requires_grad_(true);
  at::Tensor w = (0.7 * torch::randn({D}, kF64)).requires_grad_(true);
  at::Tensor g = (1.0 + 0.3 * torch::randn({D}, kF64)).requires_grad_(true);
  const at::Tensor C = torch::randn({B, T, D}, kF64);
  auto f = [&](const at::Tensor& s, const at::Tensor& q, const at::Tensor& gain) {
    const DepthMix m = DepthMixture(s, DepthKeys(s, gain, 1e-6), q);
    return (m.output * C).sum();
  };
  f(src, w, g).backward();
  const double h = 1e-6;
  int64_t checked = 0;
  for (at::Tensor* x : {&src, &w, &g}) {
    const at::Tensor analytic = x->grad().clone().flatten();
    at::Tensor base = x->detach().clone().flatten();
    for (int64_t i = 0; i < base.numel(); ++i) {
      at::Tensor plus = base.clone(), minus = base.clone();
      plus[i] += h;
      minus[i] -= h;
      auto eval = [&](const at::Tensor& flat) {
        const at::Tensor v = flat.view(x->sizes());
        if (x == &src) return f(v, w.detach(), g.detach()).item<double>();
        if (x == &w) return f(src.detach(), v, g.detach()).item<double>();
        return f(src.detach(), w.detach(), v).item<double>();
      };
      const double numeric = (eval(plus) - eval(minus)) / (2 * h);
      const double a = analytic[i].item<double>();
      EXPECT_NEAR(a, numeric, 1e-7 + 1e-6 * std::abs(numeric)) << "element " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, K * B * T * D + 2 * D);
}

TEST(DepthDiagnosticsTest, JsIsBoundedSymmetricAndZeroForEqualRoutes) {
  torch::manual_seed(3);
  const at::Tensor p = torch::softmax(torch::randn({4, 50}, kF64) * 3, 0);
  const at::Tensor q = torch::softmax(torch::randn({4, 50}, kF64) * 3, 0);
  const at::Tensor js = JsDivergence(p, q);
  EXPECT_GE(js.min().item<double>(), 0.0);
  EXPECT_LE(js.max().item<double>(), std::log(2.0));
  EXPECT_GT(js.max().item<double>(), 1e-3);
  EXPECT_LT((js - JsDivergence(q, p)).abs().max().item<double>(), 1e-15);
  EXPECT_EQ(JsDivergence(p, p).abs().max().item<double>(), 0.0);
  // Disjoint supports reach the maximum ln 2.
  const at::Tensor a = torch::tensor({1.0, 0.0}, kF64).view({2, 1});
  const at::Tensor b = torch::tensor({0.0, 1.0}, kF64).view({2, 1});
  EXPECT_NEAR(JsDivergence(a, b).item<double>(), std::log(2.0), 1e-9);
  // Entropy of the uniform distribution over K is ln K.
  EXPECT_NEAR(Entropy(torch::full({5, 1}, 0.2, kF64)).item<double>(), std::log(5.0), 1e-12);
}

TEST(DepthDiagnosticsTest, AccumulatorAveragesOverTokensAndLayers) {
  // Two layers; layer 0 has one source (JS 0), layer 1 has two.
  std::vector<RouteRecord> routes;
  routes.push_back({0, RouteSite::kAttnQK, torch::ones({1, 1, 2}, kF64)});
  routes.push_back({0, RouteSite::kAttnV, torch::ones({1, 1, 2}, kF64)});
  const at::Tensor p = torch::tensor({1.0, 0.5, 0.0, 0.5}, kF64).view({2, 1, 2});
  const at::Tensor q = torch::tensor({0.0, 0.5, 1.0, 0.5}, kF64).view({2, 1, 2});
  routes.push_back({1, RouteSite::kAttnQK, p});
  routes.push_back({1, RouteSite::kAttnV, q});
  DepthStatsAccumulator acc(2);
  acc.Add(routes);
  const DepthDiagnostics d = acc.Finalize();
  EXPECT_EQ(d.second_route, "v");
  EXPECT_EQ(d.tokens, 2);
  ASSERT_EQ(d.js_nats.size(), 2u);
  EXPECT_EQ(d.js_nats[0], 0.0);
  EXPECT_NEAR(d.js_nats[1], std::log(2.0) / 2, 1e-12);  // tokens: ln2 and 0
  EXPECT_NEAR(d.js_bits[1], 0.5, 1e-12);
  EXPECT_NEAR(d.sqrt_js[1], std::sqrt(std::log(2.0)) / 2, 1e-12);
  EXPECT_NEAR(d.mean_js_nats, std::log(2.0) / 4, 1e-12);
  EXPECT_NEAR(d.mean_js_nats_multi, std::log(2.0) / 2, 1e-12);
  EXPECT_NEAR(d.mean_js_bits, 0.25, 1e-12);
  // Token-averaged distributions are (0.75, 0.25) and (0.25, 0.75); m = (0.5, 0.5), so their
  // JS is 0.75 ln 1.5 + 0.25 ln 0.5 = 0.1308…, below the mean per-token JS (convexity).
  EXPECT_NEAR(d.js_of_mean_nats[1], 0.75 * std::log(1.5) + 0.25 * std::log(0.5), 1e-12);
  EXPECT_LT(d.js_of_mean_nats[1], d.js_nats[1]);
  EXPECT_NEAR(d.entropy_qk_nats[1], std::log(2.0) / 2, 1e-12);
  EXPECT_EQ(d.num_sources, (std::vector<int64_t>{1, 2}));
}

}  // namespace
}  // namespace rdattn::model

namespace rdattn::model {
namespace {

TEST(DepthDiagnosticsTest, PackedSumsOfTwoHalvesEqualTheWhole) {
  // What ranks do in evaluation: each accumulates its share, the packed sums are added, and
  // every rank finalises the statistics of all tokens.
  ModelConfig cfg;
  cfg.arm = Arm::kRd;
  cfg.layers = 2;
  cfg.blocks = 2;
  const std::vector<int64_t> ks = CountSources(cfg).attention;  // {1, 2}
  torch::manual_seed(5);
  auto routes = [&](int64_t tokens) {
    std::vector<RouteRecord> r;
    for (int64_t l = 0; l < 2; ++l) {
      const int64_t k = ks[static_cast<size_t>(l)];
      r.push_back({l, RouteSite::kAttnQK, torch::softmax(torch::randn({k, 1, tokens}, kF64), 0)});
      r.push_back({l, RouteSite::kAttnV, torch::softmax(torch::randn({k, 1, tokens}, kF64), 0)});
      r.push_back({l, RouteSite::kMlp, torch::softmax(torch::randn({k + 1, 1, tokens}, kF64), 0)});
    }
    return r;
  };
  const auto first = routes(3), second = routes(5);
  DepthStatsAccumulator whole(cfg), a(cfg), b(cfg);
  whole.Add(first);
  whole.Add(second);
  a.Add(first);
  b.Add(second);
  DepthStatsAccumulator merged(cfg);
  merged.UnpackSums(a.PackSums(ks) + b.PackSums(ks), ks);
  const DepthDiagnostics w = whole.Finalize(), m = merged.Finalize();
  EXPECT_EQ(m.tokens, 8);
  EXPECT_EQ(m.second_route, "v");
  ASSERT_EQ(m.js_nats.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    EXPECT_NEAR(m.js_nats[l], w.js_nats[l], 1e-14);
    EXPECT_NEAR(m.sqrt_js[l], w.sqrt_js[l], 1e-14);
    EXPECT_NEAR(m.js_of_mean_nats[l], w.js_of_mean_nats[l], 1e-14);
    EXPECT_NEAR(m.entropy_qk_nats[l], w.entropy_qk_nats[l], 1e-14);
    EXPECT_NEAR(m.entropy_second_nats[l], w.entropy_second_nats[l], 1e-14);
    EXPECT_NEAR(m.entropy_mlp_nats[l], w.entropy_mlp_nats[l], 1e-14);
  }
  EXPECT_GT(w.js_nats[1], 0.0);
  // A rank that evaluated nothing contributes zeros.
  DepthStatsAccumulator empty(cfg), merged2(cfg);
  merged2.UnpackSums(whole.PackSums(ks) + empty.PackSums(ks), ks);
  EXPECT_NEAR(merged2.Finalize().mean_js_nats, w.mean_js_nats, 1e-14);
}

}  // namespace
}  // namespace rdattn::model
