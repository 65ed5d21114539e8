// Tests of coordinator/stats/render: BuildTables() on a complete paper-like sweep and on a messy
// one (failed job, missing partner, a job still running, a cancelled control, mixed hardware,
// a duplicate job), and the Markdown, CSV, JSON and gnuplot outputs.
//
// RDATTN_REPORT_TEST_OUT=DIR keeps what the file-writing tests render, in DIR/<name> (e.g.
// DIR/paper/report.md and DIR/paper/plots/*.png), to look at.
#include "coordinator/stats/render.h"
#include "coordinator/stats/plots.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace rdattn::stats {
namespace {

namespace fs = std::filesystem;

constexpr int64_t k250M = 250000000;
constexpr int64_t k500M = 500000000;
constexpr int64_t k1B = 1000000000;
constexpr int64_t k2B = 2000000000;
const std::vector<int64_t> kMilestones = {k250M, k500M, k1B, k2B};
const std::vector<double> kPaperS = {-0.027, -0.029, -0.030, -0.030, -0.035};
constexpr uint64_t kSeed = 20260801;

// Block's validation NLL at a milestone for a seed: falls with tokens, differs a little by seed.
double BlockNll(int64_t tokens, uint64_t seed) {
  return 3.6 - 0.25 * std::log2(static_cast<double>(tokens) / k250M) + 0.004 * seed;
}

MilestoneResult Eval(double nll, bool v_route, uint64_t seed, int layers = 6) {
  MilestoneResult m;
  m.val_nll = nll;
  for (int l = 0; l < layers; ++l) {
    const double h = l == 0 ? 0.0 : std::log(1.0 + l / 2.0);
    m.route_entropy_qk_nats.push_back(h);
    if (v_route) {
      const double js = l == 0 ? 0.0 : 0.1 + 0.03 * l + 0.002 * seed;
      m.js_nats.push_back(js);
      m.js_bits.push_back(js / std::log(2.0));
      m.js_sqrt.push_back(std::sqrt(js));
      m.route_entropy_v_nats.push_back(0.8 * h);
    }
  }
  return m;
}

RunResult MakeRun(const std::string& arm, uint64_t seed, RunState state) {
  RunResult r;
  r.job_id = "sw1-S-" + arm + "-" + std::to_string(seed);
  r.scale = "S";
  r.arm = arm;
  r.seed = seed;
  r.state = state;
  r.hardware_kind = "GPU";
  return r;
}

// 5 seeds, block and rd, four milestones; at 2B the deltas are the paper's S deltas.
ReportInput PaperSweep() {
  ReportInput in;
  in.sweep_id = "sw1";
  in.sweep_name = "paper-S";
  in.reference_arm = "block";
  in.milestones = kMilestones;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    RunResult block = MakeRun("block", seed, RunState::kSucceeded);
    RunResult rd = MakeRun("rd", seed, RunState::kSucceeded);
    for (int64_t m : kMilestones) {
      const double b = BlockNll(m, seed);
      const double shrink = m == k2B ? 1.0 : 1.0 + 0.1 * std::log2(static_cast<double>(k2B) / m);
      block.milestones[m] = Eval(b, false, seed);
      rd.milestones[m] = Eval(b + kPaperS[seed - 1] * shrink, true, seed);
    }
    block.tokens_per_second = 100000.0 + 1000.0 * seed;
    rd.tokens_per_second = 0.91 * block.tokens_per_second;
    block.peak_memory_bytes = int64_t{10} << 30;
    rd.peak_memory_bytes = int64_t{11} << 30;
    block.test_nll = BlockNll(k2B, seed) + 0.01;
    rd.test_nll = block.test_nll + kPaperS[seed - 1];
    in.runs.push_back(block);
    in.runs.push_back(rd);
  }
  return in;
}

// Seeds 1–4 have jobs, seed 5 none. rd seed 3 FAILED after 500M; block seed 4 is RUNNING at 1B;
// controls tied (parent block) and frozen_v (parent rd) stop at 500M; frozen_v seed 2 was
// cancelled before any evaluation; seed 2's rd ran on a CPU, seed 4's block on an unknown kind;
// seed 1's rd has a second, failed job.
ReportInput MessySweep() {
  ReportInput in;
  in.sweep_id = "sw2";
  in.sweep_name = "messy";
  in.milestones = kMilestones;
  in.seeds = {1, 2, 3, 4, 5};
  in.controls = {{"tied", "block", k500M}, {"frozen_v", "rd", k500M}};
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    RunResult block = MakeRun("block", seed, seed == 4 ? RunState::kRunning : RunState::kSucceeded);
    RunResult rd = MakeRun("rd", seed, seed == 3 ? RunState::kFailed : RunState::kSucceeded);
    if (seed == 3) rd.failure_reason = "CUDA out of memory";
    for (int64_t m : kMilestones) {
      const double b = BlockNll(m, seed);
      if (!(seed == 4 && m == k2B)) block.milestones[m] = Eval(b, false, seed);
      if (!(seed == 3 && m > k500M)) rd.milestones[m] = Eval(b - 0.02 - 0.001 * seed, true, seed);
    }
    block.tokens_per_second = 50000.0;
    rd.tokens_per_second = 45000.0 + 100.0 * seed;
    block.peak_memory_bytes = 1000;
    rd.peak_memory_bytes = 1100;
    if (seed == 2) rd.hardware_kind = "CPU";
    if (seed == 4) block.hardware_kind = "";
    if (seed <= 2) {
      block.test_nll = BlockNll(k2B, seed) + 0.01;
      rd.test_nll = block.test_nll - 0.02;
    }
    in.runs.push_back(block);
    in.runs.push_back(rd);

    RunResult tied = MakeRun("tied", seed, RunState::kSucceeded);
    tied.control_parent_arm = "block";
    tied.control_stop_tokens = k500M;
    tied.milestones[k250M] = Eval(BlockNll(k250M, seed) + 0.0001, false, seed);
    tied.milestones[k500M] = Eval(BlockNll(k500M, seed) + 0.0001 * seed, false, seed);
    in.runs.push_back(tied);

    RunResult frozen =
        MakeRun("frozen_v", seed, seed == 2 ? RunState::kCancelled : RunState::kSucceeded);
    frozen.control_parent_arm = "rd";
    frozen.control_stop_tokens = k500M;
    if (seed != 2) {
      frozen.milestones[k250M] = Eval(BlockNll(k250M, seed) + 0.01, true, seed);
      frozen.milestones[k500M] = Eval(BlockNll(k500M, seed) + 0.01, true, seed);
    }
    in.runs.push_back(frozen);
  }
  RunResult duplicate = MakeRun("rd", 1, RunState::kFailed);
  duplicate.job_id = "sw2-S-rd-1-old";
  duplicate.failure_reason = "worker lost";
  in.runs.push_back(duplicate);
  return in;
}

