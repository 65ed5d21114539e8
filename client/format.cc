#include "client/format.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>
#include <sstream>

#include "common/number_format.h"
#include "common/strings.h"
#include "proto/contract/contract.h"

namespace rdattn::client {
namespace {

std::string Printf(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// "JOB_STATE_RUNNING" -> "RUNNING".
std::string StripPrefix(const std::string& name, const std::string& prefix) {
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

int64_t CeilDiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

std::string Percent(double fraction, int digits) {
  if (!std::isfinite(fraction)) return "-";
  return Fixed(100.0 * fraction, digits) + "%";
}

// p-values by report.md's rule (common/number_format.h); "-" when undefined.
std::string PValue(double p) { return numfmt::PValue(p, "-"); }

std::string SignedFixed(double v, int digits) {
  if (!std::isfinite(v)) return "-";
  std::string s = Fixed(v, digits);
  return v > 0 ? "+" + s : s;
}

}  // namespace

std::string JobStateName(pb::JobState state) {
  return StripPrefix(pb::JobState_Name(state), "JOB_STATE_");
}

std::string SweepStateName(pb::SweepState state) {
  return StripPrefix(pb::SweepState_Name(state), "SWEEP_STATE_");
}

bool IsTerminal(pb::JobState state) {
  return state == pb::JOB_STATE_SUCCEEDED || state == pb::JOB_STATE_FAILED ||
         state == pb::JOB_STATE_CANCELLED;
}

bool IsTerminal(pb::SweepState state) {
  return state == pb::SWEEP_STATE_SUCCEEDED || state == pb::SWEEP_STATE_FAILED ||
         state == pb::SWEEP_STATE_CANCELLED;
}

std::optional<pb::SweepState> ParseSweepState(const std::string& text) {
  std::string upper;
  for (char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  pb::SweepState state{};
  if (pb::SweepState_Parse(upper, &state) || pb::SweepState_Parse("SWEEP_STATE_" + upper, &state)) {
    if (state != pb::SWEEP_STATE_UNSPECIFIED) return state;
  }
  return std::nullopt;
}

std::string Fixed(double v, int digits) {
  return std::isfinite(v) ? strings::Fixed(v, digits) : "-";
}

std::string HumanTokens(int64_t tokens) {
  const double v = static_cast<double>(tokens);
  const double a = std::fabs(v);
  if (a < 1e4) return std::to_string(tokens);
  if (a < 1e6) return Printf("%.1fk", v / 1e3);
  if (a < 1e7) return Printf("%.2fM", v / 1e6);
  if (a < 1e9) return Printf("%.1fM", v / 1e6);
  return Printf("%.2fB", v / 1e9);
}

std::string HumanRate(double per_second) {
  if (!std::isfinite(per_second)) return "-";
  const double a = std::fabs(per_second);
  if (a < 1e3) return Printf("%.1f", per_second);
  if (a < 1e6) return Printf("%.2fk", per_second / 1e3);
  return Printf("%.2fM", per_second / 1e6);
}

std::string HumanDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long long s = static_cast<long long>(std::llround(seconds));
  char buf[64];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  } else if (s < 86400) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lldd%02lldh", s / 86400, (s % 86400) / 3600);
  }
  return buf;
}

std::string FormatTime(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  const std::time_t secs = static_cast<std::time_t>(t.seconds());
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t TargetTokens(const pb::JobSpec& job) {
  const pb::ScheduleSpec& s = job.run().schedule();
  if (s.stop_at_tokens() > 0 && (s.total_tokens() <= 0 || s.stop_at_tokens() < s.total_tokens())) {
    return s.stop_at_tokens();
  }
  return std::max<int64_t>(s.total_tokens(), 0);
}

std::optional<double> EtaSeconds(int64_t tokens, int64_t target_tokens, double tokens_per_second) {
  if (target_tokens <= 0 || !(tokens_per_second > 0) || !std::isfinite(tokens_per_second)) {
    return std::nullopt;
  }
  const int64_t remaining = std::max<int64_t>(target_tokens - tokens, 0);
  return static_cast<double>(remaining) / tokens_per_second;
}

std::string ShortJobId(const std::string& job_id, const std::string& sweep_id) {
  const std::string prefix = sweep_id + "/";
  if (!sweep_id.empty() && job_id.rfind(prefix, 0) == 0) return job_id.substr(prefix.size());
  return job_id;
}

std::string MessageJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = pretty;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(message, &text, options).ok()) return "{}";
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::string Table::Render() const {
  std::vector<size_t> width(header_.size(), 0);
  std::vector<bool> right(header_.size(), false);
  std::vector<std::string> head(header_.size());
  for (size_t c = 0; c < header_.size(); ++c) {
    right[c] = !header_[c].empty() && header_[c][0] == '>';
    head[c] = right[c] ? header_[c].substr(1) : header_[c];
    width[c] = head[c].size();
  }
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const std::string pad(width[c] - std::min(width[c], cell.size()), ' ');
      if (c > 0) text += "  ";
      text += right[c] ? pad + cell : cell + (c + 1 < width.size() ? pad : "");
    }
    out << text << "\n";
  };
  line(head);
  for (const auto& row : rows_) line(row);
  return out.str();
}

