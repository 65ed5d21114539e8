// BuildReport on hand-made store rows: pairing per seed, deltas, statistics, missing partners,
// controls, depth routes, cost, and the rendered files (gnuplot PNGs included).
#include "coordinator/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator/data_identity.h"
#include "coordinator/proto_convert.h"
#include "proto/contract/contract.h"
#include "tests/coordinator/test_util.h"

namespace rdattn::coordinator {
namespace {

pb::SweepSpec Spec() {
  pb::SweepSpec s;
  s.set_name("r");
  pb::ScaleSpec* scale = s.add_scales();
  scale->set_name("tiny");
  scale->set_preset("tiny");
  s.add_arms("block");
  s.add_arms("rd");
  for (uint64_t seed : {1, 2, 3}) s.add_seeds(seed);
  pb::ControlSpec* c = s.add_controls();
  c->set_arm("tied");
  c->set_parent_arm("rd");
  c->set_stop_at_tokens(6144);
  s.mutable_data()->add_train_shards("/d/t.bin");
  s.mutable_data()->add_val_shards("/d/v.bin");
  s.mutable_data()->set_tokenizer("byte");
  s.mutable_schedule()->set_total_tokens(12288);
  s.mutable_schedule()->set_global_batch_tokens(512);
  s.mutable_schedule()->set_micro_batch_sequences(8);
  s.mutable_schedule()->add_milestones_tokens(6144);
  s.mutable_schedule()->add_milestones_tokens(12288);
  s.mutable_optim()->set_peak_lr(0.003);
  return s;
}

struct Built {
  ReportSource src;
  int64_t seq = 0;
  pb::MetricEvent& Add(const std::string& job, pb::MetricEvent::Kind kind, int attempt = 1) {
    EventRow e;
    e.seq = ++seq;
    e.sweep_id = src.sweep.id;
    e.job_id = job;
    e.kind = EventKind::kMetric;
    e.attempt = attempt;
    e.metric_kind = kind;
    pb::MetricEvent* m = e.event.mutable_metric_event();
    m->set_kind(kind);
    m->set_job_id(job);
    m->set_attempt(attempt);
    src.events.push_back(e);
    return *src.events.back().event.mutable_metric_event();
  }
  void Eval(const std::string& job, int64_t milestone, double nll) {
    pb::MetricEvent& m = Add(job, pb::MetricEvent::KIND_EVAL);
    m.set_milestone_tokens(milestone);
    m.set_val_nll(nll);
  }
  const JobRow& JobOf(uint64_t seed, const std::string& arm) const {
    for (const JobRow& j : src.jobs) {
      if (j.spec.seed() == seed && j.spec.arm() == arm) return j;
    }
    ADD_FAILURE() << "no job " << seed << " " << arm;
    return src.jobs.front();
  }
  JobRow& MutableJobOf(uint64_t seed, const std::string& arm) {
    return const_cast<JobRow&>(JobOf(seed, arm));
  }
};

Built Make() {
  Built b;
  b.src.sweep.id = "sw-r";
  b.src.sweep.spec = Spec();
  StatusOr<std::vector<pb::JobSpec>> jobs = contract::ExpandSweep(b.src.sweep.spec, "sw-r");
  EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
  for (const pb::JobSpec& js : *jobs) {
    JobRow j;
    j.id = js.job_id();
    j.sweep_id = "sw-r";
    j.spec = js;
    j.state = JobState::kSucceeded;
    b.src.jobs.push_back(j);
  }
  return b;
}

ReportOptions NoFiles() {
  ReportOptions o;
  o.omit_files = true;
  return o;
}

const pb::PairedRow* FindRow(const pb::Report& r, const std::string& arm, int64_t milestone,
                             const std::string& kind = "main") {
  for (const pb::PairedRow& row : r.rows()) {
    if (row.arm() == arm && row.milestone_tokens() == milestone && row.kind() == kind) return &row;
  }
  ADD_FAILURE() << "no row " << arm << " @ " << milestone << " " << kind;
  return nullptr;
}

const pb::ReportFile* FindFile(const pb::GetReportResponse& resp, const std::string& name) {
  for (const pb::ReportFile& f : resp.files()) {
    if (f.name() == name) return &f;
  }
  return nullptr;
}

bool IsPng(const std::string& bytes) {
  return bytes.size() > 8 && bytes.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) == 0;
}

TEST(ReportTest, ExpectedMilestones) {
  Built b = Make();
  EXPECT_EQ(ExpectedMilestones(b.JobOf(1, "rd").spec.run()), (std::vector<int64_t>{6144, 12288}));
  EXPECT_EQ(ExpectedMilestones(b.JobOf(1, "tied").spec.run()), (std::vector<int64_t>{6144}));
  EXPECT_TRUE(ExpectedMilestones(pb::RunSpec()).empty());
}

TEST(ReportTest, BootstrapSeedIsFnv1aOfTheSweepId) {
  EXPECT_EQ(ReportBootstrapSeed(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(ReportBootstrapSeed("a"), 0xaf63dc4c8601ec8cULL);
  Built b = Make();
  pb::GetReportResponse resp = BuildReport(b.src, NoFiles());
  EXPECT_EQ(resp.report().bootstrap_seed(), ReportBootstrapSeed("sw-r"));
  EXPECT_EQ(resp.report().bootstrap_resamples(), 10000);
  EXPECT_DOUBLE_EQ(resp.report().confidence_level(), 0.95);
  EXPECT_EQ(resp.files_size(), 0);
}

TEST(ReportTest, PairsPerSeedAndListsMissingPartners) {
  Built b = Make();
  // An earlier attempt's evaluation of a milestone is replaced by the later one (seq order).
  b.Eval(b.JobOf(1, "rd").id, 6144, 9.9);
  for (uint64_t seed : {1, 2, 3}) {
    const double d = -0.1 * static_cast<double>(seed);  // rd better by 0.1, 0.2, 0.3
    b.Eval(b.JobOf(seed, "block").id, 6144, 4.0);
    b.Eval(b.JobOf(seed, "rd").id, 6144, 4.0 + d);
    b.Eval(b.JobOf(seed, "tied").id, 6144, 4.0 + d + 0.05);
    if (seed != 3) {
      b.Eval(b.JobOf(seed, "block").id, 12288, 3.0);
      b.Eval(b.JobOf(seed, "rd").id, 12288, 3.0 + d);
    }
  }
  JobRow& failed = b.MutableJobOf(3, "rd");
  failed.state = JobState::kFailed;
  failed.failure_reason = "exit code 1";
  pb::Report r = BuildReport(b.src, NoFiles()).report();
  EXPECT_EQ(r.reference_arm(), "block");
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.jobs_total(), 9);
  EXPECT_EQ(r.jobs_ended(), 9);

  const pb::PairedRow* at6k = FindRow(r, "rd", 6144);
  ASSERT_NE(at6k, nullptr);
  EXPECT_FALSE(at6k->is_control());
  EXPECT_EQ(at6k->split(), "val");
  EXPECT_EQ(at6k->n(), 3);
  EXPECT_EQ(at6k->n_expected(), 3);
  EXPECT_NEAR(at6k->pairs(0).delta_nll(), -0.1, 1e-12);  // not 9.9 - 4.0
  EXPECT_NEAR(at6k->mean_delta_nll(), -0.2, 1e-12);
  EXPECT_NEAR(at6k->sd_delta_nll(), 0.1, 1e-12);
  EXPECT_EQ(at6k->wins(), 3);
  EXPECT_EQ(at6k->losses(), 0);
  EXPECT_DOUBLE_EQ(at6k->sign_test_p(), 0.25);  // 3 of 3: 2 * (1/2)^3
  // t: mean -0.2, se 0.1/sqrt(3), df 2; t_{0.975,2} = 4.302652729749464.
  EXPECT_NEAR(at6k->t_critical(), 4.302652729749464, 1e-12);
  EXPECT_NEAR(at6k->t_ci_low(), -0.2 - 4.302652729749464 * 0.1 / std::sqrt(3.0), 1e-12);
  EXPECT_NEAR(at6k->t_ci_high(), -0.2 + 4.302652729749464 * 0.1 / std::sqrt(3.0), 1e-12);
  EXPECT_NEAR(at6k->t_statistic(), -0.2 / (0.1 / std::sqrt(3.0)), 1e-9);
  // Two-sided p of |t| = 2*sqrt(3) with df 2: 1 - |t| / sqrt(2 + t^2) = 1 - sqrt(12/14).
  EXPECT_NEAR(at6k->t_test_p(), 1 - std::sqrt(12.0 / 14.0), 1e-12);
  // The bootstrap interval lies within the range of the deltas.
  EXPECT_GE(at6k->bootstrap_ci_low(), -0.3 - 1e-12);
  EXPECT_LE(at6k->bootstrap_ci_high(), -0.1 + 1e-12);
  EXPECT_LT(at6k->bootstrap_ci_low(), at6k->bootstrap_ci_high());
  EXPECT_NEAR(at6k->ppl_change_of_mean_delta(), std::expm1(-0.2), 1e-12);
  EXPECT_NEAR(at6k->mean_ppl_change(), (std::expm1(-0.1) + std::expm1(-0.2) + std::expm1(-0.3)) / 3,
              1e-12);
  EXPECT_NEAR(at6k->pairs(2).ppl_change(), std::expm1(-0.3), 1e-12);

  // tied vs its parent rd: +0.05 for every seed; and vs the reference block.
  const pb::PairedRow* control = FindRow(r, "tied", 6144, "control_vs_parent");
  ASSERT_NE(control, nullptr);
  EXPECT_TRUE(control->is_control());
  EXPECT_EQ(control->reference_arm(), "rd");
  EXPECT_EQ(control->n(), 3);
  EXPECT_EQ(control->wins(), 0);
  EXPECT_EQ(control->losses(), 3);
  EXPECT_NEAR(control->mean_delta_nll(), 0.05, 1e-12);
  EXPECT_NEAR(control->pairs(1).delta_nll(), 0.05, 1e-12);
  const pb::PairedRow* control_ref = FindRow(r, "tied", 6144, "control_vs_reference");
  ASSERT_NE(control_ref, nullptr);
  EXPECT_EQ(control_ref->reference_arm(), "block");

  // Seed 3 has no pair at 12288: listed in the row (n 2 of 3) and in missing, never dropped.
  const pb::PairedRow* at12k = FindRow(r, "rd", 12288);
  ASSERT_NE(at12k, nullptr);
  EXPECT_EQ(at12k->n(), 2);
  EXPECT_EQ(at12k->n_expected(), 3);
  ASSERT_EQ(at12k->pairs_size(), 3);
  EXPECT_FALSE(at12k->pairs(2).complete());
  EXPECT_TRUE(std::isnan(at12k->pairs(2).delta_nll()));
  EXPECT_FALSE(at12k->pairs(2).missing_reason().empty());
  EXPECT_TRUE(at12k->pairs(1).complete());
  bool rd_missing = false;
  for (const pb::MissingEntry& m : r.missing()) {
    EXPECT_EQ(m.seed(), 3u) << m.reason();
    if (m.arm() == "rd" && m.milestone_tokens() == 12288) {
      rd_missing = true;
      EXPECT_EQ(m.job_state(), pb::JOB_STATE_FAILED);
      EXPECT_NE(m.reason().find("exit code 1"), std::string::npos) << m.reason();
    }
  }
  EXPECT_TRUE(rd_missing);
}

TEST(ReportTest, IncompleteWhileJobsRun) {
  Built b = Make();
  b.src.jobs[1].state = JobState::kRunning;
  pb::Report r = BuildReport(b.src, NoFiles()).report();
  EXPECT_FALSE(r.complete());
  for (const pb::PairedRow& row : r.rows()) {
    EXPECT_EQ(row.n(), 0);
    EXPECT_TRUE(std::isnan(row.mean_delta_nll()));
    EXPECT_TRUE(std::isnan(row.t_ci_low()));
  }
  EXPECT_GT(r.missing_size(), 0);
}

// A job's state is mapped once into the report's input (stats::RunState) and back to the proto's
// JobState: every state reaches Report.missing as the same JobState, and missing.csv and the
// reason name it as JobStateName does.
TEST(ReportTest, EveryJobStateReachesTheMissingListUnchanged) {
  for (JobState state : kAllJobStates) {
    Built b = Make();  // no events: every job's cells are missing
    for (JobRow& j : b.src.jobs) j.state = state;
    ReportOptions csv_only;
    csv_only.formats = {"csv"};
    const pb::GetReportResponse resp = BuildReport(b.src, csv_only);
    const std::string name(JobStateName(state));
    // An ended job without any evaluation is one entry (3 seeds x block, rd, tied); a job still
    // to run is one per expected cell (block and rd at 6144 and 12288, tied at 6144).
    const bool ended = state == JobState::kSucceeded || state == JobState::kFailed ||
                       state == JobState::kCancelled;
    ASSERT_EQ(resp.report().missing_size(), ended ? 9 : 15) << name;
    for (const pb::MissingEntry& m : resp.report().missing()) {
      EXPECT_EQ(m.job_state(), ToProto(state)) << name;
      EXPECT_NE(m.reason().find("job " + name), std::string::npos) << m.reason();
    }
    const pb::ReportFile* csv = FindFile(resp, "missing.csv");
    ASSERT_NE(csv, nullptr);
    std::istringstream lines(csv->content());
    std::string line;
    int rows = 0;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::vector<std::string> fields;
      std::istringstream cells(line);
      for (std::string cell; std::getline(cells, cell, ',');) fields.push_back(cell);
      ASSERT_GE(fields.size(), 7u) << line;
      EXPECT_EQ(fields[6], name) << line;
      ++rows;
    }
    EXPECT_EQ(rows, resp.report().missing_size()) << csv->content();
  }
}

// A stored sweep with evaluations, training steps and end-of-run events: the full report and
// its rendered files (report.md, the CSVs, report.json and three PNGs drawn by gnuplot).
Built Finished() {
  Built b = Make();
  const double deltas[] = {-0.03, -0.01, 0.02};
  for (uint64_t seed : {1, 2, 3}) {
    const double d = deltas[seed - 1];
    for (const std::string arm : {"block", "rd", "tied"}) {
      const std::string id = b.JobOf(seed, arm).id;
      b.MutableJobOf(seed, arm).worker_kind = HardwareKind::kCpu;
      pb::MetricEvent& init = b.Add(id, pb::MetricEvent::KIND_INIT);
      init.set_hardware_kind(pb::HARDWARE_KIND_CPU);
      const double tps = arm == "block" ? 1000 : 800;
      for (int s = 1; s <= 3; ++s) {
        pb::MetricEvent& step = b.Add(id, pb::MetricEvent::KIND_TRAIN_STEP);
        step.set_step(s);
        step.set_tokens_per_second(tps + (s == 2 ? 100 : 0));  // median: tps
        step.set_peak_memory_bytes(arm == "block" ? 1000 * s : 1500 * s);
      }
      for (int64_t milestone : {int64_t{6144}, int64_t{12288}}) {
        if (arm == "tied" && milestone == 12288) continue;
        const double base = milestone == 6144 ? 4.0 : 3.0;
        pb::MetricEvent& e = b.Add(id, pb::MetricEvent::KIND_EVAL);
        e.set_milestone_tokens(milestone);
        e.set_val_nll(arm == "block" ? base : base + d + (arm == "tied" ? 0.01 : 0));
        if (arm != "block") {
          for (double js : {0.0, 0.2, 0.3}) {
            e.add_js_nats(js);
            e.add_js_bits(js / std::log(2.0));
            e.add_js_sqrt(std::sqrt(js));
            e.add_route_entropy_qk_nats(0.5);
            e.add_route_entropy_v_nats(0.6);
          }
        }
      }
      pb::MetricEvent& fin = b.Add(id, pb::MetricEvent::KIND_FINISHED);
      fin.set_test_nll(arm == "block" ? 3.5 : 3.5 + d);
      fin.set_eval_tokens(1024);
    }
  }
  return b;
}

TEST(ReportTest, FullReportWithRenderedFiles) {
  testing::TempDir tmp;
  Built b = Finished();
  ReportOptions options;
  options.temp_parent = tmp.File("");
  options.bootstrap_resamples = 2000;
  options.now_us = 1700000000000000;
  pb::GetReportResponse resp = BuildReport(b.src, options);
  const pb::Report& r = resp.report();
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.bootstrap_resamples(), 2000);
  EXPECT_EQ(r.generate_time().seconds(), 1700000000);

