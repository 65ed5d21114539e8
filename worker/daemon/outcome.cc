// Exit statuses, outcomes and stderr tails (see outcome.h).
#include "worker/daemon/outcome.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>

namespace rdattn::worker {

namespace pb = ::rdattn::v1;

ExitStatus ExitStatusFromWait(int wait_status) {
  ExitStatus s;
  if (WIFEXITED(wait_status)) {
    s.exit_code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    s.exit_code = -1;
    s.term_signal = WTERMSIG(wait_status);
  } else {
    s.exit_code = -1;  // stopped/continued: not an end; callers wait with WEXITED only
  }
  return s;
}

std::string_view StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kNone:
      return "none";
    case StopReason::kCancel:
      return "cancel";
    case StopReason::kShutdown:
      return "worker shutdown";
    case StopReason::kLeaseExpired:
      return "lease expired";
    case StopReason::kLeaseLost:
      return "lease lost";
  }
  return "?";
}

pb::JobOutcome OutcomeFor(const ExitStatus& exit, StopReason reason) {
  if (exit.exit_code == kTrainExitOk && exit.term_signal == 0) return pb::JOB_OUTCOME_SUCCEEDED;
  switch (reason) {
    case StopReason::kCancel:
      return pb::JOB_OUTCOME_CANCELLED;
    case StopReason::kShutdown:
    case StopReason::kLeaseExpired:
      return pb::JOB_OUTCOME_PREEMPTED;
    case StopReason::kNone:
    case StopReason::kLeaseLost:
      break;
  }
  if (exit.exit_code == kTrainExitPreempted && exit.term_signal == 0)
    return pb::JOB_OUTCOME_PREEMPTED;
  if (exit.exit_code == kTrainExitMachineFailed && exit.term_signal == 0)
    return pb::JOB_OUTCOME_MACHINE_FAILED;
  return pb::JOB_OUTCOME_FAILED;
}

bool IsMachineErrno(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EIO:
    case EROFS:
    case ENODEV:
    case ENXIO:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case ESTALE:
      return true;
    default:
      return false;
  }
}

std::string DescribeExit(const ExitStatus& exit) {
  if (exit.term_signal != 0) {
    const char* name = sigabbrev_np(exit.term_signal);
    return "killed by signal " + std::to_string(exit.term_signal) +
           (name ? std::string(" (SIG") + name + ")" : std::string());
  }
  return "exit code " + std::to_string(exit.exit_code);
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t len = 0;
    unsigned min = 0;
    if (c < 0x80) {
      len = 1;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, min = 0x10000;
    }
    bool ok = len > 0 && i + len <= text.size();
    unsigned cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (ok && len > 1) ok = cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      out += '?';
      ++i;
    }
  }
  return out;
}

std::string TailOfText(std::string_view text, int max_lines, size_t max_bytes) {
  // One trailing newline ends the last line; it does not start an empty one.
  std::string_view body = text;
  if (!body.empty() && body.back() == '\n') body.remove_suffix(1);
  size_t start = body.size();
  size_t pos = body.size();
  for (int lines = 0; lines < max_lines; ++lines) {
    const size_t nl = pos == 0 ? std::string_view::npos : body.rfind('\n', pos - 1);
    const size_t line_start = nl == std::string_view::npos ? 0 : nl + 1;
    // Whole lines only, except that the last line alone may be cut below.
    if (lines > 0 && body.size() - line_start > max_bytes) break;
    start = line_start;
    if (nl == std::string_view::npos) break;
    pos = nl;
  }
  std::string_view tail = body.substr(start);
  if (tail.size() > max_bytes) {
    tail.remove_prefix(tail.size() - max_bytes);
    // Do not start inside a UTF-8 sequence.
    while (!tail.empty() && (static_cast<unsigned char>(tail.front()) & 0xC0) == 0x80) {
      tail.remove_prefix(1);
    }
  }
  return SanitizeUtf8(tail);
}

StatusOr<std::string> ReadFileTail(const std::string& path, int max_lines, size_t max_bytes) {
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) return std::string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return InternalError("open " + path + ": cannot read");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  // Read enough for max_lines of a generous width; TailOfText trims to max_bytes.
  const std::streamoff want = static_cast<std::streamoff>(max_bytes) * 4 + 4096;
  const std::streamoff from = size > want ? size - want : 0;
  in.seekg(from);
  std::string buf(static_cast<size_t>(size - from), '\0');
  in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
  buf.resize(static_cast<size_t>(in.gcount()));
  if (from > 0) {
    const size_t nl = buf.find('\n');  // the first line read is probably cut: drop it
    if (nl != std::string::npos) buf.erase(0, nl + 1);
  }
  return TailOfText(buf, max_lines, max_bytes);
}

}  // namespace rdattn::worker
