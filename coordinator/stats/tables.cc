// BuildTables(): from the runs of a sweep to the report's tables (tables.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "coordinator/stats/tables.h"

namespace rdattn::stats {
namespace {

constexpr double kLn2 = 0.693147180559945309417232121458176568;

bool IsTerminal(RunState state) {
  return state == RunState::kSucceeded || state == RunState::kFailed ||
         state == RunState::kCancelled;
}

std::string Name(RunState state) { return std::string(RunStateName(state)); }

bool Finite(double v) { return std::isfinite(v); }

template <typename T>
void AppendUnique(std::vector<T>& list, const T& value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

// Every run by (scale, arm, seed). When a cell has more than one job, the SUCCEEDED one with the
// most evaluations wins and a note names the others.
class RunIndex {
 public:
  RunIndex(const std::vector<RunResult>& runs, std::vector<std::string>& notes) {
    for (const RunResult& run : runs) {
      const Key key{run.scale, run.arm, run.seed};
      auto it = by_key_.find(key);
      if (it == by_key_.end()) {
        by_key_[key] = &run;
        continue;
      }
      const RunResult* kept = it->second;
      const auto rank = [](const RunResult* r) {
        return std::make_tuple(r->state == RunState::kSucceeded ? 1 : 0, r->milestones.size());
      };
      const RunResult* winner = rank(&run) > rank(kept) ? &run : kept;
      const RunResult* loser = winner == kept ? &run : kept;
      it->second = winner;
      notes.push_back("more than one job for scale " + run.scale + ", arm " + run.arm + ", seed " +
                      std::to_string(run.seed) + ": using " + winner->job_id + " (" +
                      Name(winner->state) + "), ignoring " + loser->job_id + " (" +
                      Name(loser->state) + ")");
    }
  }
  const RunResult* Find(const std::string& scale, const std::string& arm, uint64_t seed) const {
    auto it = by_key_.find(Key{scale, arm, seed});
    return it == by_key_.end() ? nullptr : it->second;
  }

 private:
  using Key = std::tuple<std::string, std::string, uint64_t>;
  std::map<Key, const RunResult*> by_key_;
};

std::string WithReason(const RunResult& run) {
  return run.failure_reason.empty() ? std::string() : ": " + run.failure_reason;
}

// What every NLL cell starts with: the run's job and state, or why there is nothing to pair at
// any milestone (no job; the run is excluded). True when `cell` is then complete.
bool StartCell(const RunResult* run, NllCell& cell) {
  if (run == nullptr) {
    cell.missing_reason = "no job";
    return true;
  }
  cell.job_id = run->job_id;
  cell.state = run->state;
  if (!run->excluded.empty()) {
    cell.missing_reason = "not paired: " + run->excluded;
    return true;
  }
  return false;
}

NllCell ValCell(const RunResult* run, int64_t milestone) {
  NllCell cell;
  if (StartCell(run, cell)) return cell;
  auto it = run->milestones.find(milestone);
  if (it != run->milestones.end() && Finite(it->second.val_nll)) {
    cell.present = true;
    cell.nll = it->second.val_nll;
    return cell;
  }
  if (it != run->milestones.end()) {
    cell.missing_reason = "evaluation without a finite validation NLL";
  } else if (run->state == RunState::kFailed) {
    cell.missing_reason = "job FAILED before this milestone" + WithReason(*run);
  } else if (run->state == RunState::kCancelled) {
    cell.missing_reason = "job CANCELLED before this milestone" + WithReason(*run);
  } else if (run->state == RunState::kSucceeded) {
    cell.missing_reason = "job SUCCEEDED without an evaluation at this milestone";
  } else if (run->state == RunState::kUnknown) {
    cell.missing_reason = "no evaluation at this milestone (job state unknown)";
  } else {
    cell.missing_reason = "job " + Name(run->state) + ": milestone not reached yet";
  }
  return cell;
}

NllCell TestCell(const RunResult* run) {
  NllCell cell;
  if (StartCell(run, cell)) return cell;
  if (Finite(run->test_nll)) {
    cell.present = true;
    cell.nll = run->test_nll;
    return cell;
  }
  if (run->state == RunState::kFailed || run->state == RunState::kCancelled) {
    cell.missing_reason = "job " + Name(run->state) + " without a test NLL" + WithReason(*run);
  } else if (run->state == RunState::kSucceeded) {
    cell.missing_reason = "job SUCCEEDED without a test NLL";
  } else if (run->state == RunState::kUnknown) {
    cell.missing_reason = "no test NLL (job state unknown)";
  } else {
    cell.missing_reason = "job " + Name(run->state) + ": the test NLL comes at the end of the run";
  }
  return cell;
}

bool HasAnyEvaluation(const RunResult& run) {
  if (Finite(run.test_nll)) return true;
  for (const auto& [tokens, m] : run.milestones) {
    if (Finite(m.val_nll)) return true;
  }
  return false;
}

struct Control {
  std::string arm;
  std::string parent_arm;
  int64_t stop_tokens = 0;
};

// Everything a scale expects.
struct ScalePlan {
  std::string scale;
  std::vector<uint64_t> seeds;      // ascending
  std::vector<int64_t> milestones;  // ascending, main arms
  bool expects_test = false;
  std::map<std::string, int64_t> control_milestone;  // by control arm
};

PairedRow MakePairedRow(const std::string& scale, const std::string& split, int64_t milestone,
                        const std::string& arm, const std::string& reference,
                        const std::string& kind, const std::vector<uint64_t>& seeds,
                        const std::vector<NllCell>& arm_cells,
                        const std::vector<NllCell>& reference_cells, uint64_t bootstrap_seed,
                        int resamples, double level, double target_delta) {
  PairedRow row;
  row.scale = scale;
  row.split = split;
  row.milestone_tokens = milestone;
  row.arm = arm;
  row.reference_arm = reference;
  row.kind = kind;
  std::vector<double> deltas, ref_nlls, arm_nlls;
  for (size_t i = 0; i < seeds.size(); ++i) {
    const NllCell& a = arm_cells[i];
    const NllCell& r = reference_cells[i];
    SeedPair pair;
    pair.seed = seeds[i];
    pair.arm_job_id = a.job_id;
    pair.reference_job_id = r.job_id;
    if (a.present) pair.arm_nll = a.nll;
    if (r.present) pair.reference_nll = r.nll;
    pair.complete = a.present && r.present;
    if (pair.complete) {
      pair.delta = a.nll - r.nll;
      pair.ppl_reduction = -std::expm1(pair.delta);
      deltas.push_back(pair.delta);
      ref_nlls.push_back(r.nll);
      arm_nlls.push_back(a.nll);
    } else {
      std::string reason;
      if (!r.present) reason = reference + " missing (" + r.missing_reason + ")";
      if (!a.present) {
        if (!reason.empty()) reason += "; ";
        reason += arm + " missing (" + a.missing_reason + ")";
      }
      pair.missing_reason = reason;
    }
    row.pairs.push_back(std::move(pair));
  }
  row.n_expected = static_cast<int>(seeds.size());
  row.mean_reference_nll = Mean(ref_nlls);
  row.mean_arm_nll = Mean(arm_nlls);
  row.summary = Summarize(deltas, bootstrap_seed, resamples, level);
  row.power = SummarizePower(row.summary.n, row.summary.sd, level, target_delta);
  row.robust = SummarizeRobust(deltas);
  size_t k = 0;  // index among the complete pairs
  for (SeedPair& pair : row.pairs) {
    if (!pair.complete) continue;
    pair.robust_z = row.robust.robust_z[k];
    pair.outlier = std::find(row.robust.outliers.begin(), row.robust.outliers.end(), k) !=
                   row.robust.outliers.end();
    if (pair.outlier) row.outlier_seeds.push_back(pair.seed);
    ++k;
  }
  return row;
}

NllTable MakeNllTable(const std::string& scale, const std::string& split, int64_t milestone,
                      const std::vector<std::string>& arms, const std::vector<uint64_t>& seeds,
                      const RunIndex& index) {
  NllTable table;
  table.scale = scale;
  table.split = split;
  table.milestone_tokens = milestone;
  table.arms = arms;
  table.seeds = seeds;
  for (uint64_t seed : seeds) {
    std::vector<NllCell> row;
    for (const std::string& arm : arms) {
      const RunResult* run = index.Find(scale, arm, seed);
      row.push_back(split == kSplitTest ? TestCell(run) : ValCell(run, milestone));
    }
    table.cells.push_back(std::move(row));
  }
  for (size_t a = 0; a < arms.size(); ++a) {
    std::vector<double> values;
    for (const auto& row : table.cells) {
      if (row[a].present) values.push_back(row[a].nll);
    }
    table.n.push_back(static_cast<int>(values.size()));
    table.mean.push_back(Mean(values));
    table.sd.push_back(SampleSd(values));
  }
  return table;
}

std::vector<NllCell> Column(const NllTable& table, size_t arm_index) {
  std::vector<NllCell> column;
  for (const auto& row : table.cells) column.push_back(row[arm_index]);
  return column;
}

std::vector<NllCell> ControlCells(const std::string& scale, const std::string& arm,
                                  const std::vector<uint64_t>& seeds, int64_t milestone,
                                  const RunIndex& index) {
  std::vector<NllCell> cells;
  cells.reserve(seeds.size());
  for (uint64_t seed : seeds) cells.push_back(ValCell(index.Find(scale, arm, seed), milestone));
  return cells;
}

// Missing entries of one (scale, arm, seed): the whole job when there is none or it ended without
// any evaluation, else one entry per expected cell that is missing.
void AddMissing(const std::string& scale, const std::string& arm, uint64_t seed,
                const std::vector<int64_t>& val_milestones, bool expects_test,
                const RunIndex& index, std::vector<MissingEntry>& missing) {
  const RunResult* run = index.Find(scale, arm, seed);
  MissingEntry base;
  base.scale = scale;
  base.arm = arm;
  base.seed = seed;
  if (run == nullptr) {
    base.reason = "no job for this (scale, arm, seed)";
    missing.push_back(base);
    return;
  }
  base.job_id = run->job_id;
  base.job_state = run->state;
  if (!run->excluded.empty()) {
    base.reason = "job " + Name(run->state) + ", not paired: " + run->excluded;
    missing.push_back(base);
    return;
  }
  if (IsTerminal(run->state) && !HasAnyEvaluation(*run)) {
    base.reason = "job " + Name(run->state) + " without any evaluation" + WithReason(*run);
    missing.push_back(base);
    return;
  }
  for (int64_t milestone : val_milestones) {
    NllCell cell = ValCell(run, milestone);
    if (cell.present) continue;
    MissingEntry entry = base;
    entry.milestone_tokens = milestone;
    entry.reason = cell.missing_reason;
    missing.push_back(std::move(entry));
  }
  if (expects_test) {
    NllCell cell = TestCell(run);
    if (!cell.present) {
      MissingEntry entry = base;
      entry.split = kSplitTest;
      entry.reason = cell.missing_reason;
      missing.push_back(std::move(entry));
    }
  }
}

// K_l of one layer as an evaluation gives it; 0: not given (>= 2).
int SourcesOf(const MilestoneResult& m, size_t layer) {
  if (layer < m.attention_sources.size()) return m.attention_sources[layer];
  return m.attention_sources.empty() && layer == 0 ? 1 : 0;
}

// Whether a layer's attention reads from two sources or more.
bool MultiSource(const MilestoneResult& m, size_t layer) {
  if (layer < m.attention_sources.size()) return m.attention_sources[layer] >= 2;
  return layer >= 1;  // layer 0 reads only the embedding
}

// JS of a layer in bits and its square root, from nats when the evaluation does not give them.
double JsBits(const MilestoneResult& m, size_t l) {
  return l < m.js_bits.size() ? m.js_bits[l] : m.js_nats[l] / kLn2;
}
double JsSqrt(const MilestoneResult& m, size_t l) {
  return l < m.js_sqrt.size() ? m.js_sqrt[l] : std::sqrt(m.js_nats[l]);
}

using SeedMilestones = std::vector<std::pair<uint64_t, const MilestoneResult*>>;

// Layer l of a depth row: means over the seeds with a value there.
DepthLayer MakeDepthLayer(const SeedMilestones& seeds, size_t l) {
  DepthLayer layer;
  layer.layer = static_cast<int>(l);
  std::vector<double> nats, bits, sqrts, hqk, hv;
  for (const auto& [seed, m] : seeds) {
    if (layer.sources == 0) layer.sources = SourcesOf(*m, l);
    if (l < m->js_nats.size()) {
      nats.push_back(m->js_nats[l]);
      bits.push_back(JsBits(*m, l));
      sqrts.push_back(JsSqrt(*m, l));
    }
    if (l < m->route_entropy_qk_nats.size()) hqk.push_back(m->route_entropy_qk_nats[l]);
    if (l < m->route_entropy_v_nats.size()) hv.push_back(m->route_entropy_v_nats[l]);
  }
  layer.n = static_cast<int>(std::max({nats.size(), hqk.size(), hv.size()}));
  layer.js_nats_mean = Mean(nats);
  layer.js_nats_sd = SampleSd(nats);
  layer.js_bits_mean = Mean(bits);
  layer.js_sqrt_mean = Mean(sqrts);
  layer.entropy_qk_mean = Mean(hqk);
  layer.entropy_v_mean = Mean(hv);
  return layer;
}

// A depth row's headline: per seed the mean over layers, then over seeds.
void FillDepthHeadline(const SeedMilestones& seeds, DepthRow& row) {
  std::vector<double> all_nats, all_bits, all_sqrt, multi_nats;
  for (const auto& [seed, m] : seeds) {
    if (m->js_nats.empty()) continue;
    std::vector<double> bits, sqrts, multi;
    for (size_t l = 0; l < m->js_nats.size(); ++l) {
      bits.push_back(JsBits(*m, l));
      sqrts.push_back(JsSqrt(*m, l));
      if (MultiSource(*m, l)) multi.push_back(m->js_nats[l]);
    }
    all_nats.push_back(Mean(m->js_nats));
    all_bits.push_back(Mean(bits));
    all_sqrt.push_back(Mean(sqrts));
    if (!multi.empty()) multi_nats.push_back(Mean(multi));
  }
  row.js_mean_nats = Mean(all_nats);
  row.js_mean_nats_sd = SampleSd(all_nats);
  row.js_mean_bits = Mean(all_bits);
  row.js_mean_sqrt = Mean(all_sqrt);
  row.js_mean_multi_source_nats = Mean(multi_nats);
}

DepthRow MakeDepthRow(const std::string& scale, const std::string& arm, int64_t milestone,
                      const SeedMilestones& seeds) {
  DepthRow row;
  row.scale = scale;
  row.arm = arm;
  row.milestone_tokens = milestone;
  size_t layers = 0;
  for (const auto& [seed, m] : seeds) {
    row.seeds.push_back(seed);
    layers = std::max({layers, m->js_nats.size(), m->route_entropy_qk_nats.size(),
                       m->route_entropy_v_nats.size()});
    if (!m->js_nats.empty()) row.has_js = true;
  }
  row.n = static_cast<int>(seeds.size());
  for (size_t l = 0; l < layers; ++l) row.layers.push_back(MakeDepthLayer(seeds, l));
  FillDepthHeadline(seeds, row);
  return row;
}

void FillCostRow(CostRow& row) {
  std::vector<double> tps_arm, tps_ref, tps_ratio, mem_arm, mem_ref, mem_ratio;
  for (const CostPair& p : row.pairs) {
    if (Finite(p.tokens_per_second_ratio)) {
      tps_arm.push_back(p.arm_tokens_per_second);
      tps_ref.push_back(p.reference_tokens_per_second);
      tps_ratio.push_back(p.tokens_per_second_ratio);
    }
    if (Finite(p.peak_memory_ratio)) {
      mem_arm.push_back(static_cast<double>(p.arm_peak_memory_bytes));
      mem_ref.push_back(static_cast<double>(p.reference_peak_memory_bytes));
      mem_ratio.push_back(p.peak_memory_ratio);
    }
  }
  row.n_throughput = static_cast<int>(tps_ratio.size());
  row.mean_arm_tokens_per_second = Mean(tps_arm);
  row.mean_reference_tokens_per_second = Mean(tps_ref);
  row.tokens_per_second_ratio = Mean(tps_ratio);
  if (!tps_ratio.empty()) {
    row.tokens_per_second_ratio_min = *std::min_element(tps_ratio.begin(), tps_ratio.end());
    row.tokens_per_second_ratio_max = *std::max_element(tps_ratio.begin(), tps_ratio.end());
  }
  row.n_memory = static_cast<int>(mem_ratio.size());
  row.mean_arm_peak_memory_bytes = Mean(mem_arm);
  row.mean_reference_peak_memory_bytes = Mean(mem_ref);
  row.peak_memory_ratio = Mean(mem_ratio);
  if (!mem_ratio.empty()) {
    row.peak_memory_ratio_min = *std::min_element(mem_ratio.begin(), mem_ratio.end());
    row.peak_memory_ratio_max = *std::max_element(mem_ratio.begin(), mem_ratio.end());
  }
}

bool HasThroughput(const RunResult& run) {
  return Finite(run.tokens_per_second) && run.tokens_per_second > 0;
}

// Why a seed's (arm, reference) pair is left out of the cost table; empty when it is in.
std::string CostExclusionReason(const RunResult* a, const RunResult* r, const std::string& arm,
                                const std::string& reference) {
  if (a == nullptr && r == nullptr) return "no " + arm + " or " + reference + " job";
  if (a == nullptr) return "no " + arm + " job";
  if (r == nullptr) return "no " + reference + " job";
  const bool tps = HasThroughput(*a) && HasThroughput(*r);
  const bool mem = a->peak_memory_bytes > 0 && r->peak_memory_bytes > 0;
  if (!tps && !mem) {
    // Say which side lacks which measurement.
    std::string why;
    for (const RunResult* run : {a, r}) {
      const bool has_tps = HasThroughput(*run);
      const bool has_mem = run->peak_memory_bytes > 0;
      if (has_tps && has_mem) continue;
      if (!why.empty()) why += "; ";
      why += run->arm + " has no " +
             (!has_tps && !has_mem ? "tokens/s and peak memory"
                                   : (!has_tps ? "tokens/s" : "peak memory"));
    }
    return "no measurement on both sides (" + why + ")";
  }
  if (a->hardware_kind.empty() || r->hardware_kind.empty()) return "hardware kind unknown";
  if (a->hardware_kind != r->hardware_kind) {
    return "different hardware kinds: " + arm + " on " + a->hardware_kind + ", " + reference +
           " on " + r->hardware_kind;
  }
  return "";
}

CostPair MakeCostPair(uint64_t seed, const RunResult& a, const RunResult& r) {
  CostPair pair;
  pair.seed = seed;
  pair.arm_job_id = a.job_id;
  pair.reference_job_id = r.job_id;
  if (HasThroughput(a) && HasThroughput(r)) {
    pair.arm_tokens_per_second = a.tokens_per_second;
    pair.reference_tokens_per_second = r.tokens_per_second;
    pair.tokens_per_second_ratio = a.tokens_per_second / r.tokens_per_second;
  }
  pair.arm_peak_memory_bytes = a.peak_memory_bytes;
  pair.reference_peak_memory_bytes = r.peak_memory_bytes;
  if (a.peak_memory_bytes > 0 && r.peak_memory_bytes > 0) {
    pair.peak_memory_ratio =
        static_cast<double>(a.peak_memory_bytes) / static_cast<double>(r.peak_memory_bytes);
  }
  return pair;
}

// The cost rows of one arm against the reference at one scale (one per hardware kind; one row
// with n = 0 when no pair could be formed) and the seeds left out, with why.
void AddCost(const std::string& scale, const std::string& arm, const std::string& reference,
             const std::vector<uint64_t>& seeds, const RunIndex& index, ReportTables& out) {
  std::map<std::string, CostRow> by_kind;
  for (uint64_t seed : seeds) {
    const RunResult* a = index.Find(scale, arm, seed);
    const RunResult* r = index.Find(scale, reference, seed);
    std::string why = CostExclusionReason(a, r, arm, reference);
    if (why.empty()) {
      CostRow& row = by_kind[a->hardware_kind];
      row.hardware_kind = a->hardware_kind;
      row.pairs.push_back(MakeCostPair(seed, *a, *r));
      continue;
    }
    CostExclusion ex;
    ex.scale = scale;
    ex.arm = arm;
    ex.seed = seed;
    if (a != nullptr) {
      ex.arm_job_id = a->job_id;
      ex.arm_hardware_kind = a->hardware_kind;
    }
    if (r != nullptr) {
      ex.reference_job_id = r->job_id;
      ex.reference_hardware_kind = r->hardware_kind;
    }
    ex.reason = std::move(why);
    out.cost_excluded.push_back(std::move(ex));
  }
  if (by_kind.empty()) by_kind[""];  // still a row, with n = 0
  for (auto& [kind, row] : by_kind) {
    row.scale = scale;
    row.arm = arm;
    row.reference_arm = reference;
    FillCostRow(row);
    out.cost.push_back(std::move(row));
  }
}

// ---- The builders of BuildTables, in the order it calls them -----------------------------

// What every builder reads: the input, its runs by cell, the main arms and the controls, and
// the statistics' parameters.
struct SweepPlan {
  const ReportInput& input;
  const RunIndex& index;
  std::string reference;
  std::vector<std::string> arms;  // main arms, the reference first
  std::vector<Control> controls;
  uint64_t bootstrap_seed = 0;
  int resamples = 0;
  double level = 0;
};

// The report's header: what it is of and with which parameters.
ReportTables TablesHeader(const ReportInput& input, uint64_t bootstrap_seed, int resamples,
                          double level) {
  ReportTables out;
  out.sweep_id = input.sweep_id;
  out.sweep_name = input.sweep_name;
  out.reference_arm = input.reference_arm.empty() ? "block" : input.reference_arm;
  out.level = level;
  out.bootstrap_resamples = resamples;
  out.bootstrap_seed = bootstrap_seed;
  out.target_delta = input.target_delta;
  return out;
}

// Scales in the input's order, then those only the runs show.
std::vector<std::string> Scales(const ReportInput& input) {
  std::vector<std::string> scales = input.scales;
  for (const RunResult& run : input.runs) AppendUnique(scales, run.scale);
  return scales;
}

// Main arms: the reference first, then the input's, then those of the runs that are no control.
std::vector<std::string> MainArms(const ReportInput& input, const std::string& reference) {
  std::vector<std::string> arms{reference};
  for (const std::string& arm : input.arms) AppendUnique(arms, arm);
  for (const RunResult& run : input.runs) {
    if (run.control_parent_arm.empty()) AppendUnique(arms, run.arm);
  }
  return arms;
}

// Controls: the input's, then those only the runs show; an arm named twice keeps its first
// parent and the largest stop.
std::vector<Control> Controls(const ReportInput& input) {
  std::vector<Control> controls;
  const auto add_control = [&](const std::string& arm, const std::string& parent, int64_t stop) {
    for (Control& c : controls) {
      if (c.arm == arm) {
        if (c.parent_arm.empty()) c.parent_arm = parent;
        c.stop_tokens = std::max(c.stop_tokens, stop);
        return;
      }
    }
    controls.push_back(Control{arm, parent, stop});
  };
  for (const ControlInfo& c : input.controls) add_control(c.arm, c.parent_arm, c.stop_tokens);
  for (const RunResult& run : input.runs) {
    if (!run.control_parent_arm.empty()) {
      add_control(run.arm, run.control_parent_arm, run.control_stop_tokens);
    }
  }
  return controls;
}

// A main arm listed as a control (or the other way round) would be compared twice: it is
// treated as a control, and a note says so.
void DropArmsThatAreControls(SweepPlan& sweep, std::vector<std::string>& notes) {
  for (const Control& c : sweep.controls) {
    auto it = std::find(sweep.arms.begin(), sweep.arms.end(), c.arm);
    if (it != sweep.arms.end() && c.arm != sweep.reference) {
      notes.push_back("arm " + c.arm + " is both a main arm and a control; treated as a control");
      sweep.arms.erase(it);
    }
  }
}

// A control is compared at its milestone: the largest evaluation milestone <= its stop (the
// scale's and its own runs'), else the last one when it has no stop.
int64_t ControlMilestone(const SweepPlan& sweep, const std::string& scale, const Control& c,
                         std::set<int64_t> candidates) {
  for (const RunResult& run : sweep.input.runs) {
    if (run.scale == scale && run.arm == c.arm) {
      for (const auto& [tokens, m] : run.milestones) candidates.insert(tokens);
    }
  }
  candidates.erase(0);
  int64_t chosen = c.stop_tokens;
  if (c.stop_tokens > 0) {
    auto it = candidates.upper_bound(c.stop_tokens);
    if (it != candidates.begin()) chosen = *std::prev(it);
  } else if (!candidates.empty()) {
    chosen = *candidates.rbegin();
  }
  return chosen;
}

// What one scale expects: the seeds and milestones of the input and of its runs.
ScalePlan PlanScale(const SweepPlan& sweep, const std::string& scale) {
  const ReportInput& input = sweep.input;
  ScalePlan plan;
  plan.scale = scale;
  std::set<uint64_t> seeds(input.seeds.begin(), input.seeds.end());
  std::set<int64_t> milestones(input.milestones.begin(), input.milestones.end());
  for (const RunResult& run : input.runs) {
    if (run.scale != scale) continue;
    seeds.insert(run.seed);
    if (run.control_parent_arm.empty()) {
      for (const auto& [tokens, m] : run.milestones) milestones.insert(tokens);
      if (Finite(run.test_nll)) plan.expects_test = true;
    }
  }
  milestones.erase(0);
  plan.seeds.assign(seeds.begin(), seeds.end());
  plan.milestones.assign(milestones.begin(), milestones.end());
  for (const Control& c : sweep.controls) {
    plan.control_milestone[c.arm] = ControlMilestone(sweep, scale, c, milestones);
  }
  return plan;
}

// The NLL tables of a scale (val by milestone, then test) and the main paired rows.
void AddNllAndPairedRows(const SweepPlan& sweep, const ScalePlan& plan, ReportTables& out) {
  std::vector<std::pair<std::string, int64_t>> splits;
  for (int64_t m : plan.milestones) splits.emplace_back(kSplitVal, m);
  if (plan.expects_test) splits.emplace_back(kSplitTest, 0);
  const std::vector<std::string>& arms = sweep.arms;
  for (const auto& [split, milestone] : splits) {
    NllTable table = MakeNllTable(plan.scale, split, milestone, arms, plan.seeds, sweep.index);
    const std::vector<NllCell> reference_cells = Column(table, 0);
    for (size_t a = 1; a < arms.size(); ++a) {
      out.paired.push_back(MakePairedRow(plan.scale, split, milestone, arms[a], sweep.reference,
                                         "main", plan.seeds, Column(table, a), reference_cells,
                                         sweep.bootstrap_seed, sweep.resamples, sweep.level,
                                         sweep.input.target_delta));
    }
    out.nll.push_back(std::move(table));
  }
}

// Trend of one main arm: Δ against ln(tokens) across the scale's validation milestones.
TrendRow MakeTrendRow(const SweepPlan& sweep, const ScalePlan& plan, const std::string& arm,
                      const std::vector<PairedRow>& paired) {
  TrendRow trend;
  trend.scale = plan.scale;
  trend.arm = arm;
  trend.reference_arm = sweep.reference;
  trend.milestones = plan.milestones;
  std::vector<const PairedRow*> rows;
  for (const PairedRow& row : paired) {
    if (row.scale == plan.scale && row.arm == arm && row.split == kSplitVal) {
      rows.push_back(&row);
      if (row.summary.n >= 1) {
        trend.gap = row.summary.mean;
        trend.gap_milestone_tokens = row.milestone_tokens;
      }
    }
  }
  std::vector<double> slopes;
  for (size_t s = 0; s < plan.seeds.size(); ++s) {
    TrendSeed ts;
    ts.seed = plan.seeds[s];
    std::vector<double> log_tokens;
    for (const PairedRow* row : rows) {
      const SeedPair& p = row->pairs[s];
      if (!p.complete || row->milestone_tokens <= 0) continue;
      ts.milestones.push_back(row->milestone_tokens);
      ts.deltas.push_back(p.delta);
      log_tokens.push_back(std::log(static_cast<double>(row->milestone_tokens)));
    }
    ts.slope = OlsSlope(log_tokens, ts.deltas);
    if (Finite(ts.slope)) slopes.push_back(ts.slope);
    trend.seeds.push_back(std::move(ts));
  }
  trend.summary = SummarizeSlopes(slopes, sweep.level, trend.gap);
  return trend;
}

void AddTrendRows(const SweepPlan& sweep, const ScalePlan& plan, ReportTables& out) {
  for (size_t a = 1; a < sweep.arms.size(); ++a) {
    out.trend.push_back(MakeTrendRow(sweep, plan, sweep.arms[a], out.paired));
  }
}

// Controls: against the parent, and against the reference when that is another arm.
void AddControlRows(const SweepPlan& sweep, const ScalePlan& plan, ReportTables& out) {
  const std::string& scale = plan.scale;
  const std::string& reference = sweep.reference;
  const auto row = [&](const Control& c, int64_t milestone, const std::vector<NllCell>& cells,
                       const std::string& against, const char* kind) {
    return MakePairedRow(scale, kSplitVal, milestone, c.arm, against, kind, plan.seeds, cells,
                         ControlCells(scale, against, plan.seeds, milestone, sweep.index),
                         sweep.bootstrap_seed, sweep.resamples, sweep.level,
                         sweep.input.target_delta);
  };
  for (const Control& c : sweep.controls) {
    const int64_t milestone = plan.control_milestone.at(c.arm);
    const std::vector<NllCell> control_cells =
        ControlCells(scale, c.arm, plan.seeds, milestone, sweep.index);
    const std::string parent = c.parent_arm.empty() ? reference : c.parent_arm;
    out.controls.push_back(row(c, milestone, control_cells, parent, "control_vs_parent"));
    if (parent != reference) {
      out.controls.push_back(row(c, milestone, control_cells, reference, "control_vs_reference"));
    }
  }
}

// The missing cells of a scale's main arms and controls. Returns whether every expected job
// exists.
bool AddMissingCells(const SweepPlan& sweep, const ScalePlan& plan, ReportTables& out) {
  bool every_job_exists = true;
  for (const std::string& arm : sweep.arms) {
    for (uint64_t seed : plan.seeds) {
      if (sweep.index.Find(plan.scale, arm, seed) == nullptr) every_job_exists = false;
      AddMissing(plan.scale, arm, seed, plan.milestones, plan.expects_test, sweep.index,
                 out.missing);
    }
  }
  for (const Control& c : sweep.controls) {
    const int64_t milestone = plan.control_milestone.at(c.arm);
    std::vector<int64_t> expected;
    if (milestone > 0) expected.push_back(milestone);
    for (uint64_t seed : plan.seeds) {
      if (sweep.index.Find(plan.scale, c.arm, seed) == nullptr) every_job_exists = false;
      AddMissing(plan.scale, c.arm, seed, expected, false, sweep.index, out.missing);
    }
  }
  return every_job_exists;
}

// The seeds of one (scale, arm) with depth diagnostics at a milestone.
SeedMilestones WithDepthData(const SweepPlan& sweep, const ScalePlan& plan, const std::string& arm,
                             int64_t milestone) {
  SeedMilestones with_data;
  for (uint64_t seed : plan.seeds) {
    const RunResult* run = sweep.index.Find(plan.scale, arm, seed);
    if (run == nullptr) continue;
    auto it = run->milestones.find(milestone);
    if (it == run->milestones.end()) continue;
    const MilestoneResult& m = it->second;
    if (m.js_nats.empty() && m.route_entropy_qk_nats.empty() && m.route_entropy_v_nats.empty()) {
      continue;
    }
    with_data.emplace_back(seed, &m);
  }
  return with_data;
}

// Depth routes: every arm (controls included) and milestone with diagnostics.
void AddDepthRows(const SweepPlan& sweep, const ScalePlan& plan, ReportTables& out) {
  std::vector<std::string> depth_arms = sweep.arms;
  for (const Control& c : sweep.controls) AppendUnique(depth_arms, c.arm);
  for (const std::string& arm : depth_arms) {
    std::set<int64_t> arm_milestones;
    for (const RunResult& run : sweep.input.runs) {
      if (run.scale != plan.scale || run.arm != arm) continue;
      for (const auto& [tokens, m] : run.milestones) arm_milestones.insert(tokens);
    }
    for (int64_t milestone : arm_milestones) {
      const SeedMilestones with_data = WithDepthData(sweep, plan, arm, milestone);
      if (!with_data.empty()) {
        out.depth.push_back(MakeDepthRow(plan.scale, arm, milestone, with_data));
      }
    }
  }
}

// Cost: every arm but the reference, controls included.
void AddCostRows(const SweepPlan& sweep, const ScalePlan& plan, ReportTables& out) {
  for (size_t a = 1; a < sweep.arms.size(); ++a) {
    AddCost(plan.scale, sweep.arms[a], sweep.reference, plan.seeds, sweep.index, out);
  }
  for (const Control& c : sweep.controls) {
    if (c.arm != sweep.reference) {
      AddCost(plan.scale, c.arm, sweep.reference, plan.seeds, sweep.index, out);
    }
  }
}

}  // namespace

std::string_view RunStateName(RunState state) {
  switch (state) {
    case RunState::kPending:
      return "PENDING";
    case RunState::kLeased:
      return "LEASED";
    case RunState::kRunning:
      return "RUNNING";
    case RunState::kSucceeded:
      return "SUCCEEDED";
    case RunState::kFailed:
      return "FAILED";
    case RunState::kCancelled:
      return "CANCELLED";
    case RunState::kUnknown:
      break;
  }
  return "";
}

// The header, then per scale: its NLL tables and main paired rows, their trend, the controls'
// rows, the missing cells, the depth-route diagnostics and the cost.
ReportTables BuildTables(const ReportInput& input, uint64_t bootstrap_seed, int resamples,
                         double level) {
  ReportTables out = TablesHeader(input, bootstrap_seed, resamples, level);
  const RunIndex index(input.runs, out.notes);
  out.scales = Scales(input);
  const std::string& reference = out.reference_arm;
  SweepPlan sweep{input,           index,          reference, MainArms(input, reference),
                  Controls(input), bootstrap_seed, resamples, level};
  DropArmsThatAreControls(sweep, out.notes);

  out.jobs_total = static_cast<int>(input.runs.size());
  for (const RunResult& run : input.runs) {
    if (IsTerminal(run.state)) ++out.jobs_ended;
  }
  bool every_job_exists = true;
  for (const std::string& scale : out.scales) {
    const ScalePlan plan = PlanScale(sweep, scale);
    AddNllAndPairedRows(sweep, plan, out);
    AddTrendRows(sweep, plan, out);
    AddControlRows(sweep, plan, out);
    if (!AddMissingCells(sweep, plan, out)) every_job_exists = false;
    AddDepthRows(sweep, plan, out);
    AddCostRows(sweep, plan, out);
  }
  out.complete = every_job_exists && out.jobs_ended == out.jobs_total;
  return out;
}

}  // namespace rdattn::stats
