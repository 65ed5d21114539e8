// Every difference between the LibTorch versions rdattn builds against (Debian 12's 1.13, Debian
// 13's 2.6, PyTorch's own 2.x wheels and zips) lives here, and only here: no other file of the
// tree tests TORCH_VERSION_* (tests/layering's torch_version_seam check enforces it). Each
// function states what it does on each version; docs/build.md lists the versions tried.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/DeviceType.h>
#include <torch/optim/adamw.h>

#include <cstdint>
#include <optional>
#include <string>

namespace rdattn::torch_compat {

// "1.13.0", "2.6.0": the headers' version (TORCH_VERSION).
std::string TorchVersion();
int TorchMajorVersion();

// ---- autocast -------------------------------------------------------------------------------
// The autocast dtype when autocast is on for `device` (CPU or CUDA), else none. 2.4+ has the
// per-device API (is_autocast_enabled(device), get_autocast_dtype(device)); 1.13 to 2.3 have
// the per-backend functions (is_cpu_enabled / is_enabled, get_autocast_{cpu,gpu}_dtype).
std::optional<at::ScalarType> AutocastDtype(c10::DeviceType device);

// Turns autocast for `device` (CPU or CUDA) on in `dtype`, or off (and then clears autocast's
// cast cache).
void SetAutocast(c10::DeviceType device, bool on, at::ScalarType dtype = at::kBFloat16);

// ---- scaled_dot_product_attention -------------------------------------------------------------
// Whether this LibTorch has at::scaled_dot_product_attention with an explicit scale (2.1+; 2.0
// had it with the default 1/√d only, 1.13 not at all).
bool HasSdpa();

// Causal softmax attention through at::scaled_dot_product_attention (q, k, v: [B,H,T,d]) with
// logit scale `scale`, on any device the op supports. Throws c10::Error naming the version when
// !HasSdpa().
at::Tensor CausalSdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale);

// ---- torch::optim::AdamW's per-parameter state ------------------------------------------------
// rdattn's AdamW (worker/trainer/optimizer.h) owns its state. Only a checkpoint written before it
// did (torch::optim::AdamW::save) needs torch's state, read through this: the state torch holds
// for parameter `p`, or none. The state map is keyed by a string of the TensorImpl's address in
// 1.13 and by the address itself (void*) in 2.x.
struct AdamWParamStateView {
  int64_t step = 0;
  at::Tensor exp_avg;
  at::Tensor exp_avg_sq;
};
std::optional<AdamWParamStateView> TorchAdamWState(const torch::optim::AdamW& optimizer,
                                                   const at::Tensor& p);

}  // namespace rdattn::torch_compat
