// Table-driven test of the job state machine over every (state, event) pair, illegal ones
// included, and of the derived sweep state.
#include "coordinator/job_state_machine.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rdattn::coordinator {
namespace {

using S = JobState;
using E = JobEvent;
using A = JobAction;

struct Expect {
  S state;
  std::vector<A> actions;
};

// The expected outcome of every pair for an input with attempts left and no cancel pending;
// nullopt = illegal (FAILED_PRECONDITION).
std::map<std::pair<S, E>, std::optional<Expect>> Table() {
  std::map<std::pair<S, E>, std::optional<Expect>> t;
  for (S s : kAllJobStates) {
    for (E e : kAllJobEvents) t[{s, e}] = std::nullopt;
  }
  t[{S::kPending, E::kLease}] = Expect{S::kLeased, {A::kOpenAttempt}};
  t[{S::kPending, E::kCancel}] = Expect{S::kCancelled, {A::kFinish}};
  for (S held : {S::kLeased, S::kRunning}) {
    t[{held, E::kStart}] =
        held == S::kLeased ? Expect{S::kRunning, {A::kMarkStarted}} : Expect{S::kRunning, {}};
    t[{held, E::kCompleteSucceeded}] = Expect{S::kSucceeded, {A::kCloseAttempt, A::kFinish}};
    t[{held, E::kCompleteFailed}] =
        Expect{S::kPending, {A::kCloseAttempt, A::kRecordFailure, A::kBackoff}};
    t[{held, E::kLeaseExpired}] =
        Expect{S::kPending, {A::kCloseAttempt, A::kRecordFailure, A::kBackoff}};
    t[{held, E::kCompleteMachineFailed}] = Expect{
        S::kPending, {A::kCloseAttempt, A::kCountMachineFailure, A::kRecordFailure, A::kBackoff}};
    t[{held, E::kCompleteCancelled}] = Expect{S::kCancelled, {A::kCloseAttempt, A::kFinish}};
    t[{held, E::kCompletePreempted}] = Expect{S::kPending, {A::kCloseAttempt, A::kRefundAttempt}};
    t[{held, E::kCancel}] = Expect{held, {A::kRequestCancel}};
  }
  return t;
}

std::string Name(S s, E e) {
  return std::string(JobStateName(s)) + " x " + std::string(JobEventName(e));
}

TEST(JobStateMachineTest, EveryStateEventPair) {
  const auto table = Table();
  ASSERT_EQ(table.size(), 6u * 9u);
  TransitionInput in{/*counted_attempts=*/1, /*max_attempts=*/3, /*cancel_requested=*/false};
  int legal = 0;
  for (const auto& [pair, expect] : table) {
    SCOPED_TRACE(Name(pair.first, pair.second));
    StatusOr<TransitionResult> got = Transition(pair.first, pair.second, in);
    if (!expect) {
      ASSERT_FALSE(got.ok());
      EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition);
      EXPECT_NE(got.status().message().find(JobStateName(pair.first)), std::string::npos);
      EXPECT_NE(got.status().message().find(JobEventName(pair.second)), std::string::npos);
      continue;
    }
    ++legal;
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->new_state, expect->state);
    EXPECT_EQ(got->actions, expect->actions);
  }
  EXPECT_EQ(legal, 2 + 2 * 8);
}

TEST(JobStateMachineTest, TerminalStatesAcceptNothing) {
  for (S s : {S::kSucceeded, S::kFailed, S::kCancelled}) {
    EXPECT_TRUE(IsTerminal(s));
    for (E e : kAllJobEvents) {
      for (bool cancel : {false, true}) {
        StatusOr<TransitionResult> got = Transition(s, e, {0, 1, cancel});
        EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition) << Name(s, e);
      }
    }
  }
  for (S s : {S::kPending, S::kLeased, S::kRunning}) EXPECT_FALSE(IsTerminal(s));
}

TEST(JobStateMachineTest, FailureOrExpiryAfterLastAttemptIsFailed) {
  for (S held : {S::kLeased, S::kRunning}) {
    for (E e : {E::kCompleteFailed, E::kLeaseExpired}) {
      SCOPED_TRACE(Name(held, e));
      // attempts < max: retry
      StatusOr<TransitionResult> retry = Transition(held, e, {2, 3, false});
      ASSERT_TRUE(retry.ok());
      EXPECT_EQ(retry->new_state, S::kPending);
      // attempts == max: FAILED with the reason recorded
      StatusOr<TransitionResult> last = Transition(held, e, {3, 3, false});
      ASSERT_TRUE(last.ok());
      EXPECT_EQ(last->new_state, S::kFailed);
      EXPECT_EQ(last->actions, (std::vector<A>{A::kCloseAttempt, A::kRecordFailure, A::kFinish}));
      // max_attempts 1: the first failure is final
      StatusOr<TransitionResult> once = Transition(held, e, {1, 1, false});
      ASSERT_TRUE(once.ok());
      EXPECT_EQ(once->new_state, S::kFailed);
    }
  }
}

