// AdamW (worker/trainer/optimizer.h) against LibTorch's torch::optim::AdamW: the same
// trajectories (float64 to ~1e-14, float32 to a few ulps; bitwise on ATen's default kernels),
// parameters without a gradient skipped, its own state saved and loaded bitwise, torch's saved
// state (checkpoints of rdattn before it owned its state) loaded and continued, bad state refused,
// the ATen fallback bitwise torch's, and bits independent of the thread count.
#include "worker/trainer/optimizer.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/cpu_features.h"
#include "model/torch_compat.h"
#include "worker/trainer/adamw_kernel.h"

namespace rdattn::trainer {
namespace {

// Shapes of the parameters: odd sizes (vector tails), a decay group (matrices) and a no-decay group
// (vectors), as MakeAdamW makes them. kNoGrad never gets a gradient.
const std::vector<std::vector<int64_t>> kShapes = {{37, 13}, {64, 8}, {13}, {5}, {1}, {3, 7}};
constexpr size_t kNoGrad = 3;
bool Decays(size_t i) { return kShapes[i].size() == 2; }

std::vector<at::Tensor> MakeParams(at::ScalarType dtype, uint64_t seed = 7) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<at::Tensor> params;
  params.reserve(kShapes.size());
  for (const auto& shape : kShapes)
    params.push_back(at::randn(shape, gen, at::TensorOptions().dtype(dtype)).requires_grad_());
  return params;
}

std::vector<at::Tensor> Clone(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  out.reserve(params.size());
  for (const auto& p : params) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

std::unique_ptr<torch::optim::AdamW> MakeTorchAdamW(const std::vector<at::Tensor>& params,
                                                    double weight_decay = 0.1) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const bool decay : {true, false}) {
    std::vector<at::Tensor> members;
    for (size_t i = 0; i < params.size(); ++i)
      if (Decays(i) == decay) members.push_back(params[i]);
    auto options = std::make_unique<torch::optim::AdamWOptions>();
    options->betas({0.9, 0.95}).eps(1e-8).weight_decay(decay ? weight_decay : 0.0);
    groups.emplace_back(members, std::move(options));
  }
  return std::make_unique<torch::optim::AdamW>(std::move(groups));
}

// rdattn's AdamW over the same groups, in the same order.
std::unique_ptr<AdamW> MakeAdamW(const std::vector<at::Tensor>& params, double weight_decay = 0.1) {
  std::vector<AdamWGroup> groups;
  for (const bool decay : {true, false}) {
    AdamWGroup g;
    g.weight_decay = decay ? weight_decay : 0.0;
    for (size_t i = 0; i < params.size(); ++i)
      if (Decays(i) == decay) g.params.push_back(params[i]);
    groups.push_back(std::move(g));
  }
  return std::make_unique<AdamW>(std::move(groups), AdamWHyper{0.9, 0.95, 1e-8});
}

// Step `step`'s gradients (the same for every copy of the parameters) and learning rate (a warmup,
// large enough that the decay and the update both move the weights).
void SetGradients(std::vector<at::Tensor>& params, int64_t step) {
  for (size_t i = 0; i < params.size(); ++i) {
    if (i == kNoGrad) continue;
    at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(1000 * step + i));
    params[i].mutable_grad() =
        at::randn(params[i].sizes(), gen, at::TensorOptions().dtype(params[i].scalar_type())) *
        (0.5 + static_cast<double>(i));
  }
}
double Lr(int64_t step) { return 1e-2 * (1 + step % 5); }

