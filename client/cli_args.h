// The parsed command line of the `rdattn` client: the command, its positional arguments and the
// flags given, as RunCli (commands.cc) reads them off its CLI11 app (common/cli.h). Each command
// declares its flags as FlagSpecs; anything else is a usage error naming the flag.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace rdattn::client {

enum class FlagKind { kValue, kSwitch };

struct FlagSpec {
  std::string name;  // without the leading "--"
  FlagKind kind = FlagKind::kValue;
  std::string help;          // --help's text
  std::string default_text;  // --help's default ("" shows none)
};

struct Args {
  std::vector<std::string> positional;                     // in order; [0] is the command
  std::map<std::string, std::vector<std::string>> values;  // value flags, every occurrence
  std::set<std::string> switches;                          // switch flags given

  // The last value of a value flag, if given.
  std::optional<std::string> Get(const std::string& name) const;
  // Every value of a value flag (a repeated flag, or comma-separated values when split).
  std::vector<std::string> GetAll(const std::string& name) const;
  bool Has(const std::string& name) const { return switches.count(name) > 0; }
  // Names of the flags given (value and switch).
  std::set<std::string> FlagNames() const;
};

// Parses a non-negative integer flag value; INVALID_ARGUMENT names the flag.
StatusOr<long long> ParseIntFlag(const std::string& name, const std::string& value,
                                 long long min_value);
// Parses a finite number flag value in [lo, hi].
StatusOr<double> ParseDoubleFlag(const std::string& name, const std::string& value, double lo,
                                 double hi);

}  // namespace rdattn::client
