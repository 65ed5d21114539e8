// The fused depth read used by every arm's forward pass (MODEL.md §2.1, factorised form).
//
// A read over K sources with R routes (R = 1: Block's reads, the MLP-side and final reads;
// R = 2: the attention read of rd, tied, frozen_v and the average arms) computes, per route r,
//
//   z[r,k] = inv_rms_k · (x_k · (g ⊙ q_r))      (= q_r · RMSNorm_g(x_k), no 1/√D)
//   α[r]   = softmax_k z[r]
//   h_r    = Σ_k α[r,k] · x_k                   (raw sources)
//
// The sources enter a per-forward `DepthSources` list once each: cast to the computation dtype
// and their inverse RMS computed once, then shared by every later read that sees them. No read
// stacks or normalises the sources; the logits of all routes come from the products of each raw
// source with the scaled queries g ⊙ q_r: on the CPU inside the kernel of model/depth_read_cpu.h
// (which does the whole read), elsewhere one product with the stacked [g ⊙ q_0, g ⊙ q_1] (a
// [D,2] matrix).
//
// `DepthReadFunction` is a custom autograd function: it saves the sources (by reference, they
// are the graph's own tensors), their inverse RMS, the gain, the queries, and per token the
// weights α and the raw products x_k · (g ⊙ q_r), [R,K,B,T], and, when the read's output norm
// is folded in (ReadNorm), that norm's per-token inverse RMS; the backward recomputes the rest
// (the mixtures h from α and the sources).
// The plain composition (StackSources, DepthKeys, DepthMixture in model/depth.h) is the
// reference it is tested against.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace rdattn::model {

// One source of the depth reads of a forward pass.
struct DepthSource {
  at::Tensor x;        // [B,T,D], computation dtype
  at::Tensor inv_rms;  // [B,T,1]: 1 / sqrt(mean_d(x²) + eps), differentiable
};

// x cast to the computation dtype (ComputeDtype) and its inverse RMS over the last axis.
DepthSource MakeDepthSource(const at::Tensor& x, double eps);

// The source list of one forward pass: the completed blocks b_0 … b_{n-1} and the current
// block's partial sum. Each source's inverse RMS is computed once (lazily, when a read first
// sees it) and reused by every read that sees it; a partial pushed at a block boundary keeps
// the statistics computed when it was read as the partial.
class DepthSources {
 public:
  explicit DepthSources(double eps) : eps_(eps) {}
  // Sets the current partial (undefined = EMPTY).
  void SetPartial(const at::Tensor& partial);
  // Block boundary: the partial becomes a completed block and the partial is EMPTY.
  void PushPartial();
  // blocks ++ [partial], the sources of the next read.
  std::vector<DepthSource> Sources();
  // The raw sources of the next read (for ForwardOptions::capture_final_sources).
  std::vector<at::Tensor> RawSources() const;

 private:
  double eps_;
  std::vector<DepthSource> blocks_;
  at::Tensor partial_;
  DepthSource partial_source_;  // filled on first read of `partial_`
};

// The RMSNorm that follows a read (the sublayer's pre-norm, or the final norm), folded into the
// read so that the mixture h is never saved: its backward recomputes h from α and the sources.
// Undefined gain: no norm, the read returns the mixtures themselves.
struct ReadNorm {
  at::Tensor gain;              // [D]
  double eps = 1e-6;            //
  bool mean_of_routes = false;  // the average arms: one output RMSNorm(½(h_0 + h_1))
  // rd, tied, frozen_v: route 1's output is linear(RMSNorm(h_1), v_projection) (the V
  // projection W_V, [out, in]), so that RMSNorm(h_1) is not saved either: the backward
  // recomputes it. Undefined: route 1's output is RMSNorm(h_1).
  at::Tensor v_projection;
};

struct DepthReadResult {
  // Per route: h_r, or RMSNorm_n(h_r) with a ReadNorm; one RMSNorm_n(½(h_0 + h_1)) with
  // mean_of_routes; route 1 projected with v_projection. [B,T,D], computation dtype.
  std::vector<at::Tensor> outputs;
  std::vector<at::Tensor> alphas;  // per route: α[r], [K,B,T], not differentiable
};

// The fused read of 1 or 2 routes (one query per route) over `sources`, with key gain `gain`.
// The route of a 1-route read and route 0 (or a route with an equal query) of a 2-route read
// are bitwise equal, which T6 relies on: on the CPU the kernel runs the same code for every
// route; op by op, every read computes its logits with the same [B·T,D]×[D,2] product (a
// 1-route read fills the second column with zeros and drops it) and every per-route step
// (softmax, mixture) is its own op of the same shape whatever R is.
DepthReadResult FusedDepthRead(const std::vector<DepthSource>& sources,
                               const std::vector<at::Tensor>& queries, const at::Tensor& gain,
                               const ReadNorm& norm = {});

// On the CPU (float32 and float64) the read runs the hand-written kernel of
// model/depth_read_cpu.h; elsewhere, or with the kernel switched off, the same function op by op.
// The switch is process-wide, for tests and benchmarks that compare the two; it is read when a
// read's forward runs (its backward follows the forward's choice). On by default.
void SetDepthReadCpuKernel(bool on);
bool DepthReadCpuKernel();

}  // namespace rdattn::model
