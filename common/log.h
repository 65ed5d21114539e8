// The one log line format of every rdattn binary, on stderr:
//
//   2026-12-01T23:45:12.123Z I rdattn-worker: leased job sw-1/tiny/rd/s1
//   2026-12-01T23:45:13.456Z W rdattn-train job=sw-1/tiny/rd/s1 rank=1 step=120: message
//
// UTC time with milliseconds, one level letter (D, I, W, E), the component (the binary's name),
// then job=, rank= and step= where they are known, then ": " and the message. A line is written
// with one write(2), so lines of several threads or ranks never interleave. Never log tokens.
//
// Plain C++17, no dependencies: the trainer-only GPU build uses it.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

namespace rdattn::log {

enum class Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Process-wide settings, set once in main before threads start (reads are thread-safe).
void SetComponent(std::string_view component);  // default "rdattn"
void SetMinLevel(Level level);                  // lines below it are dropped; default kInfo
Level MinLevel();

// Context carried by every later line of this process: the job it runs and its rank (set by the
// trainer once the communicator is up). An empty job or a negative rank means unknown.
void SetJob(std::string_view job);
void SetRank(int rank);
// The training step the process is at, carried by lines while it is >= 0 (the trainer updates
// it once per step; -1 clears it).
void SetStep(int64_t step);

// Optional fields of one line; unset fields fall back to the process context.
struct Fields {
  std::string job;
  int rank = -1;
  int64_t step = -1;
};

// The line as written, without the trailing newline: for tests and for callers that need the
// text (e.g. to also keep it in a job's stderr tail).
std::string FormatLine(Level level, std::string_view message, const Fields& fields = {});

// Writes one line to stderr (if `level` >= MinLevel()).
void Write(Level level, std::string_view message, const Fields& fields = {});

inline void Debug(std::string_view m) { Write(Level::kDebug, m); }
inline void Info(std::string_view m) { Write(Level::kInfo, m); }
inline void Warning(std::string_view m) { Write(Level::kWarning, m); }
inline void Error(std::string_view m) { Write(Level::kError, m); }

// Stream form: RDATTN_LOG(kInfo) << "leased " << job_id; writes when the statement ends.
class Line {
 public:
  explicit Line(Level level) : level_(level) {}
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;
  ~Line() { Write(level_, out_.str(), fields_); }

  Line& Job(std::string_view job) {
    fields_.job = std::string(job);
    return *this;
  }
  Line& Rank(int rank) {
    fields_.rank = rank;
    return *this;
  }
  Line& Step(int64_t step) {
    fields_.step = step;
    return *this;
  }
  template <typename T>
  Line& operator<<(const T& v) {
    out_ << v;
    return *this;
  }

 private:
  Level level_;
  Fields fields_;
  std::ostringstream out_;
};

}  // namespace rdattn::log

namespace rdattn::log {
// Turns the stream expression into void, for the conditional in RDATTN_LOG (glog's idiom: the
// macro is one expression, so it is safe inside an unbraced if/else).
struct Voidify {
  void operator&(const Line&) {}
};
}  // namespace rdattn::log

// The stream is built only when the level is on. Neither `level` (a name: kInfo) nor the
// replacement list (the caller's << continues it) can be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define RDATTN_LOG(level)                                   \
  (::rdattn::log::Level::level < ::rdattn::log::MinLevel()) \
      ? (void)0                                             \
      : ::rdattn::log::Voidify() & ::rdattn::log::Line(::rdattn::log::Level::level)
// NOLINTEND(bugprone-macro-parentheses)