std::string FormatSweepSummary(const pb::SweepStatus& sweep) {
  const pb::SweepSummary& s = sweep.summary();
  std::ostringstream out;
  const pb::PairGroupCounts& g = s.pair_groups();
  out << "pairs    " << g.total() << " total: " << g.complete() << " complete, " << g.running()
      << " running, " << g.waiting() << " waiting, " << g.failed() << " failed\n";
  if (s.milestones_size() > 0) {
    out << "val NLL  stored/expected jobs per milestone:";
    for (const pb::MilestoneCount& m : s.milestones()) {
      out << " " << HumanTokens(m.milestone_tokens()) << " " << m.jobs_stored() << "/"
          << m.jobs_expected();
    }
    if (s.milestones_truncated()) out << " ...";
    out << "\n         all jobs at "
        << (s.last_common_milestone_tokens() > 0 ? HumanTokens(s.last_common_milestone_tokens())
                                                 : "none yet")
        << ", furthest "
        << (s.furthest_milestone_tokens() > 0 ? HumanTokens(s.furthest_milestone_tokens())
                                              : "none yet")
        << "\n";
  }
  out << "retries  " << s.jobs_retried() << " job(s) retried, " << s.machine_failures()
      << " machine failure(s), " << s.jobs_backing_off() << " backing off";
  if (s.tokens_per_second() > 0) out << "; running at " << HumanRate(s.tokens_per_second());
  out << "\n";
  if (s.jobs_with_problems() > 0) {
    out << "problems " << s.jobs_with_problems() << " job(s) with a failure reason; latest:\n";
    for (const pb::JobProblem& p : s.recent_problems()) {
      const std::string reason = p.reason().substr(0, p.reason().find('\n'));
      out << "  " << ShortJobId(p.job_id(), sweep.sweep_id()) << " " << JobStateName(p.state())
          << " (attempt " << p.attempts() << "): " << reason << "\n";
    }
  }
  return out.str();
}

std::string FormatSweep(const pb::SweepStatus& sweep) {
  std::ostringstream out;
  const pb::JobCounts& n = sweep.job_counts();
  out << "sweep    " << sweep.sweep_id();
  if (!sweep.spec().name().empty()) out << "  (" << sweep.spec().name() << ")";
  out << "\n";
  if (!sweep.spec().owner().empty()) out << "owner    " << sweep.spec().owner() << "\n";
  out << "state    " << SweepStateName(sweep.state()) << "\n";
  out << "jobs     " << n.total() << " total: " << n.pending() << " pending, " << n.leased()
      << " leased, " << n.running() << " running, " << n.succeeded() << " succeeded, " << n.failed()
      << " failed, " << n.cancelled() << " cancelled\n";
  out << "created  " << FormatTime(sweep.create_time()) << "   updated "
      << FormatTime(sweep.update_time());
  if (sweep.has_end_time()) out << "   ended " << FormatTime(sweep.end_time());
  out << "\n";
  if (!sweep.message().empty()) out << "message  " << sweep.message() << "\n";
  if (sweep.sequential().design().look_seeds_size() > 0) {
    const pb::SequentialState& q = sweep.sequential();
    out << "seeds    policy: look " << q.looks_size() << " of at most "
        << q.design().look_seeds_size();
    if (q.looks_size() > 0) {
      out << ", " << contract::DescribeSeedLook(q.looks(q.looks_size() - 1));
    }
    out << "\n";
  }
  if (sweep.has_summary()) out << FormatSweepSummary(sweep);
  if (sweep.jobs_size() == 0) return out.str();

  out << "\n";
  Table table(
      {"JOB", "STATE", ">ATTEMPTS", ">STEP", ">TOKENS", ">LOSS", ">VAL NLL", ">TOK/S", "WORKER"});
  for (const pb::JobStatus& j : sweep.jobs()) {
    const bool started = j.step() > 0 || j.tokens() > 0;
    const int64_t target = TargetTokens(j.job());
    std::string tokens = HumanTokens(j.tokens());
    if (target > 0) tokens += "/" + HumanTokens(target);
    table.AddRow({ShortJobId(j.job().job_id(), sweep.sweep_id()), JobStateName(j.state()),
                  std::to_string(j.attempts()), std::to_string(j.step()), tokens,
                  started ? Fixed(j.last_train_loss(), 4) : "-",
                  j.last_val_nll() > 0 ? Fixed(j.last_val_nll(), 4) : "-",
                  j.tokens_per_second() > 0 ? HumanRate(j.tokens_per_second()) : "-",
                  j.worker_id().empty() ? "-" : j.worker_id()});
  }
  out << table.Render();
  for (const pb::JobStatus& j : sweep.jobs()) {
    if (!j.failure_reason().empty()) {
      out << "\n" << ShortJobId(j.job().job_id(), sweep.sweep_id()) << ": " << j.failure_reason();
    }
  }
  return out.str();
}

