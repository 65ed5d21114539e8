#include "common/run_config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "common/field_error.h"
#include "common/field_key.h"

namespace rdattn {
namespace {

// The walk runs on an insertion-ordered document so that syntax errors come out in document
// order (nlohmann::json sorts object keys).
using OJson = nlohmann::ordered_json;

constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// ------------------------------------------------------------------------------------------
// The paper recipe (MODEL.md Part I, "Recipe for the paper scale").
constexpr int64_t kPaperBatchTokens = 524288;                           // 512 sequences of 1024
constexpr int64_t kPaperSteps = 3815;                                   // 2.0B tokens
constexpr int64_t kPaperTotalTokens = kPaperSteps * kPaperBatchTokens;  // 2,000,158,720
constexpr int64_t kPaperMilestoneSteps[] = {477, 954, 1908, 3815};
constexpr int64_t kPaperWarmupSteps = 190;
constexpr double kPaperPeakLrS = 6e-4;
constexpr double kPaperPeakLrM = 3e-4;

// Defaults with no recipe (equal to the paper's values where the paper has one).
constexpr double kDefaultMinLrRatio = 0.1;
constexpr double kDefaultBeta1 = 0.9;
constexpr double kDefaultBeta2 = 0.95;
constexpr double kDefaultEps = 1e-8;
constexpr double kDefaultWeightDecay = 0.1;
constexpr double kDefaultGradClip = 1.0;
constexpr double kDefaultWarmupFraction = 0.05;
constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;
constexpr int64_t kDefaultKeepLast = 2;

constexpr double kPi = 3.14159265358979323846;

constexpr int64_t kGpt2Ids = 50257;  // 50256 BPE tokens + <|endoftext|>
constexpr int64_t kByteIds = 257;    // 256 bytes + EOT

// Errors (common/field_error.h): a path that had a syntax error (wrong type, out of range) or
// is missing is marked bad, and later validation errors on it are dropped, so one mistake is
// reported once. Syntax errors come first, in document order; validation errors follow, ordered
// by their top-level section (ParseOrdered).

// A short rendering of a JSON value for error messages.
std::string Describe(const OJson& v) {
  std::string s = v.dump(-1, ' ', false, OJson::error_handler_t::replace);
  if (s.size() > 48) s = s.substr(0, 45) + "...";
  return s;
}

std::string Num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

// snake_case → lowerCamelCase, as protobuf derives json_name.
std::string Camel(std::string_view snake) {
  std::string out;
  bool upper = false;
  for (char c : snake) {
    if (c == '_') {
      upper = true;
    } else {
      out += upper && c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
      upper = false;
    }
  }
  return out;
}

// ------------------------------------------------------------------------------------------
// Scalar readers. Each returns nullopt after recording a syntax error.

std::optional<int64_t> ParseDecimalInt(std::string_view s) {
  if (s.empty()) return std::nullopt;
  int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || p != end) return std::nullopt;
  return v;
}

std::optional<int64_t> ReadInt(const OJson& v, const std::string& path, int64_t lo, int64_t hi,
                               std::string_view type, FieldErrors& e) {
  const std::string expected =
      "expected " + std::string(type) + " (a JSON integer or a decimal string), got " + Describe(v);
  const std::string range =
      Describe(v) + " is out of the " + std::string(type.substr(type.find(' ') + 1)) + " range";
  std::optional<int64_t> out;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) {
      e.AddAndMarkBad(path, range);
      return std::nullopt;
    }
    out = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    out = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) {
      e.AddAndMarkBad(path, expected);
      return std::nullopt;
    }
    // [-2^63, 2^63) is exactly representable at its ends.
    if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) {
      e.AddAndMarkBad(path, range);
      return std::nullopt;
    }
    out = static_cast<int64_t>(d);
  } else if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    out = ParseDecimalInt(s);
    if (!out) {
      // Digits that overflow int64 are a range error, anything else a type error.
      const bool digits = !s.empty() && s.find_first_not_of("-0123456789") == std::string::npos;
      e.AddAndMarkBad(path, digits ? range : expected);
      return std::nullopt;
    }
  } else {
    e.AddAndMarkBad(path, expected);
    return std::nullopt;
  }
  if (*out < lo || *out > hi) {
    e.AddAndMarkBad(path, range);
    return std::nullopt;
  }
  return out;
}

std::optional<int64_t> ReadInt32(const OJson& v, const std::string& path, FieldErrors& e) {
  return ReadInt(v, path, kInt32Min, kInt32Max, "an int32", e);
}
std::optional<int64_t> ReadInt64(const OJson& v, const std::string& path, FieldErrors& e) {
  return ReadInt(v, path, kInt64Min, kInt64Max, "an int64", e);
}

std::optional<uint64_t> ReadUint64(const OJson& v, const std::string& path, FieldErrors& e) {
  const std::string expected =
      "expected a uint64 (a non-negative JSON integer or a decimal string), got " + Describe(v);
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) {
      e.AddAndMarkBad(path, expected);
      return std::nullopt;
    }
    return static_cast<uint64_t>(i);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && d >= 0 && d < 18446744073709551616.0)
      return static_cast<uint64_t>(d);
    e.AddAndMarkBad(path, expected);
    return std::nullopt;
  }
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    uint64_t u = 0;
    const char* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, u);
    if (!s.empty() && ec == std::errc() && p == end) return u;
    const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
    e.AddAndMarkBad(path, digits ? Describe(v) + " is out of the uint64 range" : expected);
    return std::nullopt;
  }
  e.AddAndMarkBad(path, expected);
  return std::nullopt;
}

// Doubles: JSON numbers, or the strings "NaN", "Infinity", "-Infinity" (and decimal strings),
// as protobuf's JSON mapping allows. Non-finite values are rejected later, by the checks.
std::optional<double> ReadDouble(const OJson& v, const std::string& path, FieldErrors& e) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    double d = 0;
    const char* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, d);
    if (!s.empty() && ec == std::errc() && p == end && std::isfinite(d)) return d;
  }
  e.AddAndMarkBad(
      path, "expected a double (a JSON number, or \"NaN\", \"Infinity\" or \"-Infinity\"), got " +
                Describe(v));
  return std::nullopt;
}

std::optional<std::string> ReadString(const OJson& v, const std::string& path, FieldErrors& e) {
  if (v.is_string()) return v.get<std::string>();
  e.AddAndMarkBad(path, "expected a string, got " + Describe(v));
  return std::nullopt;
}

std::optional<bool> ReadBool(const OJson& v, const std::string& path, FieldErrors& e) {
  if (v.is_boolean()) return v.get<bool>();
  e.AddAndMarkBad(path, "expected true or false, got " + Describe(v));
  return std::nullopt;
}

