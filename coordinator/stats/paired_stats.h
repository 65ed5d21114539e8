// Paired statistics of a matched-seed sweep (docs/report.md has every formula).
//
// Plain C++17, no dependencies: the coordinator fills a vector of per-seed differences
// Δ_i = NLL_arm,i − NLL_ref,i and calls Summarize(). Everything here is deterministic: the
// bootstrap draws from SplitMix64 seeded by the caller, so a report is reproducible bit for bit.
// The special functions (t, noncentral t, normal, binomial) and the generator are
// distributions.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rdattn::stats {

// ---- Descriptive -------------------------------------------------------------------------

// Arithmetic mean, summed left to right in index order and divided by n. NaN for no values.
double Mean(const std::vector<double>& xs);
// Sample standard deviation (divisor n − 1), two-pass. NaN for n < 2.
double SampleSd(const std::vector<double>& xs);

// ---- Tests -------------------------------------------------------------------------------

// Exact two-sided sign test with ties already removed: wins + losses = n non-zero pairs,
// p = min(1, 2 · P(X <= min(wins, losses))), X ~ Binomial(n, 1/2). n = 0 gives p = 1.
double SignTestP(int wins, int losses);
// Two-sided p of a t statistic with df degrees of freedom: 2 · P(T > |t|). NaN for NaN t.
double TwoSidedTP(double t, double df);

// ---- Bootstrap ---------------------------------------------------------------------------

// The bootstrap distribution of the mean: `resamples` means, in draw order. Resample b draws n
// indices with UniformIndex (one generator for all resamples, seeded once with `seed`), sums
// xs[index] left to right in draw order and divides by n. Empty when xs is empty or resamples < 1.
std::vector<double> BootstrapMeans(const std::vector<double>& xs, uint64_t seed, int resamples);

// Percentile of ascending-sorted values with linear interpolation between order statistics
// (Hyndman & Fan type 7; numpy's default "linear", R's default): h = (N − 1) · q,
// i = floor(h), value = v[i] + (h − i) · (v[i + 1] − v[i]) (v[i] itself when i = N − 1).
// NaN for no values or q outside [0, 1].
double PercentileSorted(const std::vector<double>& sorted, double q);

// ---- Power (docs/report.md "Power") --------------------------------------------------------

inline constexpr double kPowerTarget = 0.8;  // the power of every "detectable" figure
// |Δ| (nats) whose seeds-needed is always reported; --target-delta adds one more.
inline constexpr double kPlannedDeltas[] = {0.01, 0.02, 0.03};
// SeedsNeeded searches n = 2 .. kMaxSeedsSearched; beyond: kSeedsBeyondSearch.
inline constexpr int64_t kMaxSeedsSearched = 1000000;
inline constexpr int64_t kSeedsBeyondSearch = -1;

// Power of the two-sided level-alpha one-sample (paired) t test with n pairs against a true
// mean `effect` with sd `sd`: ncp = effect · √n / sd, c = t_{1−α/2, n−1},
//   power = 1 − F(c; n − 1, ncp) + F(−c; n − 1, ncp).
// NaN for n < 2, sd <= 0 or NaN, alpha outside (0, 1).
double PairedTTestPower(double effect, double sd, int64_t n, double alpha);
// The same from the noncentrality directly.
double PairedTTestPowerNcp(double ncp, int64_t n, double alpha);
// The minimum detectable effect: the |mean Δ| at which PairedTTestPower = power, i.e.
// ncp* · sd / √n with ncp* > 0 solving power(ncp*) = power (bisection to 1e-13 relative).
// 0 when sd = 0 (any non-zero effect is detected); NaN for n < 2, NaN sd, power <= alpha.
double MinimumDetectableEffect(double sd, int64_t n, double alpha, double power = kPowerTarget);
// The smallest n >= 2 with PairedTTestPower(|effect|, sd, n, alpha) >= power. 0 when undefined
// (sd NaN, effect 0 or NaN); 2 when sd = 0; kSeedsBeyondSearch past kMaxSeedsSearched.
int64_t SeedsNeeded(double effect, double sd, double alpha, double power = kPowerTarget);

