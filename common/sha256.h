// SHA-256 (FIPS 180-4), implemented here so the trainer core needs no crypto library.
// Used for tokenizer-file pinning, input digests in shard manifests, the document split, and
// the client's idempotent request ids.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rdattn {

using Sha256Digest = std::array<uint8_t, 32>;

// Streaming SHA-256: Update() any number of times, then Finish() once. Reset() starts over.
class Sha256 {
 public:
  Sha256() { Reset(); }
  void Reset();
  void Update(const void* data, size_t len);
  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
  // Pads, returns the digest and leaves the object reset (ready for a new message).
  Sha256Digest Finish();
  // Finish() as 64 lowercase hex characters.
  std::string FinishHex();

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_;
  uint64_t total_len_;  // bytes
};

// One-shot helpers.
Sha256Digest Sha256Of(std::string_view bytes);
std::string Sha256Hex(std::string_view bytes);
// 64 lowercase hex characters of a digest.
std::string DigestHex(const Sha256Digest& d);
// The digest of a file's bytes, read in binary mode in chunks. Errors name the file.
StatusOr<std::string> Sha256HexOfFile(const std::string& path);

}  // namespace rdattn