// One row of an enum's table: how the RunSpec spells a value (proto name, short name, number)
// and the C++ value it means. Several rows may mean one value (UNSPECIFIED and AUTO); the last
// row of a value is how it is written back (see Canonical).
template <typename T>
struct EnumEntry {
  std::string_view proto;       // "PRECISION_FP64"
  std::string_view short_name;  // "fp64"
  int number;
  T value;
};

// The value a number means; the first row's value for a number the table lacks.
template <typename T, size_t N>
T FromNumber(const EnumEntry<T> (&table)[N], int number) {
  for (const auto& entry : table)
    if (entry.number == number) return entry.value;
  return table[0].value;
}

// The row a value is written back as: its last row.
template <typename T, size_t N>
const EnumEntry<T>& Canonical(const EnumEntry<T> (&table)[N], T value) {
  const EnumEntry<T>* found = &table[0];
  for (const auto& entry : table)
    if (entry.value == value) found = &entry;
  return *found;
}

// Enums: the proto name, the short lowercase name, or the number.
template <typename T, size_t N>
std::optional<int> ReadEnum(const OJson& v, const std::string& path, const EnumEntry<T> (&table)[N],
                            std::string_view valid, FieldErrors& e) {
  const std::string hint = "; valid: " + std::string(valid);
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    for (const auto& entry : table)
      if (s == entry.proto || s == entry.short_name) return entry.number;
    e.AddAndMarkBad(path, "unknown value " + Quote(s) + hint);
    return std::nullopt;
  }
  if (v.is_number()) {
    const double d = v.get<double>();
    for (const auto& entry : table)
      if (d == entry.number) return entry.number;
    e.AddAndMarkBad(path, "unknown value " + Describe(v) + hint);
    return std::nullopt;
  }
  e.AddAndMarkBad(path, "expected an enum value (a name or a number), got " + Describe(v) + hint);
  return std::nullopt;
}

constexpr EnumEntry<Backend> kBackendEnum[] = {
    {"BACKEND_UNSPECIFIED", "unspecified", 0, Backend::kAuto},
    {"BACKEND_AUTO", "auto", 1, Backend::kAuto},
    {"BACKEND_LOCAL", "local", 2, Backend::kLocal},
    {"BACKEND_MPI", "mpi", 3, Backend::kMpi},
    {"BACKEND_NCCL", "nccl", 4, Backend::kNccl},
};
constexpr EnumEntry<Device> kDeviceEnum[] = {
    {"DEVICE_UNSPECIFIED", "unspecified", 0, Device::kAuto},
    {"DEVICE_UNSPECIFIED", "auto", 0, Device::kAuto},
    {"DEVICE_CPU", "cpu", 1, Device::kCpu},
    {"DEVICE_CUDA", "cuda", 2, Device::kCuda},
};
constexpr EnumEntry<Precision> kPrecisionEnum[] = {
    {"PRECISION_UNSPECIFIED", "unspecified", 0, Precision::kAuto},
    {"PRECISION_UNSPECIFIED", "auto", 0, Precision::kAuto},
    {"PRECISION_FP32", "fp32", 1, Precision::kFp32},
    {"PRECISION_BF16", "bf16", 2, Precision::kBf16},
    {"PRECISION_FP64", "fp64", 3, Precision::kFp64},
};
constexpr EnumEntry<LrDecay> kLrDecayEnum[] = {
    {"LR_DECAY_UNSPECIFIED", "unspecified", 0, LrDecay::kCosine},
    {"LR_DECAY_COSINE", "cosine", 1, LrDecay::kCosine},
    {"LR_DECAY_LINEAR", "linear", 2, LrDecay::kLinear},
    {"LR_DECAY_CONSTANT", "constant", 3, LrDecay::kConstant},
};
constexpr std::string_view kBackendValid = "auto, local, mpi, nccl (or BACKEND_* names, or 0-4)";
constexpr std::string_view kDeviceValid = "auto, cpu, cuda (or DEVICE_* names, or 0-2)";
constexpr std::string_view kPrecisionValid =
    "auto, fp32, bf16, fp64 (or PRECISION_* names, or 0-3)";
constexpr std::string_view kLrDecayValid = "cosine, linear, constant (or LR_DECAY_* names, or 0-3)";

// ------------------------------------------------------------------------------------------
// The raw spec: what the document said, with presence. Plain proto3 scalars keep 0 / empty for
// "unset"; proto3 `optional` fields are std::optional.

struct RawShape {
  std::optional<int64_t> layers, width, heads, ffn_hidden, blocks, context, vocab_size;
  std::optional<double> norm_eps, key_norm_eps, rope_theta;
};
struct RawModel {
  std::string preset;
  std::string arm;
  RawShape shape;
};
struct RawOptim {
  std::optional<double> peak_lr, min_lr_ratio;
  std::optional<int64_t> warmup_steps;
  std::optional<double> beta1, beta2, eps, weight_decay, grad_clip;
  LrDecay lr_decay = LrDecay::kCosine;
};
struct RawSchedule {
  int64_t total_tokens = 0;
  int64_t global_batch_tokens = 0;
  int64_t micro_batch_sequences = 0;
  std::vector<int64_t> milestones_tokens;
  int64_t stop_at_tokens = 0;
};
struct RawParallel {
  int64_t world_size = 0;
  int64_t threads_per_rank = 0;
  Backend backend = Backend::kAuto;
  Device device = Device::kAuto;
  Precision precision = Precision::kAuto;
  int64_t allreduce_bucket_bytes = 0;
};
struct RawCheckpoint {
  std::string dir;
  int64_t every_steps = 0;
  int64_t keep_last = 0;
  std::string resume_from;
  std::vector<int64_t> stored_eval_milestones;
  bool stored_evals_known = false;
  std::string coordinator_checkpoint;
};
struct RawSpec {
  std::string run_id, sweep_id, job_id;
  uint64_t init_seed = 0;
  RawModel model;
  DataConfig data;
  RawOptim optim;
  RawSchedule schedule;
  RawParallel parallel;
  RawCheckpoint checkpoint;
  int64_t train_event_every_steps = 0;
  std::string recipe;
  std::map<std::string, std::string> labels;
};

// ------------------------------------------------------------------------------------------
// The walk: one table of fields per message, visited in document order.

using Reader = std::function<void(const OJson&, const std::string&)>;
struct FieldDef {
  std::string_view name;  // the proto (snake_case) name
  Reader read;
};

