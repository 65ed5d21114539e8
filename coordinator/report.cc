// BuildReport: store rows -> stats::ReportInput -> ReportTables -> pb::Report + rendered files
// (see report.h and docs/report.md).
#include "coordinator/report.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "common/file_util.h"
#include "common/strings.h"
#include "coordinator/data_identity.h"
#include "coordinator/proto_convert.h"
#include "coordinator/seed_policy.h"
#include "coordinator/stats/plots.h"
#include "coordinator/stats/render.h"
#include "proto/contract/contract.h"

namespace rdattn::coordinator {
namespace {

namespace fs = std::filesystem;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string HardwareKindLabel(HardwareKind kind) {
  switch (kind) {
    case HardwareKind::kCpu:
      return "CPU";
    case HardwareKind::kGpu:
      return "GPU";
    case HardwareKind::kAny:
      break;
  }
  return "";
}

pb::HardwareKind HardwareKindOfLabel(const std::string& label) {
  if (label == "CPU") return pb::HARDWARE_KIND_CPU;
  if (label == "GPU") return pb::HARDWARE_KIND_GPU;
  return pb::HARDWARE_KIND_UNSPECIFIED;
}

pb::JobState JobStateOfLabel(const std::string& label) {
  pb::JobState state = pb::JOB_STATE_UNSPECIFIED;
  if (label.empty() || !pb::JobState_Parse("JOB_STATE_" + label, &state)) {
    return pb::JOB_STATE_UNSPECIFIED;
  }
  return state;
}

double Median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
}

// What the metric events of one job say, per attempt where it matters.
struct JobEvents {
  std::map<int64_t, stats::MilestoneResult> milestones;  // latest evaluation per milestone
  double test_nll = kNaN;
  // Per attempt: training tokens/s samples, largest peak memory, hardware kind (INIT).
  std::map<int, std::vector<double>> tokens_per_second;
  std::map<int, int64_t> peak_memory_bytes;
  std::map<int, HardwareKind> hardware_kind;
};

std::map<std::string, JobEvents> CollectEvents(const std::vector<EventRow>& events) {
  std::map<std::string, JobEvents> out;
  for (const EventRow& e : events) {
    if (!e.event.has_metric_event()) continue;
    const pb::MetricEvent& m = e.event.metric_event();
    const std::string& job_id = e.job_id.empty() ? m.job_id() : e.job_id;
    const int attempt = e.attempt != 0 ? e.attempt : m.attempt();
    JobEvents& j = out[job_id];
    auto note_memory = [&] {
      if (m.peak_memory_bytes() > 0) {
        int64_t& peak = j.peak_memory_bytes[attempt];
        peak = std::max(peak, m.peak_memory_bytes());
      }
    };
    switch (m.kind()) {
      case pb::MetricEvent::KIND_INIT: {
        const HardwareKind kind = HardwareKindFromProto(m.hardware_kind());
        if (kind != HardwareKind::kAny) j.hardware_kind[attempt] = kind;
        break;
      }
      case pb::MetricEvent::KIND_TRAIN_STEP:
        if (std::isfinite(m.tokens_per_second()) && m.tokens_per_second() > 0) {
          j.tokens_per_second[attempt].push_back(m.tokens_per_second());
        }
        note_memory();
        break;
      case pb::MetricEvent::KIND_EVAL: {
        // A resumed attempt that re-evaluates a milestone replaces the earlier value.
        const int64_t milestone = m.milestone_tokens() > 0 ? m.milestone_tokens() : m.tokens();
        stats::MilestoneResult r;
        r.val_nll = m.val_nll();
        r.js_nats.assign(m.js_nats().begin(), m.js_nats().end());
        r.js_bits.assign(m.js_bits().begin(), m.js_bits().end());
        r.js_sqrt.assign(m.js_sqrt().begin(), m.js_sqrt().end());
        r.route_entropy_qk_nats.assign(m.route_entropy_qk_nats().begin(),
                                       m.route_entropy_qk_nats().end());
        r.route_entropy_v_nats.assign(m.route_entropy_v_nats().begin(),
                                      m.route_entropy_v_nats().end());
        j.milestones[milestone] = std::move(r);
        break;
      }
      case pb::MetricEvent::KIND_FINISHED:
        // test_nll is there only when the run has test windows (eval_tokens > 0).
        if (m.eval_tokens() > 0 || m.test_nll() != 0) j.test_nll = m.test_nll();
        note_memory();
        break;
      default:
        break;
    }
  }
  return out;
}

// The seed policy's stored state as the report's sequential section (rendered with the tables).
stats::SequentialSection SequentialSectionOf(const pb::SequentialState& state) {
  const pb::SequentialDesign& d = state.design();
  stats::SequentialSection out;
  out.boundary = d.boundary();
  out.alpha = d.alpha();
  out.look_seeds.assign(d.look_seeds().begin(), d.look_seeds().end());
  out.information.assign(d.information().begin(), d.information().end());
  out.alpha_spent.assign(d.alpha_spent().begin(), d.alpha_spent().end());
  out.efficacy_t.assign(d.efficacy_t().begin(), d.efficacy_t().end());
  out.futility_t.assign(d.futility_t().begin(), d.futility_t().end());
  out.futility_effect_sd = d.futility_effect_sd();
  out.futility_power = d.futility_power();
  out.simulations = d.simulations();
  out.simulation_seed = d.simulation_seed();
  out.simulated_alpha = d.simulated_alpha();
  out.expected_seeds_null = d.expected_seeds_null();
  out.expected_seeds_futility_effect = d.expected_seeds_futility_effect();
  out.expected_seeds_two_sd = d.expected_seeds_two_sd();
  out.power_two_sd = d.power_two_sd();
  for (const pb::SeedLook& l : state.looks()) {
    stats::LookRow look;
    look.look = l.look();
    look.n_seeds = l.n_seeds();
    look.n_planned = l.n_planned();
    look.decision = l.decision();
    look.added_seeds.assign(l.added_seeds().begin(), l.added_seeds().end());
    look.reason = l.reason();
    look.description = contract::DescribeSeedLook(l);
    for (const pb::LookComparison& c : l.comparisons()) {
      look.comparisons.push_back({c.scale(), c.arm(), c.reference_arm(), c.milestone_tokens(),
                                  c.n(), c.mean_delta_nll(), c.sd_delta_nll(), c.t_statistic(),
                                  c.efficacy_t(), c.futility_t(), c.outcome(), c.decided_at_look(),
                                  c.adjusted_p(), c.rci_low(), c.rci_high()});
    }
    out.looks.push_back(std::move(look));
  }
  out.stopped = state.stopped();
  out.stopped_at_look = state.stopped_at_look();
  out.method = state.method();
  return out;
}

// ---- ReportTables -> proto -----------------------------------------------------------------

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

// ---- Files -------------------------------------------------------------------------------

void AddFile(pb::GetReportResponse& resp, const std::string& name, std::string content,
             const std::string& media_type) {
  pb::ReportFile* f = resp.add_files();
  f->set_name(name);
  f->set_content(std::move(content));
  f->set_media_type(media_type);
}

// A fresh private folder under `parent` (/tmp when empty), removed by the destructor.
class TempDir {
 public:
  static StatusOr<std::unique_ptr<TempDir>> Make(std::string parent) {
    if (parent.empty()) parent = "/tmp";
    std::string templ = (fs::path(parent) / "rdattn-report-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) {
      return InternalError("cannot create a temporary folder in " + parent);
    }
    return std::unique_ptr<TempDir>(new TempDir(templ));
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  fs::path path_;
};

// Draws the plots in a temporary folder (removed on return) and returns plots/* as files: the
// four PNGs, then the gnuplot scripts and data.
StatusOr<std::vector<pb::ReportFile>> RenderPlots(const stats::ReportTables& tables,
                                                  const ReportOptions& options) {
  if (options.gnuplot_binary.empty()) {
    return FailedPreconditionError(
        "no gnuplot: rdattn-coordinator found none at startup (--gnuplot); install gnuplot "
        "(Debian: gnuplot-nox) and restart it");
  }
  RDATTN_ASSIGN_OR_RETURN(std::unique_ptr<TempDir> tmp, TempDir::Make(options.temp_parent));
  const fs::path plots = tmp->path() / "plots";
  RDATTN_RETURN_IF_ERROR(stats::WriteGnuplotScripts(tables, plots.string()));
  RDATTN_RETURN_IF_ERROR(stats::RunGnuplot(plots.string(), options.gnuplot_binary));
  std::vector<std::pair<std::string, std::string>> names;  // file name, media type
  for (const char* png : {stats::kPlotNllVsTokens, stats::kPlotDeltaLastMilestone,
                          stats::kPlotJsByLayer, stats::kPlotDeltaVsTokens}) {
    names.emplace_back(png, "image/png");
  }
  std::vector<std::string> other;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(plots, ec)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".gp" || ext == ".dat")) {
      other.push_back(e.path().filename().string());
    }
  }
  if (ec) return InternalError("cannot list " + plots.string() + ": " + ec.message());
  std::sort(other.begin(), other.end());
  for (const std::string& name : other) names.emplace_back(name, "text/plain");
  std::vector<pb::ReportFile> files;
  for (const auto& [name, type] : names) {
    RDATTN_ASSIGN_OR_RETURN(std::string content, ReadFile((plots / name).string()));
    pb::ReportFile f;
    f.set_name("plots/" + name);
    f.set_content(std::move(content));
    f.set_media_type(type);
    files.push_back(std::move(f));
  }
  return files;
}

