// Where a run resumes (docs/trainer.md "Checkpoints"): which checkpoint, and which milestones at
// or before it must be evaluated again because their evaluation is not stored. Reads checkpoint
// metadata only; loading the chosen checkpoint is the caller's.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "runspec/run_config.h"
#include "worker/trainer/checkpoint.h"

namespace rdattn::trainer {

struct ResumePlan {
  std::string path;                    // "" : from scratch
  std::vector<EvalMilestone> missing;  // at or before the resume step, evaluation not stored
};

// Chooses the checkpoint to resume from: the explicit checkpoint.resume_from (used as is), else
// the newest that reads among the directory's and the coordinator's. A milestone before it
// whose evaluation is missing needs its own checkpoint; if that is gone, the run resumes from
// an earlier checkpoint (and trains through the milestone again) instead. `self` is this run's
// metadata (its fingerprint is compared); every problem the run goes on after is appended to
// `warnings`. FAILED_PRECONDITION for a checkpoint of a run with another numeric fingerprint.
StatusOr<ResumePlan> PlanResume(const RunConfig& cfg, const CheckpointMeta& self,
                                const std::vector<EvalMilestone>& milestones,
                                std::vector<std::string>* warnings);

}  // namespace rdattn::trainer
