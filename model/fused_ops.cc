#include "model/fused_ops.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <vector>

#include "model/cpu_kernel_dispatch.h"
#include "model/depth.h"
#include "model/fused_ops_cpu_args.h"

namespace rdattn::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<bool> kernels_enabled{true};
std::atomic<bool> baseline_only{false};

// The kernels serve CPU float32/float64 tensors; anything else takes the plain composition.
bool KernelTensor(const at::Tensor& t) {
  const auto dt = t.scalar_type();
  return kernels_enabled.load(std::memory_order_relaxed) && t.device().is_cpu() &&
         (dt == at::kFloat || dt == at::kDouble) && t.numel() > 0;
}

int64_t NormChunks(int64_t N) { return (N + fused_cpu::kNormRows - 1) / fused_cpu::kNormRows; }

// Runs a kernel over [0, n) in parallel tasks of at least `grain` (model/cpu_kernel_dispatch.h).
template <typename Args>
void RunKernel(void (*avx2)(const Args&, int64_t, int64_t),
               void (*base)(const Args&, int64_t, int64_t), const Args& p, int64_t n,
               int64_t grain) {
  RunIsaKernel(avx2, base, p, n, grain, baseline_only.load(std::memory_order_relaxed));
}

// x [N,D] (any leading shape), g [D], all contiguous; fills y (x's shape) and rho [N].
template <typename T>
void NormForwardTyped(const at::Tensor& x, const at::Tensor& g, double eps, at::Tensor& y,
                      at::Tensor& rho) {
  const int64_t D = x.size(-1), N = x.numel() / D;
  const fused_cpu::NormForwardArgs<T> p{N,
                                        D,
                                        static_cast<T>(eps),
                                        x.data_ptr<T>(),
                                        g.data_ptr<T>(),
                                        y.data_ptr<T>(),
                                        rho.data_ptr<T>()};
  RunKernel(fused_cpu::avx2::NormForward, fused_cpu::base::NormForward, p, NormChunks(N), 1);
}

// Fills dx (x's shape) and dg [D] where defined.
template <typename T>
void NormBackwardTyped(const at::Tensor& x, const at::Tensor& g, const at::Tensor& dy,
                       const at::Tensor& rho, at::Tensor& dx, at::Tensor& dg) {
  const int64_t D = x.size(-1), N = x.numel() / D, chunks = NormChunks(N);
  // Per-chunk partial sums of ∂L/∂g, added in chunk order below: the same sum for every number
  // of threads.
  std::vector<T> dg_part(dg.defined() ? static_cast<size_t>(chunks * D) : 0, T(0));
  const fused_cpu::NormBackwardArgs<T> p{N,
                                         D,
                                         x.data_ptr<T>(),
                                         g.data_ptr<T>(),
                                         dy.data_ptr<T>(),
                                         rho.data_ptr<T>(),
                                         dx.defined() ? dx.data_ptr<T>() : nullptr,
                                         dg_part.empty() ? nullptr : dg_part.data()};
  RunKernel(fused_cpu::avx2::NormBackward, fused_cpu::base::NormBackward, p, chunks, 1);
  if (dg.defined()) {
    T* out = dg.data_ptr<T>();
    for (int64_t d = 0; d < D; ++d) out[d] = T(0);
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t d = 0; d < D; ++d) out[d] += dg_part[static_cast<size_t>(c * D + d)];
  }
}

// inputs x [..., D], gain [D]; output y = x · ρ · gain.
struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& gain,
                            double eps) {
    const at::Tensor xc = x.contiguous(), gc = gain.contiguous();
    at::Tensor y = at::empty(xc.sizes(), xc.options());
    at::Tensor rho = at::empty({xc.numel() / xc.size(-1)}, xc.options());
    AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "fused_rms_norm_forward",
                               [&] { NormForwardTyped<scalar_t>(xc, gc, eps, y, rho); });
    // x by reference (the graph's own tensor) and ρ: the backward recomputes x̂ = x·ρ.
    ctx->save_for_backward({x, gain});
    ctx->saved_data["rho"] = rho;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor x = saved[0].contiguous(), g = saved[1].contiguous();
    const at::Tensor dy = grads[0].contiguous();
    const at::Tensor rho = ctx->saved_data["rho"].toTensor();
    at::Tensor dx, dg;
    if (ctx->needs_input_grad(0)) dx = at::empty(x.sizes(), x.options());
    if (ctx->needs_input_grad(1)) dg = at::empty(g.sizes(), g.options());
    if (dx.defined() || dg.defined()) {
      AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_rms_norm_backward",
                                 [&] { NormBackwardTyped<scalar_t>(x, g, dy, rho, dx, dg); });
    }
    return {dx, dg, at::Tensor()};
  }
};

