// stats::ReportTables -> pb::Report (report_proto.h): one Fill function per row type.
#include "coordinator/report_proto.h"

#include <cmath>
#include <limits>
#include <string>

#include "coordinator/proto_convert.h"

namespace rdattn::coordinator {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

pb::HardwareKind HardwareKindOfLabel(const std::string& label) {
  if (label == "CPU") return pb::HARDWARE_KIND_CPU;
  if (label == "GPU") return pb::HARDWARE_KIND_GPU;
  return pb::HARDWARE_KIND_UNSPECIFIED;
}

pb::JobState JobStateOf(stats::RunState state) {
  switch (state) {
    case stats::RunState::kPending:
      return pb::JOB_STATE_PENDING;
    case stats::RunState::kLeased:
      return pb::JOB_STATE_LEASED;
    case stats::RunState::kRunning:
      return pb::JOB_STATE_RUNNING;
    case stats::RunState::kSucceeded:
      return pb::JOB_STATE_SUCCEEDED;
    case stats::RunState::kFailed:
      return pb::JOB_STATE_FAILED;
    case stats::RunState::kCancelled:
      return pb::JOB_STATE_CANCELLED;
    case stats::RunState::kUnknown:
      break;
  }
  return pb::JOB_STATE_UNSPECIFIED;
}

double Defined(bool defined, double v) { return defined ? v : kNaN; }

void FillRow(const stats::PairedRow& in, pb::PairedRow* out) {
  const stats::PairedSummary& s = in.summary;
  out->set_scale(in.scale);
  out->set_milestone_tokens(in.milestone_tokens);
  out->set_arm(in.arm);
  out->set_reference_arm(in.reference_arm);
  out->set_n(s.n);
  out->set_mean_reference_nll(in.mean_reference_nll);
  out->set_mean_arm_nll(in.mean_arm_nll);
  out->set_mean_delta_nll(s.n > 0 ? s.mean : kNaN);
  out->set_sd_delta_nll(s.n > 1 ? s.sd : kNaN);
  out->set_t_ci_low(Defined(s.t_ci_defined, s.t_ci_low));
  out->set_t_ci_high(Defined(s.t_ci_defined, s.t_ci_high));
  out->set_bootstrap_ci_low(Defined(s.bootstrap_ci_defined, s.bootstrap_ci_low));
  out->set_bootstrap_ci_high(Defined(s.bootstrap_ci_defined, s.bootstrap_ci_high));
  out->set_wins(s.wins);
  out->set_ties(s.ties);
  out->set_losses(s.losses);
  out->set_sign_test_p(s.sign_test_p);
  out->set_t_test_p(Defined(s.t_test_defined, s.t_test_p));
  out->set_t_statistic(Defined(s.t_test_defined, s.t_statistic));
  out->set_t_critical(Defined(s.t_ci_defined, s.t_critical));
  out->set_ppl_change_of_mean_delta(s.n > 0 ? s.ppl_change_of_mean : kNaN);
  out->set_mean_ppl_change(s.n > 0 ? s.ppl_change_mean_per_seed : kNaN);
  out->set_is_control(in.kind != "main");
  out->set_n_expected(in.n_expected);
  out->set_split(in.split);
  out->set_kind(in.kind);
  out->set_note(s.note);
  for (const stats::SeedPair& p : in.pairs) {
    pb::SeedDelta* d = out->add_pairs();
    d->set_seed(p.seed);
    d->set_reference_nll(p.reference_nll);
    d->set_arm_nll(p.arm_nll);
    d->set_delta_nll(p.complete ? p.delta : kNaN);
    d->set_ppl_change(p.complete ? -p.ppl_reduction : kNaN);
    d->set_reference_job_id(p.reference_job_id);
    d->set_arm_job_id(p.arm_job_id);
    d->set_complete(p.complete);
    d->set_missing_reason(p.missing_reason);
    d->set_robust_z(p.robust_z);
    d->set_outlier(p.outlier);
  }
  out->set_power_alpha(in.power.alpha);
  out->set_power(in.power.power);
  out->set_mde_nll(in.power.mde);
  for (const stats::SeedsForDelta& e : in.power.seeds_needed) {
    pb::SeedsNeeded* n = out->add_seeds_needed();
    n->set_delta_nll(e.delta);
    n->set_user_given(e.user_given);
    n->set_seeds(e.seeds);
    n->set_power_at_n(e.power_at_n);
  }
  out->set_median_delta_nll(in.robust.median);
  out->set_mad_scaled_delta_nll(in.robust.mad_scaled);
  out->set_wilcoxon_n(in.robust.wilcoxon.n);
  out->set_wilcoxon_w_plus(in.robust.wilcoxon.w_plus);
  out->set_wilcoxon_p(in.robust.wilcoxon.p);
  out->set_wilcoxon_exact(in.robust.wilcoxon.exact);
  for (uint64_t seed : in.outlier_seeds) out->add_outlier_seeds(seed);
}

void FillTrend(const stats::TrendRow& in, pb::TrendRow* out) {
  const stats::TrendSummary& s = in.summary;
  out->set_scale(in.scale);
  out->set_arm(in.arm);
  out->set_reference_arm(in.reference_arm);
  for (int64_t m : in.milestones) out->add_milestone_tokens(m);
  out->set_n(s.n);
  out->set_n_expected(static_cast<int32_t>(in.seeds.size()));
  out->set_mean_slope(s.mean);
  out->set_sd_slope(s.sd);
  out->set_t_critical(s.t_critical);
  out->set_ci_low(s.ci_low);
  out->set_ci_high(s.ci_high);
  out->set_t_statistic(s.t_statistic);
  out->set_t_test_p(s.t_test_p);
  out->set_gap_nll(in.gap);
  out->set_gap_milestone_tokens(in.gap_milestone_tokens);
  out->set_reading(s.reading);
  out->set_note(s.note);
  for (const stats::TrendSeed& ts : in.seeds) {
    pb::TrendSeed* seed = out->add_seeds();
    seed->set_seed(ts.seed);
    for (int64_t m : ts.milestones) seed->add_milestone_tokens(m);
    for (double d : ts.deltas) seed->add_delta_nll(d);
    seed->set_slope(ts.slope);
  }
}

void FillJs(const stats::DepthRow& in, pb::JsRow* out) {
  out->set_scale(in.scale);
  out->set_arm(in.arm);
  out->set_milestone_tokens(in.milestone_tokens);
  out->set_n(in.n);
  out->set_has_js(in.has_js);
  for (const stats::DepthLayer& l : in.layers) {
    out->add_mean_js_nats_by_layer(l.js_nats_mean);
    out->add_sd_js_nats_by_layer(l.js_nats_sd);
    out->add_mean_js_bits_by_layer(l.js_bits_mean);
    out->add_mean_js_sqrt_by_layer(l.js_sqrt_mean);
    out->add_mean_route_entropy_qk_nats_by_layer(l.entropy_qk_mean);
    out->add_mean_route_entropy_v_nats_by_layer(l.entropy_v_mean);
    out->add_sources_by_layer(l.sources);
    out->add_n_by_layer(l.n);
  }
  out->set_mean_js_nats(in.js_mean_nats);
  out->set_sd_js_nats(in.js_mean_nats_sd);
  out->set_mean_js_bits(in.js_mean_bits);
  out->set_mean_js_sqrt(in.js_mean_sqrt);
  out->set_mean_js_multi_source_nats(in.js_mean_multi_source_nats);
}

int64_t RoundBytes(double v) { return std::isfinite(v) ? std::llround(v) : 0; }

void FillCost(const stats::CostRow& in, pb::CostRow* out) {
  out->set_scale(in.scale);
  out->set_arm(in.arm);
  out->set_reference_arm(in.reference_arm);
  out->set_hardware_kind(HardwareKindOfLabel(in.hardware_kind));
  out->set_n(in.n_throughput);
  out->set_mean_tokens_per_second(in.mean_arm_tokens_per_second);
  out->set_reference_mean_tokens_per_second(in.mean_reference_tokens_per_second);
  out->set_tokens_per_second_ratio(in.tokens_per_second_ratio);
  out->set_tokens_per_second_ratio_min(in.tokens_per_second_ratio_min);
  out->set_tokens_per_second_ratio_max(in.tokens_per_second_ratio_max);
  out->set_n_memory(in.n_memory);
  out->set_peak_memory_bytes(RoundBytes(in.mean_arm_peak_memory_bytes));
  out->set_reference_peak_memory_bytes(RoundBytes(in.mean_reference_peak_memory_bytes));
  out->set_peak_memory_ratio(in.peak_memory_ratio);
  out->set_peak_memory_ratio_min(in.peak_memory_ratio_min);
  out->set_peak_memory_ratio_max(in.peak_memory_ratio_max);
}

}  // namespace