// Data identity (docs/operations.md "Data identity"): within each pair group the reference
// arm's job (else the first job with digests) fixes the data; a job whose INIT events carry
// another data_digest, or whose attempts disagree among themselves, is excluded from every pair
// with the reason. Jobs without digests (older trainers) are unknown and kept.
void ExcludeDataMismatches(const ReportSource& source, const std::string& reference,
                           std::vector<stats::RunResult>& runs) {
  std::map<std::string, std::vector<EventRow>> inits;  // job id -> its INIT rows
  for (const EventRow& e : source.events) {
    if (!e.event.has_metric_event()) continue;
    if (e.event.metric_event().kind() != pb::MetricEvent::KIND_INIT) continue;
    inits[e.job_id.empty() ? e.event.metric_event().job_id() : e.job_id].push_back(e);
  }
  auto first_of = [&](const std::string& job_id) -> const pb::MetricEvent* {
    auto it = inits.find(job_id);
    return it == inits.end() ? nullptr : FirstDigestedInit(it->second, INT32_MAX);
  };
  auto label = [](const JobRow& j, const pb::MetricEvent& e) {
    return "job " + j.id + " (arm " + j.spec.arm() + ") attempt " + std::to_string(e.attempt());
  };
  std::map<std::string, std::vector<size_t>> groups;  // pair group -> indexes into jobs
  for (size_t i = 0; i < source.jobs.size() && i < runs.size(); ++i) {
    const JobRow& j = source.jobs[i];
    const std::string key =
        j.pair_group.empty() ? j.spec.scale() + "/" + std::to_string(j.spec.seed()) : j.pair_group;
    groups[key].push_back(i);
  }
  for (const auto& [group, members] : groups) {
    // The anchor: the reference arm's main job, else the first job with a digest (a job the
    // coordinator failed for data identity never is).
    const JobRow* anchor = nullptr;
    const pb::MetricEvent* anchor_init = nullptr;
    for (size_t i : members) {
      const JobRow& j = source.jobs[i];
      const pb::MetricEvent* e = first_of(j.id);
      if (e == nullptr) continue;
      if (j.state == JobState::kFailed && j.failure_reason.rfind(kDataIdentityReason, 0) == 0)
        continue;  // the coordinator refused its data: they are not the pair's
      const bool is_ref = j.spec.arm() == reference && j.spec.control_parent_arm().empty();
      if (anchor == nullptr || is_ref) {
        anchor = &j;
        anchor_init = e;
        if (is_ref) break;
      }
    }
    for (size_t i : members) {
      const JobRow& j = source.jobs[i];
      const pb::MetricEvent* first = first_of(j.id);
      if (first == nullptr) continue;
      std::string why;
      // Its own attempts first: a job whose data changed between attempts mixed two versions.
      for (const EventRow& row : inits[j.id]) {
        const pb::MetricEvent& e = row.event.metric_event();
        why = DescribeDataDifference(*first, label(j, *first), e, label(j, e));
        if (!why.empty()) break;
      }
      if (why.empty() && anchor != nullptr && anchor != &j) {
        why = DescribeDataDifference(*anchor_init, label(*anchor, *anchor_init), *first,
                                     label(j, *first));
        if (!why.empty()) why = "its data differ from those of its pair: " + why;
      } else if (!why.empty()) {
        why = "its attempts read different data: " + why;
      }
      if (why.empty()) continue;
      stats::RunResult& r = runs[i];
      r.excluded = std::string(kDataIdentityReason) + why;
      r.milestones.clear();
      r.test_nll = kNaN;
    }
  }
}

}  // namespace

