// Helpers shared by the model tests.
#pragma once

#include <torch/torch.h>

#include "model/config.h"
#include "model/gpt.h"

namespace rdattn::model::testing {

// A small valid config for an arm (byte-sized vocabulary, 4 layers, 2 blocks).
inline ModelConfig Small(Arm arm, int64_t layers = 4, int64_t blocks = 2) {
  ModelConfig c;
  c.arm = arm;
  c.layers = layers;
  c.blocks = blocks;
  c.width = 32;
  c.heads = 2;
  c.ffn_hidden = 64;
  c.context = 16;
  c.vocab_size = 61;
  return c;
}

// Moves every gain and pseudo-query off its initial value (deterministically), so that depth
// routes and norms matter in a test.
inline void Perturb(Gpt& model, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    auto& p = item.value();
    if (p.dim() != 1) continue;
    at::Tensor r = at::empty(p.sizes(), at::TensorOptions().dtype(at::kFloat));
    r.normal_(0.0, 1.0, gen);
    const bool is_gain = item.key().find("norm") != std::string::npos;
    p.copy_(is_gain ? 1.0 + 0.2 * r : 0.8 * r);
  }
}

inline at::Tensor RandomTokens(const ModelConfig& c, int64_t B, int64_t T, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randint(c.vocab_size, {B, T}, gen, at::TensorOptions().dtype(at::kLong));
}

// Sets one of model/'s process-wide kernel switches (SetDepthReadCpuKernel, SetFusedCpuKernels)
// for a scope, restoring its previous value.
class ScopedSwitch {
 public:
  ScopedSwitch(bool (*get)(), void (*set)(bool), bool on) : set_(set), was_(get()) { set_(on); }
  ~ScopedSwitch() { set_(was_); }
  ScopedSwitch(const ScopedSwitch&) = delete;
  ScopedSwitch& operator=(const ScopedSwitch&) = delete;

 private:
  void (*set_)(bool);
  bool was_;
};

inline double MaxRelDiff(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-300);
  return (a - b).abs().max().item<double>() / scale;
}

}  // namespace rdattn::model::testing