void WalkObject(const OJson& v, const std::string& path, const std::vector<FieldDef>& fields,
                FieldErrors& e) {
  if (!v.is_object()) {
    e.AddAndMarkBad(path, "expected an object, got " + Describe(v));
    return;
  }
  std::set<std::string_view> seen;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& key = it.key();
    const FieldDef* field = nullptr;
    for (const auto& f : fields) {
      if (key == f.name || key == Camel(f.name)) {
        field = &f;
        break;
      }
    }
    if (field == nullptr) {
      e.AddAndMarkBad(FieldPath(path, DisplayFieldKey(key)), "unknown field");
      continue;
    }
    const std::string fpath = FieldPath(path, field->name);
    if (!seen.insert(field->name).second) {
      e.AddAndMarkBad(fpath, "given twice (as " + std::string(field->name) + " and " +
                                 Camel(field->name) + ")");
      continue;
    }
    if (it.value().is_null()) continue;  // protobuf's JSON mapping: null is the default
    field->read(it.value(), fpath);
  }
}

// Field readers bound to a destination.
Reader Str(std::string& dst, FieldErrors& e) {
  return [&dst, &e](const OJson& v, const std::string& p) {
    if (auto s = ReadString(v, p, e)) dst = *s;
  };
}
Reader Bool(bool& dst, FieldErrors& e) {
  return [&dst, &e](const OJson& v, const std::string& p) {
    if (auto b = ReadBool(v, p, e)) dst = *b;
  };
}
Reader I32(int64_t& dst, FieldErrors& e) {
  return [&dst, &e](const OJson& v, const std::string& p) {
    if (auto i = ReadInt32(v, p, e)) dst = *i;
  };
}
Reader OptI32(std::optional<int64_t>& dst, FieldErrors& e) {
  return [&dst, &e](const OJson& v, const std::string& p) {
    if (auto i = ReadInt32(v, p, e)) dst = *i;
  };
}
Reader I64(int64_t& dst, FieldErrors& e) {
  return [&dst, &e](const OJson& v, const std::string& p) {
    if (auto i = ReadInt64(v, p, e)) dst = *i;
  };
}
Reader OptI64(std::optional<int64_t>& dst, FieldErrors& e) {
  return [&dst, &e](const OJson& v, const std::string& p) {
    if (auto i = ReadInt64(v, p, e)) dst = *i;
  };
}
Reader U64(uint64_t& dst, FieldErrors& e) {
  return [&dst, &e](const OJson& v, const std::string& p) {
    if (auto u = ReadUint64(v, p, e)) dst = *u;
  };
}
Reader OptF64(std::optional<double>& dst, FieldErrors& e) {
  return [&dst, &e](const OJson& v, const std::string& p) {
    if (auto d = ReadDouble(v, p, e)) dst = *d;
  };
}
Reader StrList(std::vector<std::string>& dst, FieldErrors& e) {
  return [&dst, &e](const OJson& v, const std::string& p) {
    if (!v.is_array()) {
      e.AddAndMarkBad(p, "expected an array of strings, got " + Describe(v));
      return;
    }
    bool ok = true;
    for (size_t i = 0; i < v.size(); ++i) {
      if (auto s = ReadString(v[i], FieldIndex(p, i), e))
        dst.push_back(*s);
      else
        ok = false;
    }
    if (!ok) e.MarkBad(p);
  };
}
Reader I64List(std::vector<int64_t>& dst, FieldErrors& e) {
  return [&dst, &e](const OJson& v, const std::string& p) {
    if (!v.is_array()) {
      e.AddAndMarkBad(p, "expected an array of int64 values, got " + Describe(v));
      return;
    }
    bool ok = true;
    std::vector<int64_t> out;
    for (size_t i = 0; i < v.size(); ++i) {
      if (auto x = ReadInt64(v[i], FieldIndex(p, i), e))
        out.push_back(*x);
      else
        ok = false;
    }
    if (ok)
      dst = std::move(out);
    else
      e.MarkBad(p);
  };
}
Reader StrMap(std::map<std::string, std::string>& dst, FieldErrors& e) {
  return [&dst, &e](const OJson& v, const std::string& p) {
    if (!v.is_object()) {
      e.AddAndMarkBad(p, "expected an object of strings, got " + Describe(v));
      return;
    }
    for (auto it = v.begin(); it != v.end(); ++it)
      if (auto s = ReadString(it.value(), FieldPath(p, it.key()), e)) dst[it.key()] = *s;
  };
}
template <typename T, size_t N>
Reader Enum(T& dst, const EnumEntry<T> (&table)[N], std::string_view valid, FieldErrors& e) {
  return [&dst, &table, valid, &e](const OJson& v, const std::string& p) {
    if (auto n = ReadEnum(v, p, table, valid, e)) dst = FromNumber(table, *n);
  };
}
Reader Message(std::function<std::vector<FieldDef>()> fields, FieldErrors& e) {
  return [fields = std::move(fields), &e](const OJson& v, const std::string& p) {
    WalkObject(v, p, fields(), e);
  };
}

// The top-level fields of RunSpec, in field-number order (used to order validation errors).
constexpr std::string_view kTopLevel[] = {
    "run_id",   "sweep_id", "job_id",     "init_seed", "model",  "data",  "optim",
    "schedule", "parallel", "checkpoint", "metrics",   "recipe", "labels"};

