// How a user-given key appears in a field path of an error ("labels.<key>: reason"): as it is
// when it is a plain name (letters, digits, '_', '-'), else quoted with every other byte as \xHH.
// So a key like ": x" or "" cannot make "field: reason" ambiguous (found by tests/fuzz).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace rdattn {

inline std::string DisplayFieldKey(std::string_view key) {
  auto plain = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  };
  bool all_plain = !key.empty();
  for (char c : key) all_plain = all_plain && plain(c);
  if (all_plain) return std::string(key);
  std::string out = "\"";
  for (char c : key) {
    if (plain(c)) {
      out.push_back(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    }
  }
  return out + "\"";
}

}  // namespace rdattn