  const pb::PairedRow* last = FindRow(r, "rd", 12288);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->n(), 3);
  EXPECT_NEAR(last->mean_delta_nll(), (-0.03 - 0.01 + 0.02) / 3, 1e-12);
  EXPECT_EQ(last->wins(), 2);
  EXPECT_EQ(last->losses(), 1);
  EXPECT_DOUBLE_EQ(last->sign_test_p(), 1.0);
  EXPECT_FALSE(std::isnan(last->bootstrap_ci_low()));
  EXPECT_FALSE(std::isnan(last->t_test_p()));
  // The test split: FINISHED test NLLs, paired the same way.
  const pb::PairedRow* test = nullptr;
  for (const pb::PairedRow& row : r.rows()) {
    if (row.split() == "test" && row.arm() == "rd") test = &row;
  }
  ASSERT_NE(test, nullptr);
  EXPECT_EQ(test->n(), 3);
  EXPECT_EQ(test->milestone_tokens(), 0);

  // Depth routes: rd at its last milestone, JS by layer and the headline means.
  const pb::JsRow* js = nullptr;
  for (const pb::JsRow& row : r.js_rows()) {
    if (row.arm() == "rd" && row.milestone_tokens() == 12288) js = &row;
  }
  ASSERT_NE(js, nullptr);
  EXPECT_TRUE(js->has_js());
  EXPECT_EQ(js->n(), 3);
  ASSERT_EQ(js->mean_js_nats_by_layer_size(), 3);
  EXPECT_NEAR(js->mean_js_nats_by_layer(2), 0.3, 1e-12);
  EXPECT_NEAR(js->mean_js_nats(), 0.5 / 3, 1e-12);
  EXPECT_NEAR(js->mean_js_multi_source_nats(), 0.25, 1e-12);

  // Cost: rd against block on CPU, median tokens/s 800 vs 1000, peak memory 4500 vs 3000.
  const pb::CostRow* cost = nullptr;
  for (const pb::CostRow& row : r.cost_rows()) {
    if (row.arm() == "rd") cost = &row;
  }
  ASSERT_NE(cost, nullptr);
  EXPECT_EQ(cost->hardware_kind(), pb::HARDWARE_KIND_CPU);
  EXPECT_EQ(cost->n(), 3);
  EXPECT_NEAR(cost->tokens_per_second_ratio(), 0.8, 1e-12);
  EXPECT_NEAR(cost->peak_memory_ratio(), 1.5, 1e-12);
  EXPECT_EQ(cost->peak_memory_bytes(), 4500);
  EXPECT_EQ(cost->reference_peak_memory_bytes(), 3000);

  // The files: report.md first, its four PNGs, the CSVs and report.json.
  EXPECT_TRUE(resp.warning().empty()) << resp.warning();
  ASSERT_GT(resp.files_size(), 0);
  EXPECT_EQ(resp.files(0).name(), "report.md");
  const pb::ReportFile* md = FindFile(resp, "report.md");
  ASSERT_NE(md, nullptr);
  EXPECT_EQ(md->media_type(), "text/markdown");
  EXPECT_NE(md->content().find("plots/nll_vs_tokens.png"), std::string::npos);
  EXPECT_NE(md->content().find("n"), std::string::npos);
  for (const char* png : {"plots/nll_vs_tokens.png", "plots/delta_last_milestone.png",
                          "plots/js_by_layer.png", "plots/delta_vs_tokens.png"}) {
    const pb::ReportFile* f = FindFile(resp, png);
    ASSERT_NE(f, nullptr) << png;
    EXPECT_EQ(f->media_type(), "image/png");
    EXPECT_TRUE(IsPng(f->content())) << png;
  }
  for (const char* csv :
       {"nll.csv", "paired.csv", "paired_seeds.csv", "controls.csv", "depth.csv",
        "depth_layers.csv", "cost.csv", "missing.csv", "trend.csv", "trend_seeds.csv"}) {
    const pb::ReportFile* f = FindFile(resp, csv);
    ASSERT_NE(f, nullptr) << csv;
    EXPECT_EQ(f->media_type(), "text/csv");
  }
  const pb::ReportFile* json = FindFile(resp, "report.json");
  ASSERT_NE(json, nullptr);
  EXPECT_NE(json->content().find("\"sweep_id\""), std::string::npos);
  for (const pb::ReportFile& f : resp.files()) {
    EXPECT_TRUE(std::regex_match(f.name(), std::regex("(plots/)?[A-Za-z0-9._-]+"))) << f.name();
  }
  // The temporary plot folder is gone.
  EXPECT_TRUE(std::filesystem::is_empty(tmp.File(""))) << tmp.File("");

  // Only the formats asked for.
  options.formats = {"json"};
  pb::GetReportResponse only_json = BuildReport(b.src, options);
  ASSERT_EQ(only_json.files_size(), 1);
  EXPECT_EQ(only_json.files(0).name(), "report.json");
}

