// Shared by the sweep and RunSpec fuzz targets: the one shape every rejection of bad input must
// have.
#pragma once

#include <string>

#include "common/status.h"
#include "proto/contract/contract.h"
#include "tests/fuzz/fuzz_check.h"

namespace rdattn::fuzz {

// A rejected input: INVALID_ARGUMENT, and every part of the message is "field: reason" with
// both sides non-empty (what `rdattn validate` prints, one per line).
inline void CheckRejection(const Status& status) {
  FUZZ_CHECK(!status.ok(), "expected an error");
  FUZZ_CHECK(status.code() == StatusCode::kInvalidArgument, status.ToString());
  for (const std::string& part : contract::SplitFieldErrors(status.message())) {
    const size_t colon = part.find(": ");
    FUZZ_CHECK(colon != std::string::npos && colon > 0 && colon + 2 < part.size(),
               "not 'field: reason': '" + part + "' in " + status.message());
  }
}

}  // namespace rdattn::fuzz
