// The only file that tests TORCH_VERSION_* (model/torch_compat.h).
#include "model/torch_compat.h"

#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <cmath>
#include <string>

#if TORCH_VERSION_MAJOR < 2
#include <c10/util/C++17.h>  // c10::guts::to_string (1.13's optimizer state key)
#endif

namespace rdattn::torch_compat {

#define RDATTN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

std::string TorchVersion() { return TORCH_VERSION; }
int TorchMajorVersion() { return TORCH_VERSION_MAJOR; }

std::optional<at::ScalarType> AutocastDtype(c10::DeviceType device) {
#if RDATTN_TORCH_AT_LEAST(2, 4)
  if (device != c10::DeviceType::CPU && device != c10::DeviceType::CUDA) return std::nullopt;
  if (!at::autocast::is_autocast_enabled(device)) return std::nullopt;
  return at::autocast::get_autocast_dtype(device);
#else
  if (device == c10::DeviceType::CPU && at::autocast::is_cpu_enabled())
    return at::autocast::get_autocast_cpu_dtype();
  if (device == c10::DeviceType::CUDA && at::autocast::is_enabled())
    return at::autocast::get_autocast_gpu_dtype();
  return std::nullopt;
#endif
}

void SetAutocast(c10::DeviceType device, bool on, at::ScalarType dtype) {
  TORCH_CHECK(device == c10::DeviceType::CPU || device == c10::DeviceType::CUDA,
              "SetAutocast: CPU or CUDA only, got ", device);
#if RDATTN_TORCH_AT_LEAST(2, 4)
  if (on) at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_enabled(device, on);
#else
  if (device == c10::DeviceType::CPU) {
    if (on) at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(on);
  } else {
    if (on) at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(on);
  }
#endif
  if (!on) at::autocast::clear_cache();
}

bool HasSdpa() {
#if RDATTN_TORCH_AT_LEAST(2, 1)
  return true;
#else
  return false;
#endif
}

at::Tensor CausalSdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
#if RDATTN_TORCH_AT_LEAST(2, 1)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                          /*is_causal=*/true, /*scale=*/scale);
#else
  (void)q;
  (void)k;
  (void)v;
  (void)scale;
  TORCH_CHECK(false,
              "scaled_dot_product_attention with a scale needs LibTorch 2.1 or newer; this "
              "build has LibTorch ",
              TORCH_VERSION, " (use the rdattn attention kernel)");
#endif
}

std::optional<AdamWParamStateView> TorchAdamWState(const torch::optim::AdamW& optimizer,
                                                   const at::Tensor& p) {
  const auto& state = optimizer.state();
#if TORCH_VERSION_MAJOR < 2
  const auto it = state.find(c10::guts::to_string(p.unsafeGetTensorImpl()));
#else
  const auto it = state.find(static_cast<void*>(p.unsafeGetTensorImpl()));
#endif
  if (it == state.end()) return std::nullopt;
  const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
  return AdamWParamStateView{s.step(), s.exp_avg(), s.exp_avg_sq()};
}

#undef RDATTN_TORCH_AT_LEAST

}  // namespace rdattn::torch_compat
