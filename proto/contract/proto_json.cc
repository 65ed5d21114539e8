// Descriptor-guided normalisation of a JSON document before protobuf's JSON parser reads it
// (proto_json.h). The walk knows each field's type, so YAML scalars (all strings here) become
// the JSON value protobuf expects, and every problem is reported at once with its field path.
#include "proto/contract/proto_json.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "common/field_key.h"

namespace rdattn::contract::internal {
namespace {

namespace gp = ::google::protobuf;
using OJson = nlohmann::ordered_json;

std::string Describe(const OJson& v) {
  std::string s = v.dump(-1, ' ', false, OJson::error_handler_t::replace);
  if (s.size() > 48) s = s.substr(0, 45) + "...";
  return s;
}

// A scalar as the user wrote it: YAML scalars arrive as strings, shown without JSON quotes.
std::string Raw(const OJson& v) {
  if (!v.is_string()) return Describe(v);
  std::string s = v.get<std::string>();
  if (s.size() > 48) s = s.substr(0, 45) + "...";
  return s;
}

std::string KindOf(const OJson& v) {
  if (v.is_object()) return "a mapping";
  if (v.is_array()) return "a list";
  return Describe(v);
}

// ---------------------------------------------------------------------------------------------
// Scalars.

// Removes '_' digit separators (YAML 1.1 style, "2_000_158_720") from a number's text.
std::string StripSeparators(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool between_digits = s[i] == '_' && i > 0 && i + 1 < s.size() &&
                                std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                                std::isdigit(static_cast<unsigned char>(s[i + 1]));
    if (!between_digits) out += s[i];
  }
  return out;
}

std::optional<double> ParseDouble(std::string_view text) {
  std::string s = StripSeparators(text);
  if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf" || s == "+.Inf" || s == "+.INF" ||
      s == "Infinity") {
    return std::numeric_limits<double>::infinity();
  }
  if (s == "-.inf" || s == "-.Inf" || s == "-.INF" || s == "-Infinity") {
    return -std::numeric_limits<double>::infinity();
  }
  if (s == ".nan" || s == ".NaN" || s == ".NAN" || s == "NaN") {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (!s.empty() && s[0] == '+') s.erase(0, 1);
  if (s.empty()) return std::nullopt;
  // from_chars would read "inf"/"nan" too; only the spellings above are accepted.
  if (s.find_first_not_of("-0123456789.eE+") != std::string::npos) return std::nullopt;
  double v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || p != end) return std::nullopt;
  return v;
}

// An integer as sign + magnitude, so that the whole int64 and uint64 ranges fit.
struct IntValue {
  bool negative = false;
  uint64_t magnitude = 0;
};

// nullopt: not an integer at all; `out_of_range` set: an integer outside 64 bits.
std::optional<IntValue> ParseInt(const OJson& v, bool* out_of_range) {
  *out_of_range = false;
  if (v.is_number_unsigned()) return IntValue{false, v.get<uint64_t>()};
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    return i < 0 ? IntValue{true, static_cast<uint64_t>(-(i + 1)) + 1}
                 : IntValue{false, static_cast<uint64_t>(i)};
  }
  std::optional<double> d;
  if (v.is_number_float()) {
    d = v.get<double>();
  } else if (v.is_string()) {
    std::string s = StripSeparators(v.get_ref<const std::string&>());
    const bool negative = !s.empty() && s[0] == '-';
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.erase(0, 1);
    if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) {
      uint64_t m = 0;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), m);
      if (ec == std::errc::result_out_of_range) {
        *out_of_range = true;
        return std::nullopt;
      }
      if (ec == std::errc() && p == s.data() + s.size()) return IntValue{negative && m != 0, m};
    }
    d = ParseDouble(v.get_ref<const std::string&>());  // "1e6", "2.0e9"
  }
  if (!d || !std::isfinite(*d) || *d != std::floor(*d)) return std::nullopt;
  if (*d >= 18446744073709551616.0 || *d < -9223372036854775808.0) {
    *out_of_range = true;
    return std::nullopt;
  }
  if (*d < 0) return IntValue{true, static_cast<uint64_t>(-(*d + 1)) + 1};
  return IntValue{false, static_cast<uint64_t>(*d)};
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// "HARDWARE_KIND_" for HardwareKind (the prefix of its *_UNSPECIFIED value), or "".
std::string EnumPrefix(const gp::EnumDescriptor* e) {
  const std::string& first = e->value(0)->name();
  const std::string suffix = "UNSPECIFIED";
  if (first.size() >= suffix.size() &&
      first.compare(first.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return first.substr(0, first.size() - suffix.size());
  }
  return "";
}

std::string ValidEnumNames(const gp::EnumDescriptor* e) {
  const std::string prefix = EnumPrefix(e);
  std::string out;
  for (int i = 0; i < e->value_count(); ++i) {
    const std::string& name = e->value(i)->name();
    if (e->value(i)->number() == 0) continue;
    if (!out.empty()) out += ", ";
    out += Lower(name.substr(prefix.size()));
  }
  return out;
}

std::optional<OJson> EnumValue(const OJson& v, const gp::FieldDescriptor* f,
                               const std::string& path, FieldErrors& errors) {
  const gp::EnumDescriptor* e = f->enum_type();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (e->FindValueByName(s) != nullptr) return OJson(s);
    if (const auto* value = e->FindValueByName(EnumPrefix(e) + Upper(s))) {
      return OJson(value->name());
    }
  }
  bool out_of_range = false;
  const std::optional<IntValue> number =
      v.is_number_integer() || v.is_string() ? ParseInt(v, &out_of_range) : std::nullopt;
  if (number && number->magnitude <= static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    const int64_t n = number->negative ? -static_cast<int64_t>(number->magnitude)
                                       : static_cast<int64_t>(number->magnitude);
    if (n >= std::numeric_limits<int>::min() && n <= std::numeric_limits<int>::max()) {
      if (const auto* value = e->FindValueByNumber(static_cast<int>(n))) {
        return OJson(value->name());
      }
    }
  }
  errors.Add(path, "unknown value " + (v.is_string() ? "'" + Raw(v) + "'" : Describe(v)) +
                       " (valid: " + ValidEnumNames(e) + ")");
  return std::nullopt;
}

