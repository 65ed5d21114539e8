// What the training loop does after an optimizer step (docs/architecture.md "The training loop"):
// evaluate at a milestone, checkpoint, finish or stop early. A pure function of the step, the
// schedule, the checkpoint config and the ranks' stop vote, so that the loop reads top to bottom
// and the policy is table-tested (tests/trainer/step_actions_test.cc). Plain C++17: no LibTorch,
// no I/O; the loop carries the actions out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runspec/run_config.h"

namespace rdattn::trainer {

struct StepAction {
  enum class Kind { kEvaluate, kCheckpoint };
  Kind kind = Kind::kEvaluate;
  int64_t milestone_tokens = 0;  // kEvaluate: what KIND_EVAL's milestone_tokens says
};

// After the actions: train on, end the run (FINISHED), or end it early (exit 75, resumable).
enum class AfterStep { kContinue, kFinish, kPreempt };

struct StepActions {
  std::vector<StepAction> actions;  // in the order the loop runs them
  AfterStep then = AfterStep::kContinue;
};

// The ranks' agreement on stopping early (SIGTERM on any rank, or --stop-after-steps).
enum class StopVote { kContinue, kStop };

// The actions after step `completed` (1-based: optimizer steps done). The rules, in order:
//  - each milestone reached at this step (schedule.milestone_steps[i] == completed): evaluate it
//    (milestones_tokens[i]), then checkpoint;
//  - the stop step (schedule.stop_step): evaluate it at its own token count unless a milestone
//    was just evaluated, checkpoint unless one was just written, and finish — a stop vote at
//    the stop step finishes the run;
//  - otherwise, every checkpoint.every_steps steps (> 0): checkpoint unless one was just written;
//  - on a stop vote: checkpoint unless one was just written, and preempt.
// No checkpoint action when checkpoint.dir is empty (the run writes none). An evaluation is
// listed even when the run has no validation windows: the loop skips it then.
StepActions After(int64_t completed, const ScheduleConfig& schedule,
                  const CheckpointConfig& checkpoint, StopVote stop);

// "evaluate 5120, checkpoint, finish": the actions in words, for test tables and messages.
std::string Describe(const StepActions& actions);

}  // namespace rdattn::trainer