const PairedRow& FindRow(const std::vector<PairedRow>& rows, const std::string& arm,
                         const std::string& reference, int64_t milestone,
                         const std::string& split = kSplitVal) {
  for (const PairedRow& r : rows) {
    if (r.arm == arm && r.reference_arm == reference && r.milestone_tokens == milestone &&
        r.split == split) {
      return r;
    }
  }
  ADD_FAILURE() << "no row " << arm << " vs " << reference << " at " << milestone;
  static const PairedRow kNone;
  return kNone;
}

std::vector<double> Deltas(const PairedRow& row) {
  std::vector<double> d;
  for (const SeedPair& p : row.pairs) {
    if (p.complete) d.push_back(p.delta);
  }
  return d;
}

// ---- Tables ------------------------------------------------------------------------------

TEST(BuildTables, PaperSweepGivesThePaperStatistics) {
  const ReportTables t = BuildTables(PaperSweep(), kSeed);
  EXPECT_TRUE(t.complete);
  EXPECT_EQ(t.jobs_total, 10);
  EXPECT_EQ(t.jobs_ended, 10);
  EXPECT_TRUE(t.missing.empty());
  EXPECT_TRUE(t.notes.empty());
  ASSERT_EQ(t.scales, std::vector<std::string>{"S"});
  ASSERT_EQ(t.nll.size(), 5u);  // 4 milestones + test
  ASSERT_EQ(t.paired.size(), 5u);
  EXPECT_EQ(t.nll[0].arms, (std::vector<std::string>{"block", "rd"}));

  const PairedRow& last = FindRow(t.paired, "rd", "block", k2B);
  EXPECT_EQ(last.kind, "main");
  EXPECT_EQ(last.summary.n, 5);
  EXPECT_EQ(last.n_expected, 5);
  // The row's summary is Summarize() of its own per-seed deltas, in seed order ...
  const PairedSummary again = Summarize(Deltas(last), kSeed);
  EXPECT_EQ(last.summary.mean, again.mean);
  EXPECT_EQ(last.summary.bootstrap_ci_low, again.bootstrap_ci_low);
  EXPECT_EQ(last.summary.bootstrap_ci_high, again.bootstrap_ci_high);
  // ... and those are the paper's deltas (up to the rounding of NLL_rd − NLL_block).
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(last.pairs[i].seed, i + 1);
    EXPECT_NEAR(last.pairs[i].delta, kPaperS[i], 1e-14);
    EXPECT_NEAR(last.pairs[i].ppl_reduction, 1.0 - std::exp(kPaperS[i]), 1e-14);
  }
  EXPECT_NEAR(last.summary.mean, -0.0302, 1e-14);
  EXPECT_EQ(last.summary.wins, 5);
  EXPECT_EQ(last.summary.sign_test_p, 0.0625);
  EXPECT_NEAR(last.summary.bootstrap_ci_low, -0.0328, 1e-12);
  EXPECT_NEAR(last.summary.bootstrap_ci_high, -0.0282, 1e-12);
  EXPECT_NEAR(last.summary.ppl_reduction_of_mean, 0.029748536150584703, 1e-13);
  EXPECT_NEAR(last.mean_arm_nll - last.mean_reference_nll, -0.0302, 1e-13);

  const PairedRow& test = FindRow(t.paired, "rd", "block", 0, kSplitTest);
  EXPECT_EQ(test.summary.n, 5);
  EXPECT_NEAR(test.summary.mean, -0.0302, 1e-14);

  // The gain shrinks over training (the fixture's shape), and every milestone has its row.
  const PairedRow& first = FindRow(t.paired, "rd", "block", k250M);
  EXPECT_LT(first.summary.mean, last.summary.mean);
}

