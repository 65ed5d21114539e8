// The job life cycle as a pure function: (state, event, attempt counts) -> (new state, actions).
// No I/O, no clock, no proto types: the store applies the actions, the service translates the
// states to and from rdattn.v1.JobState. docs/coordinator.md draws the diagram.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace rdattn::coordinator {

enum class JobState { kPending, kLeased, kRunning, kSucceeded, kFailed, kCancelled };
inline constexpr JobState kAllJobStates[] = {JobState::kPending, JobState::kLeased,
                                             JobState::kRunning, JobState::kSucceeded,
                                             JobState::kFailed,  JobState::kCancelled};

enum class JobEvent {
  kLease,              // the scheduler gave the job to a worker (LeaseJob)
  kStart,              // the ranks started: first metric event or ranks_started heartbeat
  kCompleteSucceeded,  // CompleteJob(SUCCEEDED)
  kCompleteFailed,     // CompleteJob(FAILED)
  kCompleteCancelled,  // CompleteJob(CANCELLED): the ranks stopped on a cancel order
  kCompletePreempted,  // CompleteJob(PREEMPTED): stopped by the platform after a checkpoint
  kLeaseExpired,       // the reaper found the lease past its expiry
  kCancel,             // CancelSweep
  // CompleteJob(MACHINE_FAILED): the worker could not prepare the job (ENOSPC, EIO, ...) or
  // the trainer exited 74. Not counted against max_attempts (docs/coordinator.md).
  kCompleteMachineFailed,
};
inline constexpr JobEvent kAllJobEvents[] = {JobEvent::kLease,
                                             JobEvent::kStart,
                                             JobEvent::kCompleteSucceeded,
                                             JobEvent::kCompleteFailed,
                                             JobEvent::kCompleteCancelled,
                                             JobEvent::kCompletePreempted,
                                             JobEvent::kLeaseExpired,
                                             JobEvent::kCancel,
                                             JobEvent::kCompleteMachineFailed};

// What the store must do besides writing the new state.
enum class JobAction {
  kOpenAttempt,          // attempts + 1, new lease id and expiry, an attempts row
  kMarkStarted,          // start time of the attempt (and of the job, the first time)
  kCloseAttempt,         // end the attempts row with its outcome; clear the lease
  kRefundAttempt,        // the closed attempt does not count against max_attempts (preemption)
  kRecordFailure,        // set failure_reason from the attempt's exit status / expiry
  kRequestCancel,        // remember the cancel; heartbeats carry a cancel order for the lease
  kFinish,               // the job reached a terminal state: end time
  kCountMachineFailure,  // machine_failures + 1: the attempt does not count against max_attempts
  kBackoff,              // not leased again before now + the retry backoff; remember the worker
};

struct TransitionInput {
  // Attempts that count against max_attempts, including the current one (attempts started
  // minus preempted ones). Used by kCompleteFailed and kLeaseExpired.
  int counted_attempts = 0;
  int max_attempts = 1;
  // CancelSweep already reached this job; a failure or expiry then ends it CANCELLED.
  bool cancel_requested = false;
  // Machine failures before this event, and their own bound (kCompleteMachineFailed), so that
  // a cluster that fails every start still ends the job.
  int machine_failures = 0;
  int max_machine_failures = 10;
};

struct TransitionResult {
  JobState new_state;
  std::vector<JobAction> actions;  // in the order the store applies them
};

// The transition for (state, event). Illegal pairs (e.g. kStart on a PENDING job, anything on
// a terminal job) are FAILED_PRECONDITION naming the state and the event.
//
//   PENDING  --Lease-->               LEASED     [OpenAttempt]
//   PENDING  --Cancel-->              CANCELLED  [Finish]
//   LEASED   --Start-->               RUNNING    [MarkStarted]
//   RUNNING  --Start-->               RUNNING    []   (idempotent)
//   LEASED|RUNNING --CompleteSucceeded--> SUCCEEDED [CloseAttempt, Finish]
//   LEASED|RUNNING --CompleteFailed | LeaseExpired-->
//        CANCELLED [CloseAttempt, Finish]                    if cancel_requested
//        PENDING   [CloseAttempt, RecordFailure, Backoff]    if counted_attempts < max_attempts
//        FAILED    [CloseAttempt, RecordFailure, Finish]     otherwise
//   LEASED|RUNNING --CompleteMachineFailed-->
//        CANCELLED [CloseAttempt, Finish]                    if cancel_requested
//        PENDING   [CloseAttempt, CountMachineFailure, RecordFailure, Backoff]
//                                                   if machine_failures + 1 < max_machine_failures
//        FAILED    [CloseAttempt, CountMachineFailure, RecordFailure, Finish]   otherwise
//   LEASED|RUNNING --CompleteCancelled--> CANCELLED [CloseAttempt, Finish]
//   LEASED|RUNNING --CompletePreempted-->
//        CANCELLED [CloseAttempt, Finish]                    if cancel_requested
//        PENDING   [CloseAttempt, RefundAttempt]             otherwise
//   LEASED|RUNNING --Cancel--> unchanged [RequestCancel]
StatusOr<TransitionResult> Transition(JobState state, JobEvent event, const TransitionInput& input);

bool IsTerminal(JobState state);
std::string_view JobStateName(JobState state);  // "PENDING", "LEASED", ...
std::string_view JobEventName(JobEvent event);  // "Lease", "Start", ...

// --- Sweep state, derived from its jobs ----------------------------------------------------

enum class SweepState { kPending, kRunning, kSucceeded, kFailed, kCancelled };

struct SweepFacts {
  int total = 0;
  int pending = 0;
  int leased = 0;
  int running = 0;
  int succeeded = 0;
  int failed = 0;
  int cancelled = 0;
  bool any_started = false;       // some job has had at least one attempt
  bool cancel_requested = false;  // CancelSweep was called
};

// Every job ended: SUCCEEDED if all succeeded, else FAILED if any failed, else CANCELLED.
// Otherwise RUNNING once any job has been leased (or ended), else PENDING. A cancelled sweep
// whose jobs are still stopping stays RUNNING until the last one ends; a cancelled sweep ends
// CANCELLED even when some of its jobs FAILED.
SweepState DeriveSweepState(const SweepFacts& facts);
bool IsTerminal(SweepState state);
std::string_view SweepStateName(SweepState state);

}  // namespace rdattn::coordinator
