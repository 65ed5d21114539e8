#include "common/sha256.h"

#include <openssl/err.h>
#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace rdattn {
namespace {

// The one SHA-256 implementation of the default provider, fetched once (EVP_sha256() would
// look it up again on every init). Failures here mean a broken OpenSSL installation or no
// memory: there is no digest to return, so they end the process with OpenSSL's reason.
[[noreturn]] void Fail(const char* what) {
  char reason[256] = "";
  ERR_error_string_n(ERR_get_error(), reason, sizeof(reason));
  std::fprintf(stderr, "rdattn: SHA-256 through OpenSSL: %s failed: %s\n", what,
               reason[0] != 0 ? reason : "no reason given");
  std::abort();
}

const EVP_MD* Sha256Md() {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  if (md == nullptr) Fail("EVP_MD_fetch(\"SHA256\")");
  return md;
}

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr) Fail("EVP_MD_CTX_new");
  Reset();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

Sha256::Sha256(Sha256&& other) noexcept : ctx_(other.ctx_) { other.ctx_ = nullptr; }

Sha256& Sha256::operator=(Sha256&& other) noexcept {
  if (this != &other) {
    EVP_MD_CTX_free(ctx_);
    ctx_ = other.ctx_;
    other.ctx_ = nullptr;
  }
  return *this;
}

void Sha256::Reset() {
  if (EVP_DigestInit_ex2(ctx_, Sha256Md(), nullptr) != 1) Fail("EVP_DigestInit_ex2");
}

void Sha256::Update(const void* data, size_t len) {
  if (len > 0 && EVP_DigestUpdate(ctx_, data, len) != 1) Fail("EVP_DigestUpdate");
}

Sha256Digest Sha256::Finish() {
  Sha256Digest out;
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx_, out.data(), &n) != 1 || n != out.size()) Fail("EVP_DigestFinal_ex");
  Reset();
  return out;
}

std::string Sha256::FinishHex() { return DigestHex(Finish()); }

std::string DigestHex(const Sha256Digest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(64, '0');
  for (size_t i = 0; i < d.size(); ++i) {
    s[2 * i] = kHex[d[i] >> 4];
    s[2 * i + 1] = kHex[d[i] & 15];
  }
  return s;
}

Sha256Digest Sha256Of(std::string_view bytes) {
  Sha256Digest out;
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), out.data(), &n, Sha256Md(), nullptr) != 1 ||
      n != out.size())
    Fail("EVP_Digest");
  return out;
}

std::string Sha256Hex(std::string_view bytes) { return DigestHex(Sha256Of(bytes)); }

StatusOr<std::string> Sha256HexOfFile(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    const int err = errno;
    return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kFailedPrecondition,
                  path + ": cannot open: " + std::strerror(err));
  }
  Sha256 h;
  std::unique_ptr<char[]> buf(new char[1 << 20]);
  while (true) {
    const size_t n = std::fread(buf.get(), 1, 1 << 20, f.get());
    if (n > 0) h.Update(buf.get(), n);
    if (n < (1 << 20)) {
      if (std::ferror(f.get())) return DataLossError(path + ": read error");
      break;
    }
  }
  return h.FinishHex();
}

}  // namespace rdattn