TEST(BuildTables, MissingDataIsShownCountedAndExplained) {
  const ReportTables t = BuildTables(MessySweep(), kSeed);
  EXPECT_FALSE(t.complete);
  EXPECT_EQ(t.jobs_total, 17);
  EXPECT_EQ(t.jobs_ended, 16);  // block seed 4 is RUNNING
  ASSERT_EQ(t.notes.size(), 1u);
  EXPECT_NE(t.notes[0].find("sw2-S-rd-1-old"), std::string::npos) << t.notes[0];

  // Every seed is listed in every row, complete or not.
  const PairedRow& last = FindRow(t.paired, "rd", "block", k2B);
  ASSERT_EQ(last.pairs.size(), 5u);
  EXPECT_EQ(last.n_expected, 5);
  EXPECT_EQ(last.summary.n, 2);  // seeds 1 and 2
  EXPECT_TRUE(last.pairs[0].complete);
  EXPECT_TRUE(last.pairs[1].complete);
  EXPECT_FALSE(last.pairs[2].complete);
  EXPECT_TRUE(std::isnan(last.pairs[2].delta));
  EXPECT_FALSE(std::isnan(last.pairs[2].reference_nll));  // block's side is there
  EXPECT_NE(last.pairs[2].missing_reason.find("rd missing (job FAILED before this milestone: "
                                              "CUDA out of memory)"),
            std::string::npos)
      << last.pairs[2].missing_reason;
  EXPECT_NE(last.pairs[3].missing_reason.find("block missing (job RUNNING: milestone not reached"),
            std::string::npos)
      << last.pairs[3].missing_reason;
  EXPECT_NE(last.pairs[4].missing_reason.find("block missing (no job)"), std::string::npos);
  EXPECT_NE(last.pairs[4].missing_reason.find("rd missing (no job)"), std::string::npos);
  const PairedRow& early = FindRow(t.paired, "rd", "block", k500M);
  EXPECT_EQ(early.summary.n, 4);
  // n = 2 still has intervals; the test split (seeds 1, 2) too.
  EXPECT_TRUE(last.summary.t_ci_defined);
  EXPECT_EQ(FindRow(t.paired, "rd", "block", 0, kSplitTest).summary.n, 2);

  // The duplicate: the SUCCEEDED job is used.
  EXPECT_EQ(last.pairs[0].arm_job_id, "sw1-S-rd-1");

  // NLL table at 2B: block has seeds 1–3, rd 1, 2 and 4; missing cells say why.
  const NllTable* table = nullptr;
  for (const NllTable& n : t.nll) {
    if (n.split == kSplitVal && n.milestone_tokens == k2B) table = &n;
  }
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->n, (std::vector<int>{3, 3}));
  EXPECT_FALSE(table->cells[2][1].present);
  EXPECT_EQ(table->cells[2][1].job_id, "sw1-S-rd-3");
  EXPECT_EQ(table->cells[4][0].missing_reason, "no job");

  // The missing list: each absent job once, each missing cell of an existing job once.
  auto count = [&](const std::string& arm, uint64_t seed, int64_t milestone,
                   const std::string& split, const std::string& reason_part) {
    int c = 0;
    for (const MissingEntry& m : t.missing) {
      if (m.arm == arm && m.seed == seed && m.milestone_tokens == milestone && m.split == split &&
          m.reason.find(reason_part) != std::string::npos) {
        ++c;
      }
    }
    return c;
  };
  EXPECT_EQ(count("rd", 3, k1B, kSplitVal, "FAILED before this milestone"), 1);
  EXPECT_EQ(count("rd", 3, k2B, kSplitVal, "CUDA out of memory"), 1);
  EXPECT_EQ(count("rd", 3, 0, kSplitTest, "FAILED without a test NLL"), 1);
  EXPECT_EQ(count("block", 4, k2B, kSplitVal, "RUNNING: milestone not reached yet"), 1);
  EXPECT_EQ(count("block", 5, 0, kSplitVal, "no job"), 1);
  EXPECT_EQ(count("rd", 5, 0, kSplitVal, "no job"), 1);
  EXPECT_EQ(count("tied", 5, 0, kSplitVal, "no job"), 1);
  EXPECT_EQ(count("frozen_v", 5, 0, kSplitVal, "no job"), 1);
  EXPECT_EQ(count("frozen_v", 2, 0, kSplitVal, "CANCELLED without any evaluation"), 1);
  // rd 3 (1B, 2B, test), block 4 (2B, test), seed 5 (4 jobs), frozen_v 2,
  // block 3 and rd 4: test NLL missing (SUCCEEDED without one / RUNNING).
  EXPECT_EQ(t.missing.size(), 3u + 2u + 4u + 1u + 2u);
}

TEST(BuildTables, ControlsAgainstParentAndReference) {
  const ReportTables t = BuildTables(MessySweep(), kSeed);
  // tied's parent is the reference: one row; frozen_v: vs rd and vs block.
  ASSERT_EQ(t.controls.size(), 3u);
  const PairedRow& tied = t.controls[0];
  EXPECT_EQ(tied.arm, "tied");
  EXPECT_EQ(tied.reference_arm, "block");
  EXPECT_EQ(tied.kind, "control_vs_parent");
  EXPECT_EQ(tied.milestone_tokens, k500M);
  EXPECT_EQ(tied.summary.n, 4);
  EXPECT_EQ(tied.n_expected, 5);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(tied.pairs[i].delta, 0.0001 * (i + 1), 1e-12);
  EXPECT_EQ(tied.summary.wins, 0);
  EXPECT_EQ(tied.summary.losses, 4);

  const PairedRow& frozen_parent = t.controls[1];
  EXPECT_EQ(frozen_parent.arm, "frozen_v");
  EXPECT_EQ(frozen_parent.reference_arm, "rd");
  EXPECT_EQ(frozen_parent.kind, "control_vs_parent");
  EXPECT_EQ(frozen_parent.summary.n, 3);  // seed 2 cancelled, seed 5 absent
  EXPECT_NE(frozen_parent.pairs[1].missing_reason.find("frozen_v missing"), std::string::npos);
  const PairedRow& frozen_ref = t.controls[2];
  EXPECT_EQ(frozen_ref.reference_arm, "block");
  EXPECT_EQ(frozen_ref.kind, "control_vs_reference");
  EXPECT_EQ(frozen_ref.summary.n, 3);
  EXPECT_NEAR(frozen_ref.summary.mean, 0.01, 1e-12);
  // rd − block at 500M is −0.02 − 0.001·seed, so frozen_v − rd = 0.03 + 0.001·seed.
  EXPECT_NEAR(frozen_parent.pairs[0].delta, 0.031, 1e-12);
}

TEST(BuildTables, ControlMilestoneIsTheLastEvaluationAtOrBeforeTheStop) {
  ReportInput in = PaperSweep();
  RunResult c = MakeRun("average", 1, RunState::kSucceeded);
  c.control_parent_arm = "block";
  c.control_stop_tokens = 600000000;  // between milestones: compared at 500M
  c.milestones[k250M] = Eval(3.0, false, 1);
  c.milestones[k500M] = Eval(3.0, false, 1);
  in.runs.push_back(c);
  const ReportTables t = BuildTables(in, kSeed);
  ASSERT_EQ(t.controls.size(), 1u);
  EXPECT_EQ(t.controls[0].milestone_tokens, k500M);
  EXPECT_EQ(t.controls[0].summary.n, 1);
  EXPECT_FALSE(t.controls[0].summary.t_ci_defined);  // n < 2
  // Seeds 2–5 have no "average" job: listed, and the report is not complete.
  EXPECT_FALSE(t.complete);
  EXPECT_EQ(t.missing.size(), 4u);
}