void Walk(const OJson& spec, RawSpec& r, FieldErrors& e) {
  auto shape = [&r, &e]() -> std::vector<FieldDef> {
    RawShape& s = r.model.shape;
    return {{"layers", OptI32(s.layers, e)},
            {"width", OptI32(s.width, e)},
            {"heads", OptI32(s.heads, e)},
            {"ffn_hidden", OptI32(s.ffn_hidden, e)},
            {"blocks", OptI32(s.blocks, e)},
            {"context", OptI32(s.context, e)},
            {"vocab_size", OptI32(s.vocab_size, e)},
            {"norm_eps", OptF64(s.norm_eps, e)},
            {"key_norm_eps", OptF64(s.key_norm_eps, e)},
            {"rope_theta", OptF64(s.rope_theta, e)}};
  };
  auto model = [&r, &e, shape]() -> std::vector<FieldDef> {
    return {{"preset", Str(r.model.preset, e)},
            {"arm", Str(r.model.arm, e)},
            {"shape", Message(shape, e)}};
  };
  auto data = [&r, &e]() -> std::vector<FieldDef> {
    DataConfig& d = r.data;
    return {{"train_shards", StrList(d.train_shards, e)}, {"val_shards", StrList(d.val_shards, e)},
            {"test_shards", StrList(d.test_shards, e)},   {"tokenizer", Str(d.tokenizer, e)},
            {"data_seed", U64(d.data_seed, e)},           {"val_windows", I64(d.val_windows, e)},
            {"test_windows", I64(d.test_windows, e)}};
  };
  auto optim = [&r, &e]() -> std::vector<FieldDef> {
    RawOptim& o = r.optim;
    return {{"peak_lr", OptF64(o.peak_lr, e)},
            {"min_lr_ratio", OptF64(o.min_lr_ratio, e)},
            {"warmup_steps", OptI64(o.warmup_steps, e)},
            {"beta1", OptF64(o.beta1, e)},
            {"beta2", OptF64(o.beta2, e)},
            {"eps", OptF64(o.eps, e)},
            {"weight_decay", OptF64(o.weight_decay, e)},
            {"grad_clip", OptF64(o.grad_clip, e)},
            {"lr_decay", Enum(o.lr_decay, kLrDecayEnum, kLrDecayValid, e)}};
  };
  auto schedule = [&r, &e]() -> std::vector<FieldDef> {
    RawSchedule& s = r.schedule;
    return {{"total_tokens", I64(s.total_tokens, e)},
            {"global_batch_tokens", I64(s.global_batch_tokens, e)},
            {"micro_batch_sequences", I32(s.micro_batch_sequences, e)},
            {"milestones_tokens", I64List(s.milestones_tokens, e)},
            {"stop_at_tokens", I64(s.stop_at_tokens, e)}};
  };
  auto parallel = [&r, &e]() -> std::vector<FieldDef> {
    RawParallel& p = r.parallel;
    return {{"world_size", I32(p.world_size, e)},
            {"threads_per_rank", I32(p.threads_per_rank, e)},
            {"backend", Enum(p.backend, kBackendEnum, kBackendValid, e)},
            {"device", Enum(p.device, kDeviceEnum, kDeviceValid, e)},
            {"precision", Enum(p.precision, kPrecisionEnum, kPrecisionValid, e)},
            {"allreduce_bucket_bytes", I64(p.allreduce_bucket_bytes, e)}};
  };
  auto checkpoint = [&r, &e]() -> std::vector<FieldDef> {
    RawCheckpoint& c = r.checkpoint;
    return {{"dir", Str(c.dir, e)},
            {"every_steps", I64(c.every_steps, e)},
            {"keep_last", I32(c.keep_last, e)},
            {"resume_from", Str(c.resume_from, e)},
            {"stored_eval_milestones", I64List(c.stored_eval_milestones, e)},
            {"stored_evals_known", Bool(c.stored_evals_known, e)},
            {"coordinator_checkpoint", Str(c.coordinator_checkpoint, e)}};
  };
  auto metrics = [&r, &e]() -> std::vector<FieldDef> {
    return {{"train_event_every_steps", I64(r.train_event_every_steps, e)}};
  };
  const std::vector<FieldDef> top = {
      {"run_id", Str(r.run_id, e)},       {"sweep_id", Str(r.sweep_id, e)},
      {"job_id", Str(r.job_id, e)},       {"init_seed", U64(r.init_seed, e)},
      {"model", Message(model, e)},       {"data", Message(data, e)},
      {"optim", Message(optim, e)},       {"schedule", Message(schedule, e)},
      {"parallel", Message(parallel, e)}, {"checkpoint", Message(checkpoint, e)},
      {"metrics", Message(metrics, e)},   {"recipe", Str(r.recipe, e)},
      {"labels", StrMap(r.labels, e)}};
  WalkObject(spec, "", top, e);
}

// ------------------------------------------------------------------------------------------
// Resolution: recipe, defaults, derived values and every cross-field check.

int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }  // a ≥ 0, b > 0

bool Finite(double v) { return std::isfinite(v); }

void ResolveModel(const RawSpec& r, RunConfig& cfg, FieldErrors& e, bool& shape_ok) {
  const RawModel& rm = r.model;
  std::optional<model::Arm> arm;
  if (rm.arm.empty()) {
    e.CheckAndMarkBad("model.arm", "required; valid: " + model::ValidArmNames());
  } else {
    arm = model::ParseArm(rm.arm);
    if (!arm) {
      e.CheckAndMarkBad("model.arm",
                        "unknown arm " + Quote(rm.arm) + "; valid: " + model::ValidArmNames());
    }
  }
  model::ModelConfig m;
  m.arm = arm.value_or(model::Arm::kBlock);
  bool preset_ok = true;
  if (!rm.preset.empty()) {
    if (auto p = model::Preset(rm.preset, m.arm)) {
      m = *p;
    } else {
      std::string names;
      for (const auto& n : model::PresetNames()) names += (names.empty() ? "" : ", ") + n;
      e.CheckAndMarkBad("model.preset", "unknown preset " + Quote(rm.preset) + "; valid: " + names);
      preset_ok = false;
    }
  }
  const bool explicit_shape = rm.preset.empty();
  bool complete = true;
  auto take_int = [&](const char* name, const std::optional<int64_t>& v, int64_t& dst) {
    const std::string path = std::string("model.shape.") + name;
    if (v) {
      dst = *v;
    } else if (explicit_shape) {
      e.CheckAndMarkBad(path, "required when model.preset is empty");
      dst = 0;
      complete = false;
    }
  };
  const RawShape& s = rm.shape;
  take_int("layers", s.layers, m.layers);
  take_int("width", s.width, m.width);
  take_int("heads", s.heads, m.heads);
  take_int("ffn_hidden", s.ffn_hidden, m.ffn_hidden);
  take_int("blocks", s.blocks, m.blocks);
  take_int("context", s.context, m.context);
  take_int("vocab_size", s.vocab_size, m.vocab_size);
  if (s.norm_eps) m.norm_eps = *s.norm_eps;
  if (s.key_norm_eps) m.key_norm_eps = *s.key_norm_eps;
  if (s.rope_theta) m.rope_theta = *s.rope_theta;

  // An unknown preset leaves no base shape: checking the defaults would report nonsense.
  shape_ok = preset_ok && complete;
  if (preset_ok) {
    const std::vector<FieldError> problems = m.Validate();
    for (const FieldError& p : problems) e.Check(FieldPath("model.shape", p.path), p.reason);
    if (!problems.empty()) shape_ok = false;
  }
  cfg.preset = rm.preset;
  cfg.model = m;
}

