// Compiled with -ffp-contract=off (CMakeLists.txt), as torch's scalar code is on x86-64: the
// coefficients' 1 − lr·wd keeps its two roundings on instruction sets with a multiply-add.
#include "worker/trainer/optimizer.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/adamw.h>

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
#include "model/torch_compat.h"
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

bool SameDenseCpu(const at::Tensor& t, const at::Tensor& p) {
  return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() &&
         t.scalar_type() == p.scalar_type() && t.sizes() == p.sizes() && t.is_contiguous();
}

std::string Key(size_t group, size_t index, const char* what) {
  return "g" + std::to_string(group) + ".p" + std::to_string(index) + "." + what;
}

constexpr const char* kFormat = "rdattn-adamw-1";

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
      c10::NoGradGuard no_grad;
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

AdamW::AdamW(std::vector<AdamWGroup> groups, AdamWHyper hyper)
    : groups_(std::move(groups)), hyper_(hyper) {
  state_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) state_[g].resize(groups_[g].params.size());
}

const AdamWParamState* AdamW::State(size_t group, size_t index) const {
  if (group >= state_.size() || index >= state_[group].size() || !state_[group][index])
    return nullptr;
  return &*state_[group][index];
}

bool AdamW::FusedApplies() const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const at::Tensor& p = groups_[g].params[i];
      if (!p.grad().defined()) continue;
      const at::ScalarType dtype = p.scalar_type();
      if (dtype != at::kFloat && dtype != at::kDouble) return false;
      if (!SameDenseCpu(p, p) || !SameDenseCpu(p.grad(), p)) return false;
      const std::optional<AdamWParamState>& s = state_[g][i];
      if (!s) continue;
      if (!SameDenseCpu(s->exp_avg, p) || !SameDenseCpu(s->exp_avg_sq, p)) return false;
    }
  }
  return true;
}

void AdamW::Step() {
  // All or nothing, decided before anything changes: a mixed step would be harder to reason
  // about, and the trainer's parameters are all alike.
  if (FusedApplies()) {
    StepFused();
  } else {
    StepAten();
  }
}

namespace {

// Every parameter with a gradient, in group order, with its state (created at its first step as
// torch creates it: step 0, exp_avg and exp_avg_sq zeros_like the parameter) after the step
// count is advanced: f(p, state, the group's weight decay). The walk both steps share.
template <typename F>
void ForEachStepped(std::vector<AdamWGroup>& groups,
                    std::vector<std::vector<std::optional<AdamWParamState>>>& state, F&& f) {
  c10::NoGradGuard no_grad;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    for (size_t i = 0; i < groups[gi].params.size(); ++i) {
      at::Tensor& p = groups[gi].params[i];
      if (!p.grad().defined()) continue;
      std::optional<AdamWParamState>& slot = state[gi][i];
      if (!slot) {
        slot.emplace();
        slot->exp_avg = at::zeros_like(p, at::MemoryFormat::Preserve);
        slot->exp_avg_sq = at::zeros_like(p, at::MemoryFormat::Preserve);
      }
      slot->step += 1;
      f(p, *slot, groups[gi].weight_decay);
    }
  }
}

}  // namespace

void AdamW::StepFused() {
  const double beta1 = hyper_.beta1, beta2 = hyper_.beta2;
  ForEachStepped(groups_, state_, [&](at::Tensor& p, AdamWParamState& s, double wd) {
    const auto t = static_cast<double>(s.step);
    adamw::Coefficients c;
    c.apply_decay = wd != 0;
    c.decay = 1 - lr_ * wd;
    c.beta1 = beta1;
    c.one_minus_beta1 = 1 - beta1;
    c.beta2 = beta2;
    c.one_minus_beta2 = 1 - beta2;
    c.sqrt_bias2 = std::sqrt(1 - std::pow(beta2, t));
    c.eps = hyper_.eps;
    c.neg_step = -(lr_ / (1 - std::pow(beta1, t)));
    const at::Tensor& g = p.grad();
    if (p.scalar_type() == at::kDouble) {
      RunKernel(p.data_ptr<double>(), g.data_ptr<double>(), s.exp_avg.data_ptr<double>(),
                s.exp_avg_sq.data_ptr<double>(), p.numel(), c);
    } else {
      RunKernel(p.data_ptr<float>(), g.data_ptr<float>(), s.exp_avg.data_ptr<float>(),
                s.exp_avg_sq.data_ptr<float>(), p.numel(), c);
    }
    // In-place updates, as torch's mul_/add_/addcdiv_ record them.
    torch::autograd::impl::bump_version(p);
    torch::autograd::impl::bump_version(s.exp_avg);
    torch::autograd::impl::bump_version(s.exp_avg_sq);
  });
}