std::string FormatSweepList(const std::vector<pb::SweepStatus>& sweeps) {
  Table table(
      {"SWEEP", "NAME", "OWNER", "STATE", ">JOBS", ">DONE", ">RUNNING", ">FAILED", "CREATED"});
  for (const pb::SweepStatus& s : sweeps) {
    const pb::JobCounts& n = s.job_counts();
    table.AddRow({s.sweep_id(), s.spec().name(), s.spec().owner().empty() ? "-" : s.spec().owner(),
                  SweepStateName(s.state()), std::to_string(n.total()),
                  std::to_string(n.succeeded()), std::to_string(n.running() + n.leased()),
                  std::to_string(n.failed()), FormatTime(s.create_time())});
  }
  return table.Render();
}

namespace {

// "[-0.0300, -0.0200]", or "-" when either end is undefined.
std::string Interval(double low, double high, int digits) {
  if (!std::isfinite(low) || !std::isfinite(high)) return "-";
  return "[" + SignedFixed(low, digits) + ", " + SignedFixed(high, digits) + "]";
}

std::string SignedPercent(double fraction, int digits) {
  if (!std::isfinite(fraction)) return "-";
  return (fraction > 0 ? "+" : "") + Percent(fraction, digits);
}

std::string Bytes(int64_t b) {
  if (b <= 0) return "-";
  const double v = static_cast<double>(b);
  if (v >= 1024.0 * 1024.0 * 1024.0) return Printf("%.2fG", v / (1024.0 * 1024.0 * 1024.0));
  if (v >= 1024.0 * 1024.0) return Printf("%.1fM", v / (1024.0 * 1024.0));
  return std::to_string(b);
}

}  // namespace

