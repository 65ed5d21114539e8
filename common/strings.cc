#include "common/strings.h"

#include <cmath>
#include <cstdio>

namespace rdattn::strings {

std::string Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(kSpace);
  return std::string(s.substr(b, e - b + 1));
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string Fixed(double v, int digits) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  const int n = std::snprintf(nullptr, 0, "%.*f", digits, v);
  std::string out(static_cast<size_t>(n > 0 ? n : 0), '\0');
  std::snprintf(out.data(), out.size() + 1, "%.*f", digits, v);
  return out;
}

}  // namespace rdattn::strings
