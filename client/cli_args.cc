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

StatusOr<Args> ParseArgs(const std::vector<std::string>& argv, const std::vector<FlagSpec>& specs) {
  std::map<std::string, FlagKind> kinds;
  for (const auto& s : specs) kinds[s.name] = s.kind;
  Args args;
  bool flags_done = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    std::string arg = argv[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      args.positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    if (arg == "-h") arg = "--help";
    if (arg.rfind("--", 0) != 0) {
      return InvalidArgumentError("unknown flag '" + arg + "' (flags are --long-names)");
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto it = kinds.find(name);
    if (it == kinds.end()) return InvalidArgumentError("unknown flag --" + name);
    if (it->second == FlagKind::kSwitch) {
      if (inline_value) return InvalidArgumentError("--" + name + " takes no value");
      args.switches.insert(name);
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argv.size()) return InvalidArgumentError("--" + name + " needs a value");
      inline_value = argv[++i];
    }
    args.values[name].push_back(*inline_value);
  }
  return args;
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
