// A minimal Status / StatusOr for the trainer core (model loading, data, communicator,
// checkpoints), which must build on GPU machines that have a CUDA LibTorch and nothing else
// (no Abseil). Codes use the numbers of absl::StatusCode and grpc::StatusCode, so the service
// side converts 1:1. Expected failures are values; broken invariants crash (CONVENTIONS B4).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace rdattn {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

std::string_view StatusCodeName(StatusCode code);

// One problem with a field (common/field_error.h collects them): `path` names the field as the
// user wrote it ("schedule.milestones_tokens[2]", "scales[0].shape.width"), a message as a whole
// ("RunSpec", "SweepSpec") or a place in a text ("line 3, column 5"); `reason` says what is wrong
// with it. Neither is empty. Declared here because a Status carries them (field_errors()).
struct FieldError {
  std::string path;
  std::string reason;

  // "path: reason"
  std::string Text() const { return path + ": " + reason; }
  bool operator==(const FieldError& o) const { return path == o.path && reason == o.reason; }
  bool operator<(const FieldError& o) const {
    return path != o.path ? path < o.path : reason < o.reason;
  }
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  // A status that also carries the field errors its message was made from (FieldErrorStatus).
  Status(StatusCode code, std::string message, std::vector<FieldError> field_errors)
      : code_(code), message_(std::move(message)), field_errors_(std::move(field_errors)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The field errors of an INVALID_ARGUMENT made from them, one per field error, in order; the
  // message joins them ("path: reason; path: reason") for people. Empty for any other status.
  // On the wire they are google.rpc.BadRequest field violations (contract::ToGrpcStatus).
  const std::vector<FieldError>& field_errors() const { return field_errors_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "prefix: message" (context added on the way up); the field
  // errors stay as they are.
  Status WithPrefix(std::string_view prefix) const;
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::vector<FieldError> field_errors_;
};

inline Status InvalidArgumentError(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status AbortedError(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status ResourceExhaustedError(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status UnimplementedError(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}
inline Status CancelledError(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}        // NOLINT: implicit, like absl::StatusOr
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok())
      v_ = Status(StatusCode::kInternal, "StatusOr built from an OK status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace rdattn

#define RDATTN_STATUS_CONCAT_INNER(a, b) a##b
#define RDATTN_STATUS_CONCAT(a, b) RDATTN_STATUS_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define RDATTN_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::rdattn::Status rdattn_status_ = (expr);        \
    if (!rdattn_status_.ok()) return rdattn_status_; \
  } while (0)

// `RDATTN_ASSIGN_OR_RETURN(auto x, MakeX());` — declares/assigns x or returns the error.
// NOLINTBEGIN(bugprone-macro-parentheses): `lhs` is a declaration and `tmp` a name, neither an
// expression, so parentheses around them would not compile.
#define RDATTN_ASSIGN_OR_RETURN(lhs, expr) \
  RDATTN_ASSIGN_OR_RETURN_IMPL(RDATTN_STATUS_CONCAT(rdattn_statusor_, __LINE__), lhs, expr)
#define RDATTN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)
