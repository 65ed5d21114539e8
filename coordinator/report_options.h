// GetReportRequest -> ReportOptions: the checks of a report request's fields, each problem a
// field error (docs/coordinator.md "Reports").
#pragma once

#include "common/field_error.h"
#include "coordinator/report.h"
#include "rdattn/v1/coordinator.pb.h"

namespace rdattn::coordinator {

// The options a GetReport request asks for: reference_arm, confidence_level (0: 0.95),
// bootstrap_resamples (0: 10,000), target_delta_nll, formats and omit_files. Every field out of
// range is one field error, in the request's field order:
//   sweep_id: required
//   confidence_level: must be in (0, 1), or 0 for 0.95
//   bootstrap_resamples: must be in [1, 1000000], or 0 for 10000
//   target_delta_nll: must be a finite number of nats >= 0 (0: none)
//   formats[i]: expected md, csv or json, got '...'
// What the request does not say keeps ReportOptions' defaults (gnuplot binary, temporary folder,
// now_us): the caller sets them. Whether reference_arm is an arm of the sweep needs the sweep,
// so the caller checks that too.
FieldErrorsOr<ReportOptions> ParseReportOptions(const pb::GetReportRequest& req);

}  // namespace rdattn::coordinator
