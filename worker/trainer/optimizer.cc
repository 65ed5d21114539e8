// Compiled with -ffp-contract=off (CMakeLists.txt), as torch's scalar code is on x86-64: the
// coefficients' 1 − lr·wd keeps its two roundings on instruction sets with a multiply-add.
#include "worker/trainer/optimizer.h"

#include <ATen/Parallel.h>
#include <c10/util/C++17.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "common/cpu_features.h"
#include "worker/trainer/adamw_kernel.h"

namespace rdattn::trainer {
namespace {

// Elements per task of at::parallel_for: ATen's own grain for elementwise ops. Each element is
// computed alone, so the bits do not depend on the split.
constexpr int64_t kGrain = 32768;

template <typename T>
void RunKernel(T* p, const T* g, T* m, T* v, int64_t n, const adamw::Coefficients& c) {
  const bool avx2 = ::rdattn::cpu::HasAvx2();
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    const int64_t k = end - begin;
    if (avx2) {
      adamw::avx2::Step(p + begin, g + begin, m + begin, v + begin, k, c);
    } else {
      adamw::base::Step(p + begin, g + begin, m + begin, v + begin, k, c);
    }
  });
}

// Σ g² of one gradient: fixed blocks of kGrain elements, each summed alone (SumSquares), then the
// blocks in order, so the bits do not depend on the thread count.
template <typename T>
double SumSquares(const T* x, int64_t n) {
  const int64_t blocks = (n + kGrain - 1) / kGrain;
  if (blocks <= 1)
    return ::rdattn::cpu::HasAvx2() ? adamw::avx2::SumSquares(x, n) : adamw::base::SumSquares(x, n);
  std::vector<double> part(static_cast<size_t>(blocks));
  const bool avx2 = ::rdattn::cpu::HasAvx2();
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kGrain, k = std::min(kGrain, n - begin);
      part[static_cast<size_t>(b)] =
          avx2 ? adamw::avx2::SumSquares(x + begin, k) : adamw::base::SumSquares(x + begin, k);
    }
  });
  double sum = 0;
  for (const double v : part) sum += v;
  return sum;
}

template <typename T>
void Scale(T* x, int64_t n, double coef) {
  const bool avx2 = ::rdattn::cpu::HasAvx2();
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    if (avx2) {
      adamw::avx2::Scale(x + begin, end - begin, coef);
    } else {
      adamw::base::Scale(x + begin, end - begin, coef);
    }
  });
}

// torch's state key for a parameter (AdamW::step, torch/optim/serialize.h).
std::string StateKey(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

bool SameDenseCpu(const at::Tensor& t, const at::Tensor& p) {
  return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() &&
         t.scalar_type() == p.scalar_type() && t.sizes() == p.sizes() && t.is_contiguous();
}

void RefuseAmsgrad(const torch::optim::AdamW& optimizer) {
  for (const auto& group : optimizer.param_groups())
    if (static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad())
      throw std::invalid_argument(
          "FusedAdamWStep: amsgrad is not supported (a param group has amsgrad=true); "
          "use torch::optim::AdamW::step()");
}

}  // namespace

std::optional<at::Tensor> FusedClipGradients(const std::vector<at::Tensor>& params, double clip) {
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    const at::Tensor& g = p.grad();
    if ((g.scalar_type() != at::kFloat && g.scalar_type() != at::kDouble) || !SameDenseCpu(g, g))
      return std::nullopt;
  }
  double sq = 0;  // in params' order
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    const at::Tensor& g = p.grad();
    sq += g.scalar_type() == at::kDouble ? SumSquares(g.data_ptr<double>(), g.numel())
                                         : SumSquares(g.data_ptr<float>(), g.numel());
  }
  const double total = std::sqrt(sq);
  if (clip > 0) {
    // clip_grad_norm_'s coefficient, clamped to 1, in float64. Not `coef < 1`: a NaN norm
    // scales every gradient by NaN, as clip_grad_norm_ does. 1 itself is skipped: x·1 = x.
    const double coef = clip / (total + 1e-6);
    if (!(coef >= 1)) {
      torch::NoGradGuard no_grad;
      for (const auto& p : params) {
        if (!p.grad().defined()) continue;
        const at::Tensor& g = p.grad();
        if (g.scalar_type() == at::kDouble) {
          Scale(g.data_ptr<double>(), g.numel(), coef);
        } else {
          Scale(g.data_ptr<float>(), g.numel(), coef);
        }
        torch::autograd::impl::bump_version(g);
      }
    }
  }
  return at::scalar_tensor(total, at::TensorOptions().dtype(at::kDouble));
}

bool FusedAdamWApplies(const torch::optim::AdamW& optimizer) {
  const auto& state = optimizer.state();
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const at::ScalarType dtype = p.scalar_type();
      if (dtype != at::kFloat && dtype != at::kDouble) return false;
      if (!SameDenseCpu(p, p) || !SameDenseCpu(p.grad(), p)) return false;
      const auto it = state.find(StateKey(p));
      if (it == state.end()) continue;
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      if (!SameDenseCpu(s.exp_avg(), p) || !SameDenseCpu(s.exp_avg_sq(), p)) return false;
    }
  }
  return true;
}

void FusedAdamWStep(torch::optim::AdamW& optimizer) {
  RefuseAmsgrad(optimizer);
  // All or nothing, decided before anything changes: a mixed step would be harder to reason
  // about, and the trainer's parameters are all alike.
  if (!FusedAdamWApplies(optimizer)) {
    optimizer.step();
    return;
  }
  torch::NoGradGuard no_grad;
  auto& state = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    const auto [beta1, beta2] = o.betas();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const std::string key = StateKey(p);
      auto it = state.find(key);
      if (it == state.end()) {
        // As torch's step creates it.
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        it = state.emplace(key, std::move(fresh)).first;
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
      s.step(s.step() + 1);
      const auto t = static_cast<double>(s.step());
      adamw::Coefficients c;
      c.apply_decay = o.weight_decay() != 0;
      c.decay = 1 - o.lr() * o.weight_decay();
      c.beta1 = beta1;
      c.one_minus_beta1 = 1 - beta1;
      c.beta2 = beta2;
      c.one_minus_beta2 = 1 - beta2;
      c.sqrt_bias2 = std::sqrt(1 - std::pow(beta2, t));
      c.eps = o.eps();
      c.neg_step = -(o.lr() / (1 - std::pow(beta1, t)));
      const at::Tensor& g = p.grad();
      if (p.scalar_type() == at::kDouble) {
        RunKernel(p.data_ptr<double>(), g.data_ptr<double>(), s.exp_avg().data_ptr<double>(),
                  s.exp_avg_sq().data_ptr<double>(), p.numel(), c);
      } else {
        RunKernel(p.data_ptr<float>(), g.data_ptr<float>(), s.exp_avg().data_ptr<float>(),
                  s.exp_avg_sq().data_ptr<float>(), p.numel(), c);
      }
      // In-place updates, as torch's mul_/add_/addcdiv_ record them.
      torch::autograd::impl::bump_version(p);
      torch::autograd::impl::bump_version(s.exp_avg());
      torch::autograd::impl::bump_version(s.exp_avg_sq());
    }
  }
}

}  // namespace rdattn::trainer
