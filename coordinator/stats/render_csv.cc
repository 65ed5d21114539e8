// RenderCsv(): one RFC 4180 file per table, full precision (docs/report.md "Files").
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/number_format.h"
#include "coordinator/stats/render.h"

namespace rdattn::stats {
namespace {

// Shortest text that reads back to the same double; NaN as empty (common/number_format.h).
std::string Exact(double v) { return numfmt::Shortest(v); }

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

class Csv {
 public:
  explicit Csv(const std::vector<std::string>& header) { Add(header); }
  void Add(const std::vector<std::string>& fields) {
    for (size_t i = 0; i < fields.size(); ++i) {
      if (i > 0) text_ += ',';
      text_ += CsvField(fields[i]);
    }
    text_ += "\r\n";
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

std::string Bool(bool b) { return b ? "true" : "false"; }
std::string Int(int64_t v) { return std::to_string(v); }
std::string Uint(uint64_t v) { return std::to_string(v); }
std::string Int64Or(int64_t v) { return v > 0 ? std::to_string(v) : std::string(); }

const std::vector<std::string> kPairedHeader = {"kind",
                                                "scale",
                                                "split",
                                                "milestone_tokens",
                                                "arm",
                                                "reference_arm",
                                                "n",
                                                "n_expected",
                                                "mean_reference_nll",
                                                "mean_arm_nll",
                                                "mean_delta",
                                                "sd_delta",
                                                "se_delta",
                                                "df",
                                                "level",
                                                "t_critical",
                                                "t_ci_low",
                                                "t_ci_high",
                                                "bootstrap_resamples",
                                                "bootstrap_seed",
                                                "bootstrap_ci_low",
                                                "bootstrap_ci_high",
                                                "wins",
                                                "losses",
                                                "ties",
                                                "sign_test_p",
                                                "t_statistic",
                                                "t_test_p",
                                                "ppl_reduction_mean_per_seed",
                                                "ppl_reduction_of_mean",
                                                "ppl_change_mean_per_seed",
                                                "ppl_change_of_mean",
                                                "note",
                                                "median_delta",
                                                "mad",
                                                "mad_scaled",
                                                "wilcoxon_n",
                                                "wilcoxon_zeros",
                                                "wilcoxon_w_plus",
                                                "wilcoxon_p",
                                                "wilcoxon_exact",
                                                "outlier_seeds",
                                                "power_alpha",
                                                "power",
                                                "mde",
                                                "mde_ncp",
                                                "seeds_for_0.01",
                                                "power_now_0.01",
                                                "seeds_for_0.02",
                                                "power_now_0.02",
                                                "seeds_for_0.03",
                                                "power_now_0.03",
                                                "target_delta",
                                                "seeds_for_target",
                                                "power_now_target"};

std::string SeedsField(int64_t seeds) { return seeds == 0 ? std::string() : std::to_string(seeds); }

std::string SeedList(const std::vector<uint64_t>& seeds) {
  std::string out;
  for (uint64_t s : seeds) out += (out.empty() ? "" : ";") + std::to_string(s);
  return out;
}

std::vector<std::string> PairedFields(const PairedRow& r) {
  const PairedSummary& s = r.summary;
  std::vector<std::string> fields = {r.kind,
                                     r.scale,
                                     r.split,
                                     Int(r.milestone_tokens),
                                     r.arm,
                                     r.reference_arm,
                                     Int(s.n),
                                     Int(r.n_expected),
                                     Exact(r.mean_reference_nll),
                                     Exact(r.mean_arm_nll),
                                     Exact(s.mean),
                                     Exact(s.sd),
                                     Exact(s.se),
                                     Int(s.df),
                                     Exact(s.level),
                                     Exact(s.t_critical),
                                     Exact(s.t_ci_low),
                                     Exact(s.t_ci_high),
                                     Int(s.bootstrap_resamples),
                                     Uint(s.bootstrap_seed),
                                     Exact(s.bootstrap_ci_low),
                                     Exact(s.bootstrap_ci_high),
                                     Int(s.wins),
                                     Int(s.losses),
                                     Int(s.ties),
                                     Exact(s.sign_test_p),
                                     Exact(s.t_statistic),
                                     Exact(s.t_test_p),
                                     Exact(s.ppl_reduction_mean_per_seed),
                                     Exact(s.ppl_reduction_of_mean),
                                     Exact(s.ppl_change_mean_per_seed),
                                     Exact(s.ppl_change_of_mean),
                                     s.note,
                                     Exact(r.robust.median),
                                     Exact(r.robust.mad),
                                     Exact(r.robust.mad_scaled),
                                     Int(r.robust.wilcoxon.n),
                                     Int(r.robust.wilcoxon.zeros),
                                     Exact(r.robust.wilcoxon.w_plus),
                                     Exact(r.robust.wilcoxon.p),
                                     Bool(r.robust.wilcoxon.exact),
                                     SeedList(r.outlier_seeds),
                                     Exact(r.power.alpha),
                                     Exact(r.power.power),
                                     Exact(r.power.mde),
                                     Exact(r.power.mde_ncp)};
  const SeedsForDelta* target = nullptr;
  for (const SeedsForDelta& e : r.power.seeds_needed) {
    if (e.user_given) {
      target = &e;
      continue;
    }
    fields.push_back(SeedsField(e.seeds));
    fields.push_back(Exact(e.power_at_n));
  }
  fields.push_back(target ? Exact(target->delta) : "");
  fields.push_back(target ? SeedsField(target->seeds) : "");
  fields.push_back(target ? Exact(target->power_at_n) : "");
  return fields;
}

// A CSV table declared once as columns: each column's name and how a row fills it, so a header
// and its values cannot drift apart.
template <typename Row>
struct Column {
  const char* name;
  std::function<std::string(const Row&)> cell;
};

template <typename Row>
std::string RenderTable(const std::vector<Column<Row>>& columns, const std::vector<Row>& rows) {
  std::vector<std::string> header;
  header.reserve(columns.size());
  for (const Column<Row>& c : columns) header.emplace_back(c.name);
  Csv csv(header);
  for (const Row& row : rows) {
    std::vector<std::string> fields;
    fields.reserve(columns.size());
    for (const Column<Row>& c : columns) fields.push_back(c.cell(row));
    csv.Add(fields);
  }
  return csv.text();
}

// looks.csv: one line per (look, comparison).
struct LookLine {
  const LookRow* look;
  const LookComparisonRow* c;
};

const std::vector<Column<LookLine>>& LookColumns() {
  static const std::vector<Column<LookLine>> columns = {
      {"look", [](const LookLine& r) { return Int(r.look->look); }},
      {"n_seeds", [](const LookLine& r) { return Int(r.look->n_seeds); }},
      {"n_planned", [](const LookLine& r) { return Int(r.look->n_planned); }},
      {"decision", [](const LookLine& r) { return r.look->decision; }},
      {"scale", [](const LookLine& r) { return r.c->scale; }},
      {"arm", [](const LookLine& r) { return r.c->arm; }},
      {"reference_arm", [](const LookLine& r) { return r.c->reference_arm; }},
      {"milestone_tokens", [](const LookLine& r) { return Int(r.c->milestone_tokens); }},
      {"n", [](const LookLine& r) { return Int(r.c->n); }},
      {"mean_delta_nll", [](const LookLine& r) { return Exact(r.c->mean_delta_nll); }},
      {"sd_delta_nll", [](const LookLine& r) { return Exact(r.c->sd_delta_nll); }},
      {"t_statistic", [](const LookLine& r) { return Exact(r.c->t_statistic); }},
      {"efficacy_t", [](const LookLine& r) { return Exact(r.c->efficacy_t); }},
      {"futility_t", [](const LookLine& r) { return Exact(r.c->futility_t); }},
      {"outcome", [](const LookLine& r) { return r.c->outcome; }},
      {"decided_at_look", [](const LookLine& r) { return Int(r.c->decided_at_look); }},
      {"adjusted_p", [](const LookLine& r) { return Exact(r.c->adjusted_p); }},
      {"rci_low", [](const LookLine& r) { return Exact(r.c->rci_low); }},
      {"rci_high", [](const LookLine& r) { return Exact(r.c->rci_high); }},
      {"added_seeds", [](const LookLine& r) { return SeedList(r.look->added_seeds); }},
  };
  return columns;
}

}  // namespace

std::map<std::string, std::string> RenderCsv(const ReportTables& t) {
  std::map<std::string, std::string> files;

  Csv nll({"scale", "split", "milestone_tokens", "seed", "arm", "present", "nll", "job_id",
           "job_state", "missing_reason"});
  for (const NllTable& table : t.nll) {
    for (size_t s = 0; s < table.seeds.size(); ++s) {
      for (size_t a = 0; a < table.arms.size(); ++a) {
        const NllCell& c = table.cells[s][a];
        nll.Add({table.scale, table.split, Int(table.milestone_tokens), Uint(table.seeds[s]),
                 table.arms[a], Bool(c.present), Exact(c.nll), c.job_id, c.state,
                 c.missing_reason});
      }
    }
  }
  files["nll.csv"] = nll.text();

  Csv paired(kPairedHeader);
  for (const PairedRow& r : t.paired) paired.Add(PairedFields(r));
  files["paired.csv"] = paired.text();
  Csv controls(kPairedHeader);
  for (const PairedRow& r : t.controls) controls.Add(PairedFields(r));
  files["controls.csv"] = controls.text();

  Csv seeds({"kind", "scale", "split", "milestone_tokens", "arm", "reference_arm", "seed",
             "complete", "reference_nll", "arm_nll", "delta", "ppl_reduction", "reference_job_id",
             "arm_job_id", "missing_reason", "robust_z", "outlier"});
  for (const auto* list : {&t.paired, &t.controls}) {
    for (const PairedRow& r : *list) {
      for (const SeedPair& p : r.pairs) {
        seeds.Add({r.kind, r.scale, r.split, Int(r.milestone_tokens), r.arm, r.reference_arm,
                   Uint(p.seed), Bool(p.complete), Exact(p.reference_nll), Exact(p.arm_nll),
                   Exact(p.delta), Exact(p.ppl_reduction), p.reference_job_id, p.arm_job_id,
                   p.missing_reason, Exact(p.robust_z), Bool(p.outlier)});
      }
    }
  }
  files["paired_seeds.csv"] = seeds.text();

  Csv trend({"scale", "arm", "reference_arm", "milestones", "n_seeds", "n_slopes", "level",
             "mean_slope", "sd_slope", "se_slope", "t_critical", "ci_low", "ci_high", "t_statistic",
             "t_test_p", "gap", "gap_milestone_tokens", "reading", "note"});
  Csv trend_seeds(
      {"scale", "arm", "reference_arm", "seed", "points", "milestones", "deltas", "slope"});
  for (const TrendRow& tr : t.trend) {
    const TrendSummary& s = tr.summary;
    std::string ms;
    for (int64_t m : tr.milestones) ms += (ms.empty() ? "" : ";") + Int(m);
    trend.Add({tr.scale, tr.arm, tr.reference_arm, ms, Int(static_cast<int64_t>(tr.seeds.size())),
               Int(s.n), Exact(s.level), Exact(s.mean), Exact(s.sd), Exact(s.se),
               Exact(s.t_critical), Exact(s.ci_low), Exact(s.ci_high), Exact(s.t_statistic),
               Exact(s.t_test_p), Exact(tr.gap), Int(tr.gap_milestone_tokens), s.reading, s.note});
    for (const TrendSeed& ts : tr.seeds) {
      std::string tms, tds;
      for (int64_t m : ts.milestones) tms += (tms.empty() ? "" : ";") + Int(m);
      for (double d : ts.deltas) tds += (tds.empty() ? "" : ";") + Exact(d);
      trend_seeds.Add({tr.scale, tr.arm, tr.reference_arm, Uint(ts.seed),
                       Int(static_cast<int64_t>(ts.milestones.size())), tms, tds, Exact(ts.slope)});
    }
  }
  files["trend.csv"] = trend.text();
  files["trend_seeds.csv"] = trend_seeds.text();

  Csv depth({"scale", "arm", "milestone_tokens", "has_js", "n", "seeds", "js_mean_nats",
             "js_mean_nats_sd", "js_mean_bits", "js_mean_sqrt", "js_mean_multi_source_nats"});
  Csv layers({"scale", "arm", "milestone_tokens", "layer", "sources", "n", "js_nats_mean",
              "js_nats_sd", "js_bits_mean", "js_sqrt_mean", "entropy_qk_mean", "entropy_v_mean"});
  for (const DepthRow& r : t.depth) {
    std::string seed_list;
    for (uint64_t s : r.seeds) seed_list += (seed_list.empty() ? "" : ";") + Uint(s);
    depth.Add({r.scale, r.arm, Int(r.milestone_tokens), Bool(r.has_js), Int(r.n), seed_list,
               Exact(r.js_mean_nats), Exact(r.js_mean_nats_sd), Exact(r.js_mean_bits),
               Exact(r.js_mean_sqrt), Exact(r.js_mean_multi_source_nats)});
    for (const DepthLayer& l : r.layers) {
      layers.Add({r.scale, r.arm, Int(r.milestone_tokens), Int(l.layer),
                  l.sources > 0 ? Int(l.sources) : "", Int(l.n), Exact(l.js_nats_mean),
                  Exact(l.js_nats_sd), Exact(l.js_bits_mean), Exact(l.js_sqrt_mean),
                  Exact(l.entropy_qk_mean), Exact(l.entropy_v_mean)});
    }
  }
  files["depth.csv"] = depth.text();
  files["depth_layers.csv"] = layers.text();

  Csv cost({"scale", "arm", "reference_arm", "hardware_kind", "n_throughput",
            "mean_arm_tokens_per_second", "mean_reference_tokens_per_second",
            "tokens_per_second_ratio", "tokens_per_second_ratio_min", "tokens_per_second_ratio_max",
            "n_memory", "mean_arm_peak_memory_bytes", "mean_reference_peak_memory_bytes",
            "peak_memory_ratio", "peak_memory_ratio_min", "peak_memory_ratio_max"});
  Csv cost_pairs({"scale", "arm", "reference_arm", "hardware_kind", "seed", "arm_job_id",
                  "reference_job_id", "arm_tokens_per_second", "reference_tokens_per_second",
                  "tokens_per_second_ratio", "arm_peak_memory_bytes", "reference_peak_memory_bytes",
                  "peak_memory_ratio"});
  for (const CostRow& r : t.cost) {
    cost.Add({r.scale, r.arm, r.reference_arm, r.hardware_kind, Int(r.n_throughput),
              Exact(r.mean_arm_tokens_per_second), Exact(r.mean_reference_tokens_per_second),
              Exact(r.tokens_per_second_ratio), Exact(r.tokens_per_second_ratio_min),
              Exact(r.tokens_per_second_ratio_max), Int(r.n_memory),
              Exact(r.mean_arm_peak_memory_bytes), Exact(r.mean_reference_peak_memory_bytes),
              Exact(r.peak_memory_ratio), Exact(r.peak_memory_ratio_min),
              Exact(r.peak_memory_ratio_max)});
    for (const CostPair& p : r.pairs) {
      cost_pairs.Add({r.scale, r.arm, r.reference_arm, r.hardware_kind, Uint(p.seed), p.arm_job_id,
                      p.reference_job_id, Exact(p.arm_tokens_per_second),
                      Exact(p.reference_tokens_per_second), Exact(p.tokens_per_second_ratio),
                      Int64Or(p.arm_peak_memory_bytes), Int64Or(p.reference_peak_memory_bytes),
                      Exact(p.peak_memory_ratio)});
    }
  }
  files["cost.csv"] = cost.text();
  files["cost_pairs.csv"] = cost_pairs.text();

  Csv excluded({"scale", "arm", "seed", "arm_job_id", "reference_job_id", "arm_hardware_kind",
                "reference_hardware_kind", "reason"});
  for (const CostExclusion& e : t.cost_excluded) {
    excluded.Add({e.scale, e.arm, Uint(e.seed), e.arm_job_id, e.reference_job_id,
                  e.arm_hardware_kind, e.reference_hardware_kind, e.reason});
  }
  files["cost_excluded.csv"] = excluded.text();

  Csv missing(
      {"scale", "arm", "seed", "split", "milestone_tokens", "job_id", "job_state", "reason"});
  for (const MissingEntry& m : t.missing) {
    missing.Add({m.scale, m.arm, Uint(m.seed), m.split, Int(m.milestone_tokens), m.job_id,
                 m.job_state, m.reason});
  }
  files["missing.csv"] = missing.text();

  if (t.sequential) {
    std::vector<LookLine> lines;
    for (const LookRow& l : t.sequential->looks) {
      for (const LookComparisonRow& c : l.comparisons) lines.push_back({&l, &c});
    }
    files["looks.csv"] = RenderTable(LookColumns(), lines);
  }
  return files;
}

}  // namespace rdattn::stats
