#include "model/depth_read_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>

#include "common/cpu_features.h"
#include "model/depth_read_cpu_args.h"

namespace rdattn::model::cpu {
namespace {

std::atomic<bool> baseline_only{false};

bool UseAvx2() {
  return ::rdattn::cpu::HasAvx2() && !baseline_only.load(std::memory_order_relaxed);
}

// Per-task scratch (see Scratch in depth_read_cpu_args.h), owned by the calling task.
template <typename T>
struct ScratchBuffers {
  std::vector<T> a, dz, wv, z, h, G, hb;
  std::vector<const T*> xr;
  Scratch<T> view;
  ScratchBuffers(int64_t K, int64_t R, int64_t D)
      : a(static_cast<size_t>(R * K)),
        dz(a.size()),
        wv(a.size()),
        z(static_cast<size_t>(K)),
        h(static_cast<size_t>(R * D)),
        G(h.size()),
        hb(static_cast<size_t>(D)),
        xr(static_cast<size_t>(K)),
        view{a.data(), dz.data(), wv.data(), z.data(), h.data(), G.data(), hb.data(), xr.data()} {}
};

template <typename T>
std::vector<const T*> Ptrs(const std::vector<at::Tensor>& x) {
  std::vector<const T*> p;
  p.reserve(x.size());
  for (const auto& t : x) p.push_back(t.defined() ? t.data_ptr<T>() : nullptr);
  return p;
}

template <typename T>
std::vector<T*> MutablePtrs(std::vector<at::Tensor>& x) {
  std::vector<T*> p;
  p.reserve(x.size());
  for (auto& t : x) p.push_back(t.defined() ? t.data_ptr<T>() : nullptr);
  return p;
}

int64_t Chunks(int64_t N) { return (N + kChunk - 1) / kChunk; }

template <typename T>
void ForwardTyped(const ReadShape& sh, const std::vector<at::Tensor>& xs, const at::Tensor& u,
                  const at::Tensor& inv, const at::Tensor& n, at::Tensor& s, at::Tensor& alpha,
                  std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& rhos) {
  const std::vector<const T*> x = Ptrs<T>(xs);
  const std::vector<T*> out = MutablePtrs<T>(outputs), rho = MutablePtrs<T>(rhos);
  const ForwardArgs<T> p{sh.K,
                         sh.R,
                         sh.N,
                         sh.D,
                         sh.norm,
                         static_cast<T>(sh.eps),
                         x.data(),
                         u.data_ptr<T>(),
                         inv.data_ptr<T>(),
                         n.defined() ? n.data_ptr<T>() : nullptr,
                         s.data_ptr<T>(),
                         alpha.data_ptr<T>(),
                         out.data(),
                         rho.data()};
  const bool avx2 = UseAvx2();
  at::parallel_for(0, Chunks(sh.N), 1, [&](int64_t c0, int64_t c1) {
    const ScratchBuffers<T> w(sh.K, sh.R, sh.D);
    if (avx2) {
      avx2::Forward(p, w.view, c0, c1);
    } else {
      base::Forward(p, w.view, c0, c1);
    }
  });
}

template <typename T>
void BackwardTyped(const ReadShape& sh, const std::vector<at::Tensor>& xs, const at::Tensor& s,
                   const at::Tensor& inv, const at::Tensor& alpha, const at::Tensor& n,
                   const std::vector<at::Tensor>& rhos, const at::Tensor& u,
                   const std::vector<at::Tensor>& dys, ReadGrads& g) {
  const std::vector<const T*> x = Ptrs<T>(xs), dy = Ptrs<T>(dys), rho = Ptrs<T>(rhos);
  const std::vector<T*> dx = MutablePtrs<T>(g.dx);
  const int64_t chunks = Chunks(sh.N);
  // Per-chunk partial sums of ∂L/∂n, added in chunk order below: the same sum for every
  // number of threads.
  std::vector<T> dn_part(g.dn.defined() ? static_cast<size_t>(chunks * sh.D) : 0, T(0));
  std::vector<T> du_part(g.du.defined() ? static_cast<size_t>(chunks * sh.R * sh.D) : 0, T(0));
  const BackwardArgs<T> p{sh.K,
                          sh.R,
                          sh.N,
                          sh.D,
                          sh.norm,
                          x.data(),
                          dy.data(),
                          rho.data(),
                          s.data_ptr<T>(),
                          inv.data_ptr<T>(),
                          alpha.data_ptr<T>(),
                          n.defined() ? n.data_ptr<T>() : nullptr,
                          u.data_ptr<T>(),
                          dx.data(),
                          g.dinv.defined() ? g.dinv.data_ptr<T>() : nullptr,
                          du_part.empty() ? nullptr : du_part.data(),
                          dn_part.empty() ? nullptr : dn_part.data(),
                          g.y1.defined() ? g.y1.data_ptr<T>() : nullptr};
  const bool avx2 = UseAvx2();
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    const ScratchBuffers<T> w(sh.K, sh.R, sh.D);
    if (avx2) {
      avx2::Backward(p, w.view, c0, c1);
    } else {
      base::Backward(p, w.view, c0, c1);
    }
  });
  // The per-chunk partial sums, added in chunk order.
  auto reduce = [chunks](const std::vector<T>& part, at::Tensor& out) {
    T* o = out.data_ptr<T>();
    const auto len = static_cast<int64_t>(part.size()) / chunks;
    std::fill(o, o + len, T(0));
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t j = 0; j < len; ++j) o[j] += part[static_cast<size_t>(c * len + j)];
  };
  if (g.dn.defined()) reduce(dn_part, g.dn);
  if (g.du.defined()) reduce(du_part, g.du);
}

}  // namespace

void ForceBaselineKernels(bool on) { baseline_only.store(on); }

void ReadForward(const ReadShape& sh, const std::vector<at::Tensor>& x, const at::Tensor& u,
                 const at::Tensor& inv, const at::Tensor& n, at::Tensor& s, at::Tensor& alpha,
                 std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& rho) {
  AT_DISPATCH_FLOATING_TYPES(s.scalar_type(), "depth_read_cpu_forward", [&] {
    ForwardTyped<scalar_t>(sh, x, u, inv, n, s, alpha, outputs, rho);
  });
}

void ReadBackward(const ReadShape& sh, const std::vector<at::Tensor>& x, const at::Tensor& s,
                  const at::Tensor& inv, const at::Tensor& alpha, const at::Tensor& n,
                  const std::vector<at::Tensor>& rho, const at::Tensor& u,
                  const std::vector<at::Tensor>& dy, ReadGrads& g) {
  AT_DISPATCH_FLOATING_TYPES(s.scalar_type(), "depth_read_cpu_backward", [&] {
    BackwardTyped<scalar_t>(sh, x, s, inv, alpha, n, rho, u, dy, g);
  });
}

}  // namespace rdattn::model::cpu
