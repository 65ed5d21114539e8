// Seed policies: the design and the looks (seed_policy.h); the report renders them
// (coordinator/stats/render.h, from ReportTables::sequential).
#include "coordinator/seed_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "proto/contract/contract.h"

namespace rdattn::coordinator {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const char kMethod[] =
    "boundaries: Lan-DeMets alpha spending on the paired t statistic, critical values by a seeded "
    "Monte Carlo under the null (non-binding futility by beta spending under the alternative); "
    "adjusted p: stage-wise ordering; interval: repeated confidence interval (Jennison & "
    "Turnbull) at level 1 - alpha; means are not bias-adjusted";

}  // namespace

std::vector<uint64_t> PolicySeeds(const pb::SeedPolicy& policy) {
  std::vector<uint64_t> seeds(policy.initial().begin(), policy.initial().end());
  const size_t max = static_cast<size_t>(std::max(policy.max(), 0));
  if (policy.next_size() > 0) {
    for (uint64_t s : policy.next()) {
      if (seeds.size() >= max) break;
      seeds.push_back(s);
    }
  } else {
    uint64_t top = 0;
    for (uint64_t s : seeds) top = std::max(top, s);
    while (seeds.size() < max) seeds.push_back(++top);
  }
  return seeds;
}

std::vector<int> PolicyLooks(const pb::SeedPolicy& policy) {
  std::vector<int> looks;
  int n = policy.initial_size();
  const int max = std::max(policy.max(), n);
  looks.push_back(n);
  while (n < max && policy.step() > 0) {
    n = std::min(max, n + policy.step());
    looks.push_back(n);
  }
  return looks;
}

stats::SequentialPlan PlanFromPolicy(const pb::SeedPolicy& policy) {
  stats::SequentialPlan plan;
  plan.look_seeds = PolicyLooks(policy);
  plan.alpha = policy.alpha() != 0 ? policy.alpha() : kDefaultPolicyAlpha;
  if (!stats::ParseSpendingShape(policy.boundary(), &plan.shape)) {
    plan.shape = stats::SpendingShape::kOBrienFleming;
  }
  plan.futility_effect_sd =
      policy.has_futility_effect_sd() ? policy.futility_effect_sd() : kDefaultFutilityEffectSd;
  plan.futility_power =
      policy.futility_power() != 0 ? policy.futility_power() : kDefaultFutilityPower;
  plan.simulations = policy.simulations() != 0 ? policy.simulations() : kDefaultPolicySimulations;
  plan.seed = policy.simulation_seed() != 0 ? policy.simulation_seed() : 1;
  return plan;
}

stats::SequentialBoundaries BoundariesFromDesign(const pb::SequentialDesign& d) {
  stats::SequentialBoundaries b;
  b.look_seeds.assign(d.look_seeds().begin(), d.look_seeds().end());
  b.information.assign(d.information().begin(), d.information().end());
  b.alpha_spent.assign(d.alpha_spent().begin(), d.alpha_spent().end());
  b.efficacy_t.assign(d.efficacy_t().begin(), d.efficacy_t().end());
  b.futility_t.assign(d.futility_t().begin(), d.futility_t().end());
  b.simulated_alpha = d.simulated_alpha();
  b.expected_seeds_null = d.expected_seeds_null();
  b.expected_seeds_futility_effect = d.expected_seeds_futility_effect();
  b.expected_seeds_two_sd = d.expected_seeds_two_sd();
  b.power_two_sd = d.power_two_sd();
  return b;
}

StatusOr<pb::SequentialState> DesignSeedPolicy(const pb::SeedPolicy& policy) {
  const stats::SequentialPlan plan = PlanFromPolicy(policy);
  const std::vector<std::string> problems = stats::CheckPlan(plan);
  if (!problems.empty()) {
    std::string msg;
    for (const std::string& p : problems) msg += (msg.empty() ? "" : "; ") + ("seed_policy." + p);
    return InvalidArgumentError(msg);
  }
  const stats::SequentialBoundaries b = stats::ComputeBoundaries(plan);
  pb::SequentialState state;
  pb::SequentialDesign* d = state.mutable_design();
  d->set_boundary(stats::SpendingShapeName(plan.shape));
  d->set_alpha(plan.alpha);
  for (int n : b.look_seeds) d->add_look_seeds(n);
  for (double v : b.information) d->add_information(v);
  for (double v : b.alpha_spent) d->add_alpha_spent(v);
  for (double v : b.efficacy_t) d->add_efficacy_t(v);
  for (double v : b.futility_t) d->add_futility_t(v);
  d->set_futility_effect_sd(plan.futility_effect_sd);
  d->set_futility_power(plan.futility_power);
  d->set_simulations(plan.simulations);
  d->set_simulation_seed(plan.seed);
  d->set_simulated_alpha(b.simulated_alpha);
  d->set_expected_seeds_null(b.expected_seeds_null);
  d->set_expected_seeds_futility_effect(b.expected_seeds_futility_effect);
  d->set_expected_seeds_two_sd(b.expected_seeds_two_sd);
  d->set_power_two_sd(b.power_two_sd);
  state.set_method(kMethod);
  return state;
}

