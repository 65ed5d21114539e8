#include "model/config.h"

#include <cmath>
#include <sstream>

namespace rdattn::model {
namespace {

struct ArmEntry {
  Arm arm;
  std::string_view name;
};
constexpr ArmEntry kArms[] = {
    {Arm::kStandard, "standard"}, {Arm::kBlock, "block"},     {Arm::kRd, "rd"},
    {Arm::kTied, "tied"},         {Arm::kAverage, "average"}, {Arm::kAverageAsym, "average_asym"},
    {Arm::kFrozenV, "frozen_v"},
};

// The presets, in PresetNames() order. Each shape is written from `arm` to `vocab_size`
// (ModelConfig's field order); Preset sets the arm, and the fields after vocab_size keep
// ModelConfig's defaults.
struct PresetEntry {
  std::string_view name;
  ModelConfig shape;
};
constexpr PresetEntry kPresets[] = {
    // name, {arm, layers, width, heads, ffn_hidden, blocks, context, vocab_size}
    // Paper scale, ~120M: GPT-2 vocabulary padded to 50304, SwiGLU 2560, N = 8 (P = 2).
    {"S", {Arm::kBlock, 16, 576, 9, 2560, 8, 1024, 50304}},
    // Paper scale, ~343M: SwiGLU 3904, N = 8 (P = 3).
    {"M", {Arm::kBlock, 24, 832, 13, 3904, 8, 1024, 50304}},
    // Unit tests and the CI sweep: byte-level vocabulary (256 bytes + EOT).
    {"tiny", {Arm::kBlock, 2, 64, 2, 192, 2, 64, 257}},
    // The CPU demo: byte-level, 4 layers, 2 blocks.
    {"cpu-small", {Arm::kBlock, 4, 128, 2, 384, 2, 128, 257}},
    // The benchmark shape of the foundation issue: 4 layers, width 256, context 256, vocab 512.
    {"cpu-bench", {Arm::kBlock, 4, 256, 4, 768, 2, 256, 512}},
};

std::string Str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

const std::vector<Arm>& AllArms() {
  static const std::vector<Arm> arms = [] {
    std::vector<Arm> out;
    for (const auto& e : kArms) out.push_back(e.arm);
    return out;
  }();
  return arms;
}

std::string_view ArmName(Arm arm) {
  for (const auto& e : kArms)
    if (e.arm == arm) return e.name;
  return "unknown";
}

std::optional<Arm> ParseArm(std::string_view name) {
  for (const auto& e : kArms)
    if (e.name == name) return e.arm;
  return std::nullopt;
}

std::string ValidArmNames() {
  std::string out;
  for (const auto& e : kArms) {
    if (!out.empty()) out += ", ";
    out += e.name;
  }
  return out;
}

bool HasDepthRead(Arm arm) { return arm != Arm::kStandard; }
bool HasVRoute(Arm arm) { return arm == Arm::kRd || arm == Arm::kTied || arm == Arm::kFrozenV; }
bool HasSecondQuery(Arm arm) { return arm == Arm::kAverage || arm == Arm::kAverageAsym; }
bool HasTrainedVQuery(Arm arm) { return arm == Arm::kRd; }

std::vector<FieldError> ModelConfig::Validate() const {
  std::vector<FieldError> errors;
  auto positive = [&](const char* field, int64_t v) {
    if (v <= 0) errors.push_back({field, "must be positive, got " + std::to_string(v)});
  };
  positive("layers", layers);
  positive("width", width);
  positive("heads", heads);
  positive("ffn_hidden", ffn_hidden);
  positive("blocks", blocks);
  positive("context", context);
  if (vocab_size < 2)
    errors.push_back({"vocab_size", "must be at least 2, got " + std::to_string(vocab_size)});
  if (width > 0 && heads > 0) {
    if (width % heads != 0) {
      errors.push_back({"width", std::to_string(width) + " is not divisible by heads (" +
                                     std::to_string(heads) + ")"});
    } else if ((width / heads) % 2 != 0) {
      errors.push_back({"heads", "head width width/heads = " + std::to_string(width / heads) +
                                     " must be even for rotate-half RoPE"});
    }
  }
  if (layers > 0 && blocks > 0 && layers % blocks != 0) {
    errors.push_back({"blocks", "layers (" + std::to_string(layers) +
                                    ") must be divisible by blocks (" + std::to_string(blocks) +
                                    ")"});
  }
  auto positive_finite = [&](const char* field, double v) {
    if (!(std::isfinite(v) && v > 0))
      errors.push_back({field, "must be a positive finite number, got " + Str(v)});
  };
  positive_finite("norm_eps", norm_eps);
  positive_finite("key_norm_eps", key_norm_eps);
  positive_finite("rope_theta", rope_theta);
  return errors;
}

std::optional<ModelConfig> Preset(std::string_view name, Arm arm) {
  for (const PresetEntry& p : kPresets) {
    if (p.name != name) continue;
    ModelConfig c = p.shape;
    c.arm = arm;
    return c;
  }
  return std::nullopt;
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const PresetEntry& p : kPresets) names.emplace_back(p.name);
  return names;
}

ParamCounts CountParams(const ModelConfig& c) {
  ParamCounts p;
  const int64_t D = c.width, L = c.layers;
  p.embedding = c.vocab_size * D;
  p.attention = 4 * D * D * L;
  p.mlp = 3 * D * c.ffn_hidden * L;
  p.norms = 2 * D * L + D;
  if (HasDepthRead(c.arm)) {
    p.depth_queries = 2 * D * L + D;  // q_attn, q_mlp per layer + q_final
    if (HasTrainedVQuery(c.arm) || HasSecondQuery(c.arm)) p.depth_queries += D * L;
    p.depth_key_norms = 2 * D * L + D;
  }
  return p;
}

SourceCounts CountSources(const ModelConfig& c) {
  SourceCounts s;
  if (!HasDepthRead(c.arm) || c.blocks <= 0 || c.layers % c.blocks != 0) return s;
  const int64_t P = c.layers_per_block();
  int64_t completed = 0;  // completed block sources (b_0 = embedding first)
  bool partial = true;    // the embedding starts as the partial
  for (int64_t l = 0; l < c.layers; ++l) {
    s.attention.push_back(completed + (partial ? 1 : 0));
    if (l % P == 0) {
      ++completed;
      partial = false;
    }
    partial = true;  // the attention output starts or extends the partial
    s.mlp.push_back(completed + 1);
  }
  s.final_read = completed + (partial ? 1 : 0);
  return s;
}

FlopCounts CountFlops(const ModelConfig& c) {
  FlopCounts f;
  const double D = static_cast<double>(c.width), L = static_cast<double>(c.layers);
  const double matrix_params = 4 * D * D * L + 3 * D * c.ffn_hidden * L + c.vocab_size * D;
  f.matmul_forward = 2 * matrix_params;
  f.attention_forward = 4 * L * static_cast<double>(c.context) * D;
  if (HasDepthRead(c.arm)) {
    const SourceCounts s = CountSources(c);
    const double attn_routes = (HasVRoute(c.arm) || HasSecondQuery(c.arm)) ? 2.0 : 1.0;
    double k_sum = 0;
    for (int64_t k : s.attention) k_sum += attn_routes * static_cast<double>(k);
    for (int64_t k : s.mlp) k_sum += static_cast<double>(k);
    k_sum += static_cast<double>(s.final_read);
    f.depth_read_forward = 4 * k_sum * D;
  }
  return f;
}

}  // namespace rdattn::model
