// Group-sequential seed policies (coordinator/stats/sequential.h): the spending functions, the
// determinism of the design, and its error rates checked by simulating null and alternative
// sweeps with a generator of their own (std::mt19937_64 + std::normal_distribution, on the nats
// scale of real deltas), decided by the same DecideLook/PairedT the coordinator calls.
#include "coordinator/stats/sequential.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "coordinator/stats/distributions.h"
#include "coordinator/stats/paired_stats.h"

namespace rdattn::stats {
namespace {

// The design of docs/examples/paper-seed-policy.yaml: 3 seeds, +2 per look, at most 11.
SequentialPlan ExamplePlan(SpendingShape shape = SpendingShape::kOBrienFleming) {
  SequentialPlan p;
  p.look_seeds = {3, 5, 7, 9, 11};
  p.alpha = 0.05;
  p.shape = shape;
  p.futility_effect_sd = 1.0;
  p.futility_power = 0.8;
  p.simulations = 200000;
  p.seed = 1;
  return p;
}

// One simulated sweep with real-scale deltas Δ ~ N(effect, sd²), decided look by look.
struct SimRun {
  LookOutcome outcome = LookOutcome::kContinue;
  int look = 0;
  std::vector<double> deltas;
};

SimRun RunSweep(const SequentialBoundaries& b, double effect, double sd, std::mt19937_64& rng,
                bool obey_futility) {
  std::normal_distribution<double> normal(effect, sd);
  SimRun r;
  for (size_t k = 0; k < b.look_seeds.size(); ++k) {
    while (static_cast<int>(r.deltas.size()) < b.look_seeds[k]) r.deltas.push_back(normal(rng));
    LookOutcome o = DecideLook(b, static_cast<int>(k), PairedT(r.deltas));
    if (!obey_futility && o == LookOutcome::kFutility) o = LookOutcome::kContinue;
    r.outcome = o;
    r.look = static_cast<int>(k);
    if (o != LookOutcome::kContinue && o != LookOutcome::kUndefined) break;
  }
  return r;
}

TEST(SequentialTest, NormalQuantileAndSpending) {
  EXPECT_NEAR(NormalQuantile(0.975), 1.959963984540054, 1e-12);
  EXPECT_NEAR(NormalQuantile(0.5), 0.0, 1e-15);
  EXPECT_NEAR(NormalQuantile(1e-10), -6.361340902404056, 1e-9);
  for (double p : {1e-6, 0.01, 0.3, 0.77, 0.999})
    EXPECT_NEAR(NormalCdf(NormalQuantile(p)), p, 1e-12 * std::max(1.0, p / 1e-6));
  EXPECT_TRUE(std::isnan(NormalQuantile(0.0)));
  EXPECT_TRUE(std::isnan(NormalQuantile(1.0)));

  // O'Brien–Fleming type: 2 − 2Φ(z_{0.975}/√t); at t = 0.5: 2 − 2Φ(2.7718) = 0.005575.
  EXPECT_NEAR(SpentError(SpendingShape::kOBrienFleming, 0.05, 0.5), 0.0055746, 1e-6);
  EXPECT_DOUBLE_EQ(SpentError(SpendingShape::kOBrienFleming, 0.05, 1.0), 0.05);
  EXPECT_DOUBLE_EQ(SpentError(SpendingShape::kOBrienFleming, 0.05, 0.0), 0.0);
  // Pocock type: α ln(1 + (e − 1) t).
  EXPECT_NEAR(SpentError(SpendingShape::kPocock, 0.05, 0.5),
              0.05 * std::log(1 + (std::exp(1.0) - 1) * 0.5), 1e-15);
  EXPECT_DOUBLE_EQ(SpentError(SpendingShape::kPocock, 0.05, 1.0), 0.05);
  double prev = 0;
  for (double t = 0.05; t <= 1.0; t += 0.05) {
    const double a = SpentError(SpendingShape::kOBrienFleming, 0.05, t);
    EXPECT_GE(a, prev);
    prev = a;
  }
}

TEST(SequentialTest, PlanChecksNameTheField) {
  SequentialPlan p = ExamplePlan();
  EXPECT_TRUE(CheckPlan(p).empty());
  p.alpha = 0.7;
  p.simulations = 100;
  p.look_seeds = {1, 3};
  const std::vector<std::string> errors = CheckPlan(p);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].rfind("initial: ", 0), 0u) << errors[0];
  EXPECT_EQ(errors[1].rfind("alpha: ", 0), 0u) << errors[1];
  EXPECT_EQ(errors[2].rfind("simulations: ", 0), 0u) << errors[2];
}

