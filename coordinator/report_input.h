// The report's input: a sweep's stored rows (ReportSource) become the statistics library's
// input, stats::ReportInput (one RunResult per job; coordinator/stats/tables.h, docs/report.md
// "Using it"), and its stored seed policy the report's sequential section. No store access, no
// clock. report.h's BuildReport is the entry point; the milestones and the bootstrap seed are
// also read by the core (a seed policy's look) and the sweep summary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/stats/tables.h"
#include "coordinator/store.h"
#include "rdattn/v1/run_spec.pb.h"
#include "rdattn/v1/sweep.pb.h"

namespace rdattn::coordinator {

// What the report is built from: a copy of the store's rows.
struct ReportSource {
  SweepRow sweep;
  std::vector<JobRow> jobs;  // every job of the sweep, in creation order
  // The sweep's metric events of kinds INIT, TRAIN_STEP, EVAL and FINISHED, in seq order
  // (other kinds are ignored).
  std::vector<EventRow> events;
  std::optional<pb::SequentialState> sequential;  // with a seed policy: its design and looks
};

// The bootstrap seed of a sweep's report: FNV-1a 64 of the sweep id (offset basis
// 0xcbf29ce484222325, prime 0x100000001b3), so every report of a sweep draws the same resamples.
uint64_t ReportBootstrapSeed(const std::string& sweep_id);

// Milestones (tokens) at which a job's run evaluates: its configured milestones reached
// before it stops, and the last step (docs/trainer.md). Empty when the RunSpec does not parse.
std::vector<int64_t> ExpectedMilestones(const pb::RunSpec& run);

// The statistics library's input (docs/report.md "Using it"): scales, arms, seeds and controls
// from the SweepSpec, milestones from the main jobs' schedules, one RunResult per job.
stats::ReportInput MakeStatsInput(const ReportSource& source, const std::string& reference_arm);

// The seed policy's stored state (design and looks) as the report's sequential section,
// rendered with the tables.
stats::SequentialSection SequentialSectionOf(const pb::SequentialState& state);

}  // namespace rdattn::coordinator