void ResolveData(const RawSpec& r, RunConfig& cfg, bool shape_ok, FieldErrors& e) {
  cfg.data = r.data;
  const DataConfig& d = cfg.data;
  if (d.train_shards.empty())
    e.Check("data.train_shards", "required: at least one shard path or glob");
  for (const auto* list : {&d.train_shards, &d.val_shards, &d.test_shards}) {
    const char* name = list == &d.train_shards ? "data.train_shards"
                       : list == &d.val_shards ? "data.val_shards"
                                               : "data.test_shards";
    for (size_t i = 0; i < list->size(); ++i)
      if ((*list)[i].empty()) e.Check(FieldIndex(name, i), "empty path");
  }
  int64_t ids = 0;
  if (d.tokenizer.empty()) {
    e.Check("data.tokenizer", "required; valid: gpt2, byte");
  } else if (d.tokenizer == "gpt2") {
    ids = kGpt2Ids;
  } else if (d.tokenizer == "byte") {
    ids = kByteIds;
  } else {
    e.Check("data.tokenizer", "unknown tokenizer " + Quote(d.tokenizer) + "; valid: gpt2, byte");
  }
  if (ids > 0 && shape_ok && cfg.model.vocab_size < ids) {
    e.Check("model.shape.vocab_size", std::to_string(cfg.model.vocab_size) +
                                          " is smaller than the " + d.tokenizer + " tokenizer's " +
                                          std::to_string(ids) + " ids");
  }
  if (d.val_windows < 0)
    e.Check("data.val_windows", "must not be negative, got " + std::to_string(d.val_windows));
  if (d.test_windows < 0)
    e.Check("data.test_windows", "must not be negative, got " + std::to_string(d.test_windows));
}

void ResolveParallel(const RawSpec& r, RunConfig& cfg, FieldErrors& e, bool& world_ok) {
  const RawParallel& rp = r.parallel;
  ParallelConfig& p = cfg.parallel;
  world_ok = true;
  if (rp.world_size < 0) {
    e.CheckAndMarkBad("parallel.world_size",
                      "must be at least 1 (0 means 1), got " + std::to_string(rp.world_size));
    world_ok = false;
  }
  p.world_size = rp.world_size <= 0 ? 1 : static_cast<int>(rp.world_size);
  if (rp.threads_per_rank < 0)
    e.Check("parallel.threads_per_rank", "must not be negative (0: the launcher chooses), got " +
                                             std::to_string(rp.threads_per_rank));
  p.threads_per_rank = static_cast<int>(std::max<int64_t>(0, rp.threads_per_rank));
  p.backend = rp.backend;
  p.device = rp.device;
  p.precision = rp.precision;
  if (rp.allreduce_bucket_bytes < 0)
    e.Check("parallel.allreduce_bucket_bytes", "must be positive (0: the default of 25 MiB), got " +
                                                   std::to_string(rp.allreduce_bucket_bytes));
  p.allreduce_bucket_bytes =
      rp.allreduce_bucket_bytes > 0 ? rp.allreduce_bucket_bytes : kDefaultBucketBytes;

  if (p.precision == Precision::kBf16 && p.device == Device::kCpu)
    e.Check("parallel.precision", "bf16 needs parallel.device cuda");
  if (p.backend == Backend::kNccl && p.device == Device::kCpu)
    e.Check("parallel.backend", "nccl needs parallel.device cuda (or auto)");
  if (p.backend == Backend::kLocal && p.world_size > 1)
    e.Check("parallel.backend",
            "local runs only at parallel.world_size 1, got " + std::to_string(p.world_size));
}

void ResolveSchedule(const RawSpec& r, bool paper, bool shape_ok, bool world_ok, RunConfig& cfg,
                     FieldErrors& e, bool& steps_ok) {
  const RawSchedule& rs = r.schedule;
  ScheduleConfig& s = cfg.schedule;
  s.total_tokens = rs.total_tokens != 0 ? rs.total_tokens : paper ? kPaperTotalTokens : 0;
  s.global_batch_tokens = rs.global_batch_tokens != 0 ? rs.global_batch_tokens
                          : paper                     ? kPaperBatchTokens
                                                      : 0;
  s.micro_batch_sequences = rs.micro_batch_sequences;
  s.stop_at_tokens = rs.stop_at_tokens;
  bool milestones_from_recipe = false;
  if (!rs.milestones_tokens.empty() || e.Bad("schedule.milestones_tokens")) {
    s.milestones_tokens = rs.milestones_tokens;
  } else if (paper) {
    milestones_from_recipe = true;
    for (int64_t step : kPaperMilestoneSteps)
      s.milestones_tokens.push_back(step * kPaperBatchTokens);
  }

  bool total_ok = true, batch_ok = true;
  if (s.total_tokens == 0) {
    e.CheckAndMarkBad("schedule.total_tokens", "required: the token budget (or recipe \"paper\")");
    total_ok = false;
  } else if (s.total_tokens < 0) {
    e.Check("schedule.total_tokens", "must be positive, got " + std::to_string(s.total_tokens));
    total_ok = false;
  }
  if (s.global_batch_tokens == 0) {
    e.CheckAndMarkBad("schedule.global_batch_tokens",
                      "required: tokens per optimizer step (or recipe \"paper\")");
    batch_ok = false;
  } else if (s.global_batch_tokens < 0) {
    e.Check("schedule.global_batch_tokens",
            "must be positive, got " + std::to_string(s.global_batch_tokens));
    batch_ok = false;
  }
  bool micro_ok = true;
  if (s.micro_batch_sequences < 0) {
    e.Check("schedule.micro_batch_sequences",
            "must be positive (0: the global batch's sequences / parallel.world_size), got " +
                std::to_string(s.micro_batch_sequences));
    micro_ok = false;
  }

  // Batch geometry.
  if (batch_ok && shape_ok) {
    const int64_t context = cfg.model.context;
    if (s.global_batch_tokens % context != 0) {
      e.Check("schedule.global_batch_tokens", std::to_string(s.global_batch_tokens) +
                                                  " is not a multiple of the context (" +
                                                  std::to_string(context) + ")");
    } else {
      s.global_batch_sequences = s.global_batch_tokens / context;
      const int64_t world = cfg.parallel.world_size;
      if (world_ok && micro_ok) {
        if (s.micro_batch_sequences == 0)
          s.micro_batch_sequences = std::max<int64_t>(1, s.global_batch_sequences / world);
        const int64_t per_pass = world * s.micro_batch_sequences;
        if (s.global_batch_sequences % per_pass != 0) {
          e.Check("schedule.global_batch_tokens",
                  "the global batch of " + std::to_string(s.global_batch_sequences) +
                      " sequences is not divisible by parallel.world_size (" +
                      std::to_string(world) + ") × schedule.micro_batch_sequences (" +
                      std::to_string(s.micro_batch_sequences) + ")");
        } else {
          s.grad_accum_steps = s.global_batch_sequences / per_pass;
        }
      }
    }
  }

  steps_ok = total_ok && batch_ok;
  if (steps_ok) s.total_steps = CeilDiv(s.total_tokens, s.global_batch_tokens);
  const std::string budget =
      " is beyond the budget schedule.total_tokens (" + std::to_string(s.total_tokens) + ")";

  if (!e.Bad("schedule.milestones_tokens")) {
    for (size_t i = 0; i < s.milestones_tokens.size(); ++i) {
      const int64_t m = s.milestones_tokens[i];
      const std::string path = FieldIndex("schedule.milestones_tokens", i);
      if (m <= 0) {
        e.Check(path, "must be positive, got " + std::to_string(m));
        continue;
      }
      if (i > 0 && m <= s.milestones_tokens[i - 1]) {
        e.Check(path, std::to_string(m) + " is not greater than the previous milestone (" +
                          std::to_string(s.milestones_tokens[i - 1]) +
                          "); milestones must be sorted and unique");
        continue;
      }
      if (!steps_ok) continue;
      const int64_t step = CeilDiv(m, s.global_batch_tokens);
      if (step > s.total_steps) {
        e.Check(path, std::to_string(m) +
                          (milestones_from_recipe ? " (the paper recipe's milestone)" : "") +
                          budget);
        continue;
      }
      s.milestone_steps.push_back(step);
    }
  }
  if (s.stop_at_tokens < 0) {
    e.Check("schedule.stop_at_tokens", "must not be negative (0: run the whole schedule), got " +
                                           std::to_string(s.stop_at_tokens));
  } else if (steps_ok) {
    if (s.stop_at_tokens == 0) {
      s.stop_step = s.total_steps;
    } else {
      s.stop_step = CeilDiv(s.stop_at_tokens, s.global_batch_tokens);
      if (s.stop_step > s.total_steps) {
        e.Check("schedule.stop_at_tokens", std::to_string(s.stop_at_tokens) + budget);
        s.stop_step = s.total_steps;
      }
    }
  }
}