TEST(BuildTables, CostIsPairedOnTheSameHardwareKind) {
  const ReportTables paper = BuildTables(PaperSweep(), kSeed);
  ASSERT_EQ(paper.cost.size(), 1u);
  const CostRow& row = paper.cost[0];
  EXPECT_EQ(row.arm, "rd");
  EXPECT_EQ(row.hardware_kind, "GPU");
  EXPECT_EQ(row.n_throughput, 5);
  EXPECT_NEAR(row.tokens_per_second_ratio, 0.91, 1e-12);
  EXPECT_NEAR(row.peak_memory_ratio, 1.1, 1e-12);
  EXPECT_EQ(row.n_memory, 5);
  EXPECT_TRUE(paper.cost_excluded.empty());

  const ReportTables t = BuildTables(MessySweep(), kSeed);
  const CostRow* rd = nullptr;
  for (const CostRow& r : t.cost) {
    if (r.arm == "rd") {
      EXPECT_EQ(rd, nullptr) << "one hardware kind only";
      rd = &r;
    }
  }
  ASSERT_NE(rd, nullptr);
  EXPECT_EQ(rd->hardware_kind, "GPU");
  EXPECT_EQ(rd->n_throughput, 2);  // seeds 1 and 3
  EXPECT_NEAR(rd->tokens_per_second_ratio, (45100.0 / 50000.0 + 45300.0 / 50000.0) / 2, 1e-14);
  EXPECT_NEAR(rd->tokens_per_second_ratio_min, 45100.0 / 50000.0, 1e-15);
  EXPECT_NEAR(rd->peak_memory_ratio, 1.1, 1e-14);
  auto excluded = [&](const std::string& arm, uint64_t seed) -> std::string {
    for (const CostExclusion& e : t.cost_excluded) {
      if (e.arm == arm && e.seed == seed) return e.reason;
    }
    return "";
  };
  EXPECT_EQ(excluded("rd", 2), "different hardware kinds: rd on CPU, block on GPU");
  EXPECT_EQ(excluded("rd", 4), "hardware kind unknown");
  EXPECT_EQ(excluded("rd", 5), "no rd or block job");
  EXPECT_EQ(excluded("rd", 1), "");
  // Controls are costed too (against the reference).
  bool tied_row = false;
  for (const CostRow& r : t.cost) tied_row |= r.arm == "tied";
  EXPECT_TRUE(tied_row);
}

TEST(BuildTables, DepthRoutesMeansOverSeedsAndLayers) {
  const ReportTables t = BuildTables(PaperSweep(), kSeed);
  const DepthRow* rd = nullptr;
  const DepthRow* block = nullptr;
  for (const DepthRow& r : t.depth) {
    if (r.milestone_tokens != k2B) continue;
    if (r.arm == "rd") rd = &r;
    if (r.arm == "block") block = &r;
  }
  ASSERT_NE(rd, nullptr);
  ASSERT_NE(block, nullptr);
  EXPECT_TRUE(rd->has_js);
  EXPECT_FALSE(block->has_js);
  EXPECT_EQ(rd->n, 5);
  ASSERT_EQ(rd->layers.size(), 6u);
  EXPECT_EQ(rd->layers[0].sources, 1);
  EXPECT_EQ(rd->layers[1].sources, 0);  // not given: >= 2
  EXPECT_EQ(rd->layers[0].js_nats_mean, 0.0);
  // Layer l >= 1: JS = 0.1 + 0.03 l + 0.002 seed; mean over seeds 1..5 adds 0.006.
  EXPECT_NEAR(rd->layers[2].js_nats_mean, 0.1 + 0.06 + 0.006, 1e-15);
  EXPECT_NEAR(rd->layers[2].js_nats_sd, 0.002 * std::sqrt(2.5), 1e-15);
  EXPECT_NEAR(rd->layers[2].js_bits_mean, (0.166) / std::log(2.0), 1e-14);
  EXPECT_NEAR(rd->layers[2].entropy_v_mean, 0.8 * std::log(2.0), 1e-15);
  // Headline over 6 layers (layer 0 is 0) and over layers 1..5.
  const double multi = 0.1 + 0.03 * 3 + 0.006;  // mean of l = 1..5 is 3
  EXPECT_NEAR(rd->js_mean_multi_source_nats, multi, 1e-15);
  EXPECT_NEAR(rd->js_mean_nats, multi * 5.0 / 6.0, 1e-15);
  EXPECT_NEAR(rd->js_mean_bits, rd->js_mean_nats / std::log(2.0), 1e-15);
  EXPECT_TRUE(std::isnan(block->js_mean_nats));
  EXPECT_NEAR(block->layers[3].entropy_qk_mean, std::log(2.5), 1e-15);
  EXPECT_TRUE(std::isnan(block->layers[3].entropy_v_mean));
}

TEST(BuildTables, AttentionSourcesDecideTheMultiSourceMean) {
  ReportInput in = PaperSweep();
  for (RunResult& r : in.runs) {
    for (auto& [tokens, m] : r.milestones) m.attention_sources = {1, 1, 2, 2, 3, 3};
  }
  const ReportTables t = BuildTables(in, kSeed);
  for (const DepthRow& r : t.depth) {
    if (r.arm != "rd" || r.milestone_tokens != k2B) continue;
    EXPECT_EQ(r.layers[1].sources, 1);
    EXPECT_EQ(r.layers[5].sources, 3);
    // Layers 2..5: 0.1 + 0.03 · 3.5 + 0.006.
    EXPECT_NEAR(r.js_mean_multi_source_nats, 0.1 + 0.105 + 0.006, 1e-15);
  }
}

TEST(BuildTables, ReferenceArmCanBeSet) {
  ReportInput in = PaperSweep();
  in.reference_arm = "rd";
  const ReportTables t = BuildTables(in, kSeed);
  const PairedRow& row = FindRow(t.paired, "block", "rd", k2B);
  EXPECT_NEAR(row.summary.mean, 0.0302, 1e-14);
  EXPECT_EQ(row.summary.wins, 0);
  EXPECT_EQ(row.summary.losses, 5);
  EXPECT_NEAR(row.summary.ppl_reduction_of_mean, 1.0 - std::exp(0.0302), 1e-13);
}

TEST(BuildTables, EmptySweep) {
  ReportInput in;
  in.sweep_id = "empty";
  const ReportTables t = BuildTables(in, kSeed);
  EXPECT_TRUE(t.paired.empty());
  EXPECT_TRUE(t.missing.empty());
  EXPECT_EQ(t.reference_arm, "block");
  EXPECT_FALSE(RenderMarkdown(t, "plots").empty());
}

// ---- Markdown ----------------------------------------------------------------------------

// ---- Power, robustness, trend (the figures themselves: crosscheck_power.py) --------------------

