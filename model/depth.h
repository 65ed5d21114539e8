// The depth read of Block AttnRes (MODEL.md §2.1) and the depth-route diagnostics (§5).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace rdattn::model {

// g ⊙ x / sqrt(mean_d(x²) + eps), per token over the last axis. Computed in at least float32;
// the result has the computation dtype (float32, or float64 for float64 inputs).
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& gain, double eps);

// The dtype the depth read and the norms compute in: float64 stays float64, everything else
// (float32, bf16, fp16) is computed in float32.
at::ScalarType ComputeDtype(at::ScalarType t);

// Stacks sources [B,T,D] into [K,B,T,D] in the computation dtype.
at::Tensor StackSources(const std::vector<at::Tensor>& sources);

// Keys of a read: RMSNorm_g of every source, [K,B,T,D]. Shared by every route of one read site.
at::Tensor DepthKeys(const at::Tensor& stacked, const at::Tensor& key_gain, double eps);

struct DepthMix {
  at::Tensor output;  // [B,T,D]: Σ_k α_k · source_k (raw, un-normalised sources)
  at::Tensor alpha;   // [K,B,T]: softmax over k of (query · key_k); no 1/√D scale
};
DepthMix DepthMixture(const at::Tensor& stacked, const at::Tensor& keys, const at::Tensor& query);

// R(w, g; sources) in one call.
DepthMix DepthRead(const std::vector<at::Tensor>& sources, const at::Tensor& query,
                   const at::Tensor& key_gain, double eps);

// ---------------------------------------------------------------------------
// Diagnostics
// ---------------------------------------------------------------------------

// Where a depth distribution was taken.
enum class RouteSite {
  kAttnQK,  // attention-side read: the QK route (Block's single route)
  kAttnV,   // attention-side read: the V route (rd, tied, frozen_v)
  kAttnB,   // attention-side read: the second query of average / average_asym
  kMlp,     // MLP-side read
  kFinal,   // final read before the final norm
};

struct RouteRecord {
  int64_t layer = 0;  // transformer layer (-1 for the final read)
  RouteSite site = RouteSite::kAttnQK;
  at::Tensor alpha;  // [K,B,T], detached
};

// Per-token Jensen–Shannon divergence in nats between two distributions over axis 0 ([K,...]).
// Returns [...]: ½ Σ p ln(p/m) + ½ Σ q ln(q/m), m = (p+q)/2, logs clamped at 1e-12.
at::Tensor JsDivergence(const at::Tensor& p, const at::Tensor& q);
// Per-token entropy in nats over axis 0.
at::Tensor Entropy(const at::Tensor& p);

// Per-layer depth-route statistics, averaged over every token seen.
struct DepthDiagnostics {
  // The route compared with the QK route: "v" (rd, tied, frozen_v), "b" (average arms), or
  // empty when the arm has a single attention route (block) or none (standard).
  std::string second_route;
  std::vector<int64_t> num_sources;  // K_l of the attention read
  std::vector<double> js_nats;       // mean over tokens of per-token JS, nats
  std::vector<double> js_bits;       // js_nats / ln 2
  std::vector<double> sqrt_js;       // mean over tokens of per-token √JS (nats), the JS distance
  std::vector<double> js_of_mean_nats;      // JS of the token-averaged distributions (≤ js_nats)
  std::vector<double> entropy_qk_nats;      // mean per-token entropy of the QK route
  std::vector<double> entropy_second_nats;  // same for the second route (empty if none)
  std::vector<double> entropy_mlp_nats;     // MLP-side read entropy per layer
  double entropy_final_nats = 0;
  // Headline means: over all attention layers (the primary figure), and over layers with K ≥ 2.
  double mean_js_nats = 0;
  double mean_js_nats_multi = 0;
  double mean_js_bits = 0;
  int64_t tokens = 0;
};

// Accumulates route records over evaluation batches and produces DepthDiagnostics.
class DepthStatsAccumulator {
 public:
  explicit DepthStatsAccumulator(int64_t layers);
  // For a model config: the layer count and the second route ("v", "b" or none) of its arm.
  explicit DepthStatsAccumulator(const ModelConfig& cfg);
  void Add(const std::vector<RouteRecord>& routes);
  DepthDiagnostics Finalize() const;

  // The accumulated sums as one float64 vector, so that ranks can all-reduce (sum) them and
  // every rank finalises the statistics of all evaluated tokens. `num_sources` gives K per
  // attention layer (CountSources(cfg).attention), the same on every rank.
  at::Tensor PackSums(const std::vector<int64_t>& num_sources) const;
  void UnpackSums(const at::Tensor& packed, const std::vector<int64_t>& num_sources);

 private:
  struct Layer {
    int64_t k = 0;
    double js = 0, sqrt_js = 0, ent_qk = 0, ent_second = 0, ent_mlp = 0;
    at::Tensor sum_qk, sum_second;  // Σ over tokens of the distributions, [K] float64
  };
  int64_t layers_;
  std::vector<Layer> per_layer_;
  std::string second_route_;
  double ent_final_ = 0;
  int64_t tokens_ = 0;
};

}  // namespace rdattn::model