void ResolveOptim(const RawSpec& r, bool paper, bool steps_ok, RunConfig& cfg, FieldErrors& e) {
  const RawOptim& ro = r.optim;
  OptimConfig& o = cfg.optim;
  if (ro.peak_lr) {
    o.peak_lr = *ro.peak_lr;
    if (!(Finite(o.peak_lr) && o.peak_lr > 0))
      e.Check("optim.peak_lr", "must be a positive finite number, got " + Num(o.peak_lr));
  } else if (paper && (cfg.preset == "S" || cfg.preset == "M")) {
    o.peak_lr = cfg.preset == "S" ? kPaperPeakLrS : kPaperPeakLrM;
  } else if (paper) {
    e.Check("optim.peak_lr",
            "required: the paper recipe defines it only for model.preset S "
            "(6e-4) and M (3e-4), and model.preset is " +
                Quote(cfg.preset));
  } else {
    e.Check("optim.peak_lr", "required (a positive learning rate)");
  }
  o.min_lr_ratio = ro.min_lr_ratio.value_or(kDefaultMinLrRatio);
  if (!(Finite(o.min_lr_ratio) && o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1))
    e.Check("optim.min_lr_ratio", "must be in [0, 1], got " + Num(o.min_lr_ratio));

  const char* warmup_source = "";
  if (ro.warmup_steps) {
    o.warmup_steps = *ro.warmup_steps;
  } else if (paper) {
    o.warmup_steps = kPaperWarmupSteps;
    warmup_source = " (the paper recipe's value)";
  } else if (steps_ok) {
    o.warmup_steps =
        std::llround(kDefaultWarmupFraction * static_cast<double>(cfg.schedule.total_steps));
    warmup_source = " (the default, 5% of the steps)";
  }
  if (o.warmup_steps < 0) {
    e.Check("optim.warmup_steps", "must not be negative, got " + std::to_string(o.warmup_steps));
  } else if (steps_ok && o.warmup_steps >= cfg.schedule.total_steps) {
    e.Check("optim.warmup_steps", std::to_string(o.warmup_steps) + warmup_source +
                                      " must be less than the schedule's total steps (" +
                                      std::to_string(cfg.schedule.total_steps) + ")");
  }

  auto unit_open = [&](const char* path, const std::optional<double>& v, double def, double& dst) {
    dst = v.value_or(def);
    if (!(Finite(dst) && dst >= 0 && dst < 1)) e.Check(path, "must be in [0, 1), got " + Num(dst));
  };
  unit_open("optim.beta1", ro.beta1, kDefaultBeta1, o.beta1);
  unit_open("optim.beta2", ro.beta2, kDefaultBeta2, o.beta2);
  o.eps = ro.eps.value_or(kDefaultEps);
  if (!(Finite(o.eps) && o.eps > 0))
    e.Check("optim.eps", "must be a positive finite number, got " + Num(o.eps));
  auto non_negative = [&](const char* path, const std::optional<double>& v, double def,
                          double& dst) {
    dst = v.value_or(def);
    if (!(Finite(dst) && dst >= 0)) e.Check(path, "must be a finite number >= 0, got " + Num(dst));
  };
  non_negative("optim.weight_decay", ro.weight_decay, kDefaultWeightDecay, o.weight_decay);
  non_negative("optim.grad_clip", ro.grad_clip, kDefaultGradClip, o.grad_clip);
  o.lr_decay = ro.lr_decay;
}

void ResolveRest(const RawSpec& r, RunConfig& cfg, FieldErrors& e) {
  const RawCheckpoint& rc = r.checkpoint;
  CheckpointConfig& c = cfg.checkpoint;
  c.dir = rc.dir;
  c.resume_from = rc.resume_from;
  c.stored_eval_milestones = rc.stored_eval_milestones;
  c.stored_evals_known = rc.stored_evals_known;
  c.coordinator_checkpoint = rc.coordinator_checkpoint;
  c.every_steps = rc.every_steps;
  if (rc.every_steps < 0)
    e.Check("checkpoint.every_steps",
            "must not be negative (0: only at the end and on SIGTERM), got " +
                std::to_string(rc.every_steps));
  if (rc.keep_last < 0)
    e.Check("checkpoint.keep_last",
            "must be at least 1 (0: the default of 2), got " + std::to_string(rc.keep_last));
  c.keep_last =
      rc.keep_last > 0 ? static_cast<int>(rc.keep_last) : static_cast<int>(kDefaultKeepLast);

  if (r.train_event_every_steps < 0)
    e.Check("metrics.train_event_every_steps",
            "must be at least 1 (0: every step), got " + std::to_string(r.train_event_every_steps));
  cfg.train_event_every_steps = r.train_event_every_steps > 0 ? r.train_event_every_steps : 1;
}