std::string FormatReport(const pb::Report& r) {
  std::ostringstream out;
  const double level = r.confidence_level() > 0 ? r.confidence_level() : 0.95;
  out << "report   " << r.sweep_id();
  if (!r.sweep_name().empty()) out << "  (" << r.sweep_name() << ")";
  out << "\nreference arm " << r.reference_arm() << ", " << Fixed(100 * level, 0) << "% intervals, "
      << (r.complete() ? "complete" : "PARTIAL: jobs are still running");
  if (r.bootstrap_resamples() > 0) {
    out << ", bootstrap " << r.bootstrap_resamples() << " resamples (seed " << r.bootstrap_seed()
        << ")";
  }
  out << "\n\n";
  if (r.rows_size() == 0) {
    out << "no paired rows yet\n";
  } else {
    const std::string ci = "CI" + Fixed(100 * level, 0);
    Table table({"SCALE", ">MILESTONE", "ARM", "VS", ">N", ">REF NLL", ">ARM NLL", ">DELTA NLL",
                 ">SD", ">T " + ci, ">BOOT " + ci, ">PPL", ">PPL/SEED", ">WINS", ">SIGN P",
                 ">T P"});
    bool any_control = false;
    for (const pb::PairedRow& row : r.rows()) {
      any_control = any_control || row.is_control();
      std::string n = std::to_string(row.n());
      if (row.n_expected() > 0) n += "/" + std::to_string(row.n_expected());
      const std::string where =
          row.split() == "test" ? std::string("test") : HumanTokens(row.milestone_tokens());
      table.AddRow(
          {row.scale(), where, row.arm() + (row.is_control() ? "*" : ""), row.reference_arm(), n,
           Fixed(row.mean_reference_nll(), 4), Fixed(row.mean_arm_nll(), 4),
           SignedFixed(row.mean_delta_nll(), 4), row.n() > 1 ? Fixed(row.sd_delta_nll(), 4) : "-",
           row.n() > 1 ? Interval(row.t_ci_low(), row.t_ci_high(), 4) : "-",
           row.n() > 1 ? Interval(row.bootstrap_ci_low(), row.bootstrap_ci_high(), 4) : "-",
           row.n() > 0 ? SignedPercent(row.ppl_change_of_mean_delta(), 2) : "-",
           row.n() > 0 ? SignedPercent(row.mean_ppl_change(), 2) : "-",
           std::to_string(row.wins()) + "/" + std::to_string(row.n()),
           row.n() > 0 ? PValue(row.sign_test_p()) : "-",
           row.n() > 1 ? PValue(row.t_test_p()) : "-"});
    }
    out << table.Render();
    out << "\nDELTA NLL = arm - reference in nats/token (negative: the arm is better); N = "
           "complete "
           "pairs/expected seeds;\nT/BOOT = Student t and seeded bootstrap intervals of the mean "
           "delta; PPL = exp(mean delta) - 1;\nPPL/SEED = mean over seeds of exp(delta) - 1; "
           "WINS = pairs with delta < 0; SIGN P = exact two-sided sign test;\nT P = paired "
           "two-sided t test.\n";
    if (any_control) out << "* a control, compared with its parent arm (or with the reference).\n";

    // Power, robustness (docs/report.md "Power", "Robustness").
    bool user_target = false;
    for (const pb::PairedRow& row : r.rows()) {
      for (const pb::SeedsNeeded& e : row.seeds_needed())
        user_target = user_target || e.user_given();
    }
    std::vector<std::string> cols{"SCALE", ">MILESTONE", "ARM", "VS", ">N", ">MDE"};
    std::vector<double> deltas;
    if (r.rows_size() > 0) {
      for (const pb::SeedsNeeded& e : r.rows(0).seeds_needed()) {
        deltas.push_back(e.delta_nll());
        cols.push_back(">SEEDS " + Printf("%g", e.delta_nll()) + (e.user_given() ? "*" : ""));
      }
    }
    cols.insert(cols.end(), {">MEDIAN", ">W+", ">WILCOXON P", "OUTLIERS"});
    Table power(cols);
    for (const pb::PairedRow& row : r.rows()) {
      std::string n = std::to_string(row.n());
      if (row.n_expected() > 0) n += "/" + std::to_string(row.n_expected());
      const std::string where =
          row.split() == "test" ? std::string("test") : HumanTokens(row.milestone_tokens());
      std::vector<std::string> cells{
          row.scale(),         where, row.arm() + (row.is_control() ? "*" : ""),
          row.reference_arm(), n,     Fixed(row.mde_nll(), 4)};
      for (size_t i = 0; i < deltas.size(); ++i) {
        if (static_cast<int>(i) >= row.seeds_needed_size()) {
          cells.push_back("-");
          continue;
        }
        const int64_t k = row.seeds_needed(static_cast<int>(i)).seeds();
        cells.push_back(k == 0 ? "-" : k < 0 ? ">1e6" : std::to_string(k));
      }
      std::string outliers;
      for (uint64_t seed : row.outlier_seeds()) {
        outliers += (outliers.empty() ? "seed " : ", ") + std::to_string(seed);
      }
      cells.push_back(row.n() > 0 ? SignedFixed(row.median_delta_nll(), 4) : "-");
      cells.push_back(row.wilcoxon_n() > 0 ? Printf("%g", row.wilcoxon_w_plus()) : "-");
      cells.push_back(row.n() > 0 ? PValue(row.wilcoxon_p()) + (row.wilcoxon_n() == 0  ? ""
                                                                : row.wilcoxon_exact() ? " exact"
                                                                                       : " normal")
                                  : "-");
      cells.push_back(outliers.empty() ? "none" : outliers);
      power.AddRow(cells);
    }
    const double alpha = r.rows_size() > 0 ? r.rows(0).power_alpha() : 1 - level;
    out << "\npower (two-sided paired t at alpha " << Printf("%g", alpha)
        << ", 80% power, noncentral t) and robustness:\n"
        << power.Render()
        << "MDE = minimum detectable |delta| at the current n and sd; SEEDS d = seeds needed for "
           "|delta| = d (nats)"
        << (user_target ? ", * = --target-delta" : "")
        << ";\nMEDIAN = median delta; W+ = Wilcoxon signed-rank statistic (zeros dropped); "
           "OUTLIERS = |delta - median| > 3 scaled MADs.\n";
  }
  if (r.trend_rows_size() > 0) {
    out << "\ntrend of delta against ln(tokens) (slope per seed, then over seeds; t interval):\n";
    Table trend({"SCALE", "ARM", "VS", ">MILESTONES", ">SEEDS", ">SLOPE", ">T CI", ">T P", ">GAP",
                 "READING"});
    for (const pb::TrendRow& tr : r.trend_rows()) {
      trend.AddRow({tr.scale(), tr.arm(), tr.reference_arm(),
                    std::to_string(tr.milestone_tokens_size()),
                    std::to_string(tr.n()) + "/" + std::to_string(tr.n_expected()),
                    SignedFixed(tr.mean_slope(), 5), Interval(tr.ci_low(), tr.ci_high(), 5),
                    PValue(tr.t_test_p()), SignedFixed(tr.gap_nll(), 4), tr.reading()});
    }
    out << trend.Render();
  }
  bool any_js = false;
  for (const pb::JsRow& js : r.js_rows()) any_js = any_js || js.has_js();
  if (any_js) {
    out << "\ndepth routes (JS(QK||V) in nats, means over seeds):\n";
    Table table(
        {"SCALE", "ARM", ">MILESTONE", ">N", ">JS MEAN", ">JS BITS", ">SQRT JS", ">JS K>=2"});
    for (const pb::JsRow& js : r.js_rows()) {
      if (!js.has_js()) continue;
      table.AddRow({js.scale(), js.arm(), HumanTokens(js.milestone_tokens()),
                    std::to_string(js.n()), Fixed(js.mean_js_nats(), 4),
                    Fixed(js.mean_js_bits(), 4), Fixed(js.mean_js_sqrt(), 4),
                    Fixed(js.mean_js_multi_source_nats(), 4)});
    }
    out << table.Render();
  }
  if (r.cost_rows_size() > 0) {
    out << "\ncost against " << r.reference_arm()
        << " (per seed, same hardware kind; ratio = arm / reference):\n";
    Table table({"SCALE", "ARM", "HARDWARE", ">N", ">TOK/S", ">TOK/S RATIO", ">N MEM", ">PEAK MEM",
                 ">MEM RATIO"});
    for (const pb::CostRow& c : r.cost_rows()) {
      const std::string kind =
          StripPrefix(pb::HardwareKind_Name(c.hardware_kind()), "HARDWARE_KIND_");
      table.AddRow({c.scale(), c.arm(), kind == "UNSPECIFIED" ? "-" : kind, std::to_string(c.n()),
                    c.n() > 0 ? HumanRate(c.mean_tokens_per_second()) : "-",
                    c.n() > 0 ? Fixed(c.tokens_per_second_ratio(), 3) : "-",
                    std::to_string(c.n_memory()),
                    c.n_memory() > 0 ? Bytes(c.peak_memory_bytes()) : "-",
                    c.n_memory() > 0 ? Fixed(c.peak_memory_ratio(), 3) : "-"});
    }
    out << table.Render();
  }
  if (r.missing_size() > 0) {
    out << "\nmissing (" << r.missing_size() << "):\n";
    for (const pb::MissingEntry& m : r.missing()) {
      out << "  " << m.scale() << " seed " << m.seed() << " " << m.arm();
      if (m.split() == "test") {
        out << " @ test";
      } else if (m.milestone_tokens() > 0) {
        out << " @ " << HumanTokens(m.milestone_tokens());
      }
      out << ": " << (m.reason().empty() ? JobStateName(m.job_state()) : m.reason()) << "\n";
    }
  }
  for (const std::string& note : r.notes()) out << "note: " << note << "\n";
  if (r.sequential().design().look_seeds_size() > 0) out << FormatSequential(r.sequential());
  return out.str();
}

