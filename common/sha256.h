// SHA-256 (FIPS 180-4) through OpenSSL's libcrypto (Debian's libssl-dev), which picks the
// CPU's fastest code at run time (SHA extensions, AVX2, ...): about 1.4 GB/s on one core of the
// development machine, against 160 MB/s for the portable C this replaced, which made the input
// digest of `rdattn-data prepare` a serial stage worth 15% of a tokenizer thread (docs/data.md).
// Used for tokenizer-file pinning, input digests in shard manifests, the document split, and
// the client's idempotent request ids.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX (openssl/types.h), kept out of this header

namespace rdattn {

using Sha256Digest = std::array<uint8_t, 32>;

// Streaming SHA-256: Update() any number of times, then Finish() once. Reset() starts over.
// Movable, not copyable (it owns an OpenSSL digest context).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&& other) noexcept;
  Sha256& operator=(Sha256&& other) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Reset();
  void Update(const void* data, size_t len);
  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
  // Pads, returns the digest and leaves the object reset (ready for a new message).
  Sha256Digest Finish();
  // Finish() as 64 lowercase hex characters.
  std::string FinishHex();

 private:
  evp_md_ctx_st* ctx_;
};

// One-shot helpers.
Sha256Digest Sha256Of(std::string_view bytes);
std::string Sha256Hex(std::string_view bytes);
// 64 lowercase hex characters of a digest.
std::string DigestHex(const Sha256Digest& d);
// The digest of a file's bytes, read in binary mode in chunks. Errors name the file.
StatusOr<std::string> Sha256HexOfFile(const std::string& path);

}  // namespace rdattn
