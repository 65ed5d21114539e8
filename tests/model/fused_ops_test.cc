// The fused RMSNorm, SwiGLU and inverse-RMS operators (model/fused_ops.h) against their plain
// compositions (RmsNorm of model/depth.h; SwiGlu, at::silu(a) * b on the halves of ac = [a | b];
// InvRms): forward and backward in
// float64, central finite differences of the custom backwards, float32 agreement, extreme SwiGLU
// inputs, the kernels' bits across instruction sets and thread counts, the fallback for other
// dtypes, and the whole model with the kernels on and off. Shapes have row counts that are not a
// multiple of the kernels' row chunk (64) and widths that are not a multiple of their 8 lanes.
#include "model/fused_ops.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "model/depth.h"
#include "model/gpt.h"
#include "tests/model/test_util.h"

namespace rdattn::model {
namespace {

using testing::MaxRelDiff;
using testing::Perturb;
using testing::RandomTokens;
using testing::Small;

const auto kF64 = torch::TensorOptions().dtype(torch::kDouble);
constexpr double kEps = 1e-6;

// Turns the kernels on or off for a scope (SetFusedCpuKernels), restoring the setting.
struct KernelChoice : testing::ScopedSwitch {
  explicit KernelChoice(bool on) : ScopedSwitch(FusedCpuKernels, SetFusedCpuKernels, on) {}
};

// Shapes [.., D]: one row chunk or less, several chunks with a partial last one (3·70 = 210
// rows), and widths below, at and above multiples of 8.
const std::vector<std::vector<int64_t>> kShapes = {{2, 3, 5}, {3, 70, 45}, {130, 16}, {1, 1, 9}};

// The inputs of one operator call, float64 leaves, and a fixed random output weighting w so
// that the objective Σ y·w gives every output element its own gradient.
struct Inputs {
  at::Tensor x, g, w;  // RMSNorm: x, gain; SwiGLU: ac = [a | b] = x, a factor g of y's shape
};

Inputs MakeNormInputs(const std::vector<int64_t>& shape, uint64_t seed) {
  torch::manual_seed(static_cast<int64_t>(seed));
  Inputs in;
  in.x = (1.5 * torch::randn(shape, kF64)).requires_grad_(true);
  in.g = (1.0 + 0.3 * torch::randn({shape.back()}, kF64)).requires_grad_(true);
  in.w = torch::randn(shape, kF64);
  return in;
}

// SwiGLU: ac [..., 2F] for y's shape [..., F], and a factor g of y's shape (Σ y·g·w checks y
// and gives the harness's second input a gradient).
Inputs MakeSwiGluInputs(const std::vector<int64_t>& shape, uint64_t seed) {
  torch::manual_seed(static_cast<int64_t>(seed));
  std::vector<int64_t> ac_shape = shape;
  ac_shape.back() *= 2;
  Inputs in;
  in.x = (3.0 * torch::randn(ac_shape, kF64)).requires_grad_(true);
  in.g = (1.0 + 0.3 * torch::randn(shape, kF64)).requires_grad_(true);
  in.w = torch::randn(shape, kF64);
  return in;
}

// The inverse RMS: x, a per-row factor g [..., 1] (so that Σ ρ·g·w checks ρ's gradient and the
// harness's two inputs both get one), w [..., 1].
Inputs MakeInvInputs(const std::vector<int64_t>& shape, uint64_t seed) {
  torch::manual_seed(static_cast<int64_t>(seed));
  std::vector<int64_t> rows = shape;
  rows.back() = 1;
  Inputs in;
  in.x = (1.5 * torch::randn(shape, kF64)).requires_grad_(true);
  in.g = (1.0 + 0.3 * torch::randn(rows, kF64)).requires_grad_(true);
  in.w = torch::randn(rows, kF64);
  return in;
}

Inputs Cast(const Inputs& in, at::ScalarType dt) {
  return {in.x.detach().to(dt).requires_grad_(true), in.g.detach().to(dt).requires_grad_(true),
          in.w.to(dt)};
}

using Op = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;

const Op kFusedNorm = [](const at::Tensor& x, const at::Tensor& g) {
  return FusedRmsNorm(x, g, kEps);
};
const Op kPlainNorm = [](const at::Tensor& x, const at::Tensor& g) { return RmsNorm(x, g, kEps); };
const Op kFusedInv = [](const at::Tensor& x, const at::Tensor& g) {
  return FusedInvRms(x, kEps) * g;
};
const Op kPlainInv = [](const at::Tensor& x, const at::Tensor& g) { return InvRms(x, kEps) * g; };
const Op kFusedSwiGlu = [](const at::Tensor& ac, const at::Tensor& g) {
  return FusedSwiGlu(ac) * g;
};
const Op kPlainSwiGlu = [](const at::Tensor& ac, const at::Tensor& g) { return SwiGlu(ac) * g; };

// y, ∂(Σ y·w)/∂x, ∂(Σ y·w)/∂g.
std::vector<at::Tensor> RunOp(const Op& op, Inputs& in) {
  const at::Tensor y = op(in.x, in.g);
  (y * in.w).sum().backward();
  return {y.detach(), in.x.grad(), in.g.grad()};
}

void ExpectClose(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                 double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  const char* names[] = {"output", "grad 0", "grad 1"};
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].scalar_type(), want[i].scalar_type()) << what << " " << names[i];
    EXPECT_EQ(got[i].sizes(), want[i].sizes()) << what << " " << names[i];
    EXPECT_LT(MaxRelDiff(got[i].to(torch::kDouble), want[i].to(torch::kDouble)), tol)
        << what << " " << names[i];
  }
}

