// A small SHA-256 (FIPS 180-4) for the client's default submit request id. Not for secrets:
// plain, portable C++, no constant-time guarantees, no dependency.
#pragma once

#include <string>
#include <string_view>

namespace rdattn::client {

// Lowercase hex digest of `data` (64 characters).
std::string Sha256Hex(std::string_view data);

}  // namespace rdattn::client
