// GetReportRequest -> ReportOptions (report_options.h).
#include "coordinator/report_options.h"

#include <cmath>
#include <string>
#include <utility>

namespace rdattn::coordinator {

FieldErrorsOr<ReportOptions> ParseReportOptions(const pb::GetReportRequest& req) {
  FieldErrors errors("GetReportRequest");
  if (req.sweep_id().empty()) errors.Add("sweep_id", "required");
  if (!(req.confidence_level() >= 0 && req.confidence_level() < 1)) {
    errors.Add("confidence_level", "must be in (0, 1), or 0 for 0.95");
  }
  if (req.bootstrap_resamples() < 0 || req.bootstrap_resamples() > kMaxBootstrapResamples) {
    errors.Add("bootstrap_resamples", "must be in [1, " + std::to_string(kMaxBootstrapResamples) +
                                          "], or 0 for " +
                                          std::to_string(kDefaultBootstrapResamples));
  }
  if (!(std::isfinite(req.target_delta_nll()) && req.target_delta_nll() >= 0)) {
    errors.Add("target_delta_nll", "must be a finite number of nats >= 0 (0: none)");
  }
  ReportOptions options;
  for (int i = 0; i < req.formats_size(); ++i) {
    const std::string& f = req.formats(i);
    if (f != "md" && f != "csv" && f != "json") {
      errors.Add(FieldIndex("formats", static_cast<size_t>(i)),
                 "expected md, csv or json, got '" + f + "'");
    }
    options.formats.insert(f);
  }
  if (!errors.empty()) return std::move(errors).Take();
  options.reference_arm = req.reference_arm();
  options.target_delta = req.target_delta_nll();
  options.omit_files = req.omit_files();
  options.confidence_level =
      req.confidence_level() == 0 ? kDefaultConfidenceLevel : req.confidence_level();
  options.bootstrap_resamples =
      req.bootstrap_resamples() == 0 ? kDefaultBootstrapResamples : req.bootstrap_resamples();
  return options;
}

}  // namespace rdattn::coordinator
