#include "common/flag_spelling.h"

namespace rdattn {

FlagSpelling::FlagSpelling(int argc, char** argv) : strings_(argv, argv + argc) {
  for (size_t i = 1; i < strings_.size(); ++i) {
    std::string& arg = strings_[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) continue;
    for (size_t k = 2; k < arg.size() && arg[k] != '='; ++k) {
      if (arg[k] == '-') arg[k] = '_';
    }
  }
  for (std::string& s : strings_) argv_.push_back(s.data());
}

}  // namespace rdattn