TEST(ReportTest, PowerRobustnessAndTrendInTheProto) {
  Built b = Finished();
  ReportOptions options;
  options.bootstrap_resamples = 100;
  options.omit_files = true;
  options.target_delta = 0.04;
  const pb::Report r = BuildReport(b.src, options).report();
  EXPECT_EQ(r.target_delta_nll(), 0.04);
  const pb::PairedRow* last = FindRow(r, "rd", 12288);
  ASSERT_NE(last, nullptr);
  // Power: alpha 0.05, 80%, with the row's sd (deltas −0.03, −0.01, 0.02).
  EXPECT_NEAR(last->power_alpha(), 0.05, 1e-15);
  EXPECT_EQ(last->power(), 0.8);
  EXPECT_EQ(last->mde_nll(), stats::MinimumDetectableEffect(last->sd_delta_nll(), 3, 1 - 0.95));
  ASSERT_EQ(last->seeds_needed_size(), 4);
  const double deltas[] = {0.01, 0.02, 0.03, 0.04};
  for (int i = 0; i < 4; ++i) {
    const pb::SeedsNeeded& e = last->seeds_needed(i);
    EXPECT_EQ(e.delta_nll(), deltas[i]);
    EXPECT_EQ(e.user_given(), i == 3);
    EXPECT_EQ(e.seeds(), stats::SeedsNeeded(deltas[i], last->sd_delta_nll(), 1 - 0.95)) << i;
    EXPECT_GE(e.seeds(), 2);
  }
  // Robustness: median −0.01; ranks of |Δ| 3, 1, 2 and W+ = 2: P(W+ <= 2) = 3/8, p = 0.75.
  EXPECT_NEAR(last->median_delta_nll(), -0.01, 1e-12);
  EXPECT_EQ(last->wilcoxon_n(), 3);
  EXPECT_EQ(last->wilcoxon_w_plus(), 2.0);
  EXPECT_EQ(last->wilcoxon_p(), 0.75);
  EXPECT_TRUE(last->wilcoxon_exact());
  EXPECT_EQ(last->outlier_seeds_size(), 0);
  for (const pb::SeedDelta& d : last->pairs()) {
    EXPECT_TRUE(std::isfinite(d.robust_z()));
    EXPECT_FALSE(d.outlier());
  }
  // Trend: the same Δ at both milestones, so no evidence either way.
  ASSERT_EQ(r.trend_rows_size(), 1);
  const pb::TrendRow& t = r.trend_rows(0);
  EXPECT_EQ(t.arm(), "rd");
  EXPECT_EQ(t.milestone_tokens_size(), 2);
  EXPECT_EQ(t.n(), 3);
  EXPECT_EQ(t.n_expected(), 3);
  ASSERT_EQ(t.seeds_size(), 3);
  EXPECT_EQ(t.seeds(0).delta_nll_size(), 2);
  EXPECT_NEAR(t.mean_slope(), 0.0, 1e-12);
  EXPECT_EQ(t.reading(), "no evidence");
  EXPECT_EQ(t.gap_milestone_tokens(), 12288);
  // Without a target: the three planned deltas only.
  options.target_delta = 0;
  const pb::Report none = BuildReport(b.src, options).report();
  EXPECT_EQ(none.target_delta_nll(), 0.0);
  EXPECT_EQ(FindRow(none, "rd", 12288)->seeds_needed_size(), 3);
}