TEST(BuildTables, PowerRobustnessAndTrendOfThePaperSweep) {
  ReportInput in = PaperSweep();
  in.target_delta = 0.015;
  const ReportTables t = BuildTables(in, kSeed);
  EXPECT_EQ(t.target_delta, 0.015);
  const PairedRow& last = FindRow(t.paired, "rd", "block", k2B);
  EXPECT_TRUE(last.power.defined);
  EXPECT_NEAR(last.power.alpha, 0.05, 1e-15);
  EXPECT_NEAR(PairedTTestPower(last.power.mde, last.summary.sd, 5, 0.05), 0.8, 1e-10);
  ASSERT_EQ(last.power.seeds_needed.size(), 4u);
  EXPECT_EQ(last.power.seeds_needed[3].delta, 0.015);
  EXPECT_TRUE(last.power.seeds_needed[3].user_given);
  for (const SeedsForDelta& e : last.power.seeds_needed) {
    EXPECT_EQ(e.seeds, SeedsNeeded(e.delta, last.summary.sd, 0.05)) << e.delta;
  }
  EXPECT_NEAR(last.robust.median, -0.030, 1e-12);
  EXPECT_EQ(last.robust.wilcoxon.p, 0.0625);
  // MAD = median(0.003, 0.001, 0, 0, 0.005) = 0.001: seed 5 (−0.035) is 0.005 from the median,
  // more than 3 · 1.4826 · 0.001 = 0.00445, so the rule flags it (z = −3.37).
  EXPECT_EQ(last.outlier_seeds, std::vector<uint64_t>{5});
  EXPECT_NEAR(last.pairs[4].robust_z, -0.005 / (kMadScale * 0.001), 1e-6);
  // Every seed's gap is wider early (Δ · (1 + 0.1 log2(2B / m))): the gap narrows.
  ASSERT_EQ(t.trend.size(), 1u);
  const TrendRow& trend = t.trend[0];
  EXPECT_EQ(trend.milestones.size(), kMilestones.size());
  ASSERT_EQ(trend.seeds.size(), 5u);
  for (const TrendSeed& s : trend.seeds) {
    EXPECT_EQ(s.milestones.size(), kMilestones.size());
    EXPECT_NEAR(s.slope, -0.1 * kPaperS[s.seed - 1] / std::log(2.0), 1e-9) << s.seed;
  }
  EXPECT_EQ(trend.summary.n, 5);
  EXPECT_EQ(trend.gap_milestone_tokens, k2B);
  EXPECT_EQ(trend.summary.reading, "the gap narrows");

  const std::string md = RenderMarkdown(t, "plots");
  for (const char* want : {"## Power", "## Robustness", "## Trend", "seeds for 0.015 (target)",
                           "the gap narrows", "(plots/delta_vs_tokens.png)", "(exact)"}) {
    EXPECT_NE(md.find(want), std::string::npos) << want;
  }
  const auto j = nlohmann::json::parse(RenderJson(t));
  EXPECT_EQ(j["target_delta"], 0.015);
  ASSERT_EQ(j["trend"].size(), 1u);
  EXPECT_EQ(j["trend"][0]["summary"]["reading"], "the gap narrows");
  const auto& row = j["paired"][static_cast<size_t>(&last - &t.paired[0])];
  EXPECT_EQ(row["power"]["mde"].get<double>(), last.power.mde);
  EXPECT_EQ(row["power"]["seeds_needed"].size(), 4u);
  EXPECT_EQ(row["robust"]["wilcoxon"]["p"].get<double>(), 0.0625);
}

TEST(BuildTables, OutlierSeedIsNamedInEveryFormat) {
  ReportInput in = PaperSweep();
  for (RunResult& r : in.runs) {  // seed 3's rd is far worse at 2B
    if (r.arm == "rd" && r.seed == 3) r.milestones[k2B].val_nll += 0.1;
  }
  const ReportTables t = BuildTables(in, kSeed);
  const PairedRow& last = FindRow(t.paired, "rd", "block", k2B);
  ASSERT_EQ(last.outlier_seeds, std::vector<uint64_t>{3});
  EXPECT_TRUE(last.pairs[2].outlier);
  EXPECT_GT(last.pairs[2].robust_z, 3.0);
  EXPECT_NE(RenderMarkdown(t, "").find("seed 3 (Δ +0.0700"), std::string::npos);
  const auto csv = RenderCsv(t);
  EXPECT_NE(csv.at("paired.csv").find(",3,"), std::string::npos);
  EXPECT_NE(csv.at("paired_seeds.csv").find(",true\r\n"), std::string::npos);
}

TEST(RenderMarkdown, EveryRowPrintsItsN) {
  const ReportTables t = BuildTables(MessySweep(), kSeed);
  const std::string md = RenderMarkdown(t, "plots");
  if (const char* keep = std::getenv("RDATTN_REPORT_TEST_OUT")) {
    fs::create_directories(fs::path(keep) / "messy_md");
    std::ofstream(fs::path(keep) / "messy_md" / "report.md") << md;
  }
  for (const auto* rows : {&t.paired, &t.controls}) {
    for (const PairedRow& r : *rows) {
      const std::string needle = "| " + r.arm + " − " + r.reference_arm + " | " +
                                 std::to_string(r.summary.n) + " of " +
                                 std::to_string(r.n_expected) + " |";
      EXPECT_NE(md.find(needle), std::string::npos) << needle;
    }
  }
  // Per-seed tables: n and mean rows; missing cells; the missing-data section with reasons.
  EXPECT_NE(md.find("| n | 3 | 3 | 2 |"), std::string::npos);  // 2B: block, rd, Δ
  EXPECT_NE(md.find("| missing |"), std::string::npos);
  EXPECT_NE(md.find("## Missing data"), std::string::npos);
  EXPECT_NE(md.find("CUDA out of memory"), std::string::npos);
  EXPECT_NE(md.find("Partial report"), std::string::npos);
  EXPECT_NE(md.find("sw2-S-rd-1-old"), std::string::npos);  // the duplicate note
  EXPECT_NE(md.find("different hardware kinds"), std::string::npos);
  // Plots embedded, the legend with its formulas.
  EXPECT_NE(md.find("![Validation NLL against tokens](plots/nll_vs_tokens.png)"),
            std::string::npos);
  EXPECT_NE(md.find("(plots/delta_last_milestone.png)"), std::string::npos);
  EXPECT_NE(md.find("(plots/js_by_layer.png)"), std::string::npos);
  EXPECT_NE(md.find("1 − exp(mean Δ)"), std::string::npos);
  EXPECT_NE(md.find("(1/n) Σ (1 − exp(Δ_i))"), std::string::npos);
  EXPECT_NE(md.find("seeded with 20260801"), std::string::npos);
  EXPECT_NE(md.find("10000 resamples"), std::string::npos);
  // No plots requested: none embedded.
  EXPECT_EQ(RenderMarkdown(t, "").find(".png"), std::string::npos);
}

