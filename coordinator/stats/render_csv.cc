// RenderCsv(): one RFC 4180 file per table, full precision (docs/report.md "Files").
#include <functional>
#include <iterator>
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

std::string SeedsField(int64_t seeds) { return seeds == 0 ? std::string() : std::to_string(seeds); }

std::string SeedList(const std::vector<uint64_t>& seeds) {
  std::string out;
  for (uint64_t s : seeds) out += (out.empty() ? "" : ";") + std::to_string(s);
  return out;
}

// A CSV table declared once as columns: each column's name and how a row fills it, so a header
// and its values cannot drift apart.
template <typename Row>
struct Column {
  std::string name;
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

// The i-th planned |delta| (kPlannedDeltas) of a row's seeds-needed list, and the user's target.
const SeedsForDelta* Planned(const PairedRow& r, size_t i) {
  for (const SeedsForDelta& e : r.power.seeds_needed) {
    if (e.user_given) continue;
    if (i == 0) return &e;
    --i;
  }
  return nullptr;
}

const SeedsForDelta* Target(const PairedRow& r) {
  for (const SeedsForDelta& e : r.power.seeds_needed) {
    if (e.user_given) return &e;
  }
  return nullptr;
}

// paired.csv and controls.csv.
std::vector<Column<PairedRow>> MakePairedColumns() {
  using R = const PairedRow&;
  std::vector<Column<PairedRow>> c = {
      {"kind", [](R r) { return r.kind; }},
      {"scale", [](R r) { return r.scale; }},
      {"split", [](R r) { return r.split; }},
      {"milestone_tokens", [](R r) { return Int(r.milestone_tokens); }},
      {"arm", [](R r) { return r.arm; }},
      {"reference_arm", [](R r) { return r.reference_arm; }},
      {"n", [](R r) { return Int(r.summary.n); }},
      {"n_expected", [](R r) { return Int(r.n_expected); }},
      {"mean_reference_nll", [](R r) { return Exact(r.mean_reference_nll); }},
      {"mean_arm_nll", [](R r) { return Exact(r.mean_arm_nll); }},
      {"mean_delta", [](R r) { return Exact(r.summary.mean); }},
      {"sd_delta", [](R r) { return Exact(r.summary.sd); }},
      {"se_delta", [](R r) { return Exact(r.summary.se); }},
      {"df", [](R r) { return Int(r.summary.df); }},
      {"level", [](R r) { return Exact(r.summary.level); }},
      {"t_critical", [](R r) { return Exact(r.summary.t_critical); }},
      {"t_ci_low", [](R r) { return Exact(r.summary.t_ci_low); }},
      {"t_ci_high", [](R r) { return Exact(r.summary.t_ci_high); }},
      {"bootstrap_resamples", [](R r) { return Int(r.summary.bootstrap_resamples); }},
      {"bootstrap_seed", [](R r) { return Uint(r.summary.bootstrap_seed); }},
      {"bootstrap_ci_low", [](R r) { return Exact(r.summary.bootstrap_ci_low); }},
      {"bootstrap_ci_high", [](R r) { return Exact(r.summary.bootstrap_ci_high); }},
      {"wins", [](R r) { return Int(r.summary.wins); }},
      {"losses", [](R r) { return Int(r.summary.losses); }},
      {"ties", [](R r) { return Int(r.summary.ties); }},
      {"sign_test_p", [](R r) { return Exact(r.summary.sign_test_p); }},
      {"t_statistic", [](R r) { return Exact(r.summary.t_statistic); }},
      {"t_test_p", [](R r) { return Exact(r.summary.t_test_p); }},
      {"ppl_reduction_mean_per_seed",
       [](R r) { return Exact(r.summary.ppl_reduction_mean_per_seed); }},
      {"ppl_reduction_of_mean", [](R r) { return Exact(r.summary.ppl_reduction_of_mean); }},
      {"ppl_change_mean_per_seed", [](R r) { return Exact(r.summary.ppl_change_mean_per_seed); }},
      {"ppl_change_of_mean", [](R r) { return Exact(r.summary.ppl_change_of_mean); }},
      {"note", [](R r) { return r.summary.note; }},
      {"median_delta", [](R r) { return Exact(r.robust.median); }},
      {"mad", [](R r) { return Exact(r.robust.mad); }},
      {"mad_scaled", [](R r) { return Exact(r.robust.mad_scaled); }},
      {"wilcoxon_n", [](R r) { return Int(r.robust.wilcoxon.n); }},
      {"wilcoxon_zeros", [](R r) { return Int(r.robust.wilcoxon.zeros); }},
      {"wilcoxon_w_plus", [](R r) { return Exact(r.robust.wilcoxon.w_plus); }},
      {"wilcoxon_p", [](R r) { return Exact(r.robust.wilcoxon.p); }},
      {"wilcoxon_exact", [](R r) { return Bool(r.robust.wilcoxon.exact); }},
      {"outlier_seeds", [](R r) { return SeedList(r.outlier_seeds); }},
      {"power_alpha", [](R r) { return Exact(r.power.alpha); }},
      {"power", [](R r) { return Exact(r.power.power); }},
      {"mde", [](R r) { return Exact(r.power.mde); }},
      {"mde_ncp", [](R r) { return Exact(r.power.mde_ncp); }},
  };
  // seeds_for_0.01, power_now_0.01, ... for each planned |delta|: empty when the row has none.
  for (size_t i = 0; i < std::size(kPlannedDeltas); ++i) {
    const std::string label = numfmt::Printf("%g", kPlannedDeltas[i]);
    c.push_back({"seeds_for_" + label, [i](R r) {
                   const SeedsForDelta* e = Planned(r, i);
                   return e ? SeedsField(e->seeds) : std::string();
                 }});
    c.push_back({"power_now_" + label, [i](R r) {
                   const SeedsForDelta* e = Planned(r, i);
                   return e ? Exact(e->power_at_n) : std::string();
                 }});
  }
  c.push_back({"target_delta", [](R r) { return Target(r) ? Exact(Target(r)->delta) : ""; }});
  c.push_back(
      {"seeds_for_target", [](R r) { return Target(r) ? SeedsField(Target(r)->seeds) : ""; }});
  c.push_back(
      {"power_now_target", [](R r) { return Target(r) ? Exact(Target(r)->power_at_n) : ""; }});
  return c;
}

const std::vector<Column<PairedRow>>& PairedColumns() {
  static const std::vector<Column<PairedRow>> columns = MakePairedColumns();
  return columns;
}

// A row of a table nested in another (a seed of a paired row, a layer of a depth row): the
// parent's columns come first.
template <typename Parent, typename Child>
struct Of {
  const Parent* p;
  Child c;
};

struct NllLine {
  size_t seed;  // index into NllTable::seeds
  size_t arm;   // index into NllTable::arms
};

#define RDATTN_COLUMN(name, expr)               \
  {                                             \
    name, [](const RowType& r) { return expr; } \
  }

const std::vector<Column<Of<NllTable, NllLine>>>& NllColumns() {
  using RowType = Of<NllTable, NllLine>;
  const auto cell = [](const RowType& r) -> const NllCell& {
    return r.p->cells[r.c.seed][r.c.arm];
  };
  static const std::vector<Column<RowType>> columns = {
      RDATTN_COLUMN("scale", r.p->scale),
      RDATTN_COLUMN("split", r.p->split),
      RDATTN_COLUMN("milestone_tokens", Int(r.p->milestone_tokens)),
      RDATTN_COLUMN("seed", Uint(r.p->seeds[r.c.seed])),
      RDATTN_COLUMN("arm", r.p->arms[r.c.arm]),
      {"present", [cell](const RowType& r) { return Bool(cell(r).present); }},
      {"nll", [cell](const RowType& r) { return Exact(cell(r).nll); }},
      {"job_id", [cell](const RowType& r) { return cell(r).job_id; }},
      {"job_state", [cell](const RowType& r) { return std::string(RunStateName(cell(r).state)); }},
      {"missing_reason", [cell](const RowType& r) { return cell(r).missing_reason; }},
  };
  return columns;
}

const std::vector<Column<Of<PairedRow, const SeedPair*>>>& PairedSeedColumns() {
  using RowType = Of<PairedRow, const SeedPair*>;
  static const std::vector<Column<RowType>> columns = {
      RDATTN_COLUMN("kind", r.p->kind),
      RDATTN_COLUMN("scale", r.p->scale),
      RDATTN_COLUMN("split", r.p->split),
      RDATTN_COLUMN("milestone_tokens", Int(r.p->milestone_tokens)),
      RDATTN_COLUMN("arm", r.p->arm),
      RDATTN_COLUMN("reference_arm", r.p->reference_arm),
      RDATTN_COLUMN("seed", Uint(r.c->seed)),
      RDATTN_COLUMN("complete", Bool(r.c->complete)),
      RDATTN_COLUMN("reference_nll", Exact(r.c->reference_nll)),
      RDATTN_COLUMN("arm_nll", Exact(r.c->arm_nll)),
      RDATTN_COLUMN("delta", Exact(r.c->delta)),
      RDATTN_COLUMN("ppl_reduction", Exact(r.c->ppl_reduction)),
      RDATTN_COLUMN("reference_job_id", r.c->reference_job_id),
      RDATTN_COLUMN("arm_job_id", r.c->arm_job_id),
      RDATTN_COLUMN("missing_reason", r.c->missing_reason),
      RDATTN_COLUMN("robust_z", Exact(r.c->robust_z)),
      RDATTN_COLUMN("outlier", Bool(r.c->outlier)),
  };
  return columns;
}

template <typename T, typename F>
std::string Joined(const std::vector<T>& values, F text) {
  std::string out;
  for (const T& v : values) out += (out.empty() ? "" : ";") + text(v);
  return out;
}

const std::vector<Column<TrendRow>>& TrendColumns() {
  using RowType = TrendRow;
  static const std::vector<Column<RowType>> columns = {
      RDATTN_COLUMN("scale", r.scale),
      RDATTN_COLUMN("arm", r.arm),
      RDATTN_COLUMN("reference_arm", r.reference_arm),
      RDATTN_COLUMN("milestones", Joined(r.milestones, Int)),
      RDATTN_COLUMN("n_seeds", Int(static_cast<int64_t>(r.seeds.size()))),
      RDATTN_COLUMN("n_slopes", Int(r.summary.n)),
      RDATTN_COLUMN("level", Exact(r.summary.level)),
      RDATTN_COLUMN("mean_slope", Exact(r.summary.mean)),
      RDATTN_COLUMN("sd_slope", Exact(r.summary.sd)),
      RDATTN_COLUMN("se_slope", Exact(r.summary.se)),
      RDATTN_COLUMN("t_critical", Exact(r.summary.t_critical)),
      RDATTN_COLUMN("ci_low", Exact(r.summary.ci_low)),
      RDATTN_COLUMN("ci_high", Exact(r.summary.ci_high)),
      RDATTN_COLUMN("t_statistic", Exact(r.summary.t_statistic)),
      RDATTN_COLUMN("t_test_p", Exact(r.summary.t_test_p)),
      RDATTN_COLUMN("gap", Exact(r.gap)),
      RDATTN_COLUMN("gap_milestone_tokens", Int(r.gap_milestone_tokens)),
      RDATTN_COLUMN("reading", r.summary.reading),
      RDATTN_COLUMN("note", r.summary.note),
  };
  return columns;
}

const std::vector<Column<Of<TrendRow, const TrendSeed*>>>& TrendSeedColumns() {
  using RowType = Of<TrendRow, const TrendSeed*>;
  static const std::vector<Column<RowType>> columns = {
      RDATTN_COLUMN("scale", r.p->scale),
      RDATTN_COLUMN("arm", r.p->arm),
      RDATTN_COLUMN("reference_arm", r.p->reference_arm),
      RDATTN_COLUMN("seed", Uint(r.c->seed)),
      RDATTN_COLUMN("points", Int(static_cast<int64_t>(r.c->milestones.size()))),
      RDATTN_COLUMN("milestones", Joined(r.c->milestones, Int)),
      RDATTN_COLUMN("deltas", Joined(r.c->deltas, Exact)),
      RDATTN_COLUMN("slope", Exact(r.c->slope)),
  };
  return columns;
}

const std::vector<Column<DepthRow>>& DepthColumns() {
  using RowType = DepthRow;
  static const std::vector<Column<RowType>> columns = {
      RDATTN_COLUMN("scale", r.scale),
      RDATTN_COLUMN("arm", r.arm),
      RDATTN_COLUMN("milestone_tokens", Int(r.milestone_tokens)),
      RDATTN_COLUMN("has_js", Bool(r.has_js)),
      RDATTN_COLUMN("n", Int(r.n)),
      RDATTN_COLUMN("seeds", Joined(r.seeds, Uint)),
      RDATTN_COLUMN("js_mean_nats", Exact(r.js_mean_nats)),
      RDATTN_COLUMN("js_mean_nats_sd", Exact(r.js_mean_nats_sd)),
      RDATTN_COLUMN("js_mean_bits", Exact(r.js_mean_bits)),
      RDATTN_COLUMN("js_mean_sqrt", Exact(r.js_mean_sqrt)),
      RDATTN_COLUMN("js_mean_multi_source_nats", Exact(r.js_mean_multi_source_nats)),
  };
  return columns;
}

const std::vector<Column<Of<DepthRow, const DepthLayer*>>>& DepthLayerColumns() {
  using RowType = Of<DepthRow, const DepthLayer*>;
  static const std::vector<Column<RowType>> columns = {
      RDATTN_COLUMN("scale", r.p->scale),
      RDATTN_COLUMN("arm", r.p->arm),
      RDATTN_COLUMN("milestone_tokens", Int(r.p->milestone_tokens)),
      RDATTN_COLUMN("layer", Int(r.c->layer)),
      RDATTN_COLUMN("sources", r.c->sources > 0 ? Int(r.c->sources) : ""),
      RDATTN_COLUMN("n", Int(r.c->n)),
      RDATTN_COLUMN("js_nats_mean", Exact(r.c->js_nats_mean)),
      RDATTN_COLUMN("js_nats_sd", Exact(r.c->js_nats_sd)),
      RDATTN_COLUMN("js_bits_mean", Exact(r.c->js_bits_mean)),
      RDATTN_COLUMN("js_sqrt_mean", Exact(r.c->js_sqrt_mean)),
      RDATTN_COLUMN("entropy_qk_mean", Exact(r.c->entropy_qk_mean)),
      RDATTN_COLUMN("entropy_v_mean", Exact(r.c->entropy_v_mean)),
  };
  return columns;
}

const std::vector<Column<CostRow>>& CostColumns() {
  using RowType = CostRow;
  static const std::vector<Column<RowType>> columns = {
      RDATTN_COLUMN("scale", r.scale),
      RDATTN_COLUMN("arm", r.arm),
      RDATTN_COLUMN("reference_arm", r.reference_arm),
      RDATTN_COLUMN("hardware_kind", r.hardware_kind),
      RDATTN_COLUMN("n_throughput", Int(r.n_throughput)),
      RDATTN_COLUMN("mean_arm_tokens_per_second", Exact(r.mean_arm_tokens_per_second)),
      RDATTN_COLUMN("mean_reference_tokens_per_second", Exact(r.mean_reference_tokens_per_second)),
      RDATTN_COLUMN("tokens_per_second_ratio", Exact(r.tokens_per_second_ratio)),
      RDATTN_COLUMN("tokens_per_second_ratio_min", Exact(r.tokens_per_second_ratio_min)),
      RDATTN_COLUMN("tokens_per_second_ratio_max", Exact(r.tokens_per_second_ratio_max)),
      RDATTN_COLUMN("n_memory", Int(r.n_memory)),
      RDATTN_COLUMN("mean_arm_peak_memory_bytes", Exact(r.mean_arm_peak_memory_bytes)),
      RDATTN_COLUMN("mean_reference_peak_memory_bytes", Exact(r.mean_reference_peak_memory_bytes)),
      RDATTN_COLUMN("peak_memory_ratio", Exact(r.peak_memory_ratio)),
      RDATTN_COLUMN("peak_memory_ratio_min", Exact(r.peak_memory_ratio_min)),
      RDATTN_COLUMN("peak_memory_ratio_max", Exact(r.peak_memory_ratio_max)),
  };
  return columns;
}

const std::vector<Column<Of<CostRow, const CostPair*>>>& CostPairColumns() {
  using RowType = Of<CostRow, const CostPair*>;
  static const std::vector<Column<RowType>> columns = {
      RDATTN_COLUMN("scale", r.p->scale),
      RDATTN_COLUMN("arm", r.p->arm),
      RDATTN_COLUMN("reference_arm", r.p->reference_arm),
      RDATTN_COLUMN("hardware_kind", r.p->hardware_kind),
      RDATTN_COLUMN("seed", Uint(r.c->seed)),
      RDATTN_COLUMN("arm_job_id", r.c->arm_job_id),
      RDATTN_COLUMN("reference_job_id", r.c->reference_job_id),
      RDATTN_COLUMN("arm_tokens_per_second", Exact(r.c->arm_tokens_per_second)),
      RDATTN_COLUMN("reference_tokens_per_second", Exact(r.c->reference_tokens_per_second)),
      RDATTN_COLUMN("tokens_per_second_ratio", Exact(r.c->tokens_per_second_ratio)),
      RDATTN_COLUMN("arm_peak_memory_bytes", Int64Or(r.c->arm_peak_memory_bytes)),
      RDATTN_COLUMN("reference_peak_memory_bytes", Int64Or(r.c->reference_peak_memory_bytes)),
      RDATTN_COLUMN("peak_memory_ratio", Exact(r.c->peak_memory_ratio)),
  };
  return columns;
}

const std::vector<Column<CostExclusion>>& CostExclusionColumns() {
  using RowType = CostExclusion;
  static const std::vector<Column<RowType>> columns = {
      RDATTN_COLUMN("scale", r.scale),
      RDATTN_COLUMN("arm", r.arm),
      RDATTN_COLUMN("seed", Uint(r.seed)),
      RDATTN_COLUMN("arm_job_id", r.arm_job_id),
      RDATTN_COLUMN("reference_job_id", r.reference_job_id),
      RDATTN_COLUMN("arm_hardware_kind", r.arm_hardware_kind),
      RDATTN_COLUMN("reference_hardware_kind", r.reference_hardware_kind),
      RDATTN_COLUMN("reason", r.reason),
  };
  return columns;
}

const std::vector<Column<MissingEntry>>& MissingColumns() {
  using RowType = MissingEntry;
  static const std::vector<Column<RowType>> columns = {
      RDATTN_COLUMN("scale", r.scale),
      RDATTN_COLUMN("arm", r.arm),
      RDATTN_COLUMN("seed", Uint(r.seed)),
      RDATTN_COLUMN("split", r.split),
      RDATTN_COLUMN("milestone_tokens", Int(r.milestone_tokens)),
      RDATTN_COLUMN("job_id", r.job_id),
      RDATTN_COLUMN("job_state", std::string(RunStateName(r.job_state))),
      RDATTN_COLUMN("reason", r.reason),
  };
  return columns;
}

#undef RDATTN_COLUMN

}  // namespace