uint64_t ReportBootstrapSeed(const std::string& sweep_id) {
  strings::Fnv1a64 h;
  h.Mix(sweep_id);
  return h.value();
}

std::vector<int64_t> ExpectedMilestones(const pb::RunSpec& run) {
  StatusOr<RunConfig> cfg = contract::ParseRunSpec(run);
  if (!cfg.ok()) return {};
  std::set<int64_t> out;
  for (const EvalMilestone& m : EvalMilestones(cfg->schedule)) out.insert(m.tokens);
  return {out.begin(), out.end()};
}

stats::ReportInput MakeStatsInput(const ReportSource& source, const std::string& reference_arm) {
  const pb::SweepSpec& spec = source.sweep.spec;
  stats::ReportInput in;
  in.sweep_id = source.sweep.id;
  in.sweep_name = spec.name();
  in.reference_arm = reference_arm.empty() ? contract::ReferenceArm(spec) : reference_arm;
  for (const pb::ScaleSpec& s : spec.scales()) in.scales.push_back(contract::ScaleName(s));
  in.arms.assign(spec.arms().begin(), spec.arms().end());
  if (spec.has_seed_policy()) {
    // The seeds run so far (the initial ones, then those each look added), in that order.
    std::set<uint64_t> seen;
    for (const JobRow& job : source.jobs) {
      if (seen.insert(job.spec.seed()).second) in.seeds.push_back(job.spec.seed());
    }
  } else {
    in.seeds.assign(spec.seeds().begin(), spec.seeds().end());
  }
  std::map<std::string, int64_t> control_stop;
  for (const pb::ControlSpec& c : spec.controls()) {
    in.controls.push_back({c.arm(), c.parent_arm(), c.stop_at_tokens()});
    control_stop[c.arm()] = c.stop_at_tokens();
  }

  // The validation milestones: where the main jobs evaluate (controls stop on this schedule).
  std::set<int64_t> milestones;
  for (const JobRow& job : source.jobs) {
    if (!job.spec.control_parent_arm().empty()) continue;
    for (int64_t m : ExpectedMilestones(job.spec.run())) milestones.insert(m);
  }
  in.milestones.assign(milestones.begin(), milestones.end());

  std::map<std::string, JobEvents> events = CollectEvents(source.events);
  for (const JobRow& job : source.jobs) {
    stats::RunResult r;
    r.job_id = job.id;
    r.scale = job.spec.scale();
    r.arm = job.spec.arm();
    r.seed = job.spec.seed();
    r.state = std::string(JobStateName(job.state));
    r.failure_reason = job.failure_reason;
    r.control_parent_arm = job.spec.control_parent_arm();
    if (!r.control_parent_arm.empty()) {
      auto it = control_stop.find(r.arm);
      r.control_stop_tokens =
          it != control_stop.end() ? it->second : job.spec.run().schedule().stop_at_tokens();
    }
    r.hardware_kind = HardwareKindLabel(job.worker_kind);
    auto e = events.find(job.id);
    if (e != events.end()) {
      JobEvents& j = e->second;
      r.milestones = std::move(j.milestones);
      r.test_nll = j.test_nll;
      // Cost from the latest attempt that trained: its median tokens/s, its largest peak
      // memory and its hardware kind (from its INIT event; else the job's last worker's).
      int attempt = -1;
      if (!j.tokens_per_second.empty()) attempt = j.tokens_per_second.rbegin()->first;
      if (attempt < 0 && !j.peak_memory_bytes.empty())
        attempt = j.peak_memory_bytes.rbegin()->first;
      if (attempt >= 0) {
        auto tps = j.tokens_per_second.find(attempt);
        if (tps != j.tokens_per_second.end()) r.tokens_per_second = Median(tps->second);
        auto mem = j.peak_memory_bytes.find(attempt);
        if (mem != j.peak_memory_bytes.end()) r.peak_memory_bytes = mem->second;
        auto kind = j.hardware_kind.find(attempt);
        if (kind != j.hardware_kind.end()) r.hardware_kind = HardwareKindLabel(kind->second);
      }
    }
    in.runs.push_back(std::move(r));
  }
  ExcludeDataMismatches(source, in.reference_arm, in.runs);
  return in;
}

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
    out->set_job_state(JobStateOfLabel(m.job_state));
    out->set_reason(m.reason);
    out->set_split(m.split);
  }
  for (const std::string& n : t.notes) report.add_notes(n);
  SetTimestamp(now_us, report.mutable_generate_time());
  return report;
}