TEST(ReportTest, WithoutGnuplotTheMarkdownSaysWhy) {
  testing::TempDir tmp;
  Built b = Finished();
  ReportOptions options;
  options.temp_parent = tmp.File("");
  options.bootstrap_resamples = 100;
  options.formats = {"md"};
  options.gnuplot_binary = "rdattn-no-such-gnuplot";
  pb::GetReportResponse resp = BuildReport(b.src, options);
  EXPECT_NE(resp.warning().find("plots not drawn"), std::string::npos) << resp.warning();
  ASSERT_EQ(resp.files_size(), 1);
  EXPECT_EQ(resp.files(0).name(), "report.md");
  EXPECT_NE(resp.files(0).content().find("Plots were not drawn"), std::string::npos);
  EXPECT_EQ(resp.report().rows_size() > 0, true);
  EXPECT_TRUE(std::filesystem::is_empty(tmp.File("")));
}

// rdattn-coordinator passes "" when --gnuplot found nothing at startup: no plots, no search.
TEST(ReportTest, NoGnuplotConfiguredMeansNoPlots) {
  testing::TempDir tmp;
  Built b = Finished();
  ReportOptions options;
  options.temp_parent = tmp.File("");
  options.bootstrap_resamples = 100;
  options.gnuplot_binary = "";
  pb::GetReportResponse resp = BuildReport(b.src, options);
  EXPECT_NE(resp.warning().find("no gnuplot"), std::string::npos) << resp.warning();
  const pb::ReportFile* md = FindFile(resp, "report.md");
  ASSERT_NE(md, nullptr);
  EXPECT_NE(md->content().find("Plots were not drawn: FAILED_PRECONDITION: no gnuplot"),
            std::string::npos);
  for (const pb::ReportFile& f : resp.files()) EXPECT_NE(f.media_type(), "image/png") << f.name();
  EXPECT_NE(FindFile(resp, "paired.csv"), nullptr);
  EXPECT_NE(FindFile(resp, "report.json"), nullptr);
  EXPECT_TRUE(std::filesystem::is_empty(tmp.File("")));
}