void Steps(std::vector<at::Tensor>& params, torch::optim::AdamW& opt, int64_t first,
           int64_t steps) {
  for (int64_t s = first; s < first + steps; ++s) {
    SetGradients(params, s);
    for (auto& group : opt.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(Lr(s));
    opt.step();
  }
}
void Steps(std::vector<at::Tensor>& params, AdamW& opt, int64_t first, int64_t steps) {
  for (int64_t s = first; s < first + steps; ++s) {
    SetGradients(params, s);
    opt.SetLearningRate(Lr(s));
    opt.Step();
  }
}

// Each parameter's state, in `params`' order, from either optimizer.
using View = std::optional<torch_compat::AdamWParamStateView>;
std::vector<View> States(const std::vector<at::Tensor>& params, const torch::optim::AdamW& opt) {
  std::vector<View> out;
  for (const auto& p : params) out.push_back(torch_compat::TorchAdamWState(opt, p));
  return out;
}
std::vector<View> States(const std::vector<at::Tensor>& params, const AdamW& opt) {
  std::vector<View> out(params.size());
  for (size_t g = 0; g < opt.groups().size(); ++g) {
    for (size_t i = 0; i < opt.groups()[g].params.size(); ++i) {
      const AdamWParamState* s = opt.State(g, i);
      if (s == nullptr) continue;
      for (size_t k = 0; k < params.size(); ++k)
        if (params[k].is_same(opt.groups()[g].params[i]))
          out[k] = torch_compat::AdamWParamStateView{s->step, s->exp_avg, s->exp_avg_sq};
    }
  }
  return out;
}
size_t CountStates(const std::vector<View>& v) {
  size_t n = 0;
  for (const View& s : v) n += s.has_value();
  return n;
}

// max |a − b| / max |a|: the difference relative to the tensor's scale.
double RelDiff(const at::Tensor& a, const at::Tensor& b) {
  const double scale = a.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

// The largest distance in float32 ulps between two tensors' elements (same signs assumed).
int64_t MaxUlps(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor ia = a.detach().contiguous().view(at::kInt).to(at::kLong);
  const at::Tensor ib = b.detach().contiguous().view(at::kInt).to(at::kLong);
  return (ia - ib).abs().max().item<int64_t>();
}

bool Bitwise(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && at::equal(a, b);
}

// Every parameter and its state in `a` against `b`: `cmp(x, y, what)` on each pair.
template <typename OptA, typename OptB, typename Cmp>
void CompareAll(const std::vector<at::Tensor>& pa, const OptA& oa,
                const std::vector<at::Tensor>& pb, const OptB& ob, Cmp cmp) {
  const std::vector<View> sa = States(pa, oa), sb = States(pb, ob);
  for (size_t i = 0; i < pa.size(); ++i) {
    const std::string at = "param " + std::to_string(i);
    cmp(pa[i].detach(), pb[i].detach(), at);
    ASSERT_EQ(sa[i].has_value(), sb[i].has_value()) << at;
    if (!sa[i]) continue;
    EXPECT_EQ(sa[i]->step, sb[i]->step) << at;
    cmp(sa[i]->exp_avg, sb[i]->exp_avg, at + " exp_avg");
    cmp(sa[i]->exp_avg_sq, sb[i]->exp_avg_sq, at + " exp_avg_sq");
  }
}

template <typename OptA, typename OptB>
void ExpectClose(const std::vector<at::Tensor>& pa, const OptA& oa,
                 const std::vector<at::Tensor>& pb, const OptB& ob) {
  CompareAll(pa, oa, pb, ob, [](const at::Tensor& x, const at::Tensor& y, const std::string& w) {
    ASSERT_EQ(x.scalar_type(), y.scalar_type()) << w;
    if (x.scalar_type() == at::kDouble) {
      EXPECT_LE(RelDiff(x, y), 1e-14) << w;
    } else {
      // In units of 2^-24 (float32's ulp at 1) relative to the tensor's largest magnitude:
      // elementwise ulps mean little for exp_avg, whose elements cancel towards 0 (one element
      // 2319 ulps apart at 2.2 units of the largest). 2.6 measured over 20 steps.
      EXPECT_LE(RelDiff(x, y) * 0x1p24, 8) << w << " (elementwise " << MaxUlps(x, y) << " ulps)";
    }
  });
}

template <typename OptA, typename OptB>
void ExpectBitwise(const std::vector<at::Tensor>& pa, const OptA& oa,
                   const std::vector<at::Tensor>& pb, const OptB& ob) {
  CompareAll(pa, oa, pb, ob, [](const at::Tensor& x, const at::Tensor& y, const std::string& w) {
    EXPECT_TRUE(Bitwise(x, y)) << w;
  });
}

template <typename Opt>
std::string Save(const Opt& opt) {
  torch::serialize::OutputArchive ar;
  if constexpr (std::is_same_v<Opt, AdamW>) {
    opt.Save(ar);
  } else {
    opt.save(ar);
  }
  std::ostringstream os;
  ar.save_to(os);
  return os.str();
}
void Load(AdamW& opt, const std::string& bytes) {
  torch::serialize::InputArchive ar;
  std::istringstream is(bytes);
  ar.load_from(is);
  opt.Load(ar);
}

class Trajectory : public ::testing::TestWithParam<std::tuple<at::ScalarType, double>> {};

// 20 steps of each from the same start: the fused step follows torch's, parameters and state.
TEST_P(Trajectory, FollowsTorchAdamW) {
  const auto [dtype, wd] = GetParam();
  std::vector<at::Tensor> pt = MakeParams(dtype), pf = Clone(pt);
  const at::Tensor start = pt[0].detach().clone();
  auto ot = MakeTorchAdamW(pt, wd);
  auto of = MakeAdamW(pf, wd);
  ASSERT_TRUE(of->FusedApplies());
  Steps(pt, *ot, 0, 20);
  Steps(pf, *of, 0, 20);
  EXPECT_FALSE(Bitwise(pf[0].detach(), start)) << "the parameters moved";
  ExpectClose(pt, *ot, pf, *of);
  ASSERT_TRUE(States(pf, *of)[0].has_value());
  EXPECT_EQ(States(pf, *of)[0]->step, 20);
  EXPECT_EQ(CountStates(States(pt, *ot)), CountStates(States(pf, *of)));
}

// A parameter without a gradient: untouched, and no state made for it (torch skips it too).
TEST_P(Trajectory, SkipsParametersWithoutGradient) {
  const auto [dtype, wd] = GetParam();
  std::vector<at::Tensor> pf = MakeParams(dtype);
  const at::Tensor before = pf[kNoGrad].detach().clone();
  auto of = MakeAdamW(pf, wd);
  Steps(pf, *of, 0, 3);
  EXPECT_FALSE(pf[kNoGrad].grad().defined());
  EXPECT_TRUE(Bitwise(pf[kNoGrad].detach(), before));
  EXPECT_FALSE(States(pf, *of)[kNoGrad].has_value());
  EXPECT_EQ(CountStates(States(pf, *of)), kShapes.size() - 1);
}

INSTANTIATE_TEST_SUITE_P(DtypeAndDecay, Trajectory,
                         ::testing::Combine(::testing::Values(at::kDouble, at::kFloat),
                                            ::testing::Values(0.0, 0.1)));

// torch's kernels differ from the fused loop only by their fused multiply-adds (vec::fmadd in
// add_'s alpha path under AVX2/AVX512). Without them (ATen's default kernels, chosen by
// ATEN_CPU_CAPABILITY=default: ctest's trainer_optimizer.default_isa) the two are bitwise equal,
// which pins the operation order and every scalar's cast.
TEST(FusedAdamW, BitwiseOnDefaultIsa) {
  const char* isa = std::getenv("ATEN_CPU_CAPABILITY");
  if (isa == nullptr || std::string(isa) != "default")
    GTEST_SKIP() << "needs ATEN_CPU_CAPABILITY=default";
  for (const at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    for (const double wd : {0.0, 0.1}) {
      std::vector<at::Tensor> pt = MakeParams(dtype), pf = Clone(pt);
      auto ot = MakeTorchAdamW(pt, wd);
      auto of = MakeAdamW(pf, wd);
      Steps(pt, *ot, 0, 20);
      Steps(pf, *of, 0, 20);
      ExpectBitwise(pt, *ot, pf, *of);
    }
  }
}

class StateArchive : public ::testing::TestWithParam<at::ScalarType> {};

// Saved after 6 steps and loaded into a fresh AdamW over copies of the parameters: the same
// state, bitwise, and 6 more steps on it give the uninterrupted run's bits.
TEST_P(StateArchive, SavedStateLoadsAndContinuesBitwise) {
  std::vector<at::Tensor> pf = MakeParams(GetParam());
  auto of = MakeAdamW(pf);
  Steps(pf, *of, 0, 6);
  const std::string saved = Save(*of);
  std::vector<at::Tensor> pr = Clone(pf);
  auto orr = MakeAdamW(pr);
  Load(*orr, saved);
  ExpectBitwise(pf, *of, pr, *orr);
  Steps(pf, *of, 6, 6);
  Steps(pr, *orr, 6, 6);
  ExpectBitwise(pf, *of, pr, *orr);
  EXPECT_EQ(States(pr, *orr)[0]->step, 12);
}

// torch::optim::AdamW's own archive (what checkpoints held before rdattn owned its state): the
// state loads bitwise, under this LibTorch's state keys, and the steps continue from it (a fresh
// state would restart the moments and the bias correction) as torch's own steps do.
TEST_P(StateArchive, TorchsArchiveLoadsAndContinues) {
  std::vector<at::Tensor> pt = MakeParams(GetParam());
  auto ot = MakeTorchAdamW(pt);
  Steps(pt, *ot, 0, 6);
  std::vector<at::Tensor> pf = Clone(pt);
  auto of = MakeAdamW(pf);
  Load(*of, Save(*ot));
  ExpectBitwise(pt, *ot, pf, *of);
  EXPECT_EQ(CountStates(States(pf, *of)), kShapes.size() - 1);
  Steps(pt, *ot, 6, 6);
  Steps(pf, *of, 6, 6);
  ExpectClose(pt, *ot, pf, *of);
  EXPECT_EQ(States(pf, *of)[0]->step, 12);
}

INSTANTIATE_TEST_SUITE_P(Dtype, StateArchive, ::testing::Values(at::kDouble, at::kFloat));

// A state that does not fit the parameters (another model's shape, another dtype) is refused
// with the parameter's key and the reason, and the state already held is kept.
TEST(AdamWState, MismatchedStateIsRefusedAndNothingChanges) {
  std::vector<at::Tensor> pa = MakeParams(at::kFloat);
  auto oa = MakeAdamW(pa);
  Steps(pa, *oa, 0, 2);
  const std::string saved = Save(*oa);
  for (const bool shape : {true, false}) {
    std::vector<at::Tensor> pb = shape ? MakeParams(at::kFloat) : MakeParams(at::kDouble);
    if (shape) pb[0] = at::randn({36, 13}).requires_grad_();  // the first matrix is 37 × 13
    auto ob = MakeAdamW(pb);
    Steps(pb, *ob, 0, 1);
    const std::vector<View> before = States(pb, *ob);
    try {
      Load(*ob, saved);
      ADD_FAILURE() << "a mismatched state was accepted (shape " << shape << ")";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("g0.p0.exp_avg"), std::string::npos) << what;
      EXPECT_NE(what.find(shape ? "shape" : "dtype"), std::string::npos) << what;
    }
    const std::vector<View> after = States(pb, *ob);
    for (size_t i = 0; i < pb.size(); ++i) {
      ASSERT_EQ(before[i].has_value(), after[i].has_value());
      if (before[i]) {
        EXPECT_EQ(before[i]->step, after[i]->step);
      }
    }
  }
}

// Not float/double, or not contiguous: torch's own op sequence, so bitwise torch's result.
TEST(FusedAdamW, FallsBackToTorchsOps) {
  for (const bool transpose : {true, false}) {
    const at::ScalarType dtype = transpose ? at::kFloat : at::kBFloat16;
    std::vector<at::Tensor> pt = MakeParams(dtype);
    if (transpose)  // a non-contiguous leaf
      pt[0] = pt[0].detach().t().contiguous().t().requires_grad_();
    std::vector<at::Tensor> pf = Clone(pt);
    if (transpose) pf[0] = pf[0].detach().t().contiguous().t().requires_grad_();
    auto ot = MakeTorchAdamW(pt);
    auto of = MakeAdamW(pf);
    SetGradients(pf, 0);
    EXPECT_FALSE(of->FusedApplies()) << transpose;
    Steps(pt, *ot, 0, 3);
    Steps(pf, *of, 0, 3);
    ExpectBitwise(pt, *ot, pf, *of);
  }
}

// The AVX2 build of the loop against the baseline build: the same bits, float and double, with
// and without decay, on a length with a vector tail.
template <typename T>
void ExpectBuildsAgree(at::ScalarType dtype) {
  constexpr int64_t n = 1003;
  at::Generator gen = at::detail::createCPUGenerator(11);
  const auto opts = at::TensorOptions().dtype(dtype);
  const at::Tensor p = at::randn({n}, gen, opts), g = at::randn({n}, gen, opts),
                   m = at::randn({n}, gen, opts) * 0.1, v = at::rand({n}, gen, opts) * 0.01;
  for (const bool decay : {false, true}) {
    adamw::Coefficients c;
    c.apply_decay = decay;
    c.decay = 1 - 0.01 * 0.1;
    c.beta1 = 0.9;
    c.one_minus_beta1 = 1 - 0.9;
    c.beta2 = 0.95;
    c.one_minus_beta2 = 1 - 0.95;
    c.sqrt_bias2 = std::sqrt(1 - std::pow(0.95, 3.0));
    c.eps = 1e-8;
    c.neg_step = -(0.01 / (1 - std::pow(0.9, 3.0)));
    at::Tensor out[2][3];
    for (int b = 0; b < 2; ++b) {
      out[b][0] = p.clone();
      out[b][1] = m.clone();
      out[b][2] = v.clone();
      T* pp = out[b][0].data_ptr<T>();
      T* mm = out[b][1].data_ptr<T>();
      T* vv = out[b][2].data_ptr<T>();
      if (b == 0) {
        adamw::base::Step(pp, g.data_ptr<T>(), mm, vv, n, c);
      } else {
        adamw::avx2::Step(pp, g.data_ptr<T>(), mm, vv, n, c);
      }
    }
    EXPECT_FALSE(Bitwise(out[0][0], p));
    for (int k = 0; k < 3; ++k) EXPECT_TRUE(Bitwise(out[0][k], out[1][k])) << decay << " " << k;
  }
}

TEST(FusedAdamW, Avx2BuildMatchesBaseline) {
  if (!::rdattn::cpu::HasAvx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  ExpectBuildsAgree<float>(at::kFloat);
  ExpectBuildsAgree<double>(at::kDouble);
}

// Elementwise: the same bits on 1 thread as on 4, with tensors several grains long.
TEST(FusedAdamW, BitsIndependentOfThreads) {
  const int threads = at::get_num_threads();
  std::vector<at::Tensor> runs[2];
  std::unique_ptr<AdamW> opts[2];
  for (int r = 0; r < 2; ++r) {
    at::set_num_threads(r == 0 ? 1 : 4);
    at::Generator gen = at::detail::createCPUGenerator(3);
    runs[r] = {at::randn({300, 1000}, gen).requires_grad_()};
    opts[r] = std::make_unique<AdamW>(std::vector<AdamWGroup>{{runs[r], 0.01}}, AdamWHyper{});
    opts[r]->SetLearningRate(1e-2);
    for (int64_t s = 0; s < 3; ++s) {
      at::Generator g = at::detail::createCPUGenerator(100 + static_cast<uint64_t>(s));
      runs[r][0].mutable_grad() = at::randn({300, 1000}, g);
      opts[r]->Step();
    }
  }
  at::set_num_threads(threads);
  EXPECT_TRUE(Bitwise(runs[0][0].detach(), runs[1][0].detach()));
  EXPECT_TRUE(Bitwise(opts[0]->State(0, 0)->exp_avg_sq, opts[1]->State(0, 0)->exp_avg_sq));
}

// --- FusedClipGradients against torch::nn::utils::clip_grad_norm_.

// Gradients of `params` set from `seed` at scale `scale` (kNoGrad left undefined).
std::vector<at::Tensor> GradParams(at::ScalarType dtype, double scale) {
  std::vector<at::Tensor> params = MakeParams(dtype);
  SetGradients(params, 5);
  for (auto& p : params)
    if (p.grad().defined()) p.mutable_grad().mul_(scale);
  return params;
}

// Above the clip (scaled down) and below it (untouched), float32 and float64: the norm as
// clip_grad_norm_'s, the clipped gradients within its roundings, kNoGrad still undefined.
TEST(FusedClip, FollowsClipGradNorm) {
  for (const at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    for (const double scale : {1.0, 1e-3}) {
      std::vector<at::Tensor> pt = GradParams(dtype, scale), pf = GradParams(dtype, scale);
      std::vector<at::Tensor> before;
      before.reserve(pf.size());
      for (const auto& p : pf)
        before.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
      const double want = torch::nn::utils::clip_grad_norm_(pt, 1.0);
      const std::optional<at::Tensor> got = FusedClipGradients(pf, 1.0);
      ASSERT_TRUE(got.has_value());
      EXPECT_EQ(got->scalar_type(), at::kDouble);
      const double tol = dtype == at::kDouble ? 1e-14 : 1e-6;
      EXPECT_NEAR(got->item<double>(), want, tol * want) << dtype << " " << scale;
      EXPECT_EQ(want > 1.0, scale == 1.0) << "the case clips: " << want;
      for (size_t i = 0; i < pf.size(); ++i) {
        ASSERT_EQ(pf[i].grad().defined(), i != kNoGrad);
        if (i == kNoGrad) continue;
        if (want <= 1.0) {
          EXPECT_TRUE(Bitwise(pf[i].grad(), before[i])) << i;
        } else {
          EXPECT_LE(RelDiff(pt[i].grad(), pf[i].grad()), dtype == at::kDouble ? 1e-15 : 4e-7) << i;
        }
      }
    }
  }
}

// The norm against Σ g² summed in float64 by ATen: float32 squares are exact in float64, so the
// fused norm is far closer than clip_grad_norm_'s float32 one.
TEST(FusedClip, NormIsFloat64Accurate) {
  std::vector<at::Tensor> pf = GradParams(at::kFloat, 1.0);
  double sq = 0;
  for (const auto& p : pf)
    if (p.grad().defined()) sq += p.grad().to(at::kDouble).pow(2).sum().item<double>();
  const double norm = FusedClipGradients(pf, 0.0)->item<double>();
  EXPECT_NEAR(norm, std::sqrt(sq), 1e-14 * norm);
}

TEST(FusedClip, NotCpuFloatIsLeftToTorch) {
  std::vector<at::Tensor> pf = GradParams(at::kBFloat16, 1.0);
  const at::Tensor before = pf[0].grad().clone();
  EXPECT_FALSE(FusedClipGradients(pf, 1e-3).has_value());
  EXPECT_TRUE(Bitwise(pf[0].grad(), before));
}

// A NaN in one gradient makes every gradient NaN, as clip_grad_norm_ does (coef = NaN).
TEST(FusedClip, NanNormPoisonsAsTorchDoes) {
  std::vector<at::Tensor> pf = GradParams(at::kFloat, 1.0);
  pf[1].mutable_grad()[0][0] = std::nan("");
  EXPECT_TRUE(std::isnan(FusedClipGradients(pf, 1.0)->item<double>()));
  EXPECT_TRUE(pf[0].grad().isnan().all().item<bool>());
}

// Fixed blocks: the same norm and gradients on 1 thread as on 4, over several blocks.
TEST(FusedClip, BitsIndependentOfThreads) {
  const int threads = at::get_num_threads();
  at::Tensor norms[2], grads[2];
  for (int r = 0; r < 2; ++r) {
    at::set_num_threads(r == 0 ? 1 : 4);
    at::Generator gen = at::detail::createCPUGenerator(5);
    std::vector<at::Tensor> params = {at::zeros({300, 1000}).requires_grad_()};
    params[0].mutable_grad() = at::randn({300, 1000}, gen);
    norms[r] = *FusedClipGradients(params, 1.0);
    grads[r] = params[0].grad();
  }
  at::set_num_threads(threads);
  EXPECT_TRUE(Bitwise(norms[0], norms[1]));
  EXPECT_TRUE(Bitwise(grads[0], grads[1]));
}

}  // namespace
}  // namespace rdattn::trainer