std::string FormatSequential(const pb::SequentialState& s) {
  const pb::SequentialDesign& d = s.design();
  std::ostringstream out;
  out << "\nseed policy: " << d.boundary() << " boundaries, alpha " << Printf("%g", d.alpha())
      << " per comparison, looks at n =";
  for (int n : d.look_seeds()) out << " " << n;
  out << "; futility "
      << (d.futility_effect_sd() > 0
              ? "for " + Printf("%g", d.futility_effect_sd()) + " sd (non-binding)"
              : std::string("none"))
      << "\n";
  out << "  simulated: type-I error " << Fixed(d.simulated_alpha(), 4) << ", expected seeds "
      << Fixed(d.expected_seeds_null(), 2) << " (null), " << Fixed(d.expected_seeds_two_sd(), 2)
      << " (effect 2 sd)\n";
  Table table({">LOOK", ">N", "SCALE", "ARM", ">MEAN DELTA", ">T", ">|T| STOP >=", ">|T| FUTILE <",
               "OUTCOME", ">ADJ P", "REPEATED CI"});
  for (const pb::SeedLook& l : s.looks()) {
    for (const pb::LookComparison& c : l.comparisons()) {
      table.AddRow({std::to_string(l.look()), std::to_string(c.n()), c.scale(), c.arm(),
                    SignedFixed(c.mean_delta_nll(), 4), Fixed(c.t_statistic(), 3),
                    Fixed(c.efficacy_t(), 3), c.futility_t() > 0 ? Fixed(c.futility_t(), 3) : "-",
                    c.outcome(), PValue(c.adjusted_p()), Interval(c.rci_low(), c.rci_high(), 4)});
    }
  }
  if (s.looks_size() > 0) out << table.Render();
  for (const pb::SeedLook& l : s.looks()) out << "  " << contract::DescribeSeedLook(l) << "\n";
  out << (s.stopped() ? "  stopped at look " + std::to_string(s.stopped_at_look())
                      : std::string("  not stopped yet"))
      << "\n";
  return out.str();
}