// input x [..., D]; output ρ [..., 1].
struct InvRmsFunction : public torch::autograd::Function<InvRmsFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double eps) {
    const at::Tensor xc = x.contiguous();
    std::vector<int64_t> shape = xc.sizes().vec();
    shape.back() = 1;
    at::Tensor inv = at::empty(shape, xc.options());
    AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "fused_inv_rms_forward", [&] {
      const fused_cpu::InvRmsArgs<scalar_t> p{xc.numel() / xc.size(-1),
                                              xc.size(-1),
                                              static_cast<scalar_t>(eps),
                                              xc.data_ptr<scalar_t>(),
                                              inv.data_ptr<scalar_t>(),
                                              nullptr,
                                              nullptr};
      RunKernel(fused_cpu::avx2::InvRmsForward, fused_cpu::base::InvRmsForward, p, NormChunks(p.N),
                1);
    });
    // x by reference (the graph's own tensor) and ρ (an output: saved as one).
    ctx->save_for_backward({x, inv});
    return inv;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!ctx->needs_input_grad(0)) return {at::Tensor(), at::Tensor()};
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor x = saved[0].contiguous(), inv = saved[1].contiguous();
    const at::Tensor dinv = grads[0].contiguous();
    at::Tensor dx = at::empty(x.sizes(), x.options());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_inv_rms_backward", [&] {
      const fused_cpu::InvRmsArgs<scalar_t> p{x.numel() / x.size(-1),
                                              x.size(-1),
                                              scalar_t(0),
                                              x.data_ptr<scalar_t>(),
                                              inv.data_ptr<scalar_t>(),
                                              dinv.data_ptr<scalar_t>(),
                                              dx.data_ptr<scalar_t>()};
      RunKernel(fused_cpu::avx2::InvRmsBackward, fused_cpu::base::InvRmsBackward, p,
                NormChunks(p.N), 1);
    });
    return {dx, at::Tensor()};
  }
};

// Rows per parallel task of the SwiGLU kernels: about kSwiGluGrain elements, at least one row.
int64_t SwiGluGrainRows(int64_t F) {
  return F >= fused_cpu::kSwiGluGrain ? 1 : fused_cpu::kSwiGluGrain / F;
}

// input ac = [a | b] [..., 2F]; output silu(a) · b [..., F].
struct SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& ac) {
    const at::Tensor acc = ac.contiguous();
    const int64_t F = acc.size(-1) / 2, N = acc.numel() / (2 * F);
    std::vector<int64_t> shape = acc.sizes().vec();
    shape.back() = F;
    at::Tensor y = at::empty(shape, acc.options());
    AT_DISPATCH_FLOATING_TYPES(acc.scalar_type(), "swiglu_forward", [&] {
      const fused_cpu::SwiGluArgs<scalar_t> p{F, acc.data_ptr<scalar_t>(), nullptr,
                                              y.data_ptr<scalar_t>(), nullptr};
      RunKernel(fused_cpu::avx2::SwiGluForward, fused_cpu::base::SwiGluForward, p, N,
                SwiGluGrainRows(F));
    });
    // ac by reference (the GEMM's output); silu(a) is not saved but recomputed.
    ctx->save_for_backward({ac});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!ctx->needs_input_grad(0)) return {at::Tensor()};
    const at::Tensor ac = ctx->get_saved_variables()[0].contiguous();
    const at::Tensor dy = grads[0].contiguous();
    const int64_t F = ac.size(-1) / 2, N = ac.numel() / (2 * F);
    // Both halves of ∂L/∂ac from one pass (they share the sigmoid), into one tensor.
    at::Tensor dac = at::empty(ac.sizes(), ac.options());
    AT_DISPATCH_FLOATING_TYPES(ac.scalar_type(), "swiglu_backward", [&] {
      const fused_cpu::SwiGluArgs<scalar_t> p{F, ac.data_ptr<scalar_t>(), dy.data_ptr<scalar_t>(),
                                              nullptr, dac.data_ptr<scalar_t>()};
      RunKernel(fused_cpu::avx2::SwiGluBackward, fused_cpu::base::SwiGluBackward, p, N,
                SwiGluGrainRows(F));
    });
    return {dac};
  }
};

void CheckSwiGluInput(const at::Tensor& ac) {
  TORCH_CHECK(ac.dim() >= 1 && ac.size(-1) % 2 == 0,
              "SwiGlu: ac's last axis holds [gate | up] and must have an even size, got shape ",
              ac.sizes());
}

}  // namespace

at::Tensor FusedRmsNorm(const at::Tensor& x, const at::Tensor& gain, double eps) {
  if (!KernelTensor(x) || x.dim() < 1 || !gain.device().is_cpu() ||
      gain.scalar_type() != x.scalar_type() || gain.dim() != 1 || gain.size(0) != x.size(-1))
    return RmsNorm(x, gain, eps);
  return RmsNormFunction::apply(x, gain, eps);
}

at::Tensor InvRms(const at::Tensor& x, double eps) {
  return at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

at::Tensor FusedInvRms(const at::Tensor& x, double eps) {
  if (!KernelTensor(x) || x.dim() < 1) return InvRms(x, eps);
  return InvRmsFunction::apply(x, eps);
}

at::Tensor SwiGlu(const at::Tensor& ac) {
  CheckSwiGluInput(ac);
  const int64_t F = ac.size(-1) / 2;
  return at::silu(ac.narrow(-1, 0, F)) * ac.narrow(-1, F, F);
}

at::Tensor FusedSwiGlu(const at::Tensor& ac) {
  CheckSwiGluInput(ac);
  if (!KernelTensor(ac)) return SwiGlu(ac);
  return SwiGluFunction::apply(ac);
}

void SetFusedCpuKernels(bool on) { kernels_enabled.store(on); }

bool FusedCpuKernels() { return kernels_enabled.load(); }

void ForceBaselineFusedKernels(bool on) { baseline_only.store(on); }

}  // namespace rdattn::model