TEST(RenderMarkdown, PaperSweepHeadline) {
  const std::string md = RenderMarkdown(BuildTables(PaperSweep(), kSeed), "plots");
  // Summary row: scale, tokens, arm, n, mean Δ, bootstrap CI, t CI, wins, both ppl reductions.
  EXPECT_NE(md.find("| S | 2B | rd | 5 of 5 | -0.0302 | [-0.0328, -0.0282] | [-0.0339, -0.0265] | "
                    "5/5 | +2.97% | +2.97% |"),
            std::string::npos)
      << md.substr(0, 2000);
  EXPECT_NE(md.find("None: every expected cell has a value."), std::string::npos);
}

// ---- CSV ---------------------------------------------------------------------------------

// RFC 4180 reader: rows of fields; fails the test on a malformed quote.
std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false;
  bool field_started = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        field += c;
      }
      continue;
    }
    if (c == '"') {
      EXPECT_FALSE(field_started) << "quote inside an unquoted field";
      quoted = true;
      field_started = true;
    } else if (c == ',') {
      row.push_back(field);
      field.clear();
      field_started = false;
    } else if (c == '\r') {
      EXPECT_EQ(i + 1 < text.size() ? text[i + 1] : '\0', '\n');
    } else if (c == '\n') {
      row.push_back(field);
      rows.push_back(row);
      row.clear();
      field.clear();
      field_started = false;
    } else {
      field += c;
      field_started = true;
    }
  }
  EXPECT_FALSE(quoted) << "unterminated quote";
  EXPECT_TRUE(row.empty() && field.empty()) << "no line break at the end";
  return rows;
}

TEST(RenderCsv, OneWellFormedFilePerTable) {
  const ReportTables t = BuildTables(MessySweep(), kSeed);
  const auto files = RenderCsv(t);
  for (const char* name : {"nll.csv", "paired.csv", "paired_seeds.csv", "controls.csv", "depth.csv",
                           "depth_layers.csv", "cost.csv", "cost_pairs.csv", "cost_excluded.csv",
                           "missing.csv", "trend.csv", "trend_seeds.csv"}) {
    ASSERT_TRUE(files.count(name)) << name;
    const auto rows = ParseCsv(files.at(name));
    ASSERT_FALSE(rows.empty()) << name;
    for (const auto& row : rows) EXPECT_EQ(row.size(), rows[0].size()) << name;
  }
  EXPECT_EQ(files.size(), 12u);
  const auto paired = ParseCsv(files.at("paired.csv"));
  EXPECT_EQ(paired.size(), t.paired.size() + 1);
  EXPECT_EQ(paired[0][6], "n");
  const auto missing = ParseCsv(files.at("missing.csv"));
  EXPECT_EQ(missing.size(), t.missing.size() + 1);
  const auto excluded = ParseCsv(files.at("cost_excluded.csv"));
  bool comma_field = false;
  for (const auto& row : excluded) {
    comma_field |= row.back() == "different hardware kinds: rd on CPU, block on GPU";
  }
  EXPECT_TRUE(comma_field) << files.at("cost_excluded.csv");
  // Numbers read back exactly; NaN is an empty field.
  const PairedRow& last = FindRow(t.paired, "rd", "block", k2B);
  for (const auto& row : paired) {
    if (row[3] == std::to_string(k2B) && row[2] == "val") {
      EXPECT_EQ(std::stod(row[10]), last.summary.mean);
      EXPECT_EQ(std::stod(row[20]), last.summary.bootstrap_ci_low);
    }
  }
  const auto seeds = ParseCsv(files.at("paired_seeds.csv"));
  bool empty_delta = false;
  for (const auto& row : seeds) empty_delta |= row[7] == "false" && row[10].empty();
  EXPECT_TRUE(empty_delta);
}

// ---- JSON --------------------------------------------------------------------------------

TEST(RenderJson, ParsesBackWithTheSameNumbers) {
  const ReportTables t = BuildTables(MessySweep(), kSeed);
  const nlohmann::json j = nlohmann::json::parse(RenderJson(t));
  EXPECT_EQ(j["sweep_id"], "sw2");
  EXPECT_EQ(j["reference_arm"], "block");
  EXPECT_EQ(j["complete"], false);
  EXPECT_EQ(j["bootstrap_seed"].get<uint64_t>(), kSeed);
  ASSERT_EQ(j["paired"].size(), t.paired.size());
  ASSERT_EQ(j["controls"].size(), t.controls.size());
  EXPECT_EQ(j["missing"].size(), t.missing.size());
  EXPECT_EQ(j["cost_excluded"].size(), t.cost_excluded.size());
  for (size_t i = 0; i < t.paired.size(); ++i) {
    const auto& row = j["paired"][i];
    const PairedSummary& s = t.paired[i].summary;
    EXPECT_EQ(row["n"].get<int>(), s.n);
    EXPECT_EQ(row["pairs"].size(), t.paired[i].pairs.size());
    if (s.n > 0) {
      EXPECT_EQ(row["summary"]["mean"].get<double>(), s.mean);
    }
    if (s.bootstrap_ci_defined) {
      EXPECT_EQ(row["summary"]["bootstrap_ci_low"].get<double>(), s.bootstrap_ci_low);
    } else {
      EXPECT_TRUE(row["summary"]["bootstrap_ci_low"].is_null());
    }
  }
  // A missing side is null, with its reason.
  const auto& last = j["paired"];
  bool saw_null = false;
  for (const auto& row : last) {
    for (const auto& p : row["pairs"]) {
      if (!p["complete"].get<bool>()) {
        saw_null |= p["delta"].is_null();
        EXPECT_FALSE(p["missing_reason"].get<std::string>().empty());
      }
    }
  }
  EXPECT_TRUE(saw_null);
  EXPECT_EQ(j["depth"][0]["layers"][0]["sources"].get<int>(), 1);
}