std::map<std::string, std::string> RenderCsv(const ReportTables& t) {
  std::map<std::string, std::string> files;

  std::vector<Of<NllTable, NllLine>> nll;
  for (const NllTable& table : t.nll) {
    for (size_t s = 0; s < table.seeds.size(); ++s) {
      for (size_t a = 0; a < table.arms.size(); ++a) nll.push_back({&table, {s, a}});
    }
  }
  files["nll.csv"] = RenderTable(NllColumns(), nll);

  files["paired.csv"] = RenderTable(PairedColumns(), t.paired);
  files["controls.csv"] = RenderTable(PairedColumns(), t.controls);

  std::vector<Of<PairedRow, const SeedPair*>> seeds;
  for (const auto* list : {&t.paired, &t.controls}) {
    for (const PairedRow& r : *list) {
      for (const SeedPair& p : r.pairs) seeds.push_back({&r, &p});
    }
  }
  files["paired_seeds.csv"] = RenderTable(PairedSeedColumns(), seeds);

  std::vector<Of<TrendRow, const TrendSeed*>> trend_seeds;
  for (const TrendRow& tr : t.trend) {
    for (const TrendSeed& ts : tr.seeds) trend_seeds.push_back({&tr, &ts});
  }
  files["trend.csv"] = RenderTable(TrendColumns(), t.trend);
  files["trend_seeds.csv"] = RenderTable(TrendSeedColumns(), trend_seeds);

  std::vector<Of<DepthRow, const DepthLayer*>> layers;
  for (const DepthRow& r : t.depth) {
    for (const DepthLayer& l : r.layers) layers.push_back({&r, &l});
  }
  files["depth.csv"] = RenderTable(DepthColumns(), t.depth);
  files["depth_layers.csv"] = RenderTable(DepthLayerColumns(), layers);

  std::vector<Of<CostRow, const CostPair*>> cost_pairs;
  for (const CostRow& r : t.cost) {
    for (const CostPair& p : r.pairs) cost_pairs.push_back({&r, &p});
  }
  files["cost.csv"] = RenderTable(CostColumns(), t.cost);
  files["cost_pairs.csv"] = RenderTable(CostPairColumns(), cost_pairs);
  files["cost_excluded.csv"] = RenderTable(CostExclusionColumns(), t.cost_excluded);
  files["missing.csv"] = RenderTable(MissingColumns(), t.missing);

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