// The temporary folder is the one given: an absent parent leaves the plots out and says so.
TEST(ReportTest, PlotsAreDrawnUnderTheGivenTempParent) {
  testing::TempDir tmp;
  Built b = Finished();
  ReportOptions options;
  options.temp_parent = tmp.File("no-such-folder");
  options.bootstrap_resamples = 100;
  options.formats = {"md"};
  pb::GetReportResponse resp = BuildReport(b.src, options);
  EXPECT_NE(
      resp.warning().find("cannot create a temporary folder in " + tmp.File("no-such-folder")),
      std::string::npos)
      << resp.warning();
  ASSERT_EQ(resp.files_size(), 1);
}

// Data identity (docs/operations.md "Data identity"): arms whose INIT events carry different
// data digests are never paired; the reason names the shard; events without digests are unknown.
void Digests(pb::MetricEvent& init, const std::string& train_digest) {
  init.set_data_digest("xxh3:" + train_digest.substr(5, 8) + "00000000");
  pb::ShardDigest* t = init.add_shard_digests();
  t->set_role("train");
  t->set_path("/d/t.bin");
  t->set_digest(train_digest);
  t->set_bytes(4096);
  pb::ShardDigest* v = init.add_shard_digests();
  v->set_role("val");
  v->set_path("/d/v.bin");
  v->set_digest("xxh3:00000000000000aa");
  v->set_bytes(2048);
}

