// The GPT of the study: Llama-style pre-norm blocks (RMSNorm, RoPE rotate-half, SwiGLU, no
// biases, tied embeddings) with one residual mode per arm (model/config.h). Pure LibTorch.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/depth.h"
#include "model/depth_read.h"

namespace rdattn::model {

struct ForwardOptions {
  bool capture_routes = false;         // fill ForwardOutput::routes (alphas, detached)
  bool capture_final_sources = false;  // fill ForwardOutput::final_sources (for tests)
  // The reference path (tests): every read as the plain composition of model/depth.h (stack,
  // key-norm, mixture per route, autograd through every op) instead of the fused read of
  // model/depth_read.h. Same function; the two differ in the last bits only.
  bool plain_depth_read = false;
};

struct ForwardOutput {
  at::Tensor logits;                      // [B,T,V]
  std::vector<RouteRecord> routes;        // every read site's depth weights, if asked
  std::vector<at::Tensor> final_sources;  // [b_0 … b_N] seen by the final read, if asked
};

// One transformer layer's parameters. Names match docs/model.md and the parity fixture
// (l{i}.wq, l{i}.q_attn, …).
class LayerImpl : public torch::nn::Module {
 public:
  LayerImpl(const ModelConfig& cfg);
  at::Tensor wq, wk, wv, wo, wgate, wup, wdown;  // [out, in]
  at::Tensor attn_norm, mlp_norm;                // pre-norm gains
  at::Tensor q_attn, attn_key_norm;              // attention-side read (QK route)
  at::Tensor q_mlp, mlp_key_norm;                // MLP-side read
  at::Tensor q_v;  // rd: parameter; frozen_v: zero buffer; otherwise undefined
  at::Tensor q_b;  // average, average_asym: parameter; otherwise undefined
};
TORCH_MODULE(Layer);

class GptImpl : public torch::nn::Module {
 public:
  // Builds the model and initialises it from `init_seed` (MODEL.md "Init"): every parameter
  // that two arms share gets bitwise the same value for one seed; pseudo-queries start at zero
  // and draw nothing. The config must be valid (Validate() empty); otherwise this throws.
  GptImpl(const ModelConfig& cfg, uint64_t init_seed);

  // tokens: [B,T] int64 with T ≤ context. Returns logits [B,T,V] (and routes when asked).
  ForwardOutput Forward(const at::Tensor& tokens, const ForwardOptions& opts = {});
  at::Tensor forward(const at::Tensor& tokens) { return Forward(tokens).logits; }

  // Mean token cross-entropy (nats) of next-token prediction: logits [B,T,V], targets [B,T].
  static at::Tensor Loss(const at::Tensor& logits, const at::Tensor& targets);

  const ModelConfig& config() const { return cfg_; }
  const std::vector<Layer>& layers() const { return layers_; }

  // Optimizer groups: weight decay applies to matrices only (dim ≥ 2), never to gains or
  // pseudo-queries. Frozen-V's q_v is a buffer and is in neither group.
  std::vector<at::Tensor> DecayParameters();
  std::vector<at::Tensor> NoDecayParameters();

  // Parameters that every arm with a depth read has (everything but q_v and q_b), by name.
  // Their checksum is equal across the arms of a pair at step 0.
  std::vector<std::pair<std::string, at::Tensor>> SharedParameters() const;

  // Re-initialises every parameter from `init_seed` (used by the constructor).
  void Initialize(uint64_t init_seed);

  at::Tensor emb;         // [V, D], tied with the head
  at::Tensor final_norm;  // [D]
  at::Tensor q_final;     // [D] final depth read (not in `standard`)
  at::Tensor final_key_norm;

 private:
  // v_proj: the values before the head split, x_V·W_Vᵀ [B,T,D] (computed by the caller: the
  // rd arms' fused read returns it). Both sublayers return residual + their output (the
  // writeback, folded into the output projection's GEMM on the CPU); an undefined residual
  // (an EMPTY partial) returns the output alone.
  at::Tensor Attention(const LayerImpl& layer, const at::Tensor& x_qk, const at::Tensor& v_proj,
                       const at::Tensor& cos, const at::Tensor& sin,
                       const at::Tensor& residual) const;
  at::Tensor Mlp(const LayerImpl& layer, const at::Tensor& x, const at::Tensor& residual) const;
  ForwardOutput ForwardStandard(const at::Tensor& e, const at::Tensor& cos, const at::Tensor& sin);

  ModelConfig cfg_;
  std::vector<Layer> layers_;
};
TORCH_MODULE(Gpt);

// A stable 64-bit checksum (FNV-1a) over names, shapes and float32 values of the tensors, in
// the order given. Used to verify from outside that paired arms start from the same weights.
uint64_t ParameterChecksum(const std::vector<std::pair<std::string, at::Tensor>>& named);

}  // namespace rdattn::model