TEST(JobStateMachineTest, PendingCancelTurnsEveryEndIntoCancelled) {
  for (S held : {S::kLeased, S::kRunning}) {
    for (E e : {E::kCompleteFailed, E::kLeaseExpired, E::kCompletePreempted, E::kCompleteCancelled,
                E::kCompleteMachineFailed}) {
      SCOPED_TRACE(Name(held, e));
      StatusOr<TransitionResult> got = Transition(held, e, {1, 3, true});
      ASSERT_TRUE(got.ok());
      EXPECT_EQ(got->new_state, S::kCancelled);
      EXPECT_EQ(got->actions, (std::vector<A>{A::kCloseAttempt, A::kFinish}));
    }
    // A run that finished anyway is a success.
    StatusOr<TransitionResult> ok = Transition(held, E::kCompleteSucceeded, {1, 3, true});
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(ok->new_state, S::kSucceeded);
    // A second cancel is harmless.
    StatusOr<TransitionResult> again = Transition(held, E::kCancel, {1, 3, true});
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->new_state, held);
  }
}

TEST(JobStateMachineTest, PreemptionDoesNotCountEvenAtTheLastAttempt) {
  StatusOr<TransitionResult> got = Transition(S::kRunning, E::kCompletePreempted, {3, 3, false});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->new_state, S::kPending);
  EXPECT_EQ(got->actions, (std::vector<A>{A::kCloseAttempt, A::kRefundAttempt}));
}

// A machine failure does not use max_attempts, even at the last attempt; it has its own bound
// so that a cluster that fails every start still ends the job.
TEST(JobStateMachineTest, MachineFailureIsNotCountedButBounded) {
  for (S held : {S::kLeased, S::kRunning}) {
    SCOPED_TRACE(JobStateName(held));
    TransitionInput in;
    in.counted_attempts = 3;  // == max_attempts: a job failure now would be final
    in.max_attempts = 3;
    in.machine_failures = 0;
    in.max_machine_failures = 30;
    StatusOr<TransitionResult> got = Transition(held, E::kCompleteMachineFailed, in);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->new_state, S::kPending);
    EXPECT_EQ(got->actions, (std::vector<A>{A::kCloseAttempt, A::kCountMachineFailure,
                                            A::kRecordFailure, A::kBackoff}));
    in.machine_failures = 28;  // this one is the 29th of 30: still retried
    got = Transition(held, E::kCompleteMachineFailed, in);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->new_state, S::kPending);
    in.machine_failures = 29;  // the 30th: the bound is reached
    got = Transition(held, E::kCompleteMachineFailed, in);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->new_state, S::kFailed);
    EXPECT_EQ(got->actions, (std::vector<A>{A::kCloseAttempt, A::kCountMachineFailure,
                                            A::kRecordFailure, A::kFinish}));
  }
  // Not accepted where no attempt is held.
  for (S s : {S::kPending, S::kSucceeded, S::kFailed, S::kCancelled}) {
    EXPECT_EQ(Transition(s, E::kCompleteMachineFailed, {}).status().code(),
              StatusCode::kFailedPrecondition);
  }
}

TEST(JobStateMachineTest, NamesAreDistinct) {
  std::map<std::string_view, int> seen;
  for (S s : kAllJobStates) EXPECT_EQ(seen[JobStateName(s)]++, 0);
  for (E e : kAllJobEvents) EXPECT_EQ(seen[JobEventName(e)]++, 0);
}

// --- sweep state ---

SweepFacts Facts(int pending, int leased, int running, int succeeded, int failed, int cancelled,
                 bool started, bool cancel) {
  SweepFacts f;
  f.pending = pending;
  f.leased = leased;
  f.running = running;
  f.succeeded = succeeded;
  f.failed = failed;
  f.cancelled = cancelled;
  f.total = pending + leased + running + succeeded + failed + cancelled;
  f.any_started = started;
  f.cancel_requested = cancel;
  return f;
}

TEST(SweepStateTest, DerivedFromJobs) {
  struct Case {
    SweepFacts facts;
    SweepState want;
  };
  const Case cases[] = {
      {Facts(4, 0, 0, 0, 0, 0, false, false), SweepState::kPending},
      {Facts(3, 1, 0, 0, 0, 0, true, false), SweepState::kRunning},
      {Facts(3, 0, 1, 0, 0, 0, true, false), SweepState::kRunning},
      {Facts(4, 0, 0, 0, 0, 0, true, false), SweepState::kRunning},  // requeued after an attempt
      {Facts(2, 0, 0, 2, 0, 0, true, false), SweepState::kRunning},
      {Facts(0, 0, 0, 4, 0, 0, true, false), SweepState::kSucceeded},
      {Facts(0, 0, 0, 3, 1, 0, true, false), SweepState::kFailed},
      {Facts(0, 0, 0, 3, 0, 1, true, false), SweepState::kCancelled},
      {Facts(0, 0, 1, 1, 0, 2, true, true), SweepState::kRunning},  // cancel still stopping
      {Facts(0, 0, 0, 1, 1, 2, true, true), SweepState::kCancelled},
      {Facts(0, 0, 0, 0, 0, 4, false, true), SweepState::kCancelled},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(DeriveSweepState(c.facts), c.want)
        << "p" << c.facts.pending << " l" << c.facts.leased << " r" << c.facts.running << " s"
        << c.facts.succeeded << " f" << c.facts.failed << " c" << c.facts.cancelled;
  }
  EXPECT_TRUE(IsTerminal(SweepState::kFailed));
  EXPECT_FALSE(IsTerminal(SweepState::kRunning));
}

}  // namespace
}  // namespace rdattn::coordinator