pb::SeedLook EvaluateLook(const pb::SeedPolicy& policy, const pb::SequentialState& state,
                          const stats::ReportTables& tables, int n_seeds) {
  const stats::SequentialPlan plan = PlanFromPolicy(policy);
  const stats::SequentialBoundaries b = BoundariesFromDesign(state.design());
  const int looks = static_cast<int>(b.look_seeds.size());
  const int k = std::min(state.looks_size(), looks - 1);  // 0-based
  pb::SeedLook look;
  look.set_look(k + 1);
  look.set_n_seeds(n_seeds);
  look.set_n_planned(b.look_seeds[static_cast<size_t>(k)]);

  // Comparisons decided at an earlier look keep that look's figures.
  std::map<std::pair<std::string, std::string>, pb::LookComparison> decided;
  if (state.looks_size() > 0) {
    for (const pb::LookComparison& c : state.looks(state.looks_size() - 1).comparisons()) {
      if (c.decided_at_look() > 0) decided[{c.scale(), c.arm()}] = c;
    }
  }
  // The last validation milestone of each scale's main rows.
  std::map<std::string, int64_t> last_milestone;
  for (const stats::PairedRow& row : tables.paired) {
    if (row.kind != "main" || row.split != stats::kSplitVal) continue;
    int64_t& m = last_milestone[row.scale];
    m = std::max(m, row.milestone_tokens);
  }
  bool all_decided = true;
  for (const stats::PairedRow& row : tables.paired) {
    if (row.kind != "main" || row.split != stats::kSplitVal) continue;
    if (row.milestone_tokens != last_milestone[row.scale]) continue;
    pb::LookComparison* c = look.add_comparisons();
    auto it = decided.find({row.scale, row.arm});
    if (it != decided.end()) {
      *c = it->second;
      c->set_outcome("decided");
      continue;
    }
    c->set_scale(row.scale);
    c->set_arm(row.arm);
    c->set_reference_arm(row.reference_arm);
    c->set_milestone_tokens(row.milestone_tokens);
    std::vector<double> deltas;
    for (const stats::SeedPair& p : row.pairs) {
      if (p.complete) deltas.push_back(p.delta);
    }
    c->set_n(static_cast<int>(deltas.size()));
    c->set_mean_delta_nll(deltas.empty() ? kNaN : stats::Mean(deltas));
    c->set_sd_delta_nll(deltas.size() < 2 ? kNaN : stats::SampleSd(deltas));
    const double t = stats::PairedT(deltas);
    c->set_t_statistic(t);
    c->set_efficacy_t(b.efficacy_t[static_cast<size_t>(k)]);
    c->set_futility_t(b.futility_t[static_cast<size_t>(k)]);
    const stats::LookOutcome outcome = stats::DecideLook(b, k, t);
    c->set_outcome(stats::LookOutcomeName(outcome));
    const bool crossed = outcome == stats::LookOutcome::kEfficacy ||
                         outcome == stats::LookOutcome::kFutility ||
                         outcome == stats::LookOutcome::kMaxSeeds;
    if (crossed) c->set_decided_at_look(k + 1);
    if (!crossed || outcome == stats::LookOutcome::kMaxSeeds) all_decided = false;
    c->set_adjusted_p(stats::StagewiseP(plan, b, k, t));
    double low = kNaN, high = kNaN;
    stats::RepeatedInterval(b, k, deltas, &low, &high);
    c->set_rci_low(low);
    c->set_rci_high(high);
  }

  const std::vector<uint64_t> seeds = PolicySeeds(policy);
  const bool last = k + 1 >= looks || n_seeds >= static_cast<int>(seeds.size());
  if (look.comparisons_size() == 0) {
    look.set_decision("stop");
    look.set_reason("no main arm to compare with the reference");
  } else if (all_decided) {
    look.set_decision("stop");
    look.set_reason("every comparison crossed a boundary");
  } else if (last) {
    look.set_decision("stop");
    look.set_reason("max seeds reached (" + std::to_string(n_seeds) + ")");
  } else {
    look.set_decision("continue");
    const size_t target =
        std::min(static_cast<size_t>(b.look_seeds[static_cast<size_t>(k + 1)]), seeds.size());
    for (size_t i = static_cast<size_t>(n_seeds); i < target; ++i) look.add_added_seeds(seeds[i]);
    if (look.added_seeds_size() == 0) {
      look.set_decision("stop");
      look.set_reason("no seed left to add");
    }
  }
  return look;
}

}  // namespace rdattn::coordinator