struct SeedsForDelta {
  double delta = 0;         // |Δ| to detect, nats
  bool user_given = false;  // from --target-delta
  int64_t seeds = 0;        // SeedsNeeded; 0: undefined; kSeedsBeyondSearch: > 1,000,000
  double power_at_n = 0;    // PairedTTestPower(delta, sd, current n, alpha): NaN for n < 2
};

struct PowerSummary {
  bool defined = false;  // n >= 2 and a finite sd
  double alpha = 0.05;   // 1 − level, two-sided
  double power = kPowerTarget;
  double mde = 0;      // MinimumDetectableEffect(sd, n, alpha, power); NaN when undefined
  double mde_ncp = 0;  // its noncentrality ncp*
  std::vector<SeedsForDelta> seeds_needed;  // 0.01, 0.02, 0.03, then the user's
  std::string note;
};

// Power figures of a row with n deltas of sample sd `sd` (NaN for n < 2) at level `level`.
// target_delta: NaN or <= 0 for none.
PowerSummary SummarizePower(int n, double sd, double level, double target_delta);

// ---- Robust statistics (docs/report.md "Robustness") ---------------------------------------

inline constexpr double kMadScale = 1.482602218505602;  // 1 / Φ⁻¹(3/4)
inline constexpr double kOutlierMads = 3.0;
inline constexpr int kWilcoxonExactMax = 25;

// The median (mean of the two middle values for even n). NaN for no values.
double Median(std::vector<double> xs);

struct WilcoxonResult {
  int n = 0;                // non-zero differences (zeros are dropped)
  int zeros = 0;            // differences exactly 0
  double w_plus = 0;        // sum of the (mid)ranks of |Δ| over the Δ > 0
  bool exact = false;       // n <= kWilcoxonExactMax: the exact permutation distribution
  bool tied_ranks = false;  // some |Δ| are equal (midranks; the exact distribution uses them)
  double p = 1;             // two-sided: min(1, 2 · min(P(W+ <= w), P(W+ >= w))); n = 0 gives 1
};
// Wilcoxon signed-rank test of median Δ = 0. Exact for n <= 25 (all 2^n sign patterns of the
// midranks, counted by dynamic programming over doubled ranks); above, the normal approximation
// with the tie-corrected variance and a continuity correction of ½.
WilcoxonResult WilcoxonSignedRank(const std::vector<double>& deltas);

struct RobustSummary {
  double median = 0;      // NaN for n = 0
  double mad = 0;         // median |Δ_i − median| (NaN for n = 0)
  double mad_scaled = 0;  // kMadScale · mad
  WilcoxonResult wilcoxon;
  // Index (into the deltas) of every outlier: |Δ_i − median| > 3 · mad_scaled. With
  // mad_scaled = 0 every Δ_i != median is one.
  std::vector<size_t> outliers;
  std::vector<double> robust_z;  // per delta: (Δ_i − median) / mad_scaled (±inf/NaN for MAD 0)
};
RobustSummary SummarizeRobust(const std::vector<double>& deltas);

// ---- Trend (docs/report.md "Trend") --------------------------------------------------------

// OLS slope of y on x: Σ (x − x̄)(y − ȳ) / Σ (x − x̄)². NaN for fewer than 2 points or equal x.
double OlsSlope(const std::vector<double>& x, const std::vector<double>& y);