FieldErrorsOr<RunConfig> ParseOrdered(const OJson& spec) {
  if (!spec.is_object()) {
    return std::vector<FieldError>{{"RunSpec", "expected a JSON object, got " + Describe(spec)}};
  }
  FieldErrors e("RunSpec");
  RawSpec r;
  Walk(spec, r, e);
  const size_t syntax_errors = e.size();

  RunConfig cfg;
  cfg.run_id = r.run_id;
  cfg.sweep_id = r.sweep_id;
  cfg.job_id = r.job_id;
  cfg.init_seed = r.init_seed;
  cfg.labels = r.labels;
  cfg.recipe = r.recipe;
  const bool paper = r.recipe == "paper";
  if (!r.recipe.empty() && !paper)
    e.Check("recipe", "unknown recipe " + Quote(r.recipe) + "; valid: paper (or empty)");

  bool shape_ok = false, world_ok = false, steps_ok = false;
  ResolveModel(r, cfg, e, shape_ok);
  ResolveData(r, cfg, shape_ok, e);
  ResolveParallel(r, cfg, e, world_ok);
  ResolveSchedule(r, paper, shape_ok, world_ok, cfg, e, steps_ok);
  ResolveOptim(r, paper, steps_ok, cfg, e);
  ResolveRest(r, cfg, e);

  if (e.empty()) return cfg;
  // Validation errors follow the document's order of top-level sections.
  std::vector<std::string> doc_order;
  for (auto it = spec.begin(); it != spec.end(); ++it) doc_order.push_back(it.key());
  e.StableSortFrom(syntax_errors, [&doc_order](const FieldError& error) {
    const std::string top = error.path.substr(0, error.path.find_first_of(".["));
    for (size_t i = 0; i < doc_order.size(); ++i)
      if (doc_order[i] == top || doc_order[i] == Camel(top)) return static_cast<int>(i);
    for (size_t i = 0; i < std::size(kTopLevel); ++i)
      if (kTopLevel[i] == top) return 1000 + static_cast<int>(i);
    return 2000;
  });
  return std::move(e).Take();
}

nlohmann::json ShapeJson(const model::ModelConfig& m) {
  return {{"layers", m.layers},         {"width", m.width},       {"heads", m.heads},
          {"ffn_hidden", m.ffn_hidden}, {"blocks", m.blocks},     {"context", m.context},
          {"vocab_size", m.vocab_size}, {"norm_eps", m.norm_eps}, {"key_norm_eps", m.key_norm_eps},
          {"rope_theta", m.rope_theta}};
}

nlohmann::json OptimJson(const OptimConfig& o) {
  return {{"peak_lr", o.peak_lr},
          {"min_lr_ratio", o.min_lr_ratio},
          {"warmup_steps", o.warmup_steps},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"grad_clip", o.grad_clip},
          {"lr_decay", LrDecayName(o.lr_decay)}};
}

nlohmann::json ScheduleJson(const ScheduleConfig& s, bool with_stop) {
  nlohmann::json j = {{"total_tokens", s.total_tokens},
                      {"global_batch_tokens", s.global_batch_tokens},
                      {"micro_batch_sequences", s.micro_batch_sequences},
                      {"milestones_tokens", s.milestones_tokens},
                      {"total_steps", s.total_steps},
                      {"global_batch_sequences", s.global_batch_sequences},
                      {"grad_accum_steps", s.grad_accum_steps},
                      {"milestone_steps", s.milestone_steps}};
  if (with_stop) {
    j["stop_at_tokens"] = s.stop_at_tokens;
    j["stop_step"] = s.stop_step;
  }
  return j;
}

void Differences(const nlohmann::json& a, const nlohmann::json& b, const std::string& path,
                 std::vector<std::string>& out) {
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (auto it = a.begin(); it != a.end(); ++it) keys.insert(it.key());
    for (auto it = b.begin(); it != b.end(); ++it) keys.insert(it.key());
    for (const auto& k : keys) {
      const std::string p = FieldPath(path, k);
      if (!a.contains(k) || !b.contains(k)) {
        out.push_back(p);
      } else {
        Differences(a.at(k), b.at(k), p, out);
      }
    }
    return;
  }
  if (a != b) out.push_back(path);
}

}  // namespace

std::string_view BackendName(Backend b) { return Canonical(kBackendEnum, b).short_name; }
std::string_view DeviceName(Device d) { return Canonical(kDeviceEnum, d).short_name; }
std::string_view PrecisionName(Precision p) { return Canonical(kPrecisionEnum, p).short_name; }
std::string_view LrDecayName(LrDecay d) { return Canonical(kLrDecayEnum, d).short_name; }

FieldErrorsOr<RunConfig> ParseRunConfig(const nlohmann::json& spec) {
  // nlohmann::json keeps object keys sorted; the converted copy keeps that order.
  return ParseOrdered(OJson(spec));
}

FieldErrorsOr<RunConfig> ParseRunConfigText(std::string_view json_text) {
  OJson spec;
  try {
    spec = OJson::parse(json_text.begin(), json_text.end());
  } catch (const OJson::exception& ex) {
    // parse_error, and out_of_range for a number beyond double ("1e999").
    return std::vector<FieldError>{{"RunSpec", std::string("invalid JSON: ") + ex.what()}};
  }
  return ParseOrdered(spec);
}

nlohmann::json ResolvedConfigJson(const RunConfig& cfg) {
  nlohmann::json j;
  j["run_id"] = cfg.run_id;
  j["sweep_id"] = cfg.sweep_id;
  j["job_id"] = cfg.job_id;
  j["init_seed"] = cfg.init_seed;
  j["recipe"] = cfg.recipe;
  j["labels"] = cfg.labels;
  j["model"] = {{"preset", cfg.preset},
                {"arm", model::ArmName(cfg.model.arm)},
                {"shape", ShapeJson(cfg.model)}};
  const DataConfig& d = cfg.data;
  j["data"] = {{"train_shards", d.train_shards}, {"val_shards", d.val_shards},
               {"test_shards", d.test_shards},   {"tokenizer", d.tokenizer},
               {"data_seed", d.data_seed},       {"val_windows", d.val_windows},
               {"test_windows", d.test_windows}};
  j["optim"] = OptimJson(cfg.optim);
  j["schedule"] = ScheduleJson(cfg.schedule, /*with_stop=*/true);
  const ParallelConfig& p = cfg.parallel;
  j["parallel"] = {{"world_size", p.world_size},
                   {"threads_per_rank", p.threads_per_rank},
                   {"backend", BackendName(p.backend)},
                   {"device", DeviceName(p.device)},
                   {"precision", PrecisionName(p.precision)},
                   {"allreduce_bucket_bytes", p.allreduce_bucket_bytes}};
  const CheckpointConfig& c = cfg.checkpoint;
  j["checkpoint"] = {{"dir", c.dir},
                     {"every_steps", c.every_steps},
                     {"keep_last", c.keep_last},
                     {"resume_from", c.resume_from}};
  j["metrics"] = {{"train_event_every_steps", cfg.train_event_every_steps}};
  return j;
}