TEST(ReportTest, ArmsThatReadOtherDataAreNeverPaired) {
  const std::string kOld = "xxh3:1111111111111111", kNew = "xxh3:2222222222222222";
  Built b = Make();
  for (uint64_t seed : {1, 2, 3}) {
    b.Eval(b.JobOf(seed, "block").id, 6144, 4.0);
    b.Eval(b.JobOf(seed, "rd").id, 6144, 3.9);
  }
  // Seed 1: both arms read the same data. Seed 2: rd read a rewritten train shard. Seed 3: no
  // digests (a trainer older than digests): unknown, paired as before.
  Digests(b.Add(b.JobOf(1, "block").id, pb::MetricEvent::KIND_INIT), kOld);
  Digests(b.Add(b.JobOf(1, "rd").id, pb::MetricEvent::KIND_INIT), kOld);
  Digests(b.Add(b.JobOf(2, "block").id, pb::MetricEvent::KIND_INIT), kOld);
  Digests(b.Add(b.JobOf(2, "rd").id, pb::MetricEvent::KIND_INIT), kNew);
  b.Add(b.JobOf(3, "block").id, pb::MetricEvent::KIND_INIT);
  b.Add(b.JobOf(3, "rd").id, pb::MetricEvent::KIND_INIT);
  pb::Report r = BuildReport(b.src, NoFiles()).report();
  const pb::PairedRow* row = FindRow(r, "rd", 6144);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->n(), 2);  // seeds 1 and 3
  ASSERT_EQ(row->pairs_size(), 3);
  EXPECT_TRUE(row->pairs(0).complete());
  EXPECT_TRUE(row->pairs(2).complete());
  EXPECT_FALSE(row->pairs(1).complete());
  EXPECT_TRUE(std::isnan(row->pairs(1).delta_nll()));
  const std::string& why = row->pairs(1).missing_reason();
  EXPECT_NE(why.find("not paired: data changed: "), std::string::npos) << why;
  EXPECT_NE(why.find("shard /d/t.bin (train): " + kOld), std::string::npos) << why;
  EXPECT_NE(why.find(kNew), std::string::npos) << why;
  EXPECT_EQ(why.find("/d/v.bin"), std::string::npos) << why;  // the val shard did not change
  bool listed = false;
  for (const pb::MissingEntry& m : r.missing()) {
    if (m.arm() == "rd" && m.seed() == 2) {
      listed = true;
      EXPECT_NE(m.reason().find("/d/t.bin"), std::string::npos) << m.reason();
    }
  }
  EXPECT_TRUE(listed);

  // A job whose own attempts read different data (resumed after a rewrite) is excluded too.
  Digests(b.Add(b.JobOf(1, "rd").id, pb::MetricEvent::KIND_INIT, /*attempt=*/2), kNew);
  r = BuildReport(b.src, NoFiles()).report();
  row = FindRow(r, "rd", 6144);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->n(), 1);  // seed 3 only
  EXPECT_NE(row->pairs(0).missing_reason().find("its attempts read different data"),
            std::string::npos)
      << row->pairs(0).missing_reason();
}