TEST(SequentialTest, PairedTEdgeCases) {
  EXPECT_TRUE(std::isnan(PairedT({})));
  EXPECT_TRUE(std::isnan(PairedT({-0.02})));
  EXPECT_TRUE(std::isnan(PairedT({0.0, 0.0, 0.0})));
  EXPECT_EQ(PairedT({-0.01, -0.01}), -std::numeric_limits<double>::infinity());
  // mean −0.02, sd 0.01, n = 3: t = −0.02 / (0.01/√3) = −2√3.
  EXPECT_NEAR(PairedT({-0.03, -0.02, -0.01}), -2 * std::sqrt(3.0), 1e-12);
}

TEST(SequentialTest, BoundariesAreDeterministicAndShaped) {
  SequentialPlan plan = ExamplePlan();
  plan.simulations = 50000;
  const SequentialBoundaries a = ComputeBoundaries(plan);
  const SequentialBoundaries b = ComputeBoundaries(plan);
  ASSERT_EQ(a.efficacy_t.size(), 5u);
  ASSERT_EQ(a.futility_t.size(), 5u);
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(a.efficacy_t[k], b.efficacy_t[k]) << k;  // bit for bit
    EXPECT_EQ(a.futility_t[k], b.futility_t[k]) << k;
    EXPECT_LE(a.futility_t[k], a.efficacy_t[k]) << k;
    EXPECT_GT(a.efficacy_t[k], 0.0);
  }
  EXPECT_EQ(a.futility_t[4], a.efficacy_t[4]);  // the last look decides
  // O'Brien–Fleming: strict early, close to the fixed-n t_{0.975, 10} = 2.228 at the end.
  EXPECT_GT(a.efficacy_t[0], a.efficacy_t[4]);
  EXPECT_GT(a.efficacy_t[4], StudentTQuantile(0.975, 10.0));
  EXPECT_LT(a.efficacy_t[4], StudentTQuantile(0.975, 10.0) * 1.15);
  // Another seed gives other (but close) values: the Monte Carlo is seeded, not fixed.
  plan.seed = 2;
  const SequentialBoundaries c = ComputeBoundaries(plan);
  EXPECT_NE(a.efficacy_t[4], c.efficacy_t[4]);
  EXPECT_NEAR(a.efficacy_t[4], c.efficacy_t[4], 0.05);
}

TEST(SequentialTest, FirstLookIsTheFixedSampleTTest) {
  // With one look the design is the ordinary two-sided t test: c = t_{1 − α/2, n − 1}.
  SequentialPlan plan;
  plan.look_seeds = {6};
  plan.simulations = 400000;
  plan.futility_effect_sd = 0;
  const SequentialBoundaries b = ComputeBoundaries(plan);
  const double exact = StudentTQuantile(0.975, 5.0);  // 2.5706
  EXPECT_NEAR(b.efficacy_t[0], exact, 0.03) << b.efficacy_t[0];
  // The stage-wise p at the only look is the t test's p.
  for (double t : {1.0, 2.0, 3.0}) {
    EXPECT_NEAR(StagewiseP(plan, b, 0, t), TwoSidedTP(t, 5.0), 0.003) << t;
  }
}

