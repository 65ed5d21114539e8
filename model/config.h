// Model configuration: a plain struct with no LibTorch and no third-party dependency, so that
// the contract library (proto/) and the coordinator can validate model shapes without linking
// LibTorch. The math behind every field is in docs/model.md (and MODEL.md of the design).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/field_error.h"

namespace rdattn::model {

// One residual mode per arm of the study. All arms share one model class and one code path.
enum class Arm {
  kStandard,     // plain pre-norm residual stream
  kBlock,        // Block AttnRes: one depth read feeds Q, K and V
  kRd,           // RD-AttnRes: Q, K from the QK read; V from its own read (one extra vector/layer)
  kTied,         // RD with the V route bound to the QK pseudo-query (no extra parameter)
  kAverage,      // two trained queries, their mean mixture feeds Q, K and V
  kAverageAsym,  // `average` with the second query drawn from N(0, 0.01^2)
  kFrozenV,      // RD with the V query fixed at zero (uniform V route, untrained)
};

// All arms in a fixed order (the order used by tests and benchmarks).
const std::vector<Arm>& AllArms();
std::string_view ArmName(Arm arm);
// Parses "standard", "block", "rd", "tied", "average", "average_asym", "frozen_v".
std::optional<Arm> ParseArm(std::string_view name);
// A comma-separated list of valid names, for error messages.
std::string ValidArmNames();

// Which depth routes an arm computes at the attention-side read site.
bool HasDepthRead(Arm arm);      // every arm but `standard`
bool HasVRoute(Arm arm);         // rd, tied, frozen_v: a second (V) distribution over the sources
bool HasSecondQuery(Arm arm);    // average, average_asym: a second trained query q_b
bool HasTrainedVQuery(Arm arm);  // rd only: q_v is a trainable parameter

struct ModelConfig {
  Arm arm = Arm::kBlock;
  int64_t layers = 4;          // transformer layers L_b (each: attention + MLP sublayer)
  int64_t width = 128;         // model width D
  int64_t heads = 2;           // attention heads H; head width = width / heads
  int64_t ffn_hidden = 384;    // SwiGLU hidden width
  int64_t blocks = 2;          // AttnRes blocks N; layers must be divisible by N
  int64_t context = 128;       // maximum sequence length T
  int64_t vocab_size = 512;    // embedding rows (tied with the output head)
  double norm_eps = 1e-6;      // epsilon of the pre-norms and the final norm
  double key_norm_eps = 1e-6;  // epsilon of the depth-read key RMSNorm
  double rope_theta = 10000.0;

  int64_t head_dim() const { return width / heads; }
  // P: transformer layers per AttnRes block.
  int64_t layers_per_block() const { return layers / blocks; }

  // Every problem with this config, each naming its field ("width", "blocks"). Empty means
  // valid.
  std::vector<FieldError> Validate() const;
};

// Presets. `S` and `M` are the paper scales (GPT-2 vocabulary padded to 50304); the others are
// small shapes for CPU tests, benchmarks and the demo. Names: S, M, tiny, cpu-small, cpu-bench.
std::optional<ModelConfig> Preset(std::string_view name, Arm arm);
std::vector<std::string> PresetNames();

// Parameter counts by group. `total()` is what the model allocates as trainable parameters
// (frozen_v's fixed V query is a buffer and not counted).
struct ParamCounts {
  int64_t embedding = 0;        // vocab x width (tied with the head)
  int64_t attention = 0;        // W_Q, W_K, W_V, W_O over all layers
  int64_t mlp = 0;              // W_gate, W_up, W_down over all layers
  int64_t norms = 0;            // pre-norm gains of all layers + final norm gain
  int64_t depth_queries = 0;    // pseudo-queries: attention, MLP, final, and q_v / q_b
  int64_t depth_key_norms = 0;  // key-norm gains of all read sites
  int64_t total() const {
    return embedding + attention + mlp + norms + depth_queries + depth_key_norms;
  }
};
ParamCounts CountParams(const ModelConfig& cfg);

// Number of sources K at each read site, from walking the block topology (MODEL.md §2.3).
struct SourceCounts {
  std::vector<int64_t> attention;  // per layer, the attention-side read
  std::vector<int64_t> mlp;        // per layer, the MLP-side read
  int64_t final_read = 0;
};
SourceCounts CountSources(const ModelConfig& cfg);

// Model FLOPs per token (docs/model.md gives the formula).
struct FlopCounts {
  double matmul_forward = 0;      // 2 x (matrix parameters, incl. the tied LM head)
  double attention_forward = 0;   // QK^T and AV: 4 * layers * context * width (PaLM convention)
  double depth_read_forward = 0;  // depth logits + mixtures: 4 * K * width per read and route
  double forward() const { return matmul_forward + attention_forward + depth_read_forward; }
  double training() const { return 3.0 * forward(); }  // forward + backward (2x)
};
FlopCounts CountFlops(const ModelConfig& cfg);

}  // namespace rdattn::model
