// Field errors: what a parse or validation rejects, as structured values ("which field", "why")
// from where they are found up to the boundary that shows them. ModelConfig::Validate, the
// run-config resolver (ResolveRunConfig), the sweep parsers and ExpandSweep return them;
// ExpandSweep renames their paths on the structure; the text "path: reason; path: reason" is
// built once, by the RPC or CLI boundary (FieldErrorsOr::status(), JoinFieldErrors), and the
// Status keeps the errors beside it (Status::field_errors()), so that the RPC boundary sends them
// apart (google.rpc.BadRequest) and a client never splits the text.
// Header-only and plain C++17, so model/ can use it without linking anything.
#pragma once

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>  // std::in_place_index too
#include <vector>

#include "common/status.h"

namespace rdattn {

// One problem, FieldError {path, reason}, is declared in common/status.h: a Status carries them.

// The one text form: every error's "path: reason", joined with "; ".
inline std::string JoinFieldErrors(const std::vector<FieldError>& errors) {
  std::string out;
  for (const FieldError& e : errors) {
    if (!out.empty()) out += "; ";
    out += e.Text();
  }
  return out;
}

// OK when `errors` is empty, else one INVALID_ARGUMENT whose message is JoinFieldErrors and
// which carries the errors themselves (Status::field_errors()).
inline Status FieldErrorStatus(const std::vector<FieldError>& errors) {
  if (errors.empty()) return Status::Ok();
  return Status(StatusCode::kInvalidArgument, JoinFieldErrors(errors), errors);
}

// One field's error as a Status: INVALID_ARGUMENT "path: reason", carrying the error (so the RPC
// boundary sends it as a BadRequest violation like any list of them).
inline Status FieldErrorStatus(std::string path, std::string reason) {
  return FieldErrorStatus(std::vector<FieldError>{{std::move(path), std::move(reason)}});
}

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c".
inline std::string FieldPath(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
}
// "a.b" + 3 -> "a.b[3]".
inline std::string FieldIndex(std::string_view path, size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

// The collector: errors in the order found, each distinct (path, reason) once. An empty path is
// recorded as the root ("RunSpec", "SweepSpec"). A path may be marked "bad" (it had a syntax
// error, or it is missing): Check then drops the errors that would only follow from it, so one
// mistake is reported once.
class FieldErrors {
 public:
  explicit FieldErrors(std::string root) : root_(std::move(root)) {}

  void Add(std::string_view path, std::string reason) {
    FieldError e{path.empty() ? root_ : std::string(path), std::move(reason)};
    if (seen_.insert(e).second) errors_.push_back(std::move(e));
  }
  void Add(const FieldError& e) { Add(e.path, e.reason); }
  void Append(const std::vector<FieldError>& errors) {
    for (const FieldError& e : errors) Add(e);
  }
  // Add, and mark `path` bad (a syntax error: what is checked later on it is moot).
  void AddAndMarkBad(const std::string& path, std::string reason) {
    Add(path, std::move(reason));
    MarkBad(path);
  }
  // Add, unless `path` is marked bad (a check whose value is already known to be wrong).
  void Check(const std::string& path, std::string reason) {
    if (!Bad(path)) Add(path, std::move(reason));
  }
  // Check, then mark `path` bad (e.g. "required": checks that need its value are moot).
  void CheckAndMarkBad(const std::string& path, std::string reason) {
    Check(path, std::move(reason));
    MarkBad(path);
  }
  void MarkBad(const std::string& path) { bad_.insert(path); }
  bool Bad(const std::string& path) const { return bad_.count(path) > 0; }

  bool empty() const { return errors_.empty(); }
  size_t size() const { return errors_.size(); }
  const std::vector<FieldError>& list() const { return errors_; }
  std::vector<FieldError> Take() && { return std::move(errors_); }
  Status ToStatus() const { return FieldErrorStatus(errors_); }

  // Orders the errors from index `first` on by `rank` (stable: equal ranks keep their order).
  void StableSortFrom(size_t first, const std::function<int(const FieldError&)>& rank) {
    if (first >= errors_.size()) return;
    std::vector<std::pair<int, FieldError>> ranked;
    for (size_t i = first; i < errors_.size(); ++i)
      ranked.emplace_back(rank(errors_[i]), errors_[i]);
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < ranked.size(); ++i) errors_[first + i] = std::move(ranked[i].second);
  }

 private:
  std::string root_;
  std::vector<FieldError> errors_;
  std::set<FieldError> seen_;
  std::set<std::string> bad_;
};

// A value, or why there is none: the field errors that rejected it (INVALID_ARGUMENT), or another
// failure (INTERNAL, ...). status() is where the errors become text; converting to StatusOr<T>
// (what the RPC and CLI boundaries take) does the same.
template <typename T>
class [[nodiscard]] FieldErrorsOr {
 public:
  FieldErrorsOr(T value)
      : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit, like StatusOr
  // `errors` must not be empty.
  FieldErrorsOr(std::vector<FieldError> errors)  // NOLINT
      : v_(std::in_place_index<1>, std::move(errors)) {}
  // A failure that is not about a field; `status` must not be OK.
  FieldErrorsOr(Status status) : v_(std::in_place_index<2>, std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok())
      v_ = Status(StatusCode::kInternal, "FieldErrorsOr built from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The field errors; empty when ok() or when the failure is not about a field.
  const std::vector<FieldError>& errors() const {
    static const std::vector<FieldError> kNone;
    const auto* e = std::get_if<std::vector<FieldError>>(&v_);
    return e != nullptr ? *e : kNone;
  }
  // OK, the field errors joined into one INVALID_ARGUMENT, or the other failure.
  Status status() const {
    if (ok()) return Status::Ok();
    if (const auto* s = std::get_if<Status>(&v_)) return *s;
    return FieldErrorStatus(errors());
  }
  operator StatusOr<T>() const& {  // NOLINT: implicit, the boundary's conversion
    if (ok()) return value();
    return status();
  }
  operator StatusOr<T>() && {  // NOLINT
    if (ok()) return std::move(*this).value();
    return status();
  }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, std::vector<FieldError>, Status> v_;
};

}  // namespace rdattn