struct TrendSummary {
  int n = 0;  // seeds with a slope
  double level = 0.95;
  double mean = 0;  // mean slope (nats per unit ln tokens); NaN for n = 0
  double sd = 0;    // NaN for n < 2
  double se = 0;
  bool ci_defined = false;
  double t_critical = 0;
  double ci_low = 0;
  double ci_high = 0;
  bool t_test_defined = false;
  double t_statistic = 0;
  double t_test_p = 0;
  // "the gap widens", "the gap narrows", "no evidence": the t interval excludes 0 and the slope
  // has the sign of the gap (mean Δ at the last milestone) — widens — or the opposite sign —
  // narrows; otherwise (interval undefined or covering 0, or no gap) no evidence.
  std::string reading;
  std::string note;
};
// The over-seeds summary of per-seed slopes; gap: the mean Δ at the last milestone.
TrendSummary SummarizeSlopes(const std::vector<double>& slopes, double level, double gap);

// ---- The summary of one paired row -------------------------------------------------------

struct PairedSummary {
  int n = 0;            // number of deltas (complete pairs)
  double level = 0.95;  // confidence level of both intervals
  double mean = 0;      // mean Δ                        (NaN for n = 0)
  double sd = 0;        // sample sd of Δ, divisor n − 1  (NaN for n < 2)
  double se = 0;        // sd / sqrt(n)                   (NaN for n < 2)
  int df = 0;           // n − 1 (0 for n = 0)

  // Student t interval: mean ± t_{(1+level)/2, n−1} · se. Undefined (NaN, flag false) for n < 2.
  bool t_ci_defined = false;
  double t_critical = 0;  // t_{(1+level)/2, n−1}
  double t_ci_low = 0;
  double t_ci_high = 0;

  // Percentile bootstrap of the mean (BootstrapMeans, then PercentileSorted at (1 − level)/2 and
  // 1 − (1 − level)/2 of the sorted means). Undefined (NaN, flag false) for n < 2.
  bool bootstrap_ci_defined = false;
  int bootstrap_resamples = 0;
  uint64_t bootstrap_seed = 0;
  double bootstrap_ci_low = 0;
  double bootstrap_ci_high = 0;

  int wins = 0;            // Δ < 0: the arm has the lower NLL
  int losses = 0;          // Δ > 0
  int ties = 0;            // Δ == 0; left out of the sign test
  double sign_test_p = 1;  // SignTestP(wins, losses)

  // Paired t test of mean Δ = 0: t = mean / se, two-sided, df = n − 1. Undefined for n < 2, and
  // for sd = 0 with mean = 0 (0/0); sd = 0 with mean != 0 gives t = ±inf and p = 0.
  bool t_test_defined = false;
  double t_statistic = 0;
  double t_test_p = 0;

  // Perplexity reduction as a fraction (0.02965 = 2.965% lower perplexity than the reference;
  // negative: higher). PPL_arm / PPL_ref = exp(Δ), so the reduction is 1 − exp(Δ).
  //   mean over seeds of 1 − exp(Δ_i), and 1 − exp(mean Δ). (NaN for n = 0)
  // The paper's "1 − exp(−0.0301) = 2.97%" writes the improvement −Δ; same number.
  double ppl_reduction_mean_per_seed = 0;
  double ppl_reduction_of_mean = 0;
  // The same as signed changes exp(Δ) − 1 (= −reduction), as in proto PairedRow:
  //   ppl_change_mean_per_seed = mean_i(exp(Δ_i) − 1) -> PairedRow.mean_ppl_change
  //   ppl_change_of_mean = exp(mean Δ) − 1             -> PairedRow.ppl_change_of_mean_delta
  double ppl_change_mean_per_seed = 0;
  double ppl_change_of_mean = 0;

  // Why something is undefined ("n < 2: no interval or t test"), empty otherwise.
  std::string note;
};

// Summarizes per-seed differences (order matters only for the bootstrap draws: pass them in
// seed order). resamples >= 1 and 0 < level < 1, else the intervals are undefined.
PairedSummary Summarize(const std::vector<double>& deltas, uint64_t bootstrap_seed,
                        int resamples = 10000, double level = 0.95);

}  // namespace rdattn::stats