// The check: >= 10,000 simulated null sweeps keep the overall type-I error at alpha
// (within the Monte Carlo error of the test and of the design), for both boundary shapes; and the
// expected seeds under a true effect of 2 sd.
void CheckErrorRates(SpendingShape shape) {
  const SequentialPlan plan = ExamplePlan(shape);
  const SequentialBoundaries b = ComputeBoundaries(plan);
  const int sweeps = 40000;
  const double sd = 0.0025;  // nats: the scale of real seed noise; the design is scale-free
  std::mt19937_64 rng(20261201);
  int rejected_nonbinding = 0;
  int rejected_binding = 0;
  double seeds_null = 0;
  for (int i = 0; i < sweeps; ++i) {
    if (RunSweep(b, 0.0, sd, rng, false).outcome == LookOutcome::kEfficacy) ++rejected_nonbinding;
    const SimRun r = RunSweep(b, 0.0, sd, rng, true);
    if (r.outcome == LookOutcome::kEfficacy) ++rejected_binding;
    seeds_null += b.look_seeds[static_cast<size_t>(r.look)];
  }
  const double alpha = plan.alpha;
  const double se =
      std::sqrt(alpha * (1 - alpha) / sweeps + alpha * (1 - alpha) / plan.simulations);
  const double nonbinding = static_cast<double>(rejected_nonbinding) / sweeps;
  const double binding = static_cast<double>(rejected_binding) / sweeps;
  std::printf(
      "%s: type-I error over %d null sweeps: %.4f without futility stops, %.4f with "
      "(alpha %.3f, Monte Carlo se %.4f); design's own estimate %.4f\n",
      SpendingShapeName(shape).c_str(), sweeps, nonbinding, binding, alpha, se, b.simulated_alpha);
  EXPECT_NEAR(nonbinding, alpha, 3 * se);
  EXPECT_LE(binding, alpha + 3 * se);
  EXPECT_LE(binding, nonbinding);

  // A true effect of 2 sd (Δ = −2σ: the arm better).
  int efficacy = 0;
  double seeds_effect = 0;
  int covered = 0;
  for (int i = 0; i < sweeps; ++i) {
    const SimRun r = RunSweep(b, -2 * sd, sd, rng, true);
    if (r.outcome == LookOutcome::kEfficacy) ++efficacy;
    seeds_effect += b.look_seeds[static_cast<size_t>(r.look)];
    double low = 0, high = 0;
    RepeatedInterval(b, r.look, r.deltas, &low, &high);
    if (low <= -2 * sd && -2 * sd <= high) ++covered;
  }
  seeds_effect /= sweeps;
  seeds_null /= sweeps;
  const double power = static_cast<double>(efficacy) / sweeps;
  std::printf(
      "%s: expected seeds %.2f under the null, %.2f under an effect of 2 sd (power %.4f) "
      "of at most %d; design's estimates %.2f / %.2f (power %.4f); repeated interval "
      "covers the effect in %.4f\n",
      SpendingShapeName(shape).c_str(), seeds_null, seeds_effect, power, b.look_seeds.back(),
      b.expected_seeds_null, b.expected_seeds_two_sd, b.power_two_sd,
      static_cast<double>(covered) / sweeps);
  EXPECT_LT(seeds_effect, b.look_seeds.back());
  EXPECT_NEAR(seeds_effect, b.expected_seeds_two_sd, 0.1);
  EXPECT_NEAR(seeds_null, b.expected_seeds_null, 0.1);
  EXPECT_NEAR(power, b.power_two_sd, 0.01);
  EXPECT_GT(power, 0.95);
  EXPECT_GE(static_cast<double>(covered) / sweeps, 1 - alpha - 3 * se);
}

TEST(SequentialTest, TypeIErrorAndExpectedSeedsObrienFleming) {
  CheckErrorRates(SpendingShape::kOBrienFleming);
}

TEST(SequentialTest, TypeIErrorAndExpectedSeedsPocock) { CheckErrorRates(SpendingShape::kPocock); }

TEST(SequentialTest, StagewisePIsUniformUnderTheNull) {
  SequentialPlan plan = ExamplePlan();
  plan.simulations = 20000;
  const SequentialBoundaries b = ComputeBoundaries(plan);
  std::mt19937_64 rng(7);
  int small = 0;
  const int sweeps = 400;
  for (int i = 0; i < sweeps; ++i) {
    const SimRun r = RunSweep(b, 0.0, 1.0, rng, false);
    const double p = StagewiseP(plan, b, r.look, PairedT(r.deltas));
    ASSERT_GE(p, 0.0);
    ASSERT_LE(p, 1.0);
    // Rejected exactly when p <= alpha (the ordering agrees with the boundaries).
    if (r.outcome == LookOutcome::kEfficacy) {
      EXPECT_LE(p, plan.alpha + 1e-9);
    } else {
      EXPECT_GT(p, plan.alpha - 0.005);
    }
    if (p <= 0.2) ++small;
  }
  EXPECT_NEAR(static_cast<double>(small) / sweeps, 0.2, 3 * std::sqrt(0.2 * 0.8 / sweeps));
}

}  // namespace
}  // namespace rdattn::stats
