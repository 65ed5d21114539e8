// The reader of the run configuration: walks the RunSpec JSON (protobuf's JSON mapping) into a
// RawSpec, recording every syntax error with its field path. No defaults and no cross-field
// checks here (run_config_resolve.cc).
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <system_error>
#include <utility>

#include "common/field_key.h"
#include "runspec/run_config_internal.h"

namespace rdattn::run_config_internal {
namespace {

constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

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

// Field readers bound to a destination. A scalar reader reads with `Read` and stores the value
// only when it is valid (an invalid one is a field error and leaves `dst` as it was).
template <auto Read, typename T>
Reader Scalar(T& dst, FieldErrors& e) {
  return [&dst, &e](const OJson& v, const std::string& p) {
    if (auto x = Read(v, p, e)) dst = *x;
  };
}
Reader Str(std::string& dst, FieldErrors& e) { return Scalar<ReadString>(dst, e); }
Reader Bool(bool& dst, FieldErrors& e) { return Scalar<ReadBool>(dst, e); }
Reader I32(int64_t& dst, FieldErrors& e) { return Scalar<ReadInt32>(dst, e); }
Reader OptI32(std::optional<int64_t>& dst, FieldErrors& e) { return Scalar<ReadInt32>(dst, e); }
Reader I64(int64_t& dst, FieldErrors& e) { return Scalar<ReadInt64>(dst, e); }
Reader OptI64(std::optional<int64_t>& dst, FieldErrors& e) { return Scalar<ReadInt64>(dst, e); }
Reader U64(uint64_t& dst, FieldErrors& e) { return Scalar<ReadUint64>(dst, e); }
Reader OptF64(std::optional<double>& dst, FieldErrors& e) { return Scalar<ReadDouble>(dst, e); }
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
// An enum field: number 0 (UNSPECIFIED) leaves it unset.
template <typename T, size_t N>
Reader Enum(std::optional<T>& dst, const EnumEntry<T> (&table)[N], std::string_view valid,
            FieldErrors& e) {
  return [&dst, &table, valid, &e](const OJson& v, const std::string& p) {
    if (auto n = ReadEnum(v, p, table, valid, e)) {
      if (*n != 0) dst = FromNumber(table, *n);
    }
  };
}
Reader Message(std::function<std::vector<FieldDef>()> fields, FieldErrors& e) {
  return [fields = std::move(fields), &e](const OJson& v, const std::string& p) {
    WalkObject(v, p, fields(), e);
  };
}

}  // namespace

std::string Describe(const OJson& v) {
  std::string s = v.dump(-1, ' ', false, OJson::error_handler_t::replace);
  if (s.size() > 48) s = s.substr(0, 45) + "...";
  return s;
}

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

void ReadRunSpec(const OJson& spec, RawSpec& r, FieldErrors& e) {
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

}  // namespace rdattn::run_config_internal
