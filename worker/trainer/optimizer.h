// The AdamW step of the trainer: LibTorch 1.13's torch::optim::AdamW math in one pass per
// parameter tensor on the CPU. torch's step runs ~10 ATen ops per tensor (each a dispatch and a
// pass over memory); at cpu-small's ~45 small tensors that overhead is paid by every rank and does
// not shrink with more ranks (issue 11).
#pragma once

#include <torch/optim/adamw.h>

#include <optional>
#include <vector>

namespace rdattn::trainer {

// One AdamW step on `optimizer`, updating the same state objects that optimizer.step() would
// (AdamWParamState under the same keys, created lazily as torch does: step 0, zeros_like
// exp_avg/exp_avg_sq), so checkpoints (optimizer.save/load) and resume are unchanged. Per group:
// its lr, betas, eps and weight_decay; parameters without a gradient are skipped.
//
// The math is torch 1.13's, elementwise in torch's operation order with no multiply-add
// contraction: p *= 1 − lr·wd (when wd ≠ 0); m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g·g;
// p += (−lr/(1−β1^t))·m / (sqrt(v)/sqrt(1−β2^t) + eps), every scalar cast to the tensor's dtype as
// ATen casts it. torch's vectorised kernels use fused multiply-adds in places, so the result
// agrees with optimizer.step() to about an ulp per step rather than bitwise; it is deterministic
// (elementwise, independent of the thread count).
//
// Runs fused only when every parameter with a gradient is a dense contiguous float32 or float64
// CPU tensor with a gradient (and state, if any) of the same dtype, size and layout; otherwise it
// calls optimizer.step() (CUDA, bfloat16, ...). Throws std::invalid_argument when a group has
// amsgrad set (not implemented here, and never set by AdamWGroups).
void FusedAdamWStep(torch::optim::AdamW& optimizer);

// Whether FusedAdamWStep would run fused on `optimizer` now (false: it calls optimizer.step()).
bool FusedAdamWApplies(const torch::optim::AdamW& optimizer);

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