std::string ShapeName(const std::vector<int64_t>& s) {
  std::string n;
  for (const int64_t d : s) n += (n.empty() ? "" : "x") + std::to_string(d);
  return n;
}

TEST(FusedOpsTest, RmsNormMatchesThePlainCompositionInFloat64) {
  for (const auto& shape : kShapes) {
    const Inputs base = MakeNormInputs(shape, 1 + static_cast<uint64_t>(shape.back()));
    Inputs a = Cast(base, torch::kDouble), b = Cast(base, torch::kDouble);
    ExpectClose(RunOp(kFusedNorm, a), RunOp(kPlainNorm, b), 1e-13, "rmsnorm " + ShapeName(shape));
  }
}

TEST(FusedOpsTest, InvRmsMatchesThePlainCompositionInFloat64) {
  for (const auto& shape : kShapes) {
    const Inputs base = MakeInvInputs(shape, 3 + static_cast<uint64_t>(shape.back()));
    Inputs a = Cast(base, torch::kDouble), b = Cast(base, torch::kDouble);
    ExpectClose(RunOp(kFusedInv, a), RunOp(kPlainInv, b), 1e-13, "inv_rms " + ShapeName(shape));
  }
}

TEST(FusedOpsTest, SwiGluMatchesThePlainCompositionInFloat64) {
  for (const auto& shape : kShapes) {
    const Inputs base = MakeSwiGluInputs(shape, 2 + static_cast<uint64_t>(shape.back()));
    Inputs a = Cast(base, torch::kDouble), b = Cast(base, torch::kDouble);
    ExpectClose(RunOp(kFusedSwiGlu, a), RunOp(kPlainSwiGlu, b), 1e-13,
                "swiglu " + ShapeName(shape));
  }
}

// SwiGlu's two halves are the plain composition of separate tensors: at::silu(a) * b on the
// GEMM outputs as the MLP had them before one GEMM made both; and an ac that is not contiguous
// (a transposed view) gives the contiguous one's result and gradient.
TEST(FusedOpsTest, SwiGluOfTheStackedHalvesIsSiluTimesUp) {
  const Inputs base = MakeSwiGluInputs({3, 70, 45}, 5);
  const at::Tensor a = base.x.detach().narrow(-1, 0, 45).clone().requires_grad_(true);
  const at::Tensor b = base.x.detach().narrow(-1, 45, 45).clone().requires_grad_(true);
  (at::silu(a) * b * base.w).sum().backward();
  Inputs in = Cast(base, torch::kDouble);
  const at::Tensor y = FusedSwiGlu(in.x);
  (y * base.w).sum().backward();
  EXPECT_LT(MaxRelDiff(y.detach(), (at::silu(a) * b).detach()), 1e-13);
  EXPECT_LT(MaxRelDiff(in.x.grad(), at::cat({a.grad(), b.grad()}, -1)), 1e-13);

  const at::Tensor t = base.x.detach().transpose(0, 1).contiguous().transpose(0, 1);
  ASSERT_FALSE(t.is_contiguous());
  const at::Tensor tl = t.clone(at::MemoryFormat::Preserve).requires_grad_(true);
  ASSERT_FALSE(tl.is_contiguous());
  const at::Tensor yt = FusedSwiGlu(tl);
  (yt * base.w).sum().backward();
  EXPECT_TRUE(torch::equal(yt.detach(), y.detach()));
  EXPECT_TRUE(torch::equal(tl.grad(), in.x.grad()));
}

