// The training loop's decisions after a step (worker/trainer/step_actions.h), as one table:
// milestones, checkpoint cadence, the final step, the stop vote, and their combinations.
#include "worker/trainer/step_actions.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rdattn::trainer {
namespace {

// 40 steps of 512 tokens; milestones at 5,120 and 10,240 tokens (steps 10 and 20).
ScheduleConfig Schedule() {
  ScheduleConfig s;
  s.global_batch_tokens = 512;
  s.total_tokens = 40 * 512;
  s.total_steps = 40;
  s.stop_step = 40;
  s.milestones_tokens = {10 * 512, 20 * 512};
  s.milestone_steps = {10, 20};
  return s;
}

CheckpointConfig Checkpoints(int64_t every_steps, const std::string& dir = "ckpt") {
  CheckpointConfig c;
  c.dir = dir;
  c.every_steps = every_steps;
  return c;
}

struct Row {
  std::string name;
  int64_t completed;
  ScheduleConfig schedule;
  CheckpointConfig checkpoint;
  StopVote stop;
  std::string want;
};

TEST(StepActionsTest, Table) {
  const StopVote go = StopVote::kContinue, stop = StopVote::kStop;
  ScheduleConfig last_is_milestone = Schedule();
  last_is_milestone.milestones_tokens = {10 * 512, 40 * 512};
  last_is_milestone.milestone_steps = {10, 40};
  ScheduleConfig shared_step = Schedule();  // two milestones inside one batch: both at step 1
  shared_step.milestones_tokens = {100, 200, 20 * 512};
  shared_step.milestone_steps = {1, 1, 20};
  // stop_at_tokens: the run ends at step 15, before the milestone of step 20 (never reached: the
  // loop stops at the stop step).
  ScheduleConfig stopped_early = Schedule();
  stopped_early.stop_step = 15;
  ScheduleConfig no_milestones = Schedule();
  no_milestones.milestones_tokens.clear();
  no_milestones.milestone_steps.clear();

  const std::vector<Row> rows = {
      // An ordinary step.
      {"plain step", 3, Schedule(), Checkpoints(0), go, "continue"},
      {"first step", 1, Schedule(), Checkpoints(0), go, "continue"},
      // Milestones: evaluate, then checkpoint.
      {"milestone", 10, Schedule(), Checkpoints(0), go, "evaluate 5120, checkpoint"},
      {"second milestone", 20, Schedule(), Checkpoints(0), go, "evaluate 10240, checkpoint"},
      {"milestone, no checkpoint dir", 10, Schedule(), Checkpoints(0, ""), go, "evaluate 5120"},
      {"two milestones in one step", 1, shared_step, Checkpoints(0), go,
       "evaluate 100, checkpoint, evaluate 200, checkpoint"},
      // Cadence.
      {"cadence", 7, Schedule(), Checkpoints(7), go, "checkpoint"},
      {"cadence, not due", 8, Schedule(), Checkpoints(7), go, "continue"},
      {"cadence 1", 3, Schedule(), Checkpoints(1), go, "checkpoint"},
      {"cadence on a milestone: one checkpoint", 10, Schedule(), Checkpoints(5), go,
       "evaluate 5120, checkpoint"},
      {"cadence, no checkpoint dir", 7, Schedule(), Checkpoints(7, ""), go, "continue"},
      // The final step: evaluated (at its own tokens unless a milestone), checkpointed, finish.
      {"final step", 40, Schedule(), Checkpoints(0), go, "evaluate 20480, checkpoint, finish"},
      {"final step is a milestone", 40, last_is_milestone, Checkpoints(0), go,
       "evaluate 20480, checkpoint, finish"},
      {"final step on the cadence", 40, Schedule(), Checkpoints(8), go,
       "evaluate 20480, checkpoint, finish"},
      {"final step, no checkpoint dir", 40, Schedule(), Checkpoints(0, ""), go,
       "evaluate 20480, finish"},
      {"final step, no milestones", 40, no_milestones, Checkpoints(0), go,
       "evaluate 20480, checkpoint, finish"},
      {"stop_at_tokens: the stop step is the final step", 15, stopped_early, Checkpoints(0), go,
       "evaluate 7680, checkpoint, finish"},
      // The stop vote: checkpoint (once), then preempt; at the final step it finishes instead.
      {"stop", 3, Schedule(), Checkpoints(0), stop, "checkpoint, preempt"},
      {"stop, no checkpoint dir", 3, Schedule(), Checkpoints(0, ""), stop, "preempt"},
      {"stop on a milestone", 10, Schedule(), Checkpoints(0), stop,
       "evaluate 5120, checkpoint, preempt"},
      {"stop on the cadence", 14, Schedule(), Checkpoints(7), stop, "checkpoint, preempt"},
      {"stop off the cadence", 15, Schedule(), Checkpoints(7), stop, "checkpoint, preempt"},
      {"stop on a milestone and the cadence", 20, Schedule(), Checkpoints(5), stop,
       "evaluate 10240, checkpoint, preempt"},
      {"stop at the final step finishes", 40, Schedule(), Checkpoints(0), stop,
       "evaluate 20480, checkpoint, finish"},
      {"stop at a final milestone step finishes", 40, last_is_milestone, Checkpoints(4), stop,
       "evaluate 20480, checkpoint, finish"},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(Describe(After(r.completed, r.schedule, r.checkpoint, r.stop)), r.want)
        << r.name << " (step " << r.completed << ")";
  }
}

TEST(StepActionsTest, EveryStepOfARunInOrder) {
  // The whole 40-step run with checkpoints every 15 steps and a stop vote nowhere: the steps
  // that act, and nothing else.
  std::vector<std::string> acted;
  for (int64_t step = 1; step <= 40; ++step) {
    const StepActions a = After(step, Schedule(), Checkpoints(15), StopVote::kContinue);
    if (a.actions.empty() && a.then == AfterStep::kContinue) continue;
    acted.push_back(std::to_string(step) + ": " + Describe(a));
  }
  EXPECT_EQ(acted, (std::vector<std::string>{"10: evaluate 5120, checkpoint", "15: checkpoint",
                                             "20: evaluate 10240, checkpoint", "30: checkpoint",
                                             "40: evaluate 20480, checkpoint, finish"}));
}

TEST(StepActionsTest, ActionsCarryTheirKindAndMilestone) {
  const StepActions a = After(10, Schedule(), Checkpoints(0), StopVote::kStop);
  ASSERT_EQ(a.actions.size(), 2u);
  EXPECT_EQ(a.actions[0].kind, StepAction::Kind::kEvaluate);
  EXPECT_EQ(a.actions[0].milestone_tokens, 5120);
  EXPECT_EQ(a.actions[1].kind, StepAction::Kind::kCheckpoint);
  EXPECT_EQ(a.then, AfterStep::kPreempt);
}

}  // namespace
}  // namespace rdattn::trainer
