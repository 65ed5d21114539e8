// What a finished attempt reports: the exit status of its launcher, the outcome it maps to, and
// the tail of its stderr. Pure functions plus one file read.
//
//   exit 0                                   -> SUCCEEDED
//   stopped by a cancel order (not exit 0)   -> CANCELLED
//   stopped by the worker's own shutdown or
//   by an expired lease (not exit 0)         -> PREEMPTED
//   exit 75 (checkpointed on SIGTERM)        -> PREEMPTED
//   exit 74 (the machine failed: ENOSPC, EIO) -> MACHINE_FAILED
//   anything else (exit code or signal)      -> FAILED
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"
#include "rdattn/v1/sweep.pb.h"

namespace rdattn::worker {

// rdattn-train's exit codes (docs/trainer.md).
inline constexpr int kTrainExitOk = 0;
inline constexpr int kTrainExitFailure = 1;
inline constexpr int kTrainExitUsage = 2;
inline constexpr int kTrainExitPreempted = 75;
// The machine failed, not the job (a full disk, an I/O error writing a checkpoint or an event
// file): the worker reports JOB_OUTCOME_MACHINE_FAILED (docs/worker.md "Start failures").
inline constexpr int kTrainExitMachineFailed = 74;

// An errno that says the machine cannot run jobs now (its disk is full, read-only or failing),
// as opposed to a problem of the job: ENOSPC, EDQUOT, EIO, EROFS, ENODEV, ENXIO, EMFILE,
// ENFILE, ENOMEM, ESTALE.
bool IsMachineErrno(int err);

// How a process ended, in CompleteJobRequest's terms.
struct ExitStatus {
  int exit_code = 0;    // -1 when killed by a signal
  int term_signal = 0;  // the signal number when killed by one, else 0
};

// From a waitpid() status.
ExitStatus ExitStatusFromWait(int wait_status);

// Why the worker stopped the ranks, if it did.
enum class StopReason {
  kNone,          // they ended on their own
  kCancel,        // a heartbeat cancel order
  kShutdown,      // the worker got SIGTERM/SIGINT
  kLeaseExpired,  // no renewal within the lease TTL (coordinator unreachable)
  kLeaseLost,     // the coordinator no longer knows the lease; nothing is reported
};

std::string_view StopReasonName(StopReason reason);

::rdattn::v1::JobOutcome OutcomeFor(const ExitStatus& exit, StopReason reason);

// "exit code 3", "killed by signal 9 (SIGKILL)".
std::string DescribeExit(const ExitStatus& exit);

// The last max_lines lines of text, and at most max_bytes of them (cut at a line start when
// possible), made valid UTF-8 (invalid bytes become '?') so it fits a proto string.
std::string TailOfText(std::string_view text, int max_lines, size_t max_bytes);

// TailOfText of a file's last bytes. A missing file is an empty tail.
StatusOr<std::string> ReadFileTail(const std::string& path, int max_lines, size_t max_bytes);

// Replaces every byte that is not part of a well-formed UTF-8 sequence with '?'.
std::string SanitizeUtf8(std::string_view text);

}  // namespace rdattn::worker