void AdamW::StepAten() {
  // torch::optim::AdamW::step's op sequence (amsgrad off), the same in 1.13 and 2.x. torch decays
  // before it makes a fresh state; the state's zeros depend only on p's shape, so making it first
  // changes no bit.
  const double beta1 = hyper_.beta1, beta2 = hyper_.beta2;
  ForEachStepped(groups_, state_, [&](at::Tensor& p, AdamWParamState& s, double wd) {
    const at::Tensor& grad = p.grad();
    if (wd != 0) p.mul_(1 - lr_ * wd);
    const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(s.step));
    const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(s.step));
    s.exp_avg.mul_(beta1).add_(grad, 1 - beta1);
    s.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
    const at::Tensor denom = (s.exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(hyper_.eps);
    p.addcdiv_(s.exp_avg, denom, -(lr_ / bias_correction1));
  });
}

void AdamW::Save(torch::serialize::OutputArchive& archive) const {
  archive.write("format", c10::IValue(std::string(kFormat)));
  for (size_t g = 0; g < state_.size(); ++g) {
    for (size_t i = 0; i < state_[g].size(); ++i) {
      const std::optional<AdamWParamState>& s = state_[g][i];
      if (!s) continue;
      archive.write(Key(g, i, "step"), at::scalar_tensor(s->step, at::kLong));
      archive.write(Key(g, i, "exp_avg"), s->exp_avg.detach().cpu());
      archive.write(Key(g, i, "exp_avg_sq"), s->exp_avg_sq.detach().cpu());
    }
  }
}

namespace {
// The moment `t` as parameter `p` needs it (same shape and dtype, on p's device), or an error.
at::Tensor Moment(const at::Tensor& t, const at::Tensor& p, const std::string& name) {
  if (!t.defined()) throw std::runtime_error("optimizer state " + name + " is missing");
  if (t.sizes() != p.sizes())
    throw std::runtime_error("optimizer state " + name + " has shape " + c10::str(t.sizes()) +
                             ", the parameter " + c10::str(p.sizes()));
  if (t.scalar_type() != p.scalar_type())
    throw std::runtime_error("optimizer state " + name + " has dtype " +
                             std::string(c10::toString(t.scalar_type())) + ", the parameter " +
                             std::string(c10::toString(p.scalar_type())));
  return t.to(p.device(), /*non_blocking=*/false, /*copy=*/true)
      .contiguous(p.suggest_memory_format());
}

// Parameter (g, i)'s state from an archive's step and moments (either archive kind).
AdamWParamState LoadedState(int64_t step, const at::Tensor& m, const at::Tensor& v,
                            const at::Tensor& p, size_t g, size_t i) {
  AdamWParamState s;
  s.step = step;
  s.exp_avg = Moment(m, p, Key(g, i, "exp_avg"));
  s.exp_avg_sq = Moment(v, p, Key(g, i, "exp_avg_sq"));
  return s;
}
}  // namespace

void AdamW::Load(torch::serialize::InputArchive& archive) {
  std::vector<std::vector<std::optional<AdamWParamState>>> loaded(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) loaded[g].resize(groups_[g].params.size());
  c10::IValue format;
  if (archive.try_read("format", format)) {
    if (!format.isString() || format.toStringRef() != kFormat)
      throw std::runtime_error("optimizer state has format '" +
                               (format.isString() ? format.toStringRef() : std::string("?")) +
                               "', this rdattn reads '" + kFormat + "'");
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (size_t i = 0; i < groups_[g].params.size(); ++i) {
        at::Tensor step, m, v;
        if (!archive.try_read(Key(g, i, "step"), step)) continue;  // no step taken yet
        const at::Tensor& p = groups_[g].params[i];
        if (!archive.try_read(Key(g, i, "exp_avg"), m) ||
            !archive.try_read(Key(g, i, "exp_avg_sq"), v))
          throw std::runtime_error("optimizer state " + Key(g, i, "exp_avg{,_sq}") + " is missing");
        loaded[g][i] = LoadedState(step.item<int64_t>(), m, v, p, g, i);
      }
    }
  } else {
    // torch::optim::AdamW::save's archive: load it into a torch AdamW over the same groups (its
    // load checks the group and parameter counts), then take each parameter's state.
    std::vector<torch::optim::OptimizerParamGroup> tg;
    for (const AdamWGroup& group : groups_) {
      auto options = std::make_unique<torch::optim::AdamWOptions>();
      options->betas({hyper_.beta1, hyper_.beta2}).eps(hyper_.eps).weight_decay(group.weight_decay);
      tg.emplace_back(group.params, std::move(options));
    }
    torch::optim::AdamW legacy(std::move(tg));
    legacy.load(archive);
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (size_t i = 0; i < groups_[g].params.size(); ++i) {
        const at::Tensor& p = groups_[g].params[i];
        const std::optional<torch_compat::AdamWParamStateView> view =
            torch_compat::TorchAdamWState(legacy, p);
        if (!view) continue;
        loaded[g][i] = LoadedState(view->step, view->exp_avg, view->exp_avg_sq, p, g, i);
      }
    }
  }
  state_ = std::move(loaded);
}

}  // namespace rdattn::trainer
