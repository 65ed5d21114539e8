// The paired report of a sweep as plain C++ tables: what the coordinator knows about each job
// (ReportInput) and the tables BuildTables() makes of it (ReportTables). docs/report.md defines
// every field. The renderers (render.h: Markdown, CSV, JSON; plots.h: gnuplot) only read the
// tables. Nothing here knows protobuf or gRPC.
//
// The coordinator fills a ReportInput from its store (one RunResult per job, with the job's
// milestone evaluations and cost figures) and calls BuildTables().
//
// Missing data is never dropped silently: every (scale, seed, arm, milestone) cell that a sweep
// expects but cannot fill is shown as "missing" in its table, left out of that row's n, and
// listed with its reason in ReportTables::missing.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/stats/paired_stats.h"

namespace rdattn::stats {

inline constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

// ---- Input: what the coordinator knows about each job ------------------------------------

// One milestone evaluation of one run (MetricEvent KIND_EVAL). Per-layer lists are indexed by
// attention layer l = 0 .. layers − 1; the JS lists are empty for arms with one depth route.
struct MilestoneResult {
  double val_nll = kMissing;  // nats/token; NaN: no value
  std::vector<double> js_nats;
  std::vector<double> js_bits;
  std::vector<double> js_sqrt;
  std::vector<double> route_entropy_qk_nats;
  std::vector<double> route_entropy_v_nats;
  // Sources K_l of the attention-side read of each layer. Empty: layer 0 has K = 1 and every
  // other layer K >= 2 (true of every Block/RD shape, MODEL.md §2.4).
  std::vector<int> attention_sources;
};

// The state of a job (the coordinator's JobState, docs/coordinator.md), mapped once where the
// input is made; kUnknown when the input does not say. It only explains missing cells: data a
// job did produce is used whatever its state.
enum class RunState { kUnknown, kPending, kLeased, kRunning, kSucceeded, kFailed, kCancelled };

// "PENDING", "LEASED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"; "" for kUnknown. The
// report's text, CSV and JSON print a state by this name.
std::string_view RunStateName(RunState state);

// One job of the sweep, whatever its state.
struct RunResult {
  std::string job_id;
  std::string scale;
  std::string arm;
  uint64_t seed = 0;
  RunState state = RunState::kUnknown;
  std::string failure_reason;       // for FAILED / CANCELLED
  std::string control_parent_arm;   // non-empty: this job is a control compared with that arm
  int64_t control_stop_tokens = 0;  // a control's stop (ControlSpec.stop_at_tokens)
  std::string hardware_kind;        // "CPU", "GPU"; empty: unknown
  std::map<int64_t, MilestoneResult> milestones;  // by configured milestone tokens
  double tokens_per_second = kMissing;  // median over training steps; NaN or <= 0: unknown
  int64_t peak_memory_bytes = 0;        // 0: unknown
  double test_nll = kMissing;           // KIND_FINISHED test NLL; NaN: none
  // Non-empty: this run saw other data than the runs it would be paired with (its INIT event's
  // data_digest differs; docs/operations.md "Data identity"). Its cells are missing with this
  // reason and it is never paired.
  std::string excluded;
};

// A control of the sweep (SweepSpec.controls).
struct ControlInfo {
  std::string arm;
  std::string parent_arm;
  int64_t stop_tokens = 0;
};

struct ReportInput {
  std::string sweep_id;
  std::string sweep_name;
  std::string reference_arm = "block";  // every other main arm is compared with it
  // What the sweep expects (from its SweepSpec and schedule). Each list may be empty; the union
  // with what the runs show is used, so a seed, arm or milestone that no run has reached still
  // gets its (missing) cells.
  std::vector<std::string> scales;  // order of the report; else first appearance in runs
  std::vector<std::string> arms;    // main arms; else first appearance of non-control runs
  std::vector<uint64_t> seeds;
  std::vector<int64_t> milestones;  // validation milestones in tokens
  std::vector<ControlInfo> controls;
  std::vector<RunResult> runs;
  // A |Δ| (nats) whose seeds-needed every row reports besides 0.01, 0.02, 0.03 (rdattn report
  // --target-delta); NaN or 0: none.
  double target_delta = kMissing;
};

// ---- Output tables -----------------------------------------------------------------------

// "val": validation NLL at a milestone; "test": test NLL at the end of the run
// (milestone_tokens = 0).
inline constexpr const char* kSplitVal = "val";
inline constexpr const char* kSplitTest = "test";

struct NllCell {
  bool present = false;
  double nll = kMissing;
  std::string job_id;
  RunState state = RunState::kUnknown;
  std::string missing_reason;  // when !present
};

// Per-seed NLL of every main arm at one (scale, split, milestone).
struct NllTable {
  std::string scale;
  std::string split = kSplitVal;
  int64_t milestone_tokens = 0;
  std::vector<std::string> arms;            // reference first
  std::vector<uint64_t> seeds;              // ascending
  std::vector<std::vector<NllCell>> cells;  // [seed][arm]
  std::vector<int> n;                       // [arm] present cells
  std::vector<double> mean;                 // [arm] over present cells
  std::vector<double> sd;                   // [arm] sample sd over present cells
};

// One seed of a paired row. complete: both sides present; otherwise delta is NaN, the seed is
// not in n and missing_reason says which side is missing and why.
struct SeedPair {
  uint64_t seed = 0;
  bool complete = false;
  double reference_nll = kMissing;
  double arm_nll = kMissing;
  double delta = kMissing;          // arm_nll − reference_nll
  double ppl_reduction = kMissing;  // 1 − exp(delta)
  std::string reference_job_id;
  std::string arm_job_id;
  std::string missing_reason;
  // Robustness (complete pairs only): (Δ − median) / scaled MAD, and whether it is an outlier
  // (|Δ − median| > 3 · scaled MAD). NaN / false for incomplete pairs.
  double robust_z = kMissing;
  bool outlier = false;
};

// kind: "main" (an arm against the reference arm), "control_vs_parent",
// "control_vs_reference".
struct PairedRow {
  std::string scale;
  std::string split = kSplitVal;
  int64_t milestone_tokens = 0;
  std::string arm;
  std::string reference_arm;  // the reference arm, or the control's parent
  std::string kind = "main";
  std::vector<SeedPair> pairs;           // every expected seed, ascending; incomplete ones included
  int n_expected = 0;                    // pairs.size()
  double mean_reference_nll = kMissing;  // over complete pairs
  double mean_arm_nll = kMissing;        // over complete pairs
  PairedSummary summary;                 // of the complete pairs' deltas (n = summary.n)
  PowerSummary power;                    // SummarizePower(n, sd, level, target delta)
  RobustSummary robust;                  // of the complete pairs' deltas, in seed order
  std::vector<uint64_t> outlier_seeds;   // seeds of robust.outliers
};

// One seed of a trend row: its complete pairs across the scale's validation milestones.
struct TrendSeed {
  uint64_t seed = 0;
  std::vector<int64_t> milestones;  // with a complete pair, ascending
  std::vector<double> deltas;       // Δ at those milestones
  double slope = kMissing;          // OLS slope of Δ on ln(tokens); NaN for < 2 milestones
};

// Δ of one main arm against the reference across the validation milestones of one scale:
// per seed the slope of Δ against ln(tokens), then the t summary of the slopes over seeds.
struct TrendRow {
  std::string scale;
  std::string arm;
  std::string reference_arm;
  std::vector<int64_t> milestones;  // the scale's validation milestones, ascending
  std::vector<TrendSeed> seeds;     // every expected seed, ascending
  double gap = kMissing;            // mean Δ at the last milestone with a complete pair
  int64_t gap_milestone_tokens = 0;
  TrendSummary summary;  // SummarizeSlopes(slopes of the seeds with one, level, gap)
};

struct DepthLayer {
  int layer = 0;
  int sources = 0;  // K_l
  int n = 0;        // seeds with a value at this layer
  double js_nats_mean = kMissing;
  double js_nats_sd = kMissing;
  double js_bits_mean = kMissing;
  double js_sqrt_mean = kMissing;
  double entropy_qk_mean = kMissing;
  double entropy_v_mean = kMissing;  // NaN for one-route arms
};

// Depth-route diagnostics of one (scale, arm, milestone), means over seeds.
struct DepthRow {
  std::string scale;
  std::string arm;
  int64_t milestone_tokens = 0;
  bool has_js = false;  // the arm has a separate V route
  int n = 0;            // seeds with data
  std::vector<uint64_t> seeds;
  std::vector<DepthLayer> layers;
  // Headline: per seed the unweighted mean over layers, then the mean (and sd) over seeds.
  double js_mean_nats = kMissing;  // all layers
  double js_mean_nats_sd = kMissing;
  double js_mean_bits = kMissing;               // js_mean_nats / ln 2
  double js_mean_sqrt = kMissing;               // mean over layers of √JS
  double js_mean_multi_source_nats = kMissing;  // layers with K_l >= 2
};

struct CostPair {
  uint64_t seed = 0;
  std::string arm_job_id;
  std::string reference_job_id;
  double arm_tokens_per_second = kMissing;
  double reference_tokens_per_second = kMissing;
  double tokens_per_second_ratio = kMissing;  // arm / reference
  int64_t arm_peak_memory_bytes = 0;
  int64_t reference_peak_memory_bytes = 0;
  double peak_memory_ratio = kMissing;  // arm / reference
};

// Cost of one arm against the reference at one scale, on one hardware kind.
struct CostRow {
  std::string scale;
  std::string arm;
  std::string reference_arm;
  std::string hardware_kind;  // "" when no pair could be formed (n = 0)
  int n_throughput = 0;
  double mean_arm_tokens_per_second = kMissing;
  double mean_reference_tokens_per_second = kMissing;
  double tokens_per_second_ratio = kMissing;  // mean over pairs of arm/reference
  double tokens_per_second_ratio_min = kMissing;
  double tokens_per_second_ratio_max = kMissing;
  int n_memory = 0;
  double mean_arm_peak_memory_bytes = kMissing;
  double mean_reference_peak_memory_bytes = kMissing;
  double peak_memory_ratio = kMissing;  // mean over pairs of arm/reference
  double peak_memory_ratio_min = kMissing;
  double peak_memory_ratio_max = kMissing;
  std::vector<CostPair> pairs;
};

// A seed left out of the cost table, and why (other hardware kind, no measurement, no job).
struct CostExclusion {
  std::string scale;
  std::string arm;
  uint64_t seed = 0;
  std::string arm_job_id;
  std::string reference_job_id;
  std::string arm_hardware_kind;
  std::string reference_hardware_kind;
  std::string reason;
};

// A cell the report expected but could not fill. milestone_tokens = 0 with split "val": the
// whole job (no job, or a job that ended without any evaluation).
struct MissingEntry {
  std::string scale;
  uint64_t seed = 0;
  std::string arm;
  std::string split = kSplitVal;
  int64_t milestone_tokens = 0;
  std::string job_id;
  RunState job_state = RunState::kUnknown;
  std::string reason;
};

// ---- Sequential: a seed policy's design and looks (docs/report.md "Sequential") ------------
// Copied from the sweep's stored SequentialState by the coordinator (coordinator/report.h);
// BuildTables leaves ReportTables::sequential empty. Undefined numbers are NaN.

// One comparison (scale, main arm against the reference) at one look.
struct LookComparisonRow {
  std::string scale;
  std::string arm;
  std::string reference_arm;
  int64_t milestone_tokens = 0;  // the scale's last validation milestone
  int n = 0;                     // complete pairs
  double mean_delta_nll = kMissing;
  double sd_delta_nll = kMissing;
  double t_statistic = kMissing;
  double efficacy_t = kMissing;
  double futility_t = kMissing;  // 0: no futility boundary at this look
  std::string outcome;
  int decided_at_look = 0;  // 1-based; 0: not decided yet
  double adjusted_p = kMissing;
  double rci_low = kMissing;
  double rci_high = kMissing;
};

struct LookRow {
  int look = 0;  // 1-based
  int n_seeds = 0;
  int n_planned = 0;
  std::vector<LookComparisonRow> comparisons;
  std::string decision;  // "continue" or "stop"
  std::vector<uint64_t> added_seeds;
  std::string reason;
  std::string description;  // the look in one line (report.md only)
};

struct SequentialSection {
  // The design (SequentialDesign): boundaries per planned look and simulated characteristics.
  std::string boundary;
  double alpha = kMissing;
  std::vector<int> look_seeds;
  std::vector<double> information;
  std::vector<double> alpha_spent;
  std::vector<double> efficacy_t;
  std::vector<double> futility_t;
  double futility_effect_sd = kMissing;
  double futility_power = kMissing;
  int simulations = 0;
  uint64_t simulation_seed = 0;
  double simulated_alpha = kMissing;
  double expected_seeds_null = kMissing;
  double expected_seeds_futility_effect = kMissing;
  double expected_seeds_two_sd = kMissing;
  double power_two_sd = kMissing;
  std::vector<LookRow> looks;
  bool stopped = false;
  int stopped_at_look = 0;
  std::string method;
};

struct ReportTables {
  std::string sweep_id;
  std::string sweep_name;
  std::string reference_arm;
  double level = 0.95;
  int bootstrap_resamples = 10000;
  uint64_t bootstrap_seed = 0;
  bool complete = false;  // every job ended and no expected job is absent
  int jobs_total = 0;
  int jobs_ended = 0;
  std::vector<std::string> scales;
  std::vector<NllTable> nll;        // by scale, split (val by milestone, then test)
  std::vector<PairedRow> paired;    // main arms: by scale, split, milestone, arm
  std::vector<PairedRow> controls;  // by scale, control; vs parent, then vs reference
  std::vector<TrendRow> trend;      // main arms: by scale, arm
  double target_delta = kMissing;   // ReportInput.target_delta
  std::vector<DepthRow> depth;      // by scale, arm, milestone
  std::vector<CostRow> cost;        // by scale, arm, hardware kind
  std::vector<CostExclusion> cost_excluded;
  std::vector<MissingEntry> missing;            // by scale, arm, seed, split, milestone
  std::vector<std::string> notes;               // e.g. duplicate jobs for one cell
  std::optional<SequentialSection> sequential;  // the sweep's seed policy, if it has one
};

// Builds every table. Each paired row's bootstrap uses `bootstrap_seed` as is, so a row's
// interval depends only on its deltas (in seed order) and the seed.
ReportTables BuildTables(const ReportInput& input, uint64_t bootstrap_seed, int resamples = 10000,
                         double level = 0.95);

}  // namespace rdattn::stats
