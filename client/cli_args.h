// Plain argv parsing for the `rdattn` client: a command, positional arguments and GNU-style long
// flags ("--name value", "--name=value", "--switch"). No dependency; each command declares the
// flags it takes, and anything else is a usage error naming the flag.
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

// Parses argv[1..] against `specs`. "--" ends the flags; "-h" is "--help". A value flag needs
// a value; a switch takes none ("--watch=1" is an error). INVALID_ARGUMENT names the flag.
StatusOr<Args> ParseArgs(const std::vector<std::string>& argv, const std::vector<FlagSpec>& specs);

// Parses a non-negative integer flag value; INVALID_ARGUMENT names the flag.
StatusOr<long long> ParseIntFlag(const std::string& name, const std::string& value,
                                 long long min_value);
// Parses a finite number flag value in [lo, hi].
StatusOr<double> ParseDoubleFlag(const std::string& name, const std::string& value, double lo,
                                 double hi);

}  // namespace rdattn::client
