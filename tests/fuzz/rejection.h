// Shared by the sweep and RunSpec fuzz targets: the one shape every rejection of bad input must
// have.
#pragma once

#include <string>

#include "common/field_error.h"
#include "common/status.h"
#include "tests/fuzz/fuzz_check.h"

namespace rdattn::fuzz {

// A rejected input: INVALID_ARGUMENT made of field errors, each with a non-empty path and
// reason (what `rdattn validate` prints, one per line, as "path: reason").
template <typename T>
void CheckRejection(const FieldErrorsOr<T>& result) {
  FUZZ_CHECK(!result.ok(), "expected an error");
  const Status status = result.status();
  FUZZ_CHECK(status.code() == StatusCode::kInvalidArgument, status.ToString());
  FUZZ_CHECK(!result.errors().empty(), "rejected without field errors: " + status.ToString());
  for (const FieldError& e : result.errors()) {
    FUZZ_CHECK(!e.path.empty() && !e.reason.empty(),
               "not 'field: reason': '" + e.Text() + "' in " + status.message());
  }
}

}  // namespace rdattn::fuzz
