// Fast content digests: XXH3-64 (Debian's libxxhash) for data that must be identified quickly
// and often (shards at every start of a run, stored results at every read). Not a security
// hash: it finds accidental change (a shard rewritten, a flipped bit), not an attacker's. Where
// an adversary matters (request ids, tokenizer pinning) use common/sha256.h.
//
// Text form: "xxh3:" then 16 lowercase hex digits, so a digest names its algorithm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rdattn {

inline constexpr std::string_view kDigestPrefix = "xxh3:";

// One-shot XXH3-64 of `bytes` (seed 0).
uint64_t Xxh3(const void* data, size_t len);
inline uint64_t Xxh3(std::string_view bytes) { return Xxh3(bytes.data(), bytes.size()); }

// "xxh3:0123456789abcdef".
std::string DigestText(uint64_t digest);

// Streaming XXH3-64: Update() any number of times, then Digest(). Same value as the one-shot
// form over the concatenation.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void Update(const void* data, size_t len);
  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The digest of a whole file, read in 4 MiB blocks. Errors name the path and the reason.
StatusOr<std::string> FileDigest(const std::string& path, int64_t* bytes = nullptr);

}  // namespace rdattn