pb::Report ReportToProto(const stats::ReportTables& t, int64_t now_us) {
  pb::Report report;
  report.set_sweep_id(t.sweep_id);
  report.set_sweep_name(t.sweep_name);
  report.set_reference_arm(t.reference_arm);
  report.set_confidence_level(t.level);
  report.set_bootstrap_resamples(t.bootstrap_resamples);
  report.set_bootstrap_seed(t.bootstrap_seed);
  report.set_complete(t.complete);
  report.set_jobs_total(t.jobs_total);
  report.set_jobs_ended(t.jobs_ended);
  for (const stats::PairedRow& row : t.paired) FillRow(row, report.add_rows());
  for (const stats::PairedRow& row : t.controls) FillRow(row, report.add_rows());
  for (const stats::TrendRow& row : t.trend) FillTrend(row, report.add_trend_rows());
  report.set_target_delta_nll(std::isfinite(t.target_delta) ? std::fabs(t.target_delta) : 0.0);
  for (const stats::DepthRow& row : t.depth) FillJs(row, report.add_js_rows());
  for (const stats::CostRow& row : t.cost) FillCost(row, report.add_cost_rows());
  for (const stats::MissingEntry& m : t.missing) {
    pb::MissingEntry* out = report.add_missing();
    out->set_scale(m.scale);
    out->set_seed(m.seed);
    out->set_arm(m.arm);
    out->set_milestone_tokens(m.milestone_tokens);
    out->set_job_id(m.job_id);
    out->set_job_state(JobStateOf(m.job_state));
    out->set_reason(m.reason);
    out->set_split(m.split);
  }
  for (const std::string& n : t.notes) report.add_notes(n);
  SetTimestamp(now_us, report.mutable_generate_time());
  return report;
}

}  // namespace rdattn::coordinator
