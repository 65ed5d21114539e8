// The AdamW of the trainer: LibTorch's torch::optim::AdamW math (1.13 and 2.x compute it alike),
// with its state owned here rather than in torch's optimizer, whose private state map changed
// layout between versions (keyed by a string in 1.13, by void* in 2.x). On the CPU one fused
// pass per parameter tensor: torch's step runs ~10 ATen ops per tensor (each a dispatch and a
// pass over memory); at cpu-small's ~45 small tensors that overhead is paid by every rank and
// does not shrink with more ranks (issue 11).
#pragma once

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace rdattn::trainer {

// One parameter group: its tensors and their weight decay (the trainer's: decay on matrices,
// none on vectors; MakeAdamW in train_step.h).
struct AdamWGroup {
  std::vector<at::Tensor> params;
  double weight_decay = 0;
};

struct AdamWHyper {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
};

// One parameter's state, created lazily at its first step as torch creates it: step 0, then
// exp_avg and exp_avg_sq zeros_like the parameter (memory format preserved).
struct AdamWParamState {
  int64_t step = 0;
  at::Tensor exp_avg;
  at::Tensor exp_avg_sq;
};

class AdamW {
 public:
  AdamW(std::vector<AdamWGroup> groups, AdamWHyper hyper);

  // The learning rate of the next Step(), the same for every group (the trainer's schedule).
  void SetLearningRate(double lr) { lr_ = lr; }
  double learning_rate() const { return lr_; }

  // One step over every parameter with a gradient (the others are skipped, their state kept).
  // Per group: the math of torch::optim::AdamW::step, amsgrad off:
  //   p *= 1 − lr·wd (when wd ≠ 0); m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g·g;
  //   p += (−lr/(1−β1^t))·m / (sqrt(v)/sqrt(1−β2^t) + eps).
  // Fused (one pass per tensor, every scalar cast to the tensor's dtype as ATen casts it, no
  // multiply-add contraction; deterministic and independent of the thread count) when every
  // parameter with a gradient is a dense contiguous float32 or float64 CPU tensor with a
  // gradient (and state) of the same dtype, size and layout. torch's vectorised kernels use
  // fused multiply-adds in places, so the fused step agrees with torch's to about an ulp per
  // step rather than bitwise (bitwise under ATEN_CPU_CAPABILITY=default). Otherwise (CUDA,
  // bfloat16, ...) torch's own ATen op sequence, which gives torch::optim::AdamW's bits.
  void Step();

  // Whether Step() would run fused now.
  bool FusedApplies() const;

  const std::vector<AdamWGroup>& groups() const { return groups_; }
  const AdamWHyper& hyper() const { return hyper_; }
  // The state of parameter `index` of group `group`; nullptr before its first step.
  const AdamWParamState* State(size_t group, size_t index) const;

  // The state as tensors of an archive: "format" = "rdattn-adamw-1" and, per parameter
  // with state "g<group>.p<index>.{step,exp_avg,exp_avg_sq}" (on the CPU).
  void Save(torch::serialize::OutputArchive& archive) const;
  // Reads Save()'s archive, or the archive torch::optim::AdamW::save wrote for the same groups
  // (checkpoints of rdattn before it owned its state; read through torch's own load and
  // torch_compat::TorchAdamWState). Throws std::runtime_error naming the parameter and the
  // reason when a tensor is missing or its shape or dtype does not match; the state is then
  // unchanged.
  void Load(torch::serialize::InputArchive& archive);

 private:
  void StepFused();
  void StepAten();

  std::vector<AdamWGroup> groups_;
  AdamWHyper hyper_;
  double lr_ = 1e-3;
  std::vector<std::vector<std::optional<AdamWParamState>>> state_;  // [group][index]
};

// Gradient clipping to global L2 norm `clip` (> 0; ≤ 0: the norm only) in one pass per gradient
// for the norm and one for the scaling, on the CPU: Σ g² in float64 (each square exact for
// float32; each gradient in fixed 32768-element blocks, each block in 8 lanes added in a fixed
// tree, blocks, then gradients, added in order: the same bits for any thread count), norm =
// sqrt(Σ), coef = clip / (norm + 1e-6), and when coef < 1 (or NaN) every gradient times coef
// cast to its dtype. clip_grad_norm_'s formula; its float32 per-tensor norms are not reproduced,
// so the norm and coef differ from it in the last bits. Returns the norm before clipping as a
// float64 CPU scalar, or nullopt, touching nothing, when a gradient is not a dense contiguous
// float32/float64 CPU tensor. Gradients that are not defined are skipped.
std::optional<at::Tensor> FusedClipGradients(const std::vector<at::Tensor>& params, double clip);

}  // namespace rdattn::trainer
