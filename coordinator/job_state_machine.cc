// The job life cycle (see job_state_machine.h for the table). Pure: no I/O, no clock.
#include "coordinator/job_state_machine.h"

#include <string>

namespace rdattn::coordinator {
namespace {

using A = JobAction;

Status Illegal(JobState state, JobEvent event) {
  return FailedPreconditionError("job state " + std::string(JobStateName(state)) +
                                 " does not accept event " + std::string(JobEventName(event)));
}

// A failed or expired attempt: retry while attempts remain, unless a cancel is pending.
TransitionResult AttemptLost(const TransitionInput& in) {
  if (in.cancel_requested) return {JobState::kCancelled, {A::kCloseAttempt, A::kFinish}};
  if (in.counted_attempts < in.max_attempts) {
    return {JobState::kPending, {A::kCloseAttempt, A::kRecordFailure, A::kBackoff}};
  }
  return {JobState::kFailed, {A::kCloseAttempt, A::kRecordFailure, A::kFinish}};
}

// The machine failed the attempt: retried without using max_attempts, within its own bound.
TransitionResult MachineFailed(const TransitionInput& in) {
  if (in.cancel_requested) return {JobState::kCancelled, {A::kCloseAttempt, A::kFinish}};
  if (in.machine_failures + 1 < in.max_machine_failures) {
    return {JobState::kPending,
            {A::kCloseAttempt, A::kCountMachineFailure, A::kRecordFailure, A::kBackoff}};
  }
  return {JobState::kFailed,
          {A::kCloseAttempt, A::kCountMachineFailure, A::kRecordFailure, A::kFinish}};
}

StatusOr<TransitionResult> FromPending(JobEvent event) {
  switch (event) {
    case JobEvent::kLease:
      return TransitionResult{JobState::kLeased, {A::kOpenAttempt}};
    case JobEvent::kCancel:
      return TransitionResult{JobState::kCancelled, {A::kFinish}};
    default:
      return Illegal(JobState::kPending, event);
  }
}

// LEASED and RUNNING differ only in how they take kStart.
StatusOr<TransitionResult> FromHeld(JobState state, JobEvent event, const TransitionInput& in) {
  switch (event) {
    case JobEvent::kStart:
      if (state == JobState::kRunning) return TransitionResult{JobState::kRunning, {}};
      return TransitionResult{JobState::kRunning, {A::kMarkStarted}};
    case JobEvent::kCompleteSucceeded:
      return TransitionResult{JobState::kSucceeded, {A::kCloseAttempt, A::kFinish}};
    case JobEvent::kCompleteFailed:
    case JobEvent::kLeaseExpired:
      return AttemptLost(in);
    case JobEvent::kCompleteMachineFailed:
      return MachineFailed(in);
    case JobEvent::kCompleteCancelled:
      return TransitionResult{JobState::kCancelled, {A::kCloseAttempt, A::kFinish}};
    case JobEvent::kCompletePreempted:
      if (in.cancel_requested) {
        return TransitionResult{JobState::kCancelled, {A::kCloseAttempt, A::kFinish}};
      }
      return TransitionResult{JobState::kPending, {A::kCloseAttempt, A::kRefundAttempt}};
    case JobEvent::kCancel:
      return TransitionResult{state, {A::kRequestCancel}};
    case JobEvent::kLease:
      break;
  }
  return Illegal(state, event);
}

}  // namespace

StatusOr<TransitionResult> Transition(JobState state, JobEvent event,
                                      const TransitionInput& input) {
  switch (state) {
    case JobState::kPending:
      return FromPending(event);
    case JobState::kLeased:
    case JobState::kRunning:
      return FromHeld(state, event, input);
    case JobState::kSucceeded:
    case JobState::kFailed:
    case JobState::kCancelled:
      break;
  }
  return Illegal(state, event);
}

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kPending:
      return "PENDING";
    case JobState::kLeased:
      return "LEASED";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
  }
  return "?";
}

std::string_view JobEventName(JobEvent event) {
  switch (event) {
    case JobEvent::kLease:
      return "Lease";
    case JobEvent::kStart:
      return "Start";
    case JobEvent::kCompleteSucceeded:
      return "CompleteSucceeded";
    case JobEvent::kCompleteFailed:
      return "CompleteFailed";
    case JobEvent::kCompleteCancelled:
      return "CompleteCancelled";
    case JobEvent::kCompletePreempted:
      return "CompletePreempted";
    case JobEvent::kLeaseExpired:
      return "LeaseExpired";
    case JobEvent::kCancel:
      return "Cancel";
    case JobEvent::kCompleteMachineFailed:
      return "CompleteMachineFailed";
  }
  return "?";
}

SweepState DeriveSweepState(const SweepFacts& f) {
  const int ended = f.succeeded + f.failed + f.cancelled;
  if (f.total > 0 && ended == f.total) {
    if (f.cancel_requested) return SweepState::kCancelled;
    if (f.succeeded == f.total) return SweepState::kSucceeded;
    if (f.failed > 0) return SweepState::kFailed;
    return SweepState::kCancelled;
  }
  if (f.total == 0) return f.cancel_requested ? SweepState::kCancelled : SweepState::kPending;
  if (f.any_started || f.leased > 0 || f.running > 0 || ended > 0) return SweepState::kRunning;
  return SweepState::kPending;
}

bool IsTerminal(SweepState state) {
  return state == SweepState::kSucceeded || state == SweepState::kFailed ||
         state == SweepState::kCancelled;
}

std::string_view SweepStateName(SweepState state) {
  switch (state) {
    case SweepState::kPending:
      return "PENDING";
    case SweepState::kRunning:
      return "RUNNING";
    case SweepState::kSucceeded:
      return "SUCCEEDED";
    case SweepState::kFailed:
      return "FAILED";
    case SweepState::kCancelled:
      return "CANCELLED";
  }
  return "?";
}

}  // namespace rdattn::coordinator
