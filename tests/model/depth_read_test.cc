// The fused depth read (model/depth_read.h) against the plain composition of model/depth.h, in
// float64: forward and backward for 1 and 2 routes, K = 1…4, with and without the folded
// output norm; central finite differences of the custom backward; the bitwise route identity
// T6 relies on; and the whole model, fused vs plain, for every arm. The operator-level tests run
// both implementations of the fused read: the CPU kernel (model/depth_read_cpu.h) and the
// op-by-op path that other devices take; further tests hold the kernel's bits to its promises
// (instruction set, thread count) and compare the two implementations in float32.
#include "model/depth_read.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "model/depth.h"
#include "model/depth_read_cpu.h"
#include "model/gpt.h"
#include "tests/model/test_util.h"

namespace rdattn::model {
namespace {

using testing::MaxRelDiff;
using testing::Perturb;
using testing::RandomTokens;
using testing::Small;

const auto kF64 = torch::TensorOptions().dtype(torch::kDouble);
constexpr double kKeyEps = 1e-6, kNormEps = 1e-6;

// Selects the fused read's implementation for a scope (SetDepthReadCpuKernel), restoring it.
struct KernelChoice : testing::ScopedSwitch {
  explicit KernelChoice(bool kernel)
      : ScopedSwitch(DepthReadCpuKernel, SetDepthReadCpuKernel, kernel) {}
};

const char* ImplName(bool kernel) { return kernel ? "cpu kernel" : "op by op"; }

// kProject: a norm per route, and route 1 projected by a matrix (rd's V projection).
enum class NormMode { kNone, kEach, kMean, kProject };

struct Case {
  int64_t K, R;
  NormMode norm;
};

// The leaves of one read: sources [K] of [B,T,D], queries [R], key gain, norm gain.
struct Leaves {
  std::vector<at::Tensor> src, q;
  at::Tensor g, n, w;
  std::vector<at::Tensor*> All() {
    std::vector<at::Tensor*> v;
    for (auto& s : src) v.push_back(&s);
    for (auto& x : q) v.push_back(&x);
    v.push_back(&g);
    v.push_back(&n);
    v.push_back(&w);
    return v;
  }
};

Leaves MakeLeaves(const Case& c, uint64_t seed, int64_t B = 2, int64_t T = 3, int64_t D = 5) {
  torch::manual_seed(static_cast<int64_t>(seed));
  Leaves l;
  for (int64_t k = 0; k < c.K; ++k)
    l.src.push_back((torch::randn({B, T, D}, kF64) * (1.0 + 0.5 * k)).requires_grad_(true));
  for (int64_t r = 0; r < c.R; ++r) l.q.push_back((0.7 * torch::randn({D}, kF64)).requires_grad_());
  l.g = (1.0 + 0.3 * torch::randn({D}, kF64)).requires_grad_(true);
  l.n = (1.0 + 0.3 * torch::randn({D}, kF64)).requires_grad_(true);
  l.w = (0.4 * torch::randn({D, D}, kF64)).requires_grad_(true);
  return l;
}

struct ReadOut {
  std::vector<at::Tensor> outputs, alphas;
};

ReadOut Fused(const Leaves& l, NormMode mode) {
  std::vector<DepthSource> sources;
  for (const auto& s : l.src) sources.push_back(MakeDepthSource(s, kKeyEps));
  ReadNorm norm;
  if (mode != NormMode::kNone)
    norm = ReadNorm{l.n, kNormEps, mode == NormMode::kMean,
                    mode == NormMode::kProject ? l.w : at::Tensor()};
  DepthReadResult r = FusedDepthRead(sources, l.q, l.g, norm);
  return {r.outputs, r.alphas};
}

ReadOut Plain(const Leaves& l, NormMode mode) {
  const at::Tensor stacked = StackSources(l.src);
  const at::Tensor keys = DepthKeys(stacked, l.g, kKeyEps);
  ReadOut out;
  for (const auto& q : l.q) {
    DepthMix m = DepthMixture(stacked, keys, q);
    out.outputs.push_back(m.output);
    out.alphas.push_back(m.alpha);
  }
  if (mode == NormMode::kMean) out.outputs = {0.5 * (out.outputs[0] + out.outputs[1])};
  if (mode != NormMode::kNone)
    for (auto& h : out.outputs) h = RmsNorm(h, l.n, kNormEps);
  if (mode == NormMode::kProject) out.outputs[1] = at::linear(out.outputs[1], l.w);
  return out;
}

// Σ_i Σ outputs_i ⊙ C_i with fixed random C_i.
at::Tensor Objective(const ReadOut& o) {
  at::Generator gen = at::detail::createCPUGenerator(99);
  at::Tensor f = torch::zeros({}, kF64);
  for (const auto& y : o.outputs) f = f + (y * at::randn(y.sizes(), gen, kF64)).sum();
  return f;
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (int64_t K = 1; K <= 4; ++K) {
    cases.push_back({K, 1, NormMode::kNone});
    cases.push_back({K, 2, NormMode::kNone});
    cases.push_back({K, 1, NormMode::kEach});
    cases.push_back({K, 2, NormMode::kEach});
    cases.push_back({K, 2, NormMode::kMean});
    cases.push_back({K, 2, NormMode::kProject});
  }
  return cases;
}

std::string Name(const Case& c) {
  const char* n = c.norm == NormMode::kNone   ? "none"
                  : c.norm == NormMode::kEach ? "each"
                  : c.norm == NormMode::kMean ? "mean"
                                              : "project";
  return "K=" + std::to_string(c.K) + " R=" + std::to_string(c.R) + " norm=" + n;
}

TEST(FusedDepthReadTest, MatchesThePlainCompositionForwardAndBackwardInFloat64) {
  for (const bool kernel : {true, false}) {
    const KernelChoice choice(kernel);
    SCOPED_TRACE(ImplName(kernel));
    for (const Case& c : AllCases()) {
      Leaves a = MakeLeaves(c, 10 + static_cast<uint64_t>(c.K)), b = MakeLeaves(c, 10 + c.K);
      const ReadOut fused = Fused(a, c.norm), plain = Plain(b, c.norm);
      ASSERT_EQ(fused.outputs.size(), plain.outputs.size()) << Name(c);
      for (size_t i = 0; i < fused.outputs.size(); ++i)
        EXPECT_LT(MaxRelDiff(fused.outputs[i], plain.outputs[i]), 1e-13) << Name(c);
      for (size_t r = 0; r < fused.alphas.size(); ++r) {
        EXPECT_EQ(fused.alphas[r].sizes(), plain.alphas[r].sizes()) << Name(c);
        EXPECT_LT((fused.alphas[r] - plain.alphas[r]).abs().max().item<double>(), 1e-14) << Name(c);
        EXPECT_FALSE(fused.alphas[r].requires_grad());
      }
      Objective(fused).backward();
      Objective(plain).backward();
      const auto fa = a.All(), pb = b.All();
      for (size_t i = 0; i < fa.size(); ++i) {
        const bool used = (c.norm != NormMode::kNone || fa[i] != &a.n) &&
                          (c.norm == NormMode::kProject || fa[i] != &a.w);
        if (!used) {
          EXPECT_FALSE(fa[i]->grad().defined()) << Name(c) << " leaf " << i;
          continue;
        }
        ASSERT_TRUE(fa[i]->grad().defined()) << Name(c) << " leaf " << i;
        ASSERT_TRUE(pb[i]->grad().defined()) << Name(c) << " leaf " << i;
        // With one source the queries and the key gain get no gradient (zero both ways).
        const double scale = std::max(pb[i]->grad().abs().max().item<double>(), 1e-12);
        EXPECT_LT((fa[i]->grad() - pb[i]->grad()).abs().max().item<double>() / scale, 1e-11)
            << Name(c) << " leaf " << i;
      }
    }
  }
}

// Central finite differences of the fused read (sources through MakeDepthSource, so the
// inverse-RMS path is included) against its custom backward, float64.
TEST(FusedDepthReadTest, BackwardMatchesFiniteDifferencesInFloat64) {
  for (const bool kernel : {true, false}) {
    const KernelChoice choice(kernel);
    SCOPED_TRACE(ImplName(kernel));
    for (const Case& c :
         {Case{3, 2, NormMode::kEach}, Case{2, 2, NormMode::kMean}, Case{4, 1, NormMode::kNone},
          Case{1, 2, NormMode::kEach}, Case{3, 2, NormMode::kProject}}) {
      Leaves l = MakeLeaves(c, 40 + static_cast<uint64_t>(c.K), 1, 2, 4);
      Objective(Fused(l, c.norm)).backward();
      auto eval = [&]() {
        torch::NoGradGuard no_grad;
        return Objective(Fused(l, c.norm)).item<double>();
      };
      const double h = 1e-6;
      for (at::Tensor* x : l.All()) {
        if (c.norm == NormMode::kNone && x == &l.n) continue;
        if (c.norm != NormMode::kProject && x == &l.w) continue;
        const at::Tensor analytic = x->grad().flatten();
        at::Tensor flat = x->detach().view({-1});  // shares storage with the leaf
        for (int64_t i = 0; i < flat.numel(); ++i) {
          const double v = flat[i].item<double>();
          flat[i] = v + h;
          const double fp = eval();
          flat[i] = v - h;
          const double fm = eval();
          flat[i] = v;
          const double numeric = (fp - fm) / (2 * h);
          EXPECT_NEAR(analytic[i].item<double>(), numeric, 1e-7 + 1e-6 * std::abs(numeric))
              << Name(c) << " element " << i;
        }
      }
    }
  }
}

TEST(FusedDepthReadTest, SingleSourceIsReturnedUnchanged) {
  for (const bool kernel : {true, false}) {
    const KernelChoice choice(kernel);
    SCOPED_TRACE(ImplName(kernel));
    const at::Tensor s = torch::randn({2, 3, 6}, kF64);
    const DepthReadResult r = FusedDepthRead({MakeDepthSource(s, kKeyEps)},
                                             {torch::randn({6}, kF64)}, torch::ones({6}, kF64));
    EXPECT_TRUE(torch::equal(r.outputs[0], s));
    EXPECT_TRUE(torch::equal(r.alphas[0], torch::ones({1, 2, 3}, kF64)));
  }
}

// What T6 needs at the operator level, in float32: a route's bits do not depend on the number
// of routes of its read, nor on the other route's query; equal queries give equal routes.
TEST(FusedDepthReadTest, RouteBitsDoNotDependOnTheOtherRoute) {
  for (const bool kernel : {true, false}) {
    const KernelChoice choice(kernel);
    SCOPED_TRACE(ImplName(kernel));
    torch::manual_seed(5);
    const int64_t B = 2, T = 16, D = 32;
    std::vector<DepthSource> sources;
    for (int k = 0; k < 4; ++k) sources.push_back(MakeDepthSource(torch::randn({B, T, D}), 1e-6));
    const at::Tensor q = torch::randn({D}), other = torch::randn({D}),
                     g = 1 + 0.2 * torch::randn({D});
    const at::Tensor n = 1 + 0.2 * torch::randn({D});
    for (bool normed : {false, true}) {
      const ReadNorm norm = normed ? ReadNorm{n, 1e-6, false, at::Tensor()} : ReadNorm{};
      const DepthReadResult one = FusedDepthRead(sources, {q}, g, norm);
      const DepthReadResult same = FusedDepthRead(sources, {q, q}, g, norm);
      const DepthReadResult diff = FusedDepthRead(sources, {q, other}, g, norm);
      EXPECT_TRUE(torch::equal(one.outputs[0], same.outputs[0]));
      EXPECT_TRUE(torch::equal(one.outputs[0], same.outputs[1]));
      EXPECT_TRUE(torch::equal(one.outputs[0], diff.outputs[0]));
      EXPECT_TRUE(torch::equal(one.alphas[0], same.alphas[1]));
      EXPECT_TRUE(torch::equal(one.alphas[0], diff.alphas[0]));
      EXPECT_FALSE(torch::equal(diff.outputs[0], diff.outputs[1]));
    }
    // Route 1 projected inside the read is bitwise the same projection taken outside (Block's).
    const at::Tensor w = torch::randn({D, D}) * 0.2;
    const DepthReadResult one =
        FusedDepthRead(sources, {q}, g, ReadNorm{n, 1e-6, false, at::Tensor()});
    const DepthReadResult proj = FusedDepthRead(sources, {q, q}, g, ReadNorm{n, 1e-6, false, w});
    EXPECT_TRUE(torch::equal(one.outputs[0], proj.outputs[0]));
    EXPECT_TRUE(torch::equal(at::linear(one.outputs[0], w), proj.outputs[1]));
  }
}

// The whole model, fused (the default) vs the plain composition, every arm, float64: logits,
// routes, and the gradient of the loss for every parameter.
TEST(FusedDepthReadTest, WholeModelFusedMatchesPlainForEveryArmInFloat64) {
  for (Arm arm : AllArms()) {
    if (arm == Arm::kStandard) continue;
    const ModelConfig c = Small(arm);
    Gpt model(c, 81);
    Perturb(model, 82);
    model->to(torch::kDouble);
    const at::Tensor tokens = RandomTokens(c, 2, 16, 83);
    auto run = [&](bool plain) {
      model->zero_grad();
      ForwardOutput out = model->Forward(tokens.narrow(1, 0, 15),
                                         {.capture_routes = true, .plain_depth_read = plain});
      GptImpl::Loss(out.logits, tokens.narrow(1, 1, 15)).backward();
      std::vector<at::Tensor> grads;
      for (const auto& p : model->parameters())
        grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
      return std::make_pair(std::move(out), std::move(grads));
    };
    const auto [fused, fused_grads] = run(false);
    const auto [plain, plain_grads] = run(true);
    EXPECT_LT(MaxRelDiff(fused.logits, plain.logits), 1e-12) << ArmName(arm);
    ASSERT_EQ(fused.routes.size(), plain.routes.size()) << ArmName(arm);
    for (size_t i = 0; i < fused.routes.size(); ++i) {
      EXPECT_EQ(fused.routes[i].site, plain.routes[i].site);
      EXPECT_EQ(fused.routes[i].layer, plain.routes[i].layer);
      EXPECT_LT((fused.routes[i].alpha - plain.routes[i].alpha).abs().max().item<double>(), 1e-13)
          << ArmName(arm) << " route " << i;
    }
    ASSERT_EQ(fused_grads.size(), plain_grads.size());
    for (size_t i = 0; i < fused_grads.size(); ++i) {
      ASSERT_EQ(fused_grads[i].defined(), plain_grads[i].defined()) << ArmName(arm) << " " << i;
      if (!fused_grads[i].defined()) continue;
      const double scale = std::max(plain_grads[i].abs().max().item<double>(), 1e-12);
      EXPECT_LT((fused_grads[i] - plain_grads[i]).abs().max().item<double>() / scale, 1e-9)
          << ArmName(arm) << " parameter " << i;
    }
  }
}

// Every parameter's gradient of the loss on `tokens` (inputs and targets), in the order of
// parameters(), as float64.
std::vector<at::Tensor> LossGradients(Gpt& model, const at::Tensor& tokens, bool plain) {
  model->zero_grad();
  const int64_t T = tokens.size(1) - 1;
  GptImpl::Loss(model->Forward(tokens.narrow(1, 0, T), {.plain_depth_read = plain}).logits,
                tokens.narrow(1, 1, T))
      .backward();
  std::vector<at::Tensor> grads;
  for (const auto& p : model->parameters())
    grads.push_back(p.grad().defined() ? p.grad().to(torch::kDouble).clone() : at::Tensor());
  model->zero_grad();
  return grads;
}

// The training loop's update (worker/trainer): AdamW with decay on the matrices only (betas
// 0.9/0.95, decay 0.1) and the gradient norm clipped at 1.
struct Trainer {
  explicit Trainer(Gpt& m)
      : model(m), opt([&] {
          std::vector<torch::optim::OptimizerParamGroup> groups;
          for (const bool decay : {true, false}) {
            auto o = std::make_unique<torch::optim::AdamWOptions>(3e-3);
            o->betas({0.9, 0.95}).eps(1e-8).weight_decay(decay ? 0.1 : 0.0);
            groups.emplace_back(decay ? m->DecayParameters() : m->NoDecayParameters(),
                                std::move(o));
          }
          return groups;
        }()) {}
  double Step(const at::Tensor& tokens, bool plain) {
    opt.zero_grad();
    const int64_t T = tokens.size(1) - 1;
    at::Tensor loss =
        GptImpl::Loss(model->Forward(tokens.narrow(1, 0, T), {.plain_depth_read = plain}).logits,
                      tokens.narrow(1, 1, T));
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    return loss.item<double>();
  }
  Gpt& model;
  torch::optim::AdamW opt;
};

// A whole training trajectory, fused vs plain, every arm, float64: 30 AdamW steps (decay
// groups and clipping as the trainer) from the matched-seed init, with a learning rate high
// enough to move every pseudo-query, the V query included. The per-step losses and the final
// parameters agree to rounding. One forward and backward agreeing (the test above) does not
// cover what training adds: the optimizer's groups, state and several steps in which a slightly
// wrong gradient (a detached or mis-scaled term) would accumulate.
TEST(FusedDepthReadTest, TrainingTrajectoryFusedMatchesPlainForEveryArmInFloat64) {
  constexpr int kSteps = 20;
  for (Arm arm : AllArms()) {
    if (arm == Arm::kStandard) continue;
    const ModelConfig c = Small(arm);
    Gpt fused(c, 91), plain(c, 91);
    fused->to(torch::kDouble);
    plain->to(torch::kDouble);
    Trainer tf(fused), tp(plain);
    for (int step = 0; step < kSteps; ++step) {
      const at::Tensor tokens = RandomTokens(c, 4, 16, 500 + static_cast<uint64_t>(step));
      const double lf = tf.Step(tokens, false), lp = tp.Step(tokens, true);
      ASSERT_NEAR(lf, lp, 1e-12 * std::abs(lp)) << ArmName(arm) << " step " << step;
    }
    const auto pf = fused->named_parameters(), pp = plain->named_parameters();
    ASSERT_EQ(pf.size(), pp.size());
    for (size_t i = 0; i < pf.size(); ++i) {
      ASSERT_EQ(pf[i].key(), pp[i].key());
      EXPECT_LT(MaxRelDiff(pf[i].value(), pp[i].value()), 1e-10)
          << ArmName(arm) << " " << pf[i].key();
    }
    // The run trained the depth reads: the queries left zero (and rd's V query left q_attn).
    const LayerImpl& l1 = *fused->layers()[1];
    EXPECT_GT(l1.q_attn.abs().max().item<double>(), 1e-3) << ArmName(arm);
    if (arm == Arm::kRd) {
      EXPECT_GT((l1.q_v - l1.q_attn).abs().max().item<double>(), 1e-3) << ArmName(arm);
    }
  }
}

// Float32, on a trained-looking state (gains and queries off their init): the fused and the
// plain gradients of every parameter are both within float32 rounding of the float64 gradient.
// A term of the fused backward that is wrong only in float32 (a lost precision, a wrong dtype,
// a stale saved tensor) shows here while the float64 tests pass.
TEST(FusedDepthReadTest, Float32GradientsOfBothPathsMatchFloat64ForEveryArm) {
  for (Arm arm : AllArms()) {
    if (arm == Arm::kStandard) continue;
    const ModelConfig c = Small(arm);
    Gpt model(c, 101);
    Perturb(model, 102);
    const at::Tensor tokens = RandomTokens(c, 4, 16, 103);
    const auto fused32 = LossGradients(model, tokens, false);
    const auto plain32 = LossGradients(model, tokens, true);
    model->to(torch::kDouble);
    const auto ref = LossGradients(model, tokens, true);
    const auto names = model->named_parameters().keys();
    double total = 0;
    for (const auto& g : ref)
      if (g.defined()) total += g.pow(2).sum().item<double>();
    total = std::sqrt(total);
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_TRUE(ref[i].defined()) << ArmName(arm) << " " << names[i];
      // Relative to the parameter's own gradient, floored at 1e-3 of the whole gradient's norm.
      // Measured: at most 1.2e-5 (rd, fused; 7.6e-6 plain; other arms ≤ 2.7e-6); a detached or
      // 0.1%-mis-scaled term of the backward gives ≥ 1e-3.
      const double scale = std::max(ref[i].norm().item<double>(), 1e-3 * total);
      EXPECT_LT((fused32[i] - ref[i]).norm().item<double>() / scale, 5e-5)
          << ArmName(arm) << " fused " << names[i];
      EXPECT_LT((plain32[i] - ref[i]).norm().item<double>() / scale, 5e-5)
          << ArmName(arm) << " plain " << names[i];
    }
  }
}

// Float32 leaves with the values of `l` (their own autograd leaves).
Leaves ToFloat(const Leaves& l) {
  auto f = [](const at::Tensor& t) { return t.detach().to(torch::kFloat).requires_grad_(true); };
  Leaves o;
  for (const auto& x : l.src) o.src.push_back(f(x));
  for (const auto& x : l.q) o.q.push_back(f(x));
  o.g = f(l.g);
  o.n = f(l.n);
  o.w = f(l.w);
  return o;
}

// One fused read's outputs, alphas and every leaf's gradient (undefined where none).
std::vector<at::Tensor> ReadAndGradients(Leaves& l, NormMode mode) {
  const ReadOut out = Fused(l, mode);
  Objective(out).backward();
  std::vector<at::Tensor> all = out.outputs;
  all.insert(all.end(), out.alphas.begin(), out.alphas.end());
  for (at::Tensor* x : l.All()) {
    all.push_back(x->grad().defined() ? x->grad().clone() : at::Tensor());
    x->mutable_grad() = at::Tensor();
  }
  return all;
}

// The kernel and the op-by-op path compute the same function in float32, at a shape with more
// than one chunk of tokens (kChunk = 64) and a width that is not a multiple of the kernel's 8
// lanes, for every case: outputs, weights and every gradient agree to float32 rounding.
TEST(FusedDepthReadTest, KernelAndOpByOpPathsAgreeInFloat32) {
  for (const Case& c : AllCases()) {
    const Leaves base = MakeLeaves(c, 60 + static_cast<uint64_t>(c.K), 2, 70, 37);
    std::vector<at::Tensor> res[2];
    for (const bool kernel : {true, false}) {
      const KernelChoice choice(kernel);
      Leaves l = ToFloat(base);
      res[kernel ? 0 : 1] = ReadAndGradients(l, c.norm);
    }
    ASSERT_EQ(res[0].size(), res[1].size()) << Name(c);
    for (size_t i = 0; i < res[0].size(); ++i) {
      ASSERT_EQ(res[0][i].defined(), res[1][i].defined()) << Name(c) << " tensor " << i;
      if (!res[0][i].defined()) continue;
      const double scale = std::max(res[1][i].abs().max().item<double>(), 1e-6);
      EXPECT_LT((res[0][i] - res[1][i]).abs().max().item<double>() / scale, 2e-5)
          << Name(c) << " tensor " << i;
    }
  }
}

// The kernel's bits depend neither on the instruction set it runs in (AVX2 or the baseline
// build) nor on the number of threads: forward outputs, weights, ∂L/∂sources, ∂L/∂queries,
// ∂L/∂key gain and ∂L/∂n (the last three from the kernel's reductions over tokens) are bitwise
// equal. On a CPU without AVX2 both runs
// take the baseline build and the first comparison holds trivially.
TEST(FusedDepthReadTest, KernelBitsDoNotDependOnInstructionSetOrThreadCount) {
  const KernelChoice choice(true);
  const int threads_was = at::get_num_threads();
  for (const Case& c : {Case{3, 2, NormMode::kEach}, Case{4, 2, NormMode::kMean},
                        Case{2, 1, NormMode::kEach}, Case{3, 2, NormMode::kNone}}) {
    const Leaves base = MakeLeaves(c, 70 + static_cast<uint64_t>(c.K), 3, 70, 45);
    auto run = [&](bool baseline, int threads) {
      cpu::ForceBaselineKernels(baseline);
      at::set_num_threads(threads);
      Leaves l = ToFloat(base);
      const ReadOut out = Fused(l, c.norm);
      Objective(out).backward();
      std::vector<at::Tensor> v = out.outputs;
      v.insert(v.end(), out.alphas.begin(), out.alphas.end());
      for (const auto& x : l.src) v.push_back(x.grad());
      for (const auto& q : l.q) v.push_back(q.grad());
      v.push_back(l.g.grad());
      if (c.norm != NormMode::kNone) v.push_back(l.n.grad());
      cpu::ForceBaselineKernels(false);
      at::set_num_threads(threads_was);
      return v;
    };
    const auto ref = run(false, 1), baseline = run(true, 1), threaded = run(false, 3);
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_TRUE(torch::equal(ref[i], baseline[i])) << Name(c) << " baseline build, tensor " << i;
      EXPECT_TRUE(torch::equal(ref[i], threaded[i])) << Name(c) << " 3 threads, tensor " << i;
    }
  }
}

}  // namespace
}  // namespace rdattn::model
