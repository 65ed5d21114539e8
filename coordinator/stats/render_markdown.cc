// RenderMarkdown(): report.md, one function per section, in the order they appear.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/number_format.h"
#include "coordinator/stats/plots.h"
#include "coordinator/stats/render.h"

namespace rdattn::stats {
namespace {

// ---- Number formatting (common/number_format.h; "n/a" for an undefined value) ---------------

constexpr std::string_view kUndefined = "n/a";

using numfmt::Printf;

std::string Fixed(double v, int decimals) { return numfmt::Fixed(v, decimals, kUndefined); }

std::string NllOrMissing(double v) { return std::isnan(v) ? "missing" : Fixed(v, 4); }

std::string Signed(double v, int decimals) { return numfmt::Signed(v, decimals, kUndefined); }

std::string Percent(double fraction) {
  if (std::isnan(fraction)) return "n/a";
  return Printf("%+.2f%%", 100.0 * fraction);
}

std::string PValue(double p) { return numfmt::PValue(p, kUndefined); }

std::string Interval(double low, double high, bool defined, int decimals) {
  if (!defined) return "n/a";
  return "[" + Signed(low, decimals) + ", " + Signed(high, decimals) + "]";
}

std::string Bytes(double b) {
  if (std::isnan(b)) return "n/a";
  if (b >= 1024.0 * 1024.0 * 1024.0) return Printf("%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
  if (b >= 1024.0 * 1024.0) return Printf("%.1f MiB", b / (1024.0 * 1024.0));
  return Printf("%.0f B", b);
}

// 250.1M, 2B, 512k, 999.
std::string Tokens(int64_t t) {
  const double v = static_cast<double>(t);
  if (t >= 1000000000) return Printf("%.4g", v / 1e9) + "B";
  if (t >= 1000000) return Printf("%.4g", v / 1e6) + "M";
  if (t >= 1000) return Printf("%.4g", v / 1e3) + "k";
  return std::to_string(t);
}

std::string Where(const std::string& split, int64_t milestone) {
  if (split == kSplitTest) return "test (end of run)";
  if (milestone == 0) return "whole job";
  return Tokens(milestone);
}

// Markdown cells must not break the table.
std::string Cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string Row(const std::vector<std::string>& cells) {
  std::string line = "|";
  for (const std::string& c : cells) line += " " + Cell(c) + " |";
  return line + "\n";
}

std::string Header(const std::vector<std::string>& cells) {
  std::string line = Row(cells) + "|";
  for (size_t i = 0; i < cells.size(); ++i) line += "---|";
  return line + "\n";
}

const PairedRow* LastMainRow(const ReportTables& t, const std::string& scale,
                             const std::string& arm) {
  const PairedRow* last = nullptr;
  for (const PairedRow& row : t.paired) {
    if (row.scale == scale && row.arm == arm && row.split == kSplitVal) last = &row;
  }
  return last;
}

std::vector<std::string> PairedColumns(bool with_scale_and_kind) {
  std::vector<std::string> cols;
  if (with_scale_and_kind) cols = {"scale", "against"};
  cols.insert(cols.end(), {"tokens", "comparison", "n", "mean Δ", "sd Δ", "t CI", "bootstrap CI",
                           "wins", "ties", "sign-test p", "t-test p", "ppl red., mean per seed",
                           "ppl red., of mean Δ"});
  return cols;
}

std::vector<std::string> PairedCells(const PairedRow& row, bool with_scale_and_kind) {
  const PairedSummary& s = row.summary;
  std::vector<std::string> cells;
  if (with_scale_and_kind) {
    cells = {row.scale, row.kind == "control_vs_parent" ? "parent" : "reference"};
  }
  cells.insert(cells.end(),
               {Where(row.split, row.milestone_tokens), row.arm + " − " + row.reference_arm,
                std::to_string(s.n) + " of " + std::to_string(row.n_expected), Signed(s.mean, 4),
                Fixed(s.sd, 4), Interval(s.t_ci_low, s.t_ci_high, s.t_ci_defined, 4),
                Interval(s.bootstrap_ci_low, s.bootstrap_ci_high, s.bootstrap_ci_defined, 4),
                std::to_string(s.wins) + "/" + std::to_string(s.n), std::to_string(s.ties),
                PValue(s.sign_test_p), PValue(s.t_test_p), Percent(s.ppl_reduction_mean_per_seed),
                Percent(s.ppl_reduction_of_mean)});
  return cells;
}

std::string SeedsCell(const SeedsForDelta& e) {
  std::string seeds;
  if (e.seeds == kSeedsBeyondSearch) {
    seeds = "> " + std::to_string(kMaxSeedsSearched);
  } else if (e.seeds <= 0) {
    return "n/a";
  } else {
    seeds = std::to_string(e.seeds);
  }
  return seeds + " (now " + Fixed(e.power_at_n, 2) + ")";
}

std::string OutlierList(const PairedRow& row) {
  std::string out;
  for (const SeedPair& p : row.pairs) {
    if (!p.outlier) continue;
    if (!out.empty()) out += ", ";
    out += "seed " + std::to_string(p.seed) + " (Δ " + Signed(p.delta, 4) + ", z " +
           (std::isfinite(p.robust_z) ? Signed(p.robust_z, 1)
                                      : std::string(p.robust_z > 0 ? "+inf" : "-inf")) +
           ")";
  }
  return out.empty() ? "none" : out;
}

std::string DeltaLabel(double d) { return Printf("%g", d); }

// ---- Sections of report.md, in order ----------------------------------------------------

// Every paired row, main and control, in that order (the Power and Robustness tables).
std::vector<const PairedRow*> AllRows(const ReportTables& t) {
  std::vector<const PairedRow*> rows;
  for (const PairedRow& r : t.paired) rows.push_back(&r);
  for (const PairedRow& r : t.controls) rows.push_back(&r);
  return rows;
}

int LevelPercent(const ReportTables& t) { return static_cast<int>(std::lround(100.0 * t.level)); }

// Title, the sweep's facts, and the partial-report and duplicate notes.
void Overview(std::ostringstream& md, const ReportTables& t) {
  const int pct = LevelPercent(t);
  md << "# Paired report: " << (t.sweep_name.empty() ? t.sweep_id : t.sweep_name) << "\n\n";
  md << Header({"", ""});
  md << Row({"sweep", t.sweep_id});
  md << Row({"reference arm", t.reference_arm});
  md << Row({"complete", (t.complete ? "yes" : "no") + std::string(": ") +
                             std::to_string(t.jobs_ended) + " of " + std::to_string(t.jobs_total) +
                             " jobs ended"});
  md << Row({"confidence level", std::to_string(pct) + "%"});
  md << Row({"bootstrap", std::to_string(t.bootstrap_resamples) + " resamples, seed " +
                              std::to_string(t.bootstrap_seed)});
  md << Row({"missing cells", std::to_string(t.missing.size())});
  md << "\n";
  if (!t.complete) {
    md << "> Partial report: not every job has ended. Cells not reached yet are listed under "
          "\"Missing data\".\n\n";
  }
  for (const std::string& note : t.notes) md << "> Note: " << note << "\n\n";
}

// Headline: each arm at its scale's last validation milestone.
void Summary(std::ostringstream& md, const ReportTables& t) {
  const int pct = LevelPercent(t);
  md << "## Summary\n\nEach arm against " << t.reference_arm
     << " at the last validation milestone of its scale.\n\n";
  md << Header({"scale", "tokens", "arm", "n", "mean Δ NLL",
                "bootstrap " + std::to_string(pct) + "% CI", "t " + std::to_string(pct) + "% CI",
                "wins", "ppl red., mean per seed", "ppl red., of mean Δ"});
  bool any_summary = false;
  for (const std::string& scale : t.scales) {
    std::vector<std::string> seen;
    for (const PairedRow& row : t.paired) {
      if (row.scale != scale || row.split != kSplitVal) continue;
      if (std::find(seen.begin(), seen.end(), row.arm) != seen.end()) continue;
      seen.push_back(row.arm);
      const PairedRow& last = *LastMainRow(t, scale, row.arm);
      const PairedSummary& s = last.summary;
      any_summary = true;
      md << Row({scale, Tokens(last.milestone_tokens), last.arm,
                 std::to_string(s.n) + " of " + std::to_string(last.n_expected), Signed(s.mean, 4),
                 Interval(s.bootstrap_ci_low, s.bootstrap_ci_high, s.bootstrap_ci_defined, 4),
                 Interval(s.t_ci_low, s.t_ci_high, s.t_ci_defined, 4),
                 std::to_string(s.wins) + "/" + std::to_string(s.n),
                 Percent(s.ppl_reduction_mean_per_seed), Percent(s.ppl_reduction_of_mean)});
    }
  }
  if (!any_summary) md << Row({"n/a", "", "no paired rows", "0", "", "", "", "", "", ""});
  md << "\n";
}

// Embeds the four PNGs from plots_dir_relative (nothing when it is empty).
void Plots(std::ostringstream& md, const ReportTables& t, const std::string& plots_dir_relative) {
  if (plots_dir_relative.empty()) return;
  const int pct = LevelPercent(t);
  const std::string dir =
      plots_dir_relative.back() == '/' ? plots_dir_relative : plots_dir_relative + "/";
  md << "## Plots\n\n";
  md << "Validation NLL against training tokens, mean over seeds, band from the lowest to the "
        "highest seed:\n\n![Validation NLL against tokens]("
     << dir << kPlotNllVsTokens << ")\n\n";
  md << "Per-seed Δ NLL (arm − " << t.reference_arm
     << ") at the last milestone; the large marker is the mean with its bootstrap " << pct
     << "% CI:\n\n![Per-seed delta at the last milestone](" << dir << kPlotDeltaLastMilestone
     << ")\n\n";
  md << "JS(QK‖V) by layer at the last milestone, mean over seeds (error bars: sd over "
        "seeds):\n\n![JS by layer]("
     << dir << kPlotJsByLayer << ")\n\n";
  md << "Δ NLL (arm − " << t.reference_arm
     << ") per seed against training tokens (thin lines), and the mean over seeds (thick):"
        "\n\n![Per-seed delta against tokens]("
     << dir << kPlotDeltaVsTokens << ")\n\n";
}

// One per-seed NLL table (a validation milestone, or the test split) of a scale, with each
// arm's n and mean and each paired row's n and mean Δ below it.
void NllTableSection(std::ostringstream& md, const ReportTables& t, const NllTable& table) {
  const std::string& scale = table.scale;
  md << "### "
     << (table.split == kSplitTest
             ? "Test NLL per seed, end of run"
             : "Validation NLL per seed at " + Tokens(table.milestone_tokens) + " tokens")
     << "\n\n";
  std::vector<std::string> cols{"seed"};
  for (const std::string& arm : table.arms) cols.push_back(arm);
  for (size_t a = 1; a < table.arms.size(); ++a) {
    cols.push_back("Δ " + table.arms[a] + " − " + table.arms[0]);
  }
  md << Header(cols);
  for (size_t s = 0; s < table.seeds.size(); ++s) {
    std::vector<std::string> cells{std::to_string(table.seeds[s])};
    for (const NllCell& c : table.cells[s])
      cells.push_back(c.present ? Fixed(c.nll, 4) : "missing");
    for (size_t a = 1; a < table.arms.size(); ++a) {
      const NllCell& r = table.cells[s][0];
      const NllCell& c = table.cells[s][a];
      cells.push_back(r.present && c.present ? Signed(c.nll - r.nll, 4) : "missing");
    }
    md << Row(cells);
  }
  std::vector<std::string> n_row{"n"}, mean_row{"mean"};
  for (size_t a = 0; a < table.arms.size(); ++a) {
    n_row.push_back(std::to_string(table.n[a]));
    mean_row.push_back(Fixed(table.mean[a], 4));
  }
  for (const PairedRow& row : t.paired) {
    if (row.scale == scale && row.split == table.split &&
        row.milestone_tokens == table.milestone_tokens) {
      n_row.push_back(std::to_string(row.summary.n));
      mean_row.push_back(Signed(row.summary.mean, 4));
    }
  }
  md << Row(n_row) << Row(mean_row) << "\n";
}

// "## Scale S": its NLL tables, then its paired statistics.
void Scale(std::ostringstream& md, const ReportTables& t, const std::string& scale) {
  md << "## Scale " << scale << "\n\n";
  for (const NllTable& table : t.nll) {
    if (table.scale == scale) NllTableSection(md, t, table);
  }
  md << "### Paired statistics, scale " << scale << "\n\n";
  md << Header(PairedColumns(false));
  bool any = false;
  for (const PairedRow& row : t.paired) {
    if (row.scale != scale) continue;
    any = true;
    md << Row(PairedCells(row, false));
  }
  if (!any) md << "\nNo arm other than the reference.\n";
  md << "\n";
}

void Power(std::ostringstream& md, const ReportTables& t) {
  const std::vector<const PairedRow*> rows = AllRows(t);
  md << "## Power\n\nTwo-sided paired t test at α = " << Printf("%g", 1.0 - t.level) << " and "
     << static_cast<int>(std::lround(100.0 * kPowerTarget))
     << "% power, noncentral t, with each row's observed sd of Δ: the minimum detectable |Δ| "
        "at the current n, and the seeds needed to detect |Δ| (the power at the current n in "
        "brackets).\n\n";
  std::vector<std::string> cols{"scale", "tokens", "comparison", "n", "sd Δ", "MDE (nats)"};
  for (double d : kPlannedDeltas) cols.push_back("seeds for " + DeltaLabel(d));
  const bool target = std::isfinite(t.target_delta) && t.target_delta != 0.0;
  if (target) cols.push_back("seeds for " + DeltaLabel(std::fabs(t.target_delta)) + " (target)");
  md << Header(cols);
  for (const PairedRow* row : rows) {
    std::vector<std::string> cells{
        row->scale,
        Where(row->split, row->milestone_tokens),
        row->arm + " − " + row->reference_arm,
        std::to_string(row->summary.n) + " of " + std::to_string(row->n_expected),
        Fixed(row->summary.sd, 4),
        Fixed(row->power.mde, 4)};
    for (const SeedsForDelta& e : row->power.seeds_needed) cells.push_back(SeedsCell(e));
    md << Row(cells);
  }
}

void Robustness(std::ostringstream& md, const ReportTables& t) {
  const std::vector<const PairedRow*> rows = AllRows(t);
  md << "\n## Robustness\n\nMedian Δ, the scaled MAD (1.4826 · median |Δ − median|), the "
        "Wilcoxon signed-rank test (zeros dropped, midranks for ties; exact for up to "
     << kWilcoxonExactMax
     << " non-zero Δ, else normal) and the outlier seeds: |Δ − median| > 3 · scaled MAD "
        "(z = (Δ − median) / scaled MAD).\n\n";
  md << Header({"scale", "tokens", "comparison", "n", "median Δ", "scaled MAD", "Wilcoxon W+",
                "Wilcoxon p", "outliers"});
  for (const PairedRow* row : rows) {
    const WilcoxonResult& w = row->robust.wilcoxon;
    md << Row(
        {row->scale, Where(row->split, row->milestone_tokens),
         row->arm + " − " + row->reference_arm,
         std::to_string(row->summary.n) + " of " + std::to_string(row->n_expected),
         Signed(row->robust.median, 4), Fixed(row->robust.mad_scaled, 4),
         w.n > 0 ? Printf("%g", w.w_plus) + " of " + std::to_string(w.n * (w.n + 1) / 2) : "n/a",
         PValue(w.p) + (w.n == 0  ? ""
                        : w.exact ? " (exact)"
                                  : " (normal)"),
         OutlierList(*row)});
  }
}

void Trend(std::ostringstream& md, const ReportTables& t) {
  const int pct = LevelPercent(t);
  md << "\n## Trend\n\nPer seed, the least-squares slope of Δ against ln(tokens) across the "
        "scale's validation milestones (nats per e-fold of tokens; seeds with fewer than 2 "
        "milestones are left out); then the mean over seeds with its t "
     << pct
     << "% interval. The gap (mean Δ at the last milestone) widens when the interval "
        "excludes 0 on the gap's side, narrows when it excludes 0 on the other side.\n\n";
  if (t.trend.empty()) {
    md << "No arm other than the reference.\n\n";
  } else {
    md << Header({"scale", "comparison", "milestones", "seeds with a slope", "mean slope",
                  "t " + std::to_string(pct) + "% CI", "t-test p", "gap at last milestone",
                  "reading"});
    for (const TrendRow& tr : t.trend) {
      const TrendSummary& s = tr.summary;
      md << Row({tr.scale, tr.arm + " − " + tr.reference_arm, std::to_string(tr.milestones.size()),
                 std::to_string(s.n) + " of " + std::to_string(tr.seeds.size()), Signed(s.mean, 5),
                 Interval(s.ci_low, s.ci_high, s.ci_defined, 5), PValue(s.t_test_p),
                 std::isnan(tr.gap) ? "n/a"
                                    : Signed(tr.gap, 4) + " at " + Tokens(tr.gap_milestone_tokens),
                 s.reading + (s.note.empty() ? "" : " (" + s.note + ")")});
    }
    md << "\nPer-seed slopes:\n\n";
    md << Header({"scale", "comparison", "seed", "milestones", "slope"});
    for (const TrendRow& tr : t.trend) {
      for (const TrendSeed& ts : tr.seeds) {
        md << Row({tr.scale, tr.arm + " − " + tr.reference_arm, std::to_string(ts.seed),
                   std::to_string(ts.milestones.size()), Signed(ts.slope, 5)});
      }
    }
    md << "\n";
  }
}

void Controls(std::ostringstream& md, const ReportTables& t) {
  md << "## Controls\n\n";
  if (t.controls.empty()) {
    md << "No controls in this sweep.\n\n";
  } else {
    md << "Each control against its parent at the control's milestone, and against "
       << t.reference_arm << ".\n\n";
    md << Header(PairedColumns(true));
    for (const PairedRow& row : t.controls) md << Row(PairedCells(row, true));
    md << "\nPer seed:\n\n";
    md << Header({"scale", "control", "vs", "tokens", "seed", "control NLL", "vs NLL", "Δ"});
    for (const PairedRow& row : t.controls) {
      for (const SeedPair& p : row.pairs) {
        md << Row({row.scale, row.arm, row.reference_arm, Tokens(row.milestone_tokens),
                   std::to_string(p.seed), NllOrMissing(p.arm_nll), NllOrMissing(p.reference_nll),
                   p.complete ? Signed(p.delta, 4) : "missing"});
      }
    }
    md << "\n";
  }
}

// Headline JS per (scale, arm, milestone), then per layer at each arm's last milestone.
void DepthRoutes(std::ostringstream& md, const ReportTables& t) {
  md << "## Depth routes\n\n";
  if (t.depth.empty()) {
    md << "No depth-route diagnostics were reported.\n\n";
  } else {
    md << Header({"scale", "arm", "tokens", "n", "JS all layers (nats)", "sd over seeds",
                  "JS (bits)", "√JS", "JS layers with K ≥ 2 (nats)"});
    for (const DepthRow& row : t.depth) {
      md << Row({row.scale, row.arm, Tokens(row.milestone_tokens), std::to_string(row.n),
                 Fixed(row.js_mean_nats, 4), Fixed(row.js_mean_nats_sd, 4),
                 Fixed(row.js_mean_bits, 4), Fixed(row.js_mean_sqrt, 4),
                 Fixed(row.js_mean_multi_source_nats, 4)});
    }
    md << "\nPer layer at each arm's last milestone (every milestone: depth_layers.csv).\n\n";
    for (size_t i = 0; i < t.depth.size(); ++i) {
      const DepthRow& row = t.depth[i];
      const bool last = i + 1 == t.depth.size() || t.depth[i + 1].scale != row.scale ||
                        t.depth[i + 1].arm != row.arm;
      if (!last) continue;
      md << "#### " << row.scale << ", " << row.arm << ", " << Tokens(row.milestone_tokens)
         << " tokens (n = " << row.n << ")\n\n";
      md << Header(
          {"layer", "K", "n", "JS nats (mean ± sd)", "JS bits", "√JS", "H(QK) nats", "H(V) nats"});
      for (const DepthLayer& l : row.layers) {
        const std::string k = l.sources > 0 ? std::to_string(l.sources) : "≥ 2";
        const std::string js = std::isnan(l.js_nats_mean)
                                   ? "n/a"
                                   : Fixed(l.js_nats_mean, 4) + " ± " + Fixed(l.js_nats_sd, 4);
        md << Row({std::to_string(l.layer), k, std::to_string(l.n), js, Fixed(l.js_bits_mean, 4),
                   Fixed(l.js_sqrt_mean, 4), Fixed(l.entropy_qk_mean, 4),
                   Fixed(l.entropy_v_mean, 4)});
      }
      md << "\n";
    }
  }
}

void Cost(std::ostringstream& md, const ReportTables& t) {
  md << "## Cost\n\nArm / " << t.reference_arm
     << ", paired per seed on the same hardware kind; the ratio is the mean of per-seed ratios "
        "(min–max in brackets).\n\n";
  md << Header({"scale", "arm", "hardware", "n (tokens/s)", "tokens/s, arm", "tokens/s, ref",
                "tokens/s ratio", "n (memory)", "peak memory, arm", "peak memory, ref",
                "memory ratio"});
  for (const CostRow& row : t.cost) {
    const auto ratio = [](double mean, double lo, double hi) {
      if (std::isnan(mean)) return std::string("n/a");
      return Fixed(mean, 3) + " [" + Fixed(lo, 3) + "–" + Fixed(hi, 3) + "]";
    };
    md << Row({row.scale, row.arm, row.hardware_kind.empty() ? "n/a" : row.hardware_kind,
               std::to_string(row.n_throughput), Fixed(row.mean_arm_tokens_per_second, 0),
               Fixed(row.mean_reference_tokens_per_second, 0),
               ratio(row.tokens_per_second_ratio, row.tokens_per_second_ratio_min,
                     row.tokens_per_second_ratio_max),
               std::to_string(row.n_memory), Bytes(row.mean_arm_peak_memory_bytes),
               Bytes(row.mean_reference_peak_memory_bytes),
               ratio(row.peak_memory_ratio, row.peak_memory_ratio_min, row.peak_memory_ratio_max)});
  }
  md << "\n";
  if (!t.cost_excluded.empty()) {
    md << "Pairs left out of the cost table:\n\n";
    md << Header(
        {"scale", "arm", "seed", "arm job", "ref job", "arm hardware", "ref hardware", "reason"});
    for (const CostExclusion& e : t.cost_excluded) {
      md << Row({e.scale, e.arm, std::to_string(e.seed), e.arm_job_id, e.reference_job_id,
                 e.arm_hardware_kind, e.reference_hardware_kind, e.reason});
    }
    md << "\n";
  }
}

void MissingData(std::ostringstream& md, const ReportTables& t) {
  md << "## Missing data\n\n";
  if (t.missing.empty()) {
    md << "None: every expected cell has a value.\n\n";
  } else {
    md << "Cells the sweep expects but has no value for. They are shown as \"missing\" above "
          "and are not counted in any n.\n\n";
    md << Header({"scale", "arm", "seed", "at", "job", "state", "reason"});
    for (const MissingEntry& m : t.missing) {
      md << Row({m.scale, m.arm, std::to_string(m.seed), Where(m.split, m.milestone_tokens),
                 m.job_id.empty() ? "none" : m.job_id,
                 m.job_state == RunState::kUnknown ? "n/a" : std::string(RunStateName(m.job_state)),
                 m.reason});
    }
    md << "\n";
  }
}

void Legend(std::ostringstream& md, const ReportTables& t) {
  const int pct = LevelPercent(t);
  md << "## Legend\n\n"
     << "Full definitions: docs/report.md.\n\n"
     << "- Δ_i = NLL_arm,i − NLL_ref,i for seed i (validation NLL in nats/token at the same "
        "milestone, same scale, same seed). Negative: the arm is better.\n"
     << "- n: complete pairs (both sides present); \"n of N\": N seeds expected. Incomplete "
        "pairs are shown as missing and are not in n.\n"
     << "- mean Δ = (1/n) Σ Δ_i; sd = √(Σ (Δ_i − mean)² / (n − 1)); se = sd / √n.\n"
     << "- t CI (" << pct << "%): mean ± t_{" << Printf("%g", 0.5 * (1.0 + t.level))
     << ", n−1} · se (Student t quantile); n/a for n < 2.\n"
     << "- bootstrap CI (" << pct << "%): " << t.bootstrap_resamples
     << " resamples of n deltas with replacement, indices from SplitMix64 seeded with "
     << t.bootstrap_seed << " (rejection-sampled, no modulo bias); the interval is the percentiles "
     << Printf("%g", (1.0 - t.level) / 2.0) << " and " << Printf("%g", 1.0 - (1.0 - t.level) / 2.0)
     << " of the sorted resample means, linear interpolation between order statistics "
        "(h = (B − 1)·q; Hyndman–Fan type 7). n/a for n < 2.\n"
     << "- wins k/n: pairs with Δ < 0; ties: Δ = 0.\n"
     << "- sign-test p: exact two-sided binomial test with ties dropped: "
        "p = min(1, 2·P(X ≤ min(k, m − k))), X ~ Binomial(m, ½), m = n − ties.\n"
     << "- t-test p: paired two-sided t test, t = mean / se, df = n − 1, p = 2·P(T > |t|).\n"
     << "- ppl red., mean per seed = (1/n) Σ (1 − exp(Δ_i)); ppl red., of mean Δ = "
        "1 − exp(mean Δ). Positive: the arm's perplexity exp(NLL) is lower. (The paper's "
        "\"1 − exp(−0.0301) = 2.97%\" writes the improvement −Δ: the same number.)\n"
     << "- Power: α = 1 − level, two-sided; with ncp = |Δ| √n / sd and c = t_{1−α/2, n−1}, "
        "power = 1 − F(c; n−1, ncp) + F(−c; n−1, ncp), F the noncentral t CDF. MDE: the |Δ| "
        "with power 80% at the current n and sd; seeds for d: the smallest n ≥ 2 with power "
        "≥ 80% at |Δ| = d and the observed sd. n/a for n < 2.\n"
     << "- Robustness: median Δ; scaled MAD = 1.4826 · median |Δ_i − median|; outlier: "
        "|Δ_i − median| > 3 · scaled MAD; Wilcoxon signed-rank p, two-sided.\n"
     << "- Trend: per seed the OLS slope of Δ on ln(tokens), then the mean over seeds with "
        "its t interval (df = seeds − 1).\n"
     << "- Controls: each control against its parent at the control's milestone (the last "
        "evaluation at or before its stop), and against the reference arm.\n"
     << "- Depth routes: per layer, the mean over seeds of JS(QK‖V) in nats (bits = nats / ln 2; "
        "√JS = the JS distance, averaged per layer) and of the route entropies. Headline: per "
        "seed the unweighted mean over all layers (and over the layers with K ≥ 2 sources; "
        "layer 0 has K = 1), then the mean over seeds.\n"
     << "- Cost: per seed, arm / reference of median training tokens/s and of peak memory, "
        "only for pairs on the same hardware kind; the ratio is the mean of the per-seed "
        "ratios. Other pairs are listed as excluded.\n"
     << "- missing: a cell the sweep expects but has no value for (no job, failed job, or not "
        "reached yet); see \"Missing data\".\n";
}

// The seed policy's design, its looks and where it stopped (docs/report.md "Sequential").
void Sequential(std::ostringstream& md, const SequentialSection& d) {
  const auto num = [](double v, const char* format = "%.4g") {
    return numfmt::General(v, format, kUndefined);
  };
  const auto at = [](const std::vector<double>& v, size_t i) {
    return i < v.size() ? v[i] : kMissing;
  };
  md << "\n## Seed policy (sequential design)\n\n";
  md << "Boundary: " << d.boundary << " alpha spending, alpha = " << num(d.alpha)
     << " (two-sided, per comparison), " << d.look_seeds.size() << " planned looks at n = ";
  for (size_t i = 0; i < d.look_seeds.size(); ++i) md << (i ? ", " : "") << d.look_seeds[i];
  md << ". Futility: ";
  if (d.futility_effect_sd > 0) {
    md << "non-binding, for an effect of " << num(d.futility_effect_sd) << " sd of delta at power "
       << num(d.futility_power);
  } else {
    md << "none";
  }
  md << ". Critical values from " << d.simulations << " simulated null sweeps (seed "
     << d.simulation_seed << ").\n\n";
  md << "Simulated operating characteristics: type-I error " << num(d.simulated_alpha)
     << "; expected seeds " << num(d.expected_seeds_null, "%.2f") << " under the null";
  if (d.futility_effect_sd > 0) {
    md << ", " << num(d.expected_seeds_futility_effect, "%.2f") << " under an effect of "
       << num(d.futility_effect_sd) << " sd";
  }
  md << ", " << num(d.expected_seeds_two_sd, "%.2f") << " under an effect of 2 sd (power "
     << num(d.power_two_sd, "%.3f") << "), of at most "
     << (d.look_seeds.empty() ? 0 : d.look_seeds.back()) << ".\n\n";
  md << Header(
      {"look", "n", "alpha spent", "efficacy: stop if abs(t) >=", "futility: stop if abs(t) <"});
  for (size_t i = 0; i < d.look_seeds.size(); ++i) {
    const double futility = at(d.futility_t, i);
    md << Row({std::to_string(i + 1), std::to_string(d.look_seeds[i]),
               num(at(d.alpha_spent, i), "%.5f"), num(at(d.efficacy_t, i), "%.3f"),
               futility > 0 ? num(futility, "%.3f") : std::string("-")});
  }
  md << "\n";
  if (d.looks.empty()) {
    md << "No look yet: the first comes when every job of the initial seeds has ended.\n";
    return;
  }
  md << Header({"look", "seeds", "scale", "arm", "n", "mean delta", "t", "outcome", "adjusted p",
                "repeated CI"});
  for (const LookRow& l : d.looks) {
    for (const LookComparisonRow& c : l.comparisons) {
      md << Row(
          {std::to_string(l.look), std::to_string(l.n_seeds), c.scale,
           c.arm + " vs " + c.reference_arm, std::to_string(c.n), num(c.mean_delta_nll, "%+.4f"),
           num(c.t_statistic, "%.3f"),
           c.outcome +
               (c.decided_at_look > 0 ? " (look " + std::to_string(c.decided_at_look) + ")" : ""),
           PValue(c.adjusted_p),
           "[" + num(c.rci_low, "%+.4f") + ", " + num(c.rci_high, "%+.4f") + "]"});
    }
  }
  md << "\n";
  for (const LookRow& l : d.looks) md << "- " << l.description << "\n";
  if (d.stopped) {
    md << "\nThe policy stopped at look " << d.stopped_at_look << ".";
  } else {
    md << "\nThe policy has not stopped yet.";
  }
  md << " Method: " << d.method << ".\n";
}

}  // namespace

// ---- Markdown ----------------------------------------------------------------------------

std::string RenderMarkdown(const ReportTables& t, const std::string& plots_dir_relative,
                           const std::string& plots_missing) {
  std::ostringstream md;
  Overview(md, t);
  Summary(md, t);
  Plots(md, t, plots_dir_relative);
  for (const std::string& scale : t.scales) Scale(md, t, scale);
  Power(md, t);
  Robustness(md, t);
  Trend(md, t);
  Controls(md, t);
  DepthRoutes(md, t);
  Cost(md, t);
  MissingData(md, t);
  Legend(md, t);
  if (!plots_missing.empty()) md << "\n> Plots were not drawn: " << plots_missing << "\n";
  if (t.sequential) Sequential(md, *t.sequential);
  return md.str();
}

}  // namespace rdattn::stats
