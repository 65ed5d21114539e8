// The paired report of a sweep (GetReport), built from stored data only (no store access, no
// clock), in three steps, each in a file of its own:
//   report_input.h  the store's rows (ReportSource) -> stats::ReportInput, one RunResult per job;
//                   the statistics library builds the tables (coordinator/stats/tables.h)
//   report_proto.h  the tables -> the pb::Report message (docs/report.md, "Mapping to proto")
//   report_files.h  unless asked not to, the files: report.md with four PNG plots drawn by
//                   gnuplot in a temporary folder (removed afterwards), the CSVs and report.json
// BuildReport, here, is the one entry point. Missing data is listed in Report.missing, never
// dropped.
//
// Core::GetReport copies a ReportSource under its mutex and calls BuildReport without it, so a
// long bootstrap or a slow gnuplot never blocks the other handlers. The gnuplot binary and the
// temporary folder's parent come in ReportOptions, set by rdattn-coordinator from --gnuplot
// (resolved once at startup) and --report-temp-dir: BuildReport reads no environment.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "coordinator/report_input.h"  // ReportSource, and the input's helpers callers use
#include "rdattn/v1/coordinator.pb.h"

namespace rdattn::coordinator {

inline constexpr double kDefaultConfidenceLevel = 0.95;
inline constexpr int kDefaultBootstrapResamples = 10000;
inline constexpr int kMaxBootstrapResamples = 1000000;

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

// The whole GetReport answer. Never fails: a rendering problem (gnuplot missing, no temporary
// folder) leaves the images out, says so in report.md and in `warning`.
pb::GetReportResponse BuildReport(const ReportSource& source, const ReportOptions& options);

}  // namespace rdattn::coordinator
