#include "common/number_format.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace rdattn::numfmt {

std::string Printf(const char* format, double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, v);
  return buffer;
}

std::string General(double v, const char* format, std::string_view undefined) {
  if (std::isnan(v)) return std::string(undefined);
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return Printf(format, v);
}

std::string Fixed(double v, int decimals, std::string_view undefined) {
  if (std::isnan(v)) return std::string(undefined);
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  const int n = std::snprintf(nullptr, 0, "%.*f", decimals, v);
  std::string out(static_cast<size_t>(n > 0 ? n : 0), '\0');
  std::snprintf(out.data(), out.size() + 1, "%.*f", decimals, v);
  return out;
}

std::string Signed(double v, int decimals, std::string_view undefined) {
  if (std::isnan(v)) return std::string(undefined);
  const int n = std::snprintf(nullptr, 0, "%+.*f", decimals, v);
  std::string out(static_cast<size_t>(n > 0 ? n : 0), '\0');
  std::snprintf(out.data(), out.size() + 1, "%+.*f", decimals, v);
  return out;
}

std::string PValue(double p, std::string_view undefined) {
  if (!std::isfinite(p)) return std::string(undefined);
  return Printf(p >= 1e-4 ? "%.4f" : "%.2e", p);
}

std::string Shortest(double v) {
  if (std::isnan(v)) return "";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), v);
  return std::string(buffer, result.ptr);
}

}  // namespace rdattn::numfmt