std::optional<OJson> IntegerValue(const OJson& v, const gp::FieldDescriptor* f,
                                  const std::string& path, FieldErrors& errors) {
  int64_t lo = 0;
  uint64_t hi = 0;
  bool as_string = false;  // 64-bit integers travel as decimal strings (proto3 JSON)
  std::string type;
  switch (f->cpp_type()) {
    case gp::FieldDescriptor::CPPTYPE_INT32:
      lo = std::numeric_limits<int32_t>::min();
      hi = std::numeric_limits<int32_t>::max();
      type = "int32";
      break;
    case gp::FieldDescriptor::CPPTYPE_UINT32:
      hi = std::numeric_limits<uint32_t>::max();
      type = "uint32";
      break;
    case gp::FieldDescriptor::CPPTYPE_INT64:
      lo = std::numeric_limits<int64_t>::min();
      hi = std::numeric_limits<int64_t>::max();
      type = "int64";
      as_string = true;
      break;
    default:
      hi = std::numeric_limits<uint64_t>::max();
      type = "uint64";
      as_string = true;
      break;
  }
  bool out_of_range = false;
  const std::optional<IntValue> n =
      (v.is_object() || v.is_array() || v.is_boolean()) ? std::nullopt : ParseInt(v, &out_of_range);
  if (!n) {
    errors.Add(path, out_of_range ? Raw(v) + " is out of the " + type + " range"
                                  : "expected an integer, got " + KindOf(v));
    return std::nullopt;
  }
  const bool fits = n->negative ? lo < 0 && n->magnitude <= static_cast<uint64_t>(-(lo + 1)) + 1
                                : n->magnitude <= hi;
  if (!fits) {
    errors.Add(path, Raw(v) + " is out of the " + type + " range" +
                         (n->negative && lo == 0 ? " (it must not be negative)" : ""));
    return std::nullopt;
  }
  if (as_string) {
    return OJson((n->negative ? "-" : "") + std::to_string(n->magnitude));
  }
  return n->negative ? OJson(-static_cast<int64_t>(n->magnitude)) : OJson(n->magnitude);
}

