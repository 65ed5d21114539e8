// The report's tables as proto messages: stats::ReportTables -> pb::Report (docs/report.md,
// "Mapping to proto"). Undefined numbers are NaN. Called by report.h's BuildReport.
#pragma once

#include <cstdint>

#include "coordinator/stats/tables.h"
#include "rdattn/v1/sweep.pb.h"

namespace rdattn::coordinator {

namespace pb = ::rdattn::v1;

pb::Report ReportToProto(const stats::ReportTables& tables, int64_t now_us);

}  // namespace rdattn::coordinator
