// The paired report of a sweep (GetReport), built from stored data only (no store access, no
// clock): the store's rows become a stats::ReportInput (one RunResult per job), the statistics
// library builds the tables (coordinator/stats/tables.h, docs/report.md), and they are turned
// into the pb::Report message and, unless asked not to, rendered into files: report.md with
// four PNG plots drawn by gnuplot in a temporary folder (removed afterwards), the CSV files and
// report.json. Missing data is listed in Report.missing, never dropped.
//
// Core::GetReport copies a ReportSource under its mutex and calls BuildReport without it, so a
// long bootstrap or a slow gnuplot never blocks the other handlers. The gnuplot binary and the
// temporary folder's parent come in ReportOptions, set by rdattn-coordinator from --gnuplot
// (resolved once at startup) and --report-temp-dir: BuildReport reads no environment.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/stats/tables.h"
#include "coordinator/store.h"
#include "rdattn/v1/coordinator.pb.h"
#include "rdattn/v1/sweep.pb.h"

namespace rdattn::coordinator {

inline constexpr double kDefaultConfidenceLevel = 0.95;
inline constexpr int kDefaultBootstrapResamples = 10000;
inline constexpr int kMaxBootstrapResamples = 1000000;

// What the report is built from: a copy of the store's rows.
struct ReportSource {
  SweepRow sweep;
  std::vector<JobRow> jobs;  // every job of the sweep, in creation order
  // The sweep's metric events of kinds INIT, TRAIN_STEP, EVAL and FINISHED, in seq order
  // (other kinds are ignored).
  std::vector<EventRow> events;
  std::optional<pb::SequentialState> sequential;  // with a seed policy: its design and looks
};

struct ReportOptions {
  std::string reference_arm;  // empty: the sweep's (SweepSpec.reference_arm, else "block")
  double confidence_level = kDefaultConfidenceLevel;
  int bootstrap_resamples = kDefaultBootstrapResamples;
  // A |Δ| in nats whose seeds needed every row reports besides 0.01, 0.02 and 0.03
  // (GetReportRequest.target_delta_nll); 0: none.
  double target_delta = 0;
  int64_t now_us = 0;  // Report.generate_time
  // Files to render: "md" (report.md and plots/), "csv", "json"; empty: all three.
  std::set<std::string> formats;
  bool omit_files = false;  // only the Report message
  // The gnuplot executable. rdattn-coordinator passes the absolute path it resolved at startup
  // (stats::FindGnuplot), so no report searches PATH; a bare name (this default, for tests and
  // tools) is looked up in PATH when the plots are drawn. Empty: no plots (report.md and
  // `warning` say why).
  std::string gnuplot_binary = "gnuplot";
  // Parent of the temporary plot folder (rdattn-coordinator: --report-temp-dir, whose default
  // is $TMPDIR, read once in main); empty: /tmp.
  std::string temp_parent = "/tmp";
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

// ReportTables -> pb::Report (docs/report.md, "Mapping to proto"). Undefined numbers are NaN.
pb::Report ReportToProto(const stats::ReportTables& tables, int64_t now_us);

// The whole GetReport answer. Never fails: a rendering problem (gnuplot missing, no temporary
// folder) leaves the images out, says so in report.md and in `warning`.
pb::GetReportResponse BuildReport(const ReportSource& source, const ReportOptions& options);

}  // namespace rdattn::coordinator