std::string FormatExpansion(const pb::SweepSpec& spec, const std::vector<pb::JobSpec>& jobs,
                            bool list_jobs) {
  std::ostringstream out;
  std::vector<std::string> groups;
  std::map<std::string, std::vector<const pb::JobSpec*>> by_group;
  for (const pb::JobSpec& j : jobs) {
    if (!by_group.count(j.pair_group())) groups.push_back(j.pair_group());
    by_group[j.pair_group()].push_back(&j);
  }
  out << "sweep '" << spec.name() << "': " << jobs.size() << " jobs = " << spec.scales_size()
      << " scale(s) x "
      << (spec.has_seed_policy() ? std::to_string(spec.seed_policy().initial_size()) +
                                       " initial seed(s) (policy: " + "up to " +
                                       std::to_string(spec.seed_policy().max()) + ")"
                                 : std::to_string(spec.seeds_size()) + " seed(s)")
      << " x (" << spec.arms_size() << " arm(s) + " << spec.controls_size() << " control(s))\n";
  out << "reference arm: "
      << (spec.reference_arm().empty() ? std::string("block") : spec.reference_arm()) << "\n";
  for (const pb::ControlSpec& c : spec.controls()) {
    out << "control: " << c.arm() << " vs " << c.parent_arm() << ", stops at "
        << HumanTokens(c.stop_at_tokens()) << " tokens\n";
  }
  out << "pair groups (" << groups.size() << "):\n";
  for (const std::string& g : groups) {
    const pb::JobSpec& first = *by_group[g].front();
    const pb::ScheduleSpec& s = first.run().schedule();
    out << "  " << g << ":";
    for (const pb::JobSpec* j : by_group[g]) out << " " << j->arm();
    out << "   (" << HumanTokens(s.total_tokens()) << " tokens, "
        << CeilDiv(s.total_tokens(), s.global_batch_tokens()) << " steps, world size "
        << first.run().parallel().world_size() << ")\n";
  }
  if (list_jobs) {
    out << "\n";
    Table table({"JOB", "ARM", "PRESET", ">WORLD", ">STEPS", ">TOKENS", ">PEAK LR", "PARENT"});
    for (const pb::JobSpec& j : jobs) {
      const pb::ScheduleSpec& s = j.run().schedule();
      table.AddRow({j.job_id(), j.arm(),
                    j.run().model().preset().empty() ? "-" : j.run().model().preset(),
                    std::to_string(j.run().parallel().world_size()),
                    std::to_string(CeilDiv(TargetTokens(j), s.global_batch_tokens())),
                    HumanTokens(TargetTokens(j)), Printf("%g", j.run().optim().peak_lr()),
                    j.control_parent_arm().empty() ? "-" : j.control_parent_arm()});
    }
    out << table.Render();
  }
  return out.str();
}

}  // namespace rdattn::client
