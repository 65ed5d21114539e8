// Both spellings of a flag, --flag-name (as documented) and --flag_name (abseil's), for the
// binaries that parse their command line with absl::ParseCommandLine.
#pragma once

#include <string>
#include <vector>

namespace rdattn {

// argv with every "--flag-name" rewritten "--flag_name" up to its '=' (values are left alone),
// stopping at "--". `argv` points into `strings`; keep the object alive while it is used.
class FlagSpelling {
 public:
  FlagSpelling(int argc, char** argv);
  FlagSpelling(const FlagSpelling&) = delete;
  FlagSpelling& operator=(const FlagSpelling&) = delete;

  int argc() const { return static_cast<int>(argv_.size()); }
  char** argv() { return argv_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> argv_;
};

}  // namespace rdattn
