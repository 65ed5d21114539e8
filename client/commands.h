// The `rdattn` command line: parses argv, resolves the connection and runs one command
// (validate, submit, list, get, watch, cancel, report, help). Output goes to `out`, errors to
// `err` as "rdattn: CODE: message" (one field error per line when there are several).
// Exit codes: 0 success; 1 an RPC or I/O error; 2 a usage error or INVALID_ARGUMENT (a bad
// sweep file); 3 `watch` (or `submit --watch`) saw the sweep end FAILED or CANCELLED.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "client/settings.h"

namespace rdattn::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitSweepUnsuccessful = 3;

// argv[0] is the program name. `env` reads environment variables.
int RunCli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err,
           const EnvGetter& env);

// The default idempotency key of `rdattn submit`: "sha256:" + hex SHA-256 of the owner key and
// the file's bytes. The owner key is the spec's owner when set, else a SHA-256 of the token
// ("anonymous" without one), so the same file submitted again by the same user maps to the
// same sweep, and two users' copies do not collide.
std::string DefaultRequestId(const std::string& file_content, const std::string& spec_owner,
                             const std::string& token);

}  // namespace rdattn::client
