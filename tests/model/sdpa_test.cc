// LibTorch's scaled_dot_product_attention (LibTorch 2.1+; model/torch_compat.h) against rdattn's
// own causal attention kernel, on the CPU: values and gradients in float64 (≤ 1e-10) and float32
// (the bounds below), over lengths around the kernel's 64-row blocks, with the default scale
// 1/√d and another one; and the process-wide selection (SetAttentionKernel) that rdattn-train's
// --attention sets. On a LibTorch without SDPA (1.13) those tests skip, and the one that checks
// the refusal runs instead; ctest's debian13_sdpa runs this file on Debian 13's LibTorch 2.6,
// where a skip fails the check.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/attention.h"
#include "model/torch_compat.h"

namespace rdattn::model {
namespace {

// The selection in effect for one test, restored afterwards.
class KernelScope {
 public:
  explicit KernelScope(AttentionKernel k) : saved_(GetAttentionKernel()) { SetAttentionKernel(k); }
  ~KernelScope() { SetAttentionKernel(saved_); }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  AttentionKernel saved_;
};

struct Run {
  at::Tensor out, dq, dk, dv;
};

// Attention over q, k, v ([B,H,T,d]) with `kernel`, and the gradients of <out, w>.
Run Attend(AttentionKernel kernel, const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0,
           const at::Tensor& w, double scale) {
  KernelScope scope(kernel);
  const at::Tensor q = q0.detach().requires_grad_(true), k = k0.detach().requires_grad_(true),
                   v = v0.detach().requires_grad_(true);
  Run r;
  r.out = CausalAttention(q, k, v, scale);
  const auto g = torch::autograd::grad({(r.out * w).sum()}, {q, k, v});
  r.dq = g[0];
  r.dk = g[1];
  r.dv = g[2];
  return r;
}

// max |a − b| relative to rdattn's tensor b: to its largest element, or to 1 where that is smaller
// (the inputs are N(0, 1); at T = 1 the softmax has one key, dq and dk are exactly 0 in rdattn's
// kernel and a few 1e-16 in SDPA's).
double Diff(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1.0);
  return (a - b).abs().max().item<double>() / scale;
}

// The largest difference of SDPA against rdattn's kernel over the cases, values and gradients
// separately.
struct Worst {
  double value = 0, grad = 0;
};
Worst Compare(at::ScalarType dtype) {
  at::Generator gen = at::detail::createCPUGenerator(21);
  const auto opts = at::TensorOptions().dtype(dtype);
  Worst worst;
  for (const int64_t T : {1, 7, 63, 64, 65, 150}) {
    const int64_t B = 2, H = 3, d = 16;
    for (const double scale : {1.0 / std::sqrt(static_cast<double>(d)), 0.3}) {
      const at::Tensor q = at::randn({B, H, T, d}, gen, opts),
                       k = at::randn({B, H, T, d}, gen, opts),
                       v = at::randn({B, H, T, d}, gen, opts),
                       w = at::randn({B, H, T, d}, gen, opts);
      const Run own = Attend(AttentionKernel::kRdattn, q, k, v, w, scale);
      const Run sdpa = Attend(AttentionKernel::kSdpa, q, k, v, w, scale);
      EXPECT_EQ(sdpa.out.sizes(), own.out.sizes());
      EXPECT_EQ(sdpa.out.scalar_type(), dtype);
      worst.value = std::max(worst.value, Diff(sdpa.out, own.out));
      for (const auto& [a, b] : {std::pair{sdpa.dq, own.dq}, {sdpa.dk, own.dk}, {sdpa.dv, own.dv}})
        worst.grad = std::max(worst.grad, Diff(a, b));
    }
  }
  return worst;
}

TEST(SdpaTest, MatchesRdattnAttentionInFloat64) {
  if (!torch_compat::HasSdpa())
    GTEST_SKIP() << "LibTorch " << torch_compat::TorchVersion() << " has no SDPA";
  const Worst w = Compare(at::kDouble);
  // Measured on LibTorch 2.6 (Debian 13, x86-64): values 6.6e-16, gradients 1.3e-15.
  std::printf("sdpa vs rdattn, float64: values %.3g, gradients %.3g (max relative difference)\n",
              w.value, w.grad);
  EXPECT_LE(w.value, 1e-10);
  EXPECT_LE(w.grad, 1e-10);
}

// float32: SDPA's CPU kernel (flash, blocked online softmax) and rdattn's (full-row softmax per
// 64-row block) round differently; the bound is relative as Diff says.
TEST(SdpaTest, AgreesWithRdattnAttentionInFloat32) {
  if (!torch_compat::HasSdpa())
    GTEST_SKIP() << "LibTorch " << torch_compat::TorchVersion() << " has no SDPA";
  const Worst w = Compare(at::kFloat);
  std::printf("sdpa vs rdattn, float32: values %.3g, gradients %.3g (max relative difference)\n",
              w.value, w.grad);
  // Measured on LibTorch 2.6 (Debian 13, x86-64): values 2.9e-7, gradients 7.1e-7.
  EXPECT_LE(w.value, 2e-6);
  EXPECT_LE(w.grad, 4e-6);
}

// The selection: auto takes rdattn's kernel on the CPU, sdpa takes SDPA (its bits, not rdattn's).
TEST(SdpaTest, SelectionRoutesTheCpuAttention) {
  if (!torch_compat::HasSdpa())
    GTEST_SKIP() << "LibTorch " << torch_compat::TorchVersion() << " has no SDPA";
  at::Generator gen = at::detail::createCPUGenerator(5);
  const at::Tensor q = at::randn({1, 2, 70, 8}, gen), k = at::randn({1, 2, 70, 8}, gen),
                   v = at::randn({1, 2, 70, 8}, gen);
  const double scale = 1.0 / std::sqrt(8.0);
  const at::Tensor direct = torch_compat::CausalSdpa(q, k, v, scale);
  {
    KernelScope scope(AttentionKernel::kAuto);
    EXPECT_FALSE(UsesSdpa(c10::DeviceType::CPU));
  }
  KernelScope scope(AttentionKernel::kSdpa);
  EXPECT_TRUE(UsesSdpa(c10::DeviceType::CPU));
  EXPECT_TRUE(at::equal(CausalAttention(q, k, v, scale), direct));
  EXPECT_EQ(AttentionKernelName(GetAttentionKernel()), "sdpa");
}

TEST(SdpaTest, RefusedWhereLibTorchHasNone) {
  if (torch_compat::HasSdpa())
    GTEST_SKIP() << "LibTorch " << torch_compat::TorchVersion() << " has SDPA";
  try {
    SetAttentionKernel(AttentionKernel::kSdpa);
    ADD_FAILURE() << "sdpa was accepted on LibTorch " << torch_compat::TorchVersion();
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(torch_compat::TorchVersion()), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(GetAttentionKernel(), AttentionKernel::kAuto);
}

}  // namespace
}  // namespace rdattn::model
