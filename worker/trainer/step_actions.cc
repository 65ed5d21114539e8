#include "worker/trainer/step_actions.h"

namespace rdattn::trainer {

StepActions After(int64_t completed, const ScheduleConfig& schedule,
                  const CheckpointConfig& checkpoint, StopVote stop) {
  StepActions out;
  const bool writes = !checkpoint.dir.empty();
  bool evaluated = false, checkpointed = false;
  auto evaluate = [&](int64_t tokens) {
    out.actions.push_back({StepAction::Kind::kEvaluate, tokens});
    evaluated = true;
  };
  auto write_checkpoint = [&] {
    if (writes) out.actions.push_back({StepAction::Kind::kCheckpoint, 0});
    checkpointed = true;
  };
  for (size_t i = 0; i < schedule.milestone_steps.size() && i < schedule.milestones_tokens.size();
       ++i) {
    if (schedule.milestone_steps[i] != completed) continue;
    evaluate(schedule.milestones_tokens[i]);
    write_checkpoint();
  }
  if (completed == schedule.stop_step) {
    if (!evaluated) evaluate(completed * schedule.global_batch_tokens);
    if (!checkpointed) write_checkpoint();
    out.then = AfterStep::kFinish;
    return out;
  }
  if (!checkpointed && checkpoint.every_steps > 0 && completed % checkpoint.every_steps == 0)
    write_checkpoint();
  if (stop == StopVote::kStop) {
    if (!checkpointed) write_checkpoint();
    out.then = AfterStep::kPreempt;
  }
  return out;
}

std::string Describe(const StepActions& actions) {
  std::string out;
  for (const StepAction& a : actions.actions) {
    if (!out.empty()) out += ", ";
    out += a.kind == StepAction::Kind::kEvaluate ? "evaluate " + std::to_string(a.milestone_tokens)
                                                 : "checkpoint";
  }
  const char* then = actions.then == AfterStep::kFinish    ? "finish"
                     : actions.then == AfterStep::kPreempt ? "preempt"
                                                           : "";
  if (*then != '\0') out += (out.empty() ? "" : ", ") + std::string(then);
  return out.empty() ? "continue" : out;
}

}  // namespace rdattn::trainer
