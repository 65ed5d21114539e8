// Small string helpers that several folders share (one copy each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rdattn::strings {

// `s` without leading and trailing spaces, tabs, CR and LF.
std::string Trim(std::string_view s);

// `s` in single quotes, as error messages quote a value: 'abc'. Nothing is escaped.
std::string Quote(std::string_view s);

// printf("%.<digits>f", v) for a finite v; "nan", "inf" or "-inf" otherwise (callers that show
// an undefined value differently test std::isfinite first).
std::string Fixed(double v, int digits);

// 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3), fed byte by byte.
class Fnv1a64 {
 public:
  static constexpr uint64_t kOffsetBasis = 0xcbf29ce484222325ULL;
  static constexpr uint64_t kPrime = 0x100000001b3ULL;
  // The offset basis of the model's parameter checksum and the trainer's data-order checksum:
  // 1469598103934665603, the standard basis with its last digit lost when they were written.
  // Kept, so that checksums stored in events and checkpoints stay comparable across versions.
  static constexpr uint64_t kRdattnChecksumBasis = 1469598103934665603ULL;

  Fnv1a64() = default;
  explicit Fnv1a64(uint64_t offset_basis) : h_(offset_basis) {}

  void Mix(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= kPrime;
    }
  }
  void Mix(std::string_view s) { Mix(s.data(), s.size()); }
  // The 8 bytes of `v`, least significant first (the same on every host).
  void MixLittleEndian(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h_ ^= (v >> (8 * i)) & 0xff;
      h_ *= kPrime;
    }
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = kOffsetBasis;
};

}  // namespace rdattn::strings
