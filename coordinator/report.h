// The paired report of a sweep, built from stored data only (no store access, no clock):
// for each scale, each evaluation milestone and each compared arm, per seed the validation
// NLL of the arm and of its reference (the sweep's reference arm, or a control's parent arm)
// and their difference. Cells that cannot be filled are listed in Report.missing, never
// dropped. This version fills n, the means, the mean delta, its sample sd, wins/ties and the
// perplexity changes; the intervals and tests (t, bootstrap, sign) come with the full report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/store.h"
#include "rdattn/v1/sweep.pb.h"

namespace rdattn::coordinator {

struct ReportInput {
  SweepRow sweep;
  std::vector<JobRow> jobs;          // every job of the sweep, in creation order
  std::vector<EventRow> eval_events;  // the sweep's KIND_EVAL metric events, in seq order
  std::string reference_arm;          // empty: the sweep's, else "block"
  double confidence_level = 0.95;
  int bootstrap_resamples = 0;
  int64_t now_us = 0;  // Report.generate_time
};

// Milestones (tokens) at which a job's run evaluates: its configured milestones reached
// before it stops, and the last step (docs/trainer.md). Empty when the RunSpec does not parse.
std::vector<int64_t> ExpectedMilestones(const pb::RunSpec& run);

pb::Report BuildReport(const ReportInput& input);

}  // namespace rdattn::coordinator
