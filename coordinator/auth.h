// Bearer-token authentication and role checks. Tokens come from a file of lines
// `TOKEN ROLE NAME` (roles: researcher, worker, admin; `#` starts a comment). A presented token
// is compared with every configured token in constant time, and tokens are never logged or
// put in an error message. No gRPC here: service.cc passes the "authorization" metadata value.
//
//   researcher: SweepService (cancels only sweeps whose owner is its NAME)
//   worker:     WorkerService
//   admin:      both
// Missing or unknown token: UNAUTHENTICATED. Wrong role: PERMISSION_DENIED. Without a tokens
// file authentication is off: every caller is an anonymous admin (main.cc warns at start).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace rdattn::coordinator {

enum class Role { kResearcher, kWorker, kAdmin };
enum class ServiceKind { kSweep, kWorker };

struct TokenEntry {
  std::string token;
  Role role = Role::kResearcher;
  std::string name;
};

struct Principal {
  Role role = Role::kAdmin;
  std::string name;  // empty when authentication is off
};

// Equal length and bytes; the time taken depends only on the lengths, never on where the
// inputs differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

std::string_view RoleName(Role role);  // "researcher", "worker", "admin"

// Parses a tokens file's text. Errors name the line ("line 3: unknown role 'root'; ...") and
// never quote a token. Duplicate tokens are an error; an empty list is an error.
StatusOr<std::vector<TokenEntry>> ParseTokens(std::string_view text);
StatusOr<std::vector<TokenEntry>> LoadTokensFile(const std::string& path);

class Authenticator {
 public:
  // Authentication off.
  Authenticator() = default;
  explicit Authenticator(std::vector<TokenEntry> tokens);

  bool enabled() const { return enabled_; }

  // `authorization`: the metadata value ("Bearer TOKEN"), or nullopt when absent.
  // UNAUTHENTICATED or PERMISSION_DENIED; the principal otherwise.
  StatusOr<Principal> Check(const std::optional<std::string_view>& authorization,
                            ServiceKind service) const;

 private:
  bool enabled_ = false;
  std::vector<TokenEntry> tokens_;
};

}  // namespace rdattn::coordinator
