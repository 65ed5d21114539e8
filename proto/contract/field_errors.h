// Internal to the contract library: a list of "field: reason" errors, kept in the order found
// and each reported once, joined into one INVALID_ARGUMENT the way ParseRunConfig joins its own.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace rdattn::contract::internal {

class FieldErrors {
 public:
  // Adds "path: reason" unless the same text is already there. An empty path is the message
  // as a whole ("SweepSpec").
  void Add(std::string_view path, std::string_view reason) {
    AddText((path.empty() ? std::string("SweepSpec") : std::string(path)) + ": " +
            std::string(reason));
  }
  void AddText(std::string text) {
    if (seen_.insert(text).second) texts_.push_back(std::move(text));
  }
  bool empty() const { return texts_.empty(); }
  const std::vector<std::string>& texts() const { return texts_; }

  // OK when empty, else one INVALID_ARGUMENT joining every error with "; ".
  Status ToStatus() const {
    if (texts_.empty()) return Status::Ok();
    std::string out;
    for (const auto& t : texts_) {
      if (!out.empty()) out += "; ";
      out += t;
    }
    return InvalidArgumentError(std::move(out));
  }

 private:
  std::vector<std::string> texts_;
  std::set<std::string> seen_;
};

// Reasons must not contain "; " (it separates errors): library messages are rewritten with this.
inline std::string NoSemicolons(std::string s) {
  for (size_t p = 0; (p = s.find("; ", p)) != std::string::npos;) s.replace(p, 2, ", ");
  return s;
}

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c".
inline std::string JoinPath(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
}
// "a.b" + 3 -> "a.b[3]".
inline std::string IndexPath(std::string_view path, size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

}  // namespace rdattn::contract::internal