pb::GetReportResponse BuildReport(const ReportSource& source, const ReportOptions& options) {
  stats::ReportInput in = MakeStatsInput(source, options.reference_arm);
  if (options.target_delta > 0.0 && std::isfinite(options.target_delta)) {
    in.target_delta = options.target_delta;
  }
  stats::ReportTables tables =
      stats::BuildTables(in, ReportBootstrapSeed(source.sweep.id), options.bootstrap_resamples,
                         options.confidence_level);
  if (source.sequential) tables.sequential = SequentialSectionOf(*source.sequential);
  pb::GetReportResponse resp;
  *resp.mutable_report() = ReportToProto(tables, options.now_us);
  if (source.sequential) *resp.mutable_report()->mutable_sequential() = *source.sequential;
  if (options.omit_files) return resp;

  auto wanted = [&](const char* format) {
    return options.formats.empty() || options.formats.count(format) > 0;
  };
  if (wanted("md")) {
    StatusOr<std::vector<pb::ReportFile>> plots = RenderPlots(tables, options);
    std::string md;
    if (plots.ok()) {
      md = stats::RenderMarkdown(tables, "plots");
    } else {
      resp.set_warning("plots not drawn: " + plots.status().ToString());
      md = stats::RenderMarkdown(tables, "", plots.status().ToString());
    }
    AddFile(resp, "report.md", std::move(md), "text/markdown");
    if (plots.ok()) {
      for (pb::ReportFile& f : *plots) *resp.add_files() = std::move(f);
    }
  }
  if (wanted("csv")) {
    for (auto& [name, content] : stats::RenderCsv(tables)) {
      AddFile(resp, name, std::move(content), "text/csv");
    }
  }
  if (wanted("json")) {
    AddFile(resp, "report.json", stats::RenderJson(tables), "application/json");
  }
  return resp;
}

}  // namespace rdattn::coordinator
