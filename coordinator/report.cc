// BuildReport: store rows -> stats::ReportInput (report_input.h) -> ReportTables
// (stats/tables.h) -> pb::Report (report_proto.h) + rendered files (report_files.h); see
// report.h and docs/report.md.
#include "coordinator/report.h"

#include <cmath>

#include "coordinator/report_files.h"
#include "coordinator/report_proto.h"

namespace rdattn::coordinator {

pb::GetReportResponse BuildReport(const ReportSource& source, const ReportOptions& options) {
  stats::ReportInput in = MakeStatsInput(source, options.reference_arm);
  if (options.target_delta > 0.0 && std::isfinite(options.target_delta)) {
    in.target_delta = options.target_delta;
  }
  stats::ReportTables tables =
      stats::BuildTables(in, ReportBootstrapSeed(source.sweep.id), options.bootstrap_resamples,
                         options.confidence_level);
  if (source.sequential) tables.sequential = SequentialSectionOf(*source.sequential);
  pb::GetReportResponse resp;
  *resp.mutable_report() = ReportToProto(tables, options.now_us);
  if (source.sequential) *resp.mutable_report()->mutable_sequential() = *source.sequential;
  if (options.omit_files) return resp;

  AddReportFiles(tables, options, resp);
  return resp;
}

}  // namespace rdattn::coordinator
