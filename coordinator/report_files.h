// The report's files (GetReportResponse.files) rendered from its tables: report.md with the
// plots/ gnuplot draws in a temporary folder (removed afterwards), the CSVs and report.json, in
// that order, each only when ReportOptions.formats asks for it. Called by report.h's BuildReport.
#pragma once

#include "coordinator/report.h"
#include "coordinator/stats/tables.h"
#include "rdattn/v1/coordinator.pb.h"

namespace rdattn::coordinator {

// Appends the files to resp.files. Never fails: when the plots cannot be drawn (no gnuplot, no
// temporary folder), report.md says why, resp.warning too, and the other files still come.
void AddReportFiles(const stats::ReportTables& tables, const ReportOptions& options,
                    pb::GetReportResponse& resp);

}  // namespace rdattn::coordinator
