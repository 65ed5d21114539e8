#include "client/cli_args.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <system_error>

namespace rdattn::client {

std::optional<std::string> Args::Get(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> Args::GetAll(const std::string& name) const {
  auto it = values.find(name);
  return it == values.end() ? std::vector<std::string>{} : it->second;
}

std::set<std::string> Args::FlagNames() const {
  std::set<std::string> out(switches.begin(), switches.end());
  for (const auto& [name, v] : values) out.insert(name);
  return out;
}

StatusOr<long long> ParseIntFlag(const std::string& name, const std::string& value,
                                 long long min_value) {
  long long v = 0;
  const char* end = value.data() + value.size();
  auto [p, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec != std::errc() || p != end) {
    return InvalidArgumentError("--" + name + ": expected an integer, got '" + value + "'");
  }
  if (v < min_value) {
    return InvalidArgumentError("--" + name + ": must be >= " + std::to_string(min_value) +
                                ", got " + value);
  }
  return v;
}

StatusOr<double> ParseDoubleFlag(const std::string& name, const std::string& value, double lo,
                                 double hi) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(v)) {
    return InvalidArgumentError("--" + name + ": expected a number, got '" + value + "'");
  }
  if (v < lo || v > hi) {
    return InvalidArgumentError("--" + name + ": must be in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got " + value);
  }
  return v;
}

}  // namespace rdattn::client
