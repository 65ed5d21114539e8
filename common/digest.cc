#include "common/digest.h"

#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

namespace rdattn {

struct Xxh3Stream::State {
  XXH3_state_t* s = nullptr;
};

uint64_t Xxh3(const void* data, size_t len) { return XXH3_64bits(data, len); }

std::string DigestText(uint64_t digest) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
  return std::string(kDigestPrefix) + hex;
}

Xxh3Stream::Xxh3Stream() : state_(std::make_unique<State>()) {
  state_->s = XXH3_createState();
  if (state_->s == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state_->s);
}

Xxh3Stream::~Xxh3Stream() {
  if (state_ != nullptr) XXH3_freeState(state_->s);
}

void Xxh3Stream::Update(const void* data, size_t len) { XXH3_64bits_update(state_->s, data, len); }

uint64_t Xxh3Stream::Digest() const { return XXH3_64bits_digest(state_->s); }

StatusOr<std::string> FileDigest(const std::string& path, int64_t* bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return NotFoundError(path + ": cannot open: " + std::strerror(errno));
  Xxh3Stream stream;
  std::vector<char> buffer(size_t{4} << 20);
  int64_t total = 0;
  while (true) {
    const size_t n = std::fread(buffer.data(), 1, buffer.size(), f);
    if (n > 0) {
      stream.Update(buffer.data(), n);
      total += static_cast<int64_t>(n);
    }
    if (n < buffer.size()) break;
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return DataLossError(path + ": read failed: " + std::strerror(err));
  if (bytes != nullptr) *bytes = total;
  return DigestText(stream.Digest());
}

}  // namespace rdattn