std::optional<OJson> ScalarValue(const OJson& v, const gp::FieldDescriptor* f,
                                 const std::string& path, FieldErrors& errors) {
  switch (f->cpp_type()) {
    case gp::FieldDescriptor::CPPTYPE_STRING:
      if (v.is_string()) return v;
      errors.Add(path, "expected a string, got " + KindOf(v));
      return std::nullopt;
    case gp::FieldDescriptor::CPPTYPE_BOOL:
      if (v.is_boolean()) return v;
      if (v.is_string()) {
        const std::string s = Lower(v.get<std::string>());
        if (s == "true") return OJson(true);
        if (s == "false") return OJson(false);
      }
      errors.Add(path, "expected true or false, got " + KindOf(v));
      return std::nullopt;
    case gp::FieldDescriptor::CPPTYPE_DOUBLE:
    case gp::FieldDescriptor::CPPTYPE_FLOAT: {
      std::optional<double> d;
      if (v.is_number()) d = v.get<double>();
      if (v.is_string()) d = ParseDouble(v.get_ref<const std::string&>());
      if (!d) {
        errors.Add(path, "expected a number, got " + KindOf(v));
        return std::nullopt;
      }
      if (std::isnan(*d)) return OJson("NaN");
      if (std::isinf(*d)) return OJson(*d > 0 ? "Infinity" : "-Infinity");
      return OJson(*d);
    }
    case gp::FieldDescriptor::CPPTYPE_ENUM:
      return EnumValue(v, f, path, errors);
    case gp::FieldDescriptor::CPPTYPE_MESSAGE:
      break;  // not a scalar
    default:
      return IntegerValue(v, f, path, errors);
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// The descriptor walk.

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string UnknownFieldReason(const std::string& key, const gp::Descriptor* d) {
  std::string best;
  size_t best_distance = 3;  // suggest only close names
  for (int i = 0; i < d->field_count(); ++i) {
    const std::string& name = d->field(i)->name();
    const size_t dist = EditDistance(Lower(key), name);
    if (dist < best_distance && dist < name.size()) {
      best = name;
      best_distance = dist;
    }
  }
  std::string reason = "unknown field";
  if (!best.empty()) reason += " (did you mean '" + best + "'?)";
  return reason;
}

const gp::FieldDescriptor* FindField(const gp::Descriptor* d, const std::string& key) {
  if (const auto* f = d->FindFieldByName(key)) return f;
  for (int i = 0; i < d->field_count(); ++i) {
    if (d->field(i)->json_name() == key) return d->field(i);
  }
  return nullptr;
}

class Normalizer {
 public:
  explicit Normalizer(FieldErrors& errors) : errors_(errors) {}

  OJson Message(const OJson& in, const gp::Descriptor* d, const std::string& path) {
    OJson out = OJson::object();
    if (!in.is_object()) {
      errors_.Add(path, "expected a mapping of " + d->name() + " fields, got " + KindOf(in));
      return out;
    }
    std::set<int> seen;
    for (const auto& [key, value] : in.items()) {
      const gp::FieldDescriptor* f = FindField(d, key);
      if (f == nullptr) {
        errors_.Add(FieldPath(path, DisplayFieldKey(key)), UnknownFieldReason(key, d));
        continue;
      }
      const std::string field_path = FieldPath(path, f->name());
      if (!seen.insert(f->number()).second) {
        errors_.Add(field_path, "given twice (as " + f->name() + " and " + f->json_name() + ")");
        continue;
      }
      if (value.is_null()) continue;  // null: not set, as in protobuf's JSON mapping
      std::optional<OJson> v = Field(value, f, field_path);
      if (v) out[f->name()] = std::move(*v);
    }
    return out;
  }

 private:
  std::optional<OJson> Field(const OJson& value, const gp::FieldDescriptor* f,
                             const std::string& path) {
    if (f->is_map()) {
      if (!value.is_object()) {
        errors_.Add(path, "expected a mapping, got " + KindOf(value));
        return std::nullopt;
      }
      const gp::FieldDescriptor* value_field = f->message_type()->map_value();
      OJson out = OJson::object();
      for (const auto& [key, item] : value.items()) {
        const std::string item_path = FieldPath(path, DisplayFieldKey(key));
        if (item.is_null()) {
          errors_.Add(item_path, "a value is required");
          continue;
        }
        if (auto v = Single(item, value_field, item_path)) out[key] = std::move(*v);
      }
      return out;
    }
    if (f->is_repeated()) {
      if (!value.is_array()) {
        errors_.Add(path, "expected a list, got " + KindOf(value));
        return std::nullopt;
      }
      OJson out = OJson::array();
      for (size_t i = 0; i < value.size(); ++i) {
        const std::string item_path = FieldIndex(path, i);
        if (value[i].is_null()) {
          errors_.Add(item_path, "null is not allowed in a list");
          continue;
        }
        if (auto v = Single(value[i], f, item_path)) out.push_back(std::move(*v));
      }
      return out;
    }
    return Single(value, f, path);
  }

  std::optional<OJson> Single(const OJson& value, const gp::FieldDescriptor* f,
                              const std::string& path) {
    if (f->cpp_type() != gp::FieldDescriptor::CPPTYPE_MESSAGE) {
      if (value.is_object() || value.is_array()) {
        errors_.Add(path, "expected a single value, got " + KindOf(value));
        return std::nullopt;
      }
      return ScalarValue(value, f, path, errors_);
    }
    // Well-known types keep their own JSON forms; protobuf checks them.
    if (f->message_type()->file()->package() == "google.protobuf") return value;
    return Message(value, f->message_type(), path);
  }

  FieldErrors& errors_;
};

}  // namespace

OJson NormalizeJson(const OJson& document, const gp::Descriptor* descriptor, FieldErrors& errors) {
  Normalizer normalizer(errors);
  return normalizer.Message(document, descriptor, "");
}

}  // namespace rdattn::contract::internal