nlohmann::json RunSpecJson(const RunConfig& cfg) {
  // Protobuf's JSON mapping with proto field names: 64-bit integers as decimal strings, enums
  // by their proto names. Every field is explicit, so the recipe fills nothing on re-reading.
  auto str = [](auto v) { return std::to_string(v); };
  auto strs = [&str](const std::vector<int64_t>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (int64_t x : v) a.push_back(str(x));
    return a;
  };
  nlohmann::json j;
  j["run_id"] = cfg.run_id;
  j["sweep_id"] = cfg.sweep_id;
  j["job_id"] = cfg.job_id;
  j["init_seed"] = str(cfg.init_seed);
  j["model"] = {{"preset", cfg.preset},
                {"arm", model::ArmName(cfg.model.arm)},
                {"shape", ShapeJson(cfg.model)}};
  const DataConfig& d = cfg.data;
  j["data"] = {{"train_shards", d.train_shards},     {"val_shards", d.val_shards},
               {"test_shards", d.test_shards},       {"tokenizer", d.tokenizer},
               {"data_seed", str(d.data_seed)},      {"val_windows", str(d.val_windows)},
               {"test_windows", str(d.test_windows)}};
  const OptimConfig& o = cfg.optim;
  j["optim"] = {{"peak_lr", o.peak_lr},
                {"min_lr_ratio", o.min_lr_ratio},
                {"warmup_steps", str(o.warmup_steps)},
                {"beta1", o.beta1},
                {"beta2", o.beta2},
                {"eps", o.eps},
                {"weight_decay", o.weight_decay},
                {"grad_clip", o.grad_clip},
                {"lr_decay", Canonical(kLrDecayEnum, o.lr_decay).proto}};
  const ScheduleConfig& s = cfg.schedule;
  j["schedule"] = {{"total_tokens", str(s.total_tokens)},
                   {"global_batch_tokens", str(s.global_batch_tokens)},
                   {"micro_batch_sequences", s.micro_batch_sequences},
                   {"milestones_tokens", strs(s.milestones_tokens)},
                   {"stop_at_tokens", str(s.stop_at_tokens)}};
  const ParallelConfig& p = cfg.parallel;
  j["parallel"] = {{"world_size", p.world_size},
                   {"threads_per_rank", p.threads_per_rank},
                   {"backend", Canonical(kBackendEnum, p.backend).proto},
                   {"device", Canonical(kDeviceEnum, p.device).proto},
                   {"precision", Canonical(kPrecisionEnum, p.precision).proto},
                   {"allreduce_bucket_bytes", str(p.allreduce_bucket_bytes)}};
  const CheckpointConfig& c = cfg.checkpoint;
  j["checkpoint"] = {{"dir", c.dir},
                     {"every_steps", str(c.every_steps)},
                     {"keep_last", c.keep_last},
                     {"resume_from", c.resume_from},
                     {"stored_eval_milestones", strs(c.stored_eval_milestones)},
                     {"stored_evals_known", c.stored_evals_known},
                     {"coordinator_checkpoint", c.coordinator_checkpoint}};
  j["metrics"] = {{"train_event_every_steps", str(cfg.train_event_every_steps)}};
  j["recipe"] = cfg.recipe;
  j["labels"] = cfg.labels;
  return j;
}

nlohmann::json NumericFingerprint(const RunConfig& cfg) {
  nlohmann::json j;
  j["model"] = {{"arm", model::ArmName(cfg.model.arm)}, {"shape", ShapeJson(cfg.model)}};
  j["init_seed"] = cfg.init_seed;
  const DataConfig& d = cfg.data;
  j["data"] = {{"train_shards", d.train_shards}, {"val_shards", d.val_shards},
               {"test_shards", d.test_shards},   {"tokenizer", d.tokenizer},
               {"data_seed", d.data_seed},       {"val_windows", d.val_windows},
               {"test_windows", d.test_windows}};
  j["optim"] = OptimJson(cfg.optim);
  // The stopping point is left out: stopping earlier or later changes no number of the steps
  // both runs take (a control stopped at 0.5B may be resumed to run on).
  j["schedule"] = ScheduleJson(cfg.schedule, /*with_stop=*/false);
  j["parallel"] = {{"world_size", cfg.parallel.world_size},
                   {"precision", PrecisionName(cfg.parallel.precision)},
                   {"device", DeviceName(cfg.parallel.device)}};
  return j;
}

std::vector<std::string> FingerprintDifferences(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<std::string> out;
  Differences(a, b, "", out);
  return out;
}

double LearningRate(const OptimConfig& optim, const ScheduleConfig& schedule, int64_t step) {
  const double peak = optim.peak_lr;
  const double min = peak * optim.min_lr_ratio;
  const int64_t w = optim.warmup_steps;
  if (step < 0) step = 0;
  if (w > 0 && step < w) return peak * static_cast<double>(step + 1) / static_cast<double>(w);
  if (optim.lr_decay == LrDecay::kConstant) return peak;
  const int64_t span = std::max<int64_t>(1, schedule.total_steps - 1 - w);
  const double p = std::clamp(static_cast<double>(step - w) / static_cast<double>(span), 0.0, 1.0);
  if (optim.lr_decay == LrDecay::kLinear) return peak - (peak - min) * p;
  return min + (peak - min) * 0.5 * (1.0 + std::cos(kPi * p));
}

std::vector<EvalMilestone> EvalMilestones(const ScheduleConfig& s) {
  std::vector<EvalMilestone> out;
  bool last_is_milestone = false;
  for (size_t i = 0; i < s.milestone_steps.size() && i < s.milestones_tokens.size(); ++i) {
    if (s.milestone_steps[i] > s.stop_step) continue;
    out.push_back({s.milestone_steps[i], s.milestones_tokens[i]});
    if (s.milestone_steps[i] == s.stop_step) last_is_milestone = true;
  }
  if (!last_is_milestone && s.stop_step > 0) {
    out.push_back({s.stop_step, s.stop_step * s.global_batch_tokens});
  }
  return out;
}

}  // namespace rdattn
