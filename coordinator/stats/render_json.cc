// RenderJson(): the whole report as one JSON document (NaN as null).
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "coordinator/stats/render.h"

namespace rdattn::stats {
namespace {

using Json = nlohmann::ordered_json;

Json Num(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

Json ToJson(const PairedSummary& s) {
  return Json{{"n", s.n},
              {"level", s.level},
              {"mean", Num(s.mean)},
              {"sd", Num(s.sd)},
              {"se", Num(s.se)},
              {"df", s.df},
              {"t_ci_defined", s.t_ci_defined},
              {"t_critical", Num(s.t_critical)},
              {"t_ci_low", Num(s.t_ci_low)},
              {"t_ci_high", Num(s.t_ci_high)},
              {"bootstrap_ci_defined", s.bootstrap_ci_defined},
              {"bootstrap_resamples", s.bootstrap_resamples},
              {"bootstrap_seed", s.bootstrap_seed},
              {"bootstrap_ci_low", Num(s.bootstrap_ci_low)},
              {"bootstrap_ci_high", Num(s.bootstrap_ci_high)},
              {"wins", s.wins},
              {"losses", s.losses},
              {"ties", s.ties},
              {"sign_test_p", Num(s.sign_test_p)},
              {"t_test_defined", s.t_test_defined},
              {"t_statistic", Num(s.t_statistic)},
              {"t_test_p", Num(s.t_test_p)},
              {"ppl_reduction_mean_per_seed", Num(s.ppl_reduction_mean_per_seed)},
              {"ppl_reduction_of_mean", Num(s.ppl_reduction_of_mean)},
              {"ppl_change_mean_per_seed", Num(s.ppl_change_mean_per_seed)},
              {"ppl_change_of_mean", Num(s.ppl_change_of_mean)},
              {"note", s.note}};
}

Json ToJson(const PairedRow& r) {
  Json pairs = Json::array();
  for (const SeedPair& p : r.pairs) {
    pairs.push_back(Json{{"seed", p.seed},
                         {"complete", p.complete},
                         {"reference_nll", Num(p.reference_nll)},
                         {"arm_nll", Num(p.arm_nll)},
                         {"delta", Num(p.delta)},
                         {"ppl_reduction", Num(p.ppl_reduction)},
                         {"reference_job_id", p.reference_job_id},
                         {"arm_job_id", p.arm_job_id},
                         {"missing_reason", p.missing_reason},
                         {"robust_z", Num(p.robust_z)},
                         {"outlier", p.outlier}});
  }
  Json seeds_needed = Json::array();
  for (const SeedsForDelta& e : r.power.seeds_needed) {
    seeds_needed.push_back(Json{{"delta", e.delta},
                                {"user_given", e.user_given},
                                {"seeds", e.seeds == 0 ? Json(nullptr) : Json(e.seeds)},
                                {"power_at_n", Num(e.power_at_n)}});
  }
  const WilcoxonResult& w = r.robust.wilcoxon;
  Json power{{"defined", r.power.defined},
             {"alpha", Num(r.power.alpha)},
             {"power", r.power.power},
             {"mde", Num(r.power.mde)},
             {"mde_ncp", Num(r.power.mde_ncp)},
             {"seeds_needed", seeds_needed},
             {"note", r.power.note}};
  Json robust{{"median", Num(r.robust.median)},
              {"mad", Num(r.robust.mad)},
              {"mad_scaled", Num(r.robust.mad_scaled)},
              {"wilcoxon", Json{{"n", w.n},
                                {"zeros", w.zeros},
                                {"w_plus", w.w_plus},
                                {"exact", w.exact},
                                {"tied_ranks", w.tied_ranks},
                                {"p", Num(w.p)}}},
              {"outlier_seeds", r.outlier_seeds}};
  return Json{{"kind", r.kind},
              {"scale", r.scale},
              {"split", r.split},
              {"milestone_tokens", r.milestone_tokens},
              {"arm", r.arm},
              {"reference_arm", r.reference_arm},
              {"n", r.summary.n},
              {"n_expected", r.n_expected},
              {"mean_reference_nll", Num(r.mean_reference_nll)},
              {"mean_arm_nll", Num(r.mean_arm_nll)},
              {"summary", ToJson(r.summary)},
              {"power", power},
              {"robust", robust},
              {"pairs", pairs}};
}

Json Nums(const std::vector<double>& values) {
  Json out = Json::array();
  for (double v : values) out.push_back(Num(v));
  return out;
}

// The seed policy, with the field names of its proto message (SequentialState).
Json ToJson(const SequentialSection& d) {
  Json looks = Json::array();
  for (const LookRow& l : d.looks) {
    Json comparisons = Json::array();
    for (const LookComparisonRow& c : l.comparisons) {
      comparisons.push_back(Json{{"scale", c.scale},
                                 {"arm", c.arm},
                                 {"reference_arm", c.reference_arm},
                                 {"milestone_tokens", c.milestone_tokens},
                                 {"n", c.n},
                                 {"mean_delta_nll", Num(c.mean_delta_nll)},
                                 {"sd_delta_nll", Num(c.sd_delta_nll)},
                                 {"t_statistic", Num(c.t_statistic)},
                                 {"efficacy_t", Num(c.efficacy_t)},
                                 {"futility_t", Num(c.futility_t)},
                                 {"outcome", c.outcome},
                                 {"decided_at_look", c.decided_at_look},
                                 {"adjusted_p", Num(c.adjusted_p)},
                                 {"rci_low", Num(c.rci_low)},
                                 {"rci_high", Num(c.rci_high)}});
    }
    looks.push_back(Json{{"look", l.look},
                         {"n_seeds", l.n_seeds},
                         {"n_planned", l.n_planned},
                         {"comparisons", comparisons},
                         {"decision", l.decision},
                         {"added_seeds", l.added_seeds},
                         {"reason", l.reason}});
  }
  Json design{{"boundary", d.boundary},
              {"alpha", Num(d.alpha)},
              {"look_seeds", d.look_seeds},
              {"information", Nums(d.information)},
              {"alpha_spent", Nums(d.alpha_spent)},
              {"efficacy_t", Nums(d.efficacy_t)},
              {"futility_t", Nums(d.futility_t)},
              {"futility_effect_sd", Num(d.futility_effect_sd)},
              {"futility_power", Num(d.futility_power)},
              {"simulations", d.simulations},
              {"simulation_seed", d.simulation_seed},
              {"simulated_alpha", Num(d.simulated_alpha)},
              {"expected_seeds_null", Num(d.expected_seeds_null)},
              {"expected_seeds_futility_effect", Num(d.expected_seeds_futility_effect)},
              {"expected_seeds_two_sd", Num(d.expected_seeds_two_sd)},
              {"power_two_sd", Num(d.power_two_sd)}};
  return Json{{"design", design},
              {"looks", looks},
              {"stopped", d.stopped},
              {"stopped_at_look", d.stopped_at_look},
              {"method", d.method}};
}

}  // namespace

std::string RenderJson(const ReportTables& t) {
  Json j;
  j["sweep_id"] = t.sweep_id;
  j["sweep_name"] = t.sweep_name;
  j["reference_arm"] = t.reference_arm;
  j["level"] = t.level;
  j["bootstrap_resamples"] = t.bootstrap_resamples;
  j["bootstrap_seed"] = t.bootstrap_seed;
  j["complete"] = t.complete;
  j["jobs_total"] = t.jobs_total;
  j["jobs_ended"] = t.jobs_ended;
  j["scales"] = t.scales;

  Json nll = Json::array();
  for (const NllTable& table : t.nll) {
    Json rows = Json::array();
    for (size_t s = 0; s < table.seeds.size(); ++s) {
      Json cells = Json::object();
      for (size_t a = 0; a < table.arms.size(); ++a) {
        const NllCell& c = table.cells[s][a];
        cells[table.arms[a]] = Json{{"present", c.present},
                                    {"nll", Num(c.nll)},
                                    {"job_id", c.job_id},
                                    {"job_state", std::string(RunStateName(c.state))},
                                    {"missing_reason", c.missing_reason}};
      }
      rows.push_back(Json{{"seed", table.seeds[s]}, {"arms", cells}});
    }
    Json per_arm = Json::object();
    for (size_t a = 0; a < table.arms.size(); ++a) {
      per_arm[table.arms[a]] =
          Json{{"n", table.n[a]}, {"mean", Num(table.mean[a])}, {"sd", Num(table.sd[a])}};
    }
    nll.push_back(Json{{"scale", table.scale},
                       {"split", table.split},
                       {"milestone_tokens", table.milestone_tokens},
                       {"arms", table.arms},
                       {"seeds", rows},
                       {"per_arm", per_arm}});
  }
  j["nll"] = nll;

  Json paired = Json::array();
  for (const PairedRow& r : t.paired) paired.push_back(ToJson(r));
  j["paired"] = paired;
  Json controls = Json::array();
  for (const PairedRow& r : t.controls) controls.push_back(ToJson(r));
  j["controls"] = controls;

  j["target_delta"] = Num(t.target_delta);
  Json trend = Json::array();
  for (const TrendRow& tr : t.trend) {
    const TrendSummary& s = tr.summary;
    Json seeds = Json::array();
    for (const TrendSeed& ts : tr.seeds) {
      Json deltas = Json::array();
      for (double d : ts.deltas) deltas.push_back(Num(d));
      seeds.push_back(Json{{"seed", ts.seed},
                           {"milestones", ts.milestones},
                           {"deltas", deltas},
                           {"slope", Num(ts.slope)}});
    }
    trend.push_back(Json{{"scale", tr.scale},
                         {"arm", tr.arm},
                         {"reference_arm", tr.reference_arm},
                         {"milestones", tr.milestones},
                         {"gap", Num(tr.gap)},
                         {"gap_milestone_tokens", tr.gap_milestone_tokens},
                         {"summary", Json{{"n", s.n},
                                          {"level", s.level},
                                          {"mean", Num(s.mean)},
                                          {"sd", Num(s.sd)},
                                          {"se", Num(s.se)},
                                          {"ci_defined", s.ci_defined},
                                          {"t_critical", Num(s.t_critical)},
                                          {"ci_low", Num(s.ci_low)},
                                          {"ci_high", Num(s.ci_high)},
                                          {"t_test_defined", s.t_test_defined},
                                          {"t_statistic", Num(s.t_statistic)},
                                          {"t_test_p", Num(s.t_test_p)},
                                          {"reading", s.reading},
                                          {"note", s.note}}},
                         {"seeds", seeds}});
  }
  j["trend"] = trend;

  Json depth = Json::array();
  for (const DepthRow& r : t.depth) {
    Json layers = Json::array();
    for (const DepthLayer& l : r.layers) {
      layers.push_back(Json{{"layer", l.layer},
                            {"sources", l.sources > 0 ? Json(l.sources) : Json(nullptr)},
                            {"n", l.n},
                            {"js_nats_mean", Num(l.js_nats_mean)},
                            {"js_nats_sd", Num(l.js_nats_sd)},
                            {"js_bits_mean", Num(l.js_bits_mean)},
                            {"js_sqrt_mean", Num(l.js_sqrt_mean)},
                            {"entropy_qk_mean", Num(l.entropy_qk_mean)},
                            {"entropy_v_mean", Num(l.entropy_v_mean)}});
    }
    depth.push_back(Json{{"scale", r.scale},
                         {"arm", r.arm},
                         {"milestone_tokens", r.milestone_tokens},
                         {"has_js", r.has_js},
                         {"n", r.n},
                         {"seeds", r.seeds},
                         {"js_mean_nats", Num(r.js_mean_nats)},
                         {"js_mean_nats_sd", Num(r.js_mean_nats_sd)},
                         {"js_mean_bits", Num(r.js_mean_bits)},
                         {"js_mean_sqrt", Num(r.js_mean_sqrt)},
                         {"js_mean_multi_source_nats", Num(r.js_mean_multi_source_nats)},
                         {"layers", layers}});
  }
  j["depth"] = depth;

  Json cost = Json::array();
  for (const CostRow& r : t.cost) {
    Json pairs = Json::array();
    for (const CostPair& p : r.pairs) {
      pairs.push_back(Json{{"seed", p.seed},
                           {"arm_job_id", p.arm_job_id},
                           {"reference_job_id", p.reference_job_id},
                           {"arm_tokens_per_second", Num(p.arm_tokens_per_second)},
                           {"reference_tokens_per_second", Num(p.reference_tokens_per_second)},
                           {"tokens_per_second_ratio", Num(p.tokens_per_second_ratio)},
                           {"arm_peak_memory_bytes", p.arm_peak_memory_bytes},
                           {"reference_peak_memory_bytes", p.reference_peak_memory_bytes},
                           {"peak_memory_ratio", Num(p.peak_memory_ratio)}});
    }
    cost.push_back(
        Json{{"scale", r.scale},
             {"arm", r.arm},
             {"reference_arm", r.reference_arm},
             {"hardware_kind", r.hardware_kind},
             {"n_throughput", r.n_throughput},
             {"mean_arm_tokens_per_second", Num(r.mean_arm_tokens_per_second)},
             {"mean_reference_tokens_per_second", Num(r.mean_reference_tokens_per_second)},
             {"tokens_per_second_ratio", Num(r.tokens_per_second_ratio)},
             {"tokens_per_second_ratio_min", Num(r.tokens_per_second_ratio_min)},
             {"tokens_per_second_ratio_max", Num(r.tokens_per_second_ratio_max)},
             {"n_memory", r.n_memory},
             {"mean_arm_peak_memory_bytes", Num(r.mean_arm_peak_memory_bytes)},
             {"mean_reference_peak_memory_bytes", Num(r.mean_reference_peak_memory_bytes)},
             {"peak_memory_ratio", Num(r.peak_memory_ratio)},
             {"peak_memory_ratio_min", Num(r.peak_memory_ratio_min)},
             {"peak_memory_ratio_max", Num(r.peak_memory_ratio_max)},
             {"pairs", pairs}});
  }
  j["cost"] = cost;

  Json excluded = Json::array();
  for (const CostExclusion& e : t.cost_excluded) {
    excluded.push_back(Json{{"scale", e.scale},
                            {"arm", e.arm},
                            {"seed", e.seed},
                            {"arm_job_id", e.arm_job_id},
                            {"reference_job_id", e.reference_job_id},
                            {"arm_hardware_kind", e.arm_hardware_kind},
                            {"reference_hardware_kind", e.reference_hardware_kind},
                            {"reason", e.reason}});
  }
  j["cost_excluded"] = excluded;

  Json missing = Json::array();
  for (const MissingEntry& m : t.missing) {
    missing.push_back(Json{{"scale", m.scale},
                           {"arm", m.arm},
                           {"seed", m.seed},
                           {"split", m.split},
                           {"milestone_tokens", m.milestone_tokens},
                           {"job_id", m.job_id},
                           {"job_state", std::string(RunStateName(m.job_state))},
                           {"reason", m.reason}});
  }
  j["missing"] = missing;
  j["notes"] = t.notes;
  if (t.sequential) j["sequential"] = ToJson(*t.sequential);
  return j.dump(2) + "\n";
}

}  // namespace rdattn::stats