TEST(DataIdentityTest, DescribesEachShardThatDiffersAndUnknownIsNoDifference) {
  pb::MetricEvent a, b;
  Digests(a, "xxh3:1111111111111111");
  Digests(b, "xxh3:1111111111111111");
  EXPECT_EQ(DescribeDataDifference(a, "A", b, "B"), "");
  pb::MetricEvent none;  // an older trainer: unknown
  EXPECT_EQ(DescribeDataDifference(a, "A", none, "B"), "");
  EXPECT_EQ(DescribeDataDifference(none, "A", b, "B"), "");
  // One train shard differs and one test shard exists on one side only.
  b.Clear();
  Digests(b, "xxh3:2222222222222222");
  pb::ShardDigest* t = b.add_shard_digests();
  t->set_role("test");
  t->set_path("/d/x.bin");
  t->set_digest("xxh3:00000000000000bb");
  t->set_bytes(1030);
  b.set_data_digest("xxh3:3333333333333333");
  const std::string why = DescribeDataDifference(a, "job A", b, "job B");
  EXPECT_EQ(why,
            "shard /d/t.bin (train): xxh3:1111111111111111 (4096 bytes) in job A, "
            "xxh3:2222222222222222 (4096 bytes) in job B; shard /d/x.bin (test) only in job B");
  // Same shards, other order: the data digests differ, the shards do not.
  pb::MetricEvent c = a;
  c.mutable_shard_digests()->SwapElements(0, 1);
  c.set_data_digest("xxh3:4444444444444444");
  EXPECT_NE(DescribeDataDifference(a, "A", c, "C").find("the shard lists differ in order or paths"),
            std::string::npos);
}
}  // namespace
}  // namespace rdattn::coordinator