// A job's state is an enum in the tables and printed by one name in every file: missing.csv's
// and report.json's job_state, and report.md's missing table (n/a when there is no job).
TEST(RunState, OneNamePerStateInEveryRenderer) {
  EXPECT_EQ(RunStateName(RunState::kPending), "PENDING");
  EXPECT_EQ(RunStateName(RunState::kLeased), "LEASED");
  EXPECT_EQ(RunStateName(RunState::kRunning), "RUNNING");
  EXPECT_EQ(RunStateName(RunState::kSucceeded), "SUCCEEDED");
  EXPECT_EQ(RunStateName(RunState::kFailed), "FAILED");
  EXPECT_EQ(RunStateName(RunState::kCancelled), "CANCELLED");
  EXPECT_EQ(RunStateName(RunState::kUnknown), "");

  const ReportTables t = BuildTables(MessySweep(), kSeed);
  std::set<RunState> seen;
  for (const MissingEntry& m : t.missing) seen.insert(m.job_state);
  EXPECT_EQ(seen, (std::set<RunState>{RunState::kUnknown, RunState::kSucceeded, RunState::kRunning,
                                      RunState::kFailed, RunState::kCancelled}));
  const auto csv = ParseCsv(RenderCsv(t).at("missing.csv"));
  const nlohmann::json j = nlohmann::json::parse(RenderJson(t));
  ASSERT_EQ(csv.size(), t.missing.size() + 1);
  ASSERT_EQ(j["missing"].size(), t.missing.size());
  EXPECT_EQ(csv[0][6], "job_state");
  for (size_t i = 0; i < t.missing.size(); ++i) {
    const std::string name(RunStateName(t.missing[i].job_state));
    EXPECT_EQ(csv[i + 1][6], name) << i;
    EXPECT_EQ(j["missing"][i]["job_state"], name) << i;
  }
  const std::string md = RenderMarkdown(t, "");
  EXPECT_NE(md.find("| sw1-S-rd-3 | FAILED | job FAILED before this milestone"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| none | n/a | no job for this (scale, arm, seed) |"), std::string::npos);
}

// ---- Plots -------------------------------------------------------------------------------

class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    const char* keep = std::getenv("RDATTN_REPORT_TEST_OUT");
    if (keep != nullptr) {
      path_ = fs::path(keep) / name;
      keep_ = true;
    } else {
      path_ = fs::temp_directory_path() /
              ("rdattn_render_test_" + std::to_string(getpid()) + "_" + name);
    }
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    if (!keep_) fs::remove_all(path_);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  bool keep_ = false;
};

bool IsPng(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char header[8] = {};
  in.read(header, 8);
  const unsigned char want[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return in.gcount() == 8 && std::equal(header, header + 8, reinterpret_cast<const char*>(want)) &&
         fs::file_size(path) > 1000;
}

void ExpectThreePngs(const fs::path& dir) {
  for (const char* png :
       {kPlotNllVsTokens, kPlotDeltaLastMilestone, kPlotJsByLayer, kPlotDeltaVsTokens}) {
    EXPECT_TRUE(fs::exists(dir / png)) << png;
    if (fs::exists(dir / png)) {
      EXPECT_TRUE(IsPng(dir / png)) << png;
    }
  }
}

TEST(Gnuplot, DrawsTheThreePlots) {
  TempDir dir("paper");
  const ReportTables t = BuildTables(PaperSweep(), kSeed);
  const fs::path plots = dir.path() / "plots";
  ASSERT_TRUE(WriteGnuplotScripts(t, plots.string()).ok());
  const Status ran = RunGnuplot(plots.string());
  ASSERT_TRUE(ran.ok()) << ran.ToString();
  ExpectThreePngs(plots);
  EXPECT_TRUE(fs::exists(plots / "nll_vs_tokens.gp"));
  EXPECT_TRUE(fs::exists(plots / "delta_last_milestone_seeds.dat"));
  EXPECT_TRUE(fs::exists(plots / "js_by_layer_s0_a0.dat"));
  EXPECT_NE(RenderMarkdown(t, "plots").find("](plots/js_by_layer.png)"), std::string::npos);
}

TEST(Gnuplot, MessyAndEmptyReportsStillDraw) {
  TempDir messy("messy");
  ReportInput two_scales = MessySweep();
  for (RunResult r : MessySweep().runs) {  // a second scale, with quotes in an arm name
    r.scale = "M";
    if (r.arm == "rd") r.arm = "rd's";
    two_scales.runs.push_back(r);
  }
  const ReportTables t = BuildTables(two_scales, kSeed);
  ASSERT_TRUE(WriteGnuplotScripts(t, messy.path().string()).ok());
  const Status ran = RunGnuplot(messy.path().string());
  EXPECT_TRUE(ran.ok()) << ran.ToString();
  ExpectThreePngs(messy.path());

  TempDir empty("empty");
  ReportInput none;
  none.sweep_id = "empty";
  ASSERT_TRUE(WriteGnuplotScripts(BuildTables(none, kSeed), empty.path().string()).ok());
  const Status ran_empty = RunGnuplot(empty.path().string());
  EXPECT_TRUE(ran_empty.ok()) << ran_empty.ToString();
  ExpectThreePngs(empty.path());
}

TEST(Gnuplot, ErrorsNameTheScript) {
  TempDir dir("errors");
  ASSERT_TRUE(WriteGnuplotScripts(BuildTables(PaperSweep(), kSeed), dir.path().string()).ok());
  const Status missing = RunGnuplot(dir.path().string(), "/nonexistent/gnuplot");
  EXPECT_EQ(missing.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.message().find("delta_last_milestone.gp"), std::string::npos)
      << missing.message();
  EXPECT_NE(missing.message().find("not found"), std::string::npos);

  std::ofstream(dir.path() / "broken.gp") << "set terminal pngcairo\nset output 'broken.png'\n"
                                             "plot 'no_such_file.dat' using 1:2\n";
  const Status broken = RunGnuplot(dir.path().string());
  EXPECT_FALSE(broken.ok());
  EXPECT_NE(broken.message().find("broken.gp"), std::string::npos) << broken.message();
  EXPECT_NE(broken.message().find("no_such_file.dat"), std::string::npos) << broken.message();

  // A plot failure does not fail the markdown report: it says so instead (BuildReport passes
  // the error; tests/coordinator/report_test.cc runs it with a missing gnuplot).
  const std::string md = RenderMarkdown(BuildTables(PaperSweep(), kSeed), "",
                                        "FAILED_PRECONDITION: " + missing.message());
  EXPECT_NE(md.find("\n> Plots were not drawn: FAILED_PRECONDITION: "), std::string::npos);
  EXPECT_EQ(md.find("](plots/"), std::string::npos);
}

// ---- The sequential section and one rule per format ----------------------------------------

// A seed policy with two looks: a decided comparison, one whose t and sd are undefined (NaN), an
// infinite boundary, a p below 1e-4 and names with the characters each format must escape.
SequentialSection TwoLooks() {
  SequentialSection s;
  s.boundary = "obrien_fleming";
  s.alpha = 0.05;
  s.look_seeds = {2, 3};
  s.information = {2.0 / 3.0, 1.0};
  s.alpha_spent = {0.01, 0.05};
  s.efficacy_t = {std::numeric_limits<double>::infinity(), 4.25};
  s.futility_t = {0.5, 0};
  s.futility_effect_sd = 1;
  s.futility_power = 0.8;
  s.simulations = 1000;
  s.simulation_seed = 7;
  s.simulated_alpha = 0.049;
  s.expected_seeds_null = 2.5;
  s.expected_seeds_futility_effect = 2.75;
  s.expected_seeds_two_sd = 2.25;
  s.power_two_sd = 0.9;
  LookRow first{1, 2, 2, {}, "continue", {3}, "", "look 1 at n = 2: continue, adding seed 3"};
  first.comparisons.push_back({"tiny", "rd", "block", 4096, 1, -0.5, kMissing, kMissing,
                               std::numeric_limits<double>::infinity(), 0.5, "undefined", 0,
                               kMissing, kMissing, kMissing});
  LookRow second{2, 3, 3, {}, "stop", {}, "max seeds reached (3)", "look 2 at n = 3: stop"};
  second.comparisons.push_back({"s, \"q\"", "x|y", "block", 4096, 3, -0.25, 0.01, -43.3, 4.25, 0,
                                "efficacy", 2, 3.2e-7, -0.3, -0.2});
  s.looks = {first, second};
  s.stopped = true;
  s.stopped_at_look = 2;
  s.method = "m";
  return s;
}

TEST(RenderSequential, OneSectionInEachFormat) {
  ReportTables t = BuildTables(MessySweep(), kSeed);
  t.sequential = TwoLooks();
  const std::string md = RenderMarkdown(t, "", "no gnuplot");
  const size_t plots_note = md.find("\n> Plots were not drawn: no gnuplot\n");
  const size_t section = md.find("\n## Seed policy (sequential design)\n");
  ASSERT_NE(plots_note, std::string::npos);
  ASSERT_NE(section, std::string::npos);
  EXPECT_LT(plots_note, section) << "the section comes last, after the plots note";
  // The same table syntax, escaping and p-value rule as every other table of report.md.
  EXPECT_NE(md.find("| look | n | alpha spent | efficacy: stop if abs(t) >= | futility: stop if "
                    "abs(t) < |\n|---|---|---|---|---|\n| 1 | 2 | 0.01000 | inf | 0.500 |\n"
                    "| 2 | 3 | 0.05000 | 4.250 | - |\n"),
            std::string::npos)
      << md.substr(section);
  EXPECT_NE(md.find("| 1 | 2 | tiny | rd vs block | 1 | -0.5000 | n/a | undefined | n/a | "
                    "[n/a, n/a] |\n"),
            std::string::npos);
  EXPECT_NE(md.find("| 2 | 3 | s, \"q\" | x\\|y vs block | 3 | -0.2500 | -43.300 | efficacy "
                    "(look 2) | 3.20e-07 | [-0.3000, -0.2000] |\n"),
            std::string::npos);
  EXPECT_NE(md.find("- look 2 at n = 3: stop\n\nThe policy stopped at look 2. Method: m.\n"),
            std::string::npos);

  const auto csv = RenderCsv(t);
  ASSERT_TRUE(csv.count("looks.csv"));
  const auto rows = ParseCsv(csv.at("looks.csv"));
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& row : rows) EXPECT_EQ(row.size(), rows[0].size());
  EXPECT_EQ(rows[0][9], "mean_delta_nll");
  EXPECT_EQ(rows[1][10], "") << "NaN is an empty field";
  EXPECT_EQ(rows[1][12], "inf");
  EXPECT_EQ(rows[1][19], "3");
  EXPECT_EQ(rows[2][4], "s, \"q\"");
  EXPECT_EQ(std::stod(rows[2][16]), 3.2e-7);

  const nlohmann::json j = nlohmann::json::parse(RenderJson(t));
  const auto& seq = j.at("sequential");
  EXPECT_EQ(seq["design"]["simulation_seed"], 7) << "uint64 as a JSON number";
  EXPECT_TRUE(seq["design"]["efficacy_t"][0].is_null()) << "infinity as null";
  EXPECT_TRUE(seq["looks"][0]["comparisons"][0]["t_statistic"].is_null()) << "NaN as null";
  EXPECT_EQ(seq["looks"][0]["comparisons"][0]["milestone_tokens"], 4096);
  EXPECT_EQ(seq["looks"][0]["added_seeds"], nlohmann::json::array({3}));
  EXPECT_EQ(seq["looks"][1]["comparisons"][0]["adjusted_p"], 3.2e-7);
  EXPECT_EQ(seq["stopped_at_look"], 2);
  EXPECT_FALSE(j.contains("description")) << "the look's line is report.md's only";
}

// One rule per format, over every file of a report with NaN cells, a seed policy and text that
// needs quoting: CSV lines end in \r\n and NaN is an empty field; JSON has no NaN or Infinity
// (null) and ends in one \n; Markdown lines end in \n alone.
TEST(RenderRules, OneRulePerFormatForNaNAndLineEndings) {
  ReportTables t = BuildTables(MessySweep(), kSeed);
  t.sequential = TwoLooks();
  for (const auto& [name, text] : RenderCsv(t)) {
    ASSERT_FALSE(text.empty()) << name;
    EXPECT_EQ(text.substr(text.size() - 2), "\r\n") << name;
    size_t lf = 0, crlf = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '\n') continue;
      ++lf;
      crlf += i > 0 && text[i - 1] == '\r';
    }
    // A quoted field may hold a line break; none of these does.
    EXPECT_EQ(lf, crlf) << name;
    EXPECT_EQ(text.find("nan"), std::string::npos) << name;
    EXPECT_EQ(text.find("NaN"), std::string::npos) << name;
  }
  const std::string json = RenderJson(t);
  EXPECT_EQ(json.find("NaN"), std::string::npos);
  EXPECT_EQ(json.find("Infinity"), std::string::npos);
  EXPECT_EQ(json.find('\r'), std::string::npos);
  EXPECT_EQ(json.back(), '\n');
  EXPECT_NE(json[json.size() - 2], '\n');
  const std::string md = RenderMarkdown(t, "plots");
  EXPECT_EQ(md.find('\r'), std::string::npos);
  EXPECT_EQ(md.find("nan"), std::string::npos);
  EXPECT_EQ(md.find("NaN"), std::string::npos);
}

}  // namespace
}  // namespace rdattn::stats