// ac's last axis holds [gate | up]: an odd size is an error that says so, on every path.
TEST(FusedOpsTest, SwiGluRejectsAnOddLastAxis) {
  const at::Tensor odd = torch::randn({4, 7}, kF64);
  for (const bool on : {true, false}) {
    const KernelChoice choice(on);
    try {
      (void)FusedSwiGlu(odd);
      ADD_FAILURE() << "no error for an odd last axis, kernels " << on;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("even size"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW((void)SwiGlu(odd), c10::Error);
}

// Central differences of Σ op(x, g)·w in float64 against the custom backward, every element.
void CheckFiniteDifferences(const Op& op, Inputs in, const std::string& what) {
  const std::vector<at::Tensor> grads = RunOp(op, in);
  torch::NoGradGuard no_grad;
  const double h = 1e-6;
  for (int which = 0; which < 2; ++which) {
    at::Tensor p = (which == 0 ? in.x : in.g).detach().clone();
    at::Tensor other = (which == 0 ? in.g : in.x).detach();
    auto f = [&](const at::Tensor& v) {
      const at::Tensor y = which == 0 ? op(v, other) : op(other, v);
      return (y * in.w).sum().item<double>();
    };
    const at::Tensor flat = p.view({-1});
    const at::Tensor analytic = grads[static_cast<size_t>(which + 1)].reshape({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const double v = flat[i].item<double>();
      flat[i] = v + h;
      const double up = f(p);
      flat[i] = v - h;
      const double down = f(p);
      flat[i] = v;
      const double fd = (up - down) / (2 * h);
      const double an = analytic[i].item<double>();
      EXPECT_NEAR(an, fd, 1e-7 * std::max(1.0, std::abs(fd)))
          << what << " input " << which << " element " << i;
    }
  }
}

TEST(FusedOpsTest, BackwardsMatchFiniteDifferencesInFloat64) {
  for (const auto& shape : {std::vector<int64_t>{2, 3, 5}, std::vector<int64_t>{1, 11}}) {
    CheckFiniteDifferences(kFusedNorm, MakeNormInputs(shape, 11), "rmsnorm " + ShapeName(shape));
    CheckFiniteDifferences(kFusedSwiGlu, MakeSwiGluInputs(shape, 12), "swiglu " + ShapeName(shape));
    CheckFiniteDifferences(kFusedInv, MakeInvInputs(shape, 13), "inv_rms " + ShapeName(shape));
  }
}

// float32: the kernels and the plain composition agree to float32 rounding (the kernels' sums
// and exp differ from ATen's in the last bits), outputs and both gradients.
TEST(FusedOpsTest, KernelsAgreeWithThePlainCompositionInFloat32) {
  for (const auto& shape : kShapes) {
    const Inputs nb = MakeNormInputs(shape, 21), sb = MakeSwiGluInputs(shape, 22);
    Inputs n1 = Cast(nb, torch::kFloat), n2 = Cast(nb, torch::kFloat);
    ExpectClose(RunOp(kFusedNorm, n1), RunOp(kPlainNorm, n2), 2e-6, "rmsnorm " + ShapeName(shape));
    Inputs s1 = Cast(sb, torch::kFloat), s2 = Cast(sb, torch::kFloat);
    ExpectClose(RunOp(kFusedSwiGlu, s1), RunOp(kPlainSwiGlu, s2), 2e-6,
                "swiglu " + ShapeName(shape));
    const Inputs ib = MakeInvInputs(shape, 23);
    Inputs i1 = Cast(ib, torch::kFloat), i2 = Cast(ib, torch::kFloat);
    ExpectClose(RunOp(kFusedInv, i1), RunOp(kPlainInv, i2), 2e-6, "inv_rms " + ShapeName(shape));
  }
}

// The float32 sigmoid's own exp (model/fused_ops_cpu_kernel.inc) over its whole range, its
// clamp at [-87, 88] included: silu(a)·b and both gradients against float64, element by
// element (relative 1e-6, or absolute 1e-30 where the result underflows); NaN propagates.
TEST(FusedOpsTest, SwiGluFloat32IsAccurateOverTheWholeRange) {
  std::vector<double> values = {-1e4, -200, -104, -90, -88.5, -87.5, -87, -50, -20,  -1, -1e-3,
                                0,    1e-3, 0.5,  1,   20,    50,    87,  88,  88.5, 90, 1e4};
  for (int i = -400; i <= 400; ++i) values.push_back(i * 0.0731);
  const auto n = static_cast<int64_t>(values.size());
  // Inputs representable in float32, so that the float64 reference sees the same numbers; ac is
  // one row [a | b].
  auto f32 = [](const at::Tensor& t) { return t.to(torch::kFloat).to(torch::kDouble); };
  const at::Tensor a64 = f32(torch::tensor(values, kF64));
  const at::Tensor b64 = f32(0.5 + torch::rand({n}, kF64)), w64 = f32(torch::randn({1, n}, kF64));
  Inputs ref{at::cat({a64, b64}).view({1, 2 * n}).requires_grad_(true),
             torch::ones({1, n}, kF64).requires_grad_(true), w64};
  const std::vector<at::Tensor> want = RunOp(kPlainSwiGlu, ref);
  Inputs in = Cast(ref, torch::kFloat);
  const std::vector<at::Tensor> got = RunOp(kFusedSwiGlu, in);
  // y, ∂/∂a, ∂/∂b (the halves of ∂/∂ac); the factor g's gradient is y·w.
  auto parts = [n](const std::vector<at::Tensor>& v) {
    return std::vector<at::Tensor>{v[0].view({n}), v[1].view({2, n})[0], v[1].view({2, n})[1]};
  };
  const std::vector<at::Tensor> got3 = parts(got), want3 = parts(want);
  const at::Tensor wb = (w64.view({n}) * b64).abs();
  for (size_t t = 0; t < got3.size(); ++t) {
    const at::Tensor g = got3[t].to(torch::kDouble);
    const at::Tensor& r = want3[t];
    // ∂/∂a crosses zero at a ≈ -1.28, where s(1 + a(1 − s)) cancels: there the error is
    // relative to the scale of its terms, |dy·b|.
    const at::Tensor err = (g - r).abs();
    const at::Tensor bound = 1e-6 * r.abs() + (t == 1 ? 1e-6 * wb : 1e-30 + 0 * r);
    EXPECT_TRUE((err <= bound).all().item<bool>())
        << "tensor " << t << ": worst at a = " << a64[(err / bound).argmax()].item<double>();
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const at::Tensor y = FusedSwiGlu(torch::tensor({nan, 1.0F, 1.0F, nan}).view({2, 2}));
  EXPECT_TRUE(y.isnan().all().item<bool>());
}

// The kernels' bits depend neither on the instruction set they run in (AVX2 or the baseline
// build) nor on the number of threads: outputs and gradients (∂L/∂g is the one reduction over
// rows) are bitwise equal. On a CPU without AVX2 both runs take the baseline build and the
// first comparison holds trivially.
TEST(FusedOpsTest, KernelBitsDoNotDependOnInstructionSetOrThreadCount) {
  const KernelChoice on(true);
  const int threads_was = at::get_num_threads();
  // 3·70 rows of 333 SwiGLU outputs, or 300 of 256: more than one parallel task (32768 outputs
  // each, in whole rows).
  for (const auto& shape : {std::vector<int64_t>{3, 70, 45}, std::vector<int64_t>{3, 70, 333},
                            std::vector<int64_t>{300, 256}}) {
    for (const int kind : {0, 1, 2}) {  // RMSNorm, SwiGLU, inverse RMS
      const Inputs base = kind == 0   ? MakeNormInputs(shape, 31)
                          : kind == 1 ? MakeSwiGluInputs(shape, 32)
                                      : MakeInvInputs(shape, 33);
      const Op& op = kind == 0 ? kFusedNorm : kind == 1 ? kFusedSwiGlu : kFusedInv;
      for (const auto dt : {torch::kFloat, torch::kDouble}) {
        auto run = [&](bool baseline, int threads) {
          ForceBaselineFusedKernels(baseline);
          at::set_num_threads(threads);
          Inputs in = Cast(base, dt);
          std::vector<at::Tensor> v = RunOp(op, in);
          ForceBaselineFusedKernels(false);
          at::set_num_threads(threads_was);
          return v;
        };
        const auto ref = run(false, 1), baseline = run(true, 1), threaded = run(false, 3);
        const char* names[] = {"rmsnorm ", "swiglu ", "inv_rms "};
        const std::string what = std::string(names[kind]) + ShapeName(shape) +
                                 (dt == torch::kFloat ? " float32" : " float64");
        for (size_t i = 0; i < ref.size(); ++i) {
          EXPECT_TRUE(torch::equal(ref[i], baseline[i])) << what << " baseline, tensor " << i;
          EXPECT_TRUE(torch::equal(ref[i], threaded[i])) << what << " 3 threads, tensor " << i;
        }
      }
    }
  }
}

// Other dtypes take the plain composition: bitwise the reference's result.
TEST(FusedOpsTest, OtherDtypesTakeThePlainComposition) {
  const Inputs base = MakeNormInputs({3, 70, 45}, 41);
  const at::Tensor x = base.x.detach().to(torch::kBFloat16);
  const at::Tensor g = base.g.detach().to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(FusedRmsNorm(x, g, kEps), RmsNorm(x, g, kEps)));
  const at::Tensor ac = torch::randn({3, 70, 46}, kF64).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(FusedSwiGlu(ac), SwiGlu(ac)));
  EXPECT_TRUE(torch::equal(FusedInvRms(x, kEps), InvRms(x, kEps)));
  // So do shapes the kernels do not take: a scalar, a gain that broadcasts, an empty ac.
  const at::Tensor s = torch::tensor(2.0, kF64), one = torch::ones({1}, kF64);
  EXPECT_TRUE(torch::equal(FusedRmsNorm(s, one, kEps), RmsNorm(s, one, kEps)));
  const at::Tensor empty = torch::zeros({0, 8}, kF64);
  EXPECT_EQ(FusedSwiGlu(empty).sizes(), (std::vector<int64_t>{0, 4}));
}

// The whole model, kernels on against off (the plain composition), in float64: logits and every
// parameter's gradient, for the standard arm (RMSNorm, SwiGLU) and block (SwiGLU, the sources'
// inverse RMS); every gradient is contiguous.
TEST(FusedOpsTest, WholeModelWithKernelsMatchesPlainInFloat64) {
  for (const Arm arm : {Arm::kStandard, Arm::kBlock}) {
    const ModelConfig c = Small(arm);
    const at::Tensor tokens = RandomTokens(c, 2, 16, 5), targets = RandomTokens(c, 2, 16, 6);
    std::vector<std::vector<at::Tensor>> res;
    for (const bool on : {true, false}) {
      const KernelChoice choice(on);
      Gpt model(c, 3);
      model->to(torch::kDouble);
      Perturb(model, 4);
      const at::Tensor logits = model->forward(tokens);
      GptImpl::Loss(logits, targets).backward();
      std::vector<at::Tensor> v = {logits.detach()};
      for (const auto& p : model->parameters()) {
        // wgate's and wup's are row blocks of the stacked weight's gradient: contiguous.
        EXPECT_TRUE(p.grad().is_contiguous()) << ArmName(arm) << " tensor " << v.size();
        v.push_back(p.grad());
      }
      res.push_back(v);
    }
    for (size_t i = 0; i < res[0].size(); ++i)
      EXPECT_LT(MaxRelDiff(res[0][i], res[1][i]), 1e-12) << ArmName(arm) << " tensor " << i;
  }
}

}  // namespace
}  // namespace rdattn::model
