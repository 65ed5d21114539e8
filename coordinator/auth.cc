// Bearer tokens: file parsing, constant-time lookup, role checks.
#include "coordinator/auth.h"

#include <utility>

#include "common/file_util.h"

namespace rdattn::coordinator {
namespace {

constexpr std::string_view kBearer = "bearer ";

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && IsSpace(line[i])) ++i;
    const size_t start = i;
    while (i < line.size() && !IsSpace(line[i])) ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

std::optional<Role> ParseRole(std::string_view s) {
  if (s == "researcher") return Role::kResearcher;
  if (s == "worker") return Role::kWorker;
  if (s == "admin") return Role::kAdmin;
  return std::nullopt;
}

bool Allowed(Role role, ServiceKind service) {
  switch (role) {
    case Role::kAdmin:
      return true;
    case Role::kResearcher:
      return service == ServiceKind::kSweep;
    case Role::kWorker:
      return service == ServiceKind::kWorker;
  }
  return false;
}

}  // namespace

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  // Fold the length difference in; then visit every byte position of the longer input.
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kResearcher:
      return "researcher";
    case Role::kWorker:
      return "worker";
    case Role::kAdmin:
      return "admin";
  }
  return "?";
}

StatusOr<std::vector<TokenEntry>> ParseTokens(std::string_view text) {
  std::vector<TokenEntry> out;
  std::string problems;
  auto add = [&](int line, const std::string& p) {
    problems += (problems.empty() ? "" : "; ") + ("line " + std::to_string(line) + ": " + p);
  };
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    std::vector<std::string_view> f = SplitFields(line);
    if (f.empty()) continue;
    if (f.size() != 3) {
      add(line_no, "expected 'TOKEN ROLE NAME', got " + std::to_string(f.size()) + " fields");
      continue;
    }
    std::optional<Role> role = ParseRole(f[1]);
    if (!role) {
      add(line_no, "unknown role '" + std::string(f[1]) + "'; valid: researcher, worker, admin");
      continue;
    }
    bool duplicate = false;
    for (const TokenEntry& e : out) duplicate = duplicate || ConstantTimeEquals(e.token, f[0]);
    if (duplicate) {
      add(line_no, "duplicate token (same as an earlier line)");
      continue;
    }
    out.push_back(TokenEntry{std::string(f[0]), *role, std::string(f[2])});
  }
  if (!problems.empty()) return InvalidArgumentError("tokens file: " + problems);
  if (out.empty()) return InvalidArgumentError("tokens file: no tokens");
  return out;
}

StatusOr<std::vector<TokenEntry>> LoadTokensFile(const std::string& path) {
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status().WithPrefix("tokens file");
  StatusOr<std::vector<TokenEntry>> tokens = ParseTokens(*text);
  if (!tokens.ok()) return tokens.status().WithPrefix(path);
  return tokens;
}

Authenticator::Authenticator(std::vector<TokenEntry> tokens)
    : enabled_(true), tokens_(std::move(tokens)) {}

StatusOr<Principal> Authenticator::Check(const std::optional<std::string_view>& authorization,
                                         ServiceKind service) const {
  if (!enabled_) return Principal{Role::kAdmin, ""};
  if (!authorization) {
    return Status(StatusCode::kUnauthenticated, "missing bearer token (metadata 'authorization')");
  }
  std::string_view value = *authorization;
  bool bearer = value.size() > kBearer.size();
  for (size_t i = 0; bearer && i < kBearer.size(); ++i) {
    const char c = value[i];
    bearer = (c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) == kBearer[i];
  }
  if (!bearer) {
    return Status(StatusCode::kUnauthenticated, "authorization metadata is not 'Bearer TOKEN'");
  }
  const std::string_view presented = value.substr(kBearer.size());
  // Visit every entry whatever matches, so the time does not tell which one did.
  const TokenEntry* match = nullptr;
  for (const TokenEntry& e : tokens_) {
    if (ConstantTimeEquals(e.token, presented) && match == nullptr) match = &e;
  }
  if (match == nullptr) return Status(StatusCode::kUnauthenticated, "unknown bearer token");
  if (!Allowed(match->role, service)) {
    return Status(StatusCode::kPermissionDenied,
                  "role " + std::string(RoleName(match->role)) + " (" + match->name +
                      ") may not call " +
                      (service == ServiceKind::kSweep ? "SweepService" : "WorkerService"));
  }
  return Principal{match->role, match->name};
}

}  // namespace rdattn::coordinator
