// Group-sequential seed policies (docs/sweeps.md "Seed policy", docs/report.md "Sequential"):
// the boundaries of the paired t statistic at each planned look, computed once per design by a
// seeded Monte Carlo under the null (and, for futility, under the alternative), the decision at
// a look, and the sequentially adjusted p-value and interval. Plain C++17, deterministic given
// the plan (the same plan gives bit-identical boundaries on every run).
//
// Why a Monte Carlo and not the normal-theory boundaries: the looks test a paired t statistic
// with few seeds (df = n − 1, often 1–10), whose joint distribution over looks is far from the
// Brownian motion that the classical tables assume. Under the null it is pivotal (free of the
// sd of Δ), so simulating Δ ~ N(0, 1) gives exact critical values up to Monte Carlo error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rdattn::stats {

// Lan-DeMets alpha spending (fraction of alpha spent by information fraction t ∈ (0, 1]):
//   O'Brien–Fleming type: a(t) = 2 − 2 Φ(z_{1−a/2} / √t);  Pocock type: a(t) = a ln(1 + (e − 1) t).
enum class SpendingShape { kOBrienFleming, kPocock };

// "obrien_fleming" / "pocock"; false for anything else.
bool ParseSpendingShape(const std::string& name, SpendingShape* out);
std::string SpendingShapeName(SpendingShape shape);

// Cumulative error spent by information fraction t (clamped to [0, 1]) for a total of `total`.
double SpentError(SpendingShape shape, double total, double t);

struct SequentialPlan {
  std::vector<int> look_seeds;  // strictly increasing, first >= 2
  double alpha = 0.05;          // two-sided, over all looks
  SpendingShape shape = SpendingShape::kOBrienFleming;
  double futility_effect_sd = 1.0;  // standardized effect of the futility boundary; 0: none
  double futility_power = 0.8;      // 1 − beta spent on futility
  int simulations = 200000;
  uint64_t seed = 1;
};

// The stored design. Look k (0-based) is at look_seeds[k] seeds.
struct SequentialBoundaries {
  std::vector<int> look_seeds;
  std::vector<double> information;  // look_seeds[k] / look_seeds.back()
  std::vector<double> alpha_spent;  // cumulative
  std::vector<double> efficacy_t;   // stop for efficacy when |t| >= efficacy_t[k] (may be +inf)
  std::vector<double> futility_t;   // stop for futility when |t| < futility_t[k] (0: never)
  // Operating characteristics from an independent simulation stream (futility obeyed).
  double simulated_alpha = 0;
  double expected_seeds_null = 0;
  double expected_seeds_futility_effect = 0;  // NaN without futility
  double expected_seeds_two_sd = 0;
  double power_two_sd = 0;
};

// The plan's problems as "field: reason" (field names of SeedPolicy), empty when it is usable.
std::vector<std::string> CheckPlan(const SequentialPlan& plan);

// Computes the boundaries (the plan must pass CheckPlan). Cost: O(simulations × seeds).
SequentialBoundaries ComputeBoundaries(const SequentialPlan& plan);

// The paired t statistic of the deltas: mean / (sd / √n). NaN for n < 2 or when sd = 0 and the
// mean is 0; ±inf when sd = 0 and the mean is not.
double PairedT(const std::vector<double>& deltas);

enum class LookOutcome {
  kContinue,   // inside the boundaries: add seeds
  kEfficacy,   // |t| >= efficacy_t: the difference is clear
  kFutility,   // |t| < futility_t: an effect of futility_effect_sd is unlikely
  kMaxSeeds,   // the last look, no efficacy: the seeds are spent without a clear difference
  kUndefined,  // t is NaN (fewer than 2 complete pairs): continue, or stop at the last look
};
std::string LookOutcomeName(LookOutcome outcome);  // "continue", "efficacy", ...

// The decision at look `look` (0-based) for statistic t.
LookOutcome DecideLook(const SequentialBoundaries& b, int look, double t);

// The stage-wise ordering p-value (Armitage; Fairbanks & Madsen 1982; Tsiatis, Rosner & Mehta
// 1984) of stopping at look `look` with statistic t: the null chance of crossing the efficacy
// boundary at an earlier look, plus that of reaching look `look` without crossing and seeing
// |T| >= |t| there. Futility is non-binding, so it is ignored. Regenerates the plan's null
// simulation (deterministic). NaN for NaN t.
double StagewiseP(const SequentialPlan& plan, const SequentialBoundaries& b, int look, double t);

// The repeated confidence interval (Jennison & Turnbull 1989) at look `look`: mean ± c_k · sd/√n,
// c_k = efficacy_t[look], which covers the true mean at every look at once with probability
// 1 − alpha (exact for normal Δ, up to the Monte Carlo error of c_k). NaN/inf as the inputs.
void RepeatedInterval(const SequentialBoundaries& b, int look, const std::vector<double>& deltas,
                      double* low, double* high);

// For tests and the operating characteristics: one simulated sweep of paired deltas
// Δ ~ N(effect_sd, 1) run through DecideLook at every look. Returns the outcome and the seeds
// used (look_seeds of the stopping look). `stream` selects an independent path.
struct SimulatedSweep {
  LookOutcome outcome = LookOutcome::kContinue;
  int look = 0;   // 0-based look it stopped at
  int seeds = 0;  // seeds it used
};
SimulatedSweep SimulateSweep(const SequentialBoundaries& b, double effect_sd, uint64_t seed,
                             uint64_t stream);

}  // namespace rdattn::stats
