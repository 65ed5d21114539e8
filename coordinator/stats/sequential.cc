// Group-sequential boundaries by seeded Monte Carlo (sequential.h).
#include "coordinator/stats/sequential.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "coordinator/stats/distributions.h"
#include "coordinator/stats/paired_stats.h"

namespace rdattn::stats {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kPi = 3.14159265358979323846;

// One simulated sequence of deltas Δ_1, Δ_2, ... ~ N(mu, 1) with its running mean and sum of
// squared deviations (Welford).
class Path {
 public:
  // One independent generator per path from (seed, stream, path), hashed with the SplitMix64
  // output function: consecutive SplitMix64 states are shifted copies of one sequence, so the
  // path index must be hashed, not added.
  Path(uint64_t seed, uint64_t stream, uint64_t index, double mu)
      : rng_(SplitMix64::Mix(
            SplitMix64::Mix(seed ^ SplitMix64::Mix(stream + 0x632BE59BD9B4E019ULL)) + index)),
        mu_(mu) {}

  void AdvanceTo(int n) {
    while (n_ < n) {
      const double x = mu_ + Normal();
      ++n_;
      const double d = x - mean_;
      mean_ += d / n_;
      m2_ += d * (x - mean_);
    }
  }

  double T() const {
    if (n_ < 2) return kNaN;
    const double sd = std::sqrt(m2_ / (n_ - 1));
    if (sd == 0.0) return mean_ == 0.0 ? kNaN : (mean_ > 0 ? kInf : -kInf);
    return mean_ / (sd / std::sqrt(static_cast<double>(n_)));
  }

 private:
  double Uniform() {  // (0, 1]
    return (static_cast<double>(rng_.Next() >> 11) + 1.0) * 0x1.0p-53;
  }
  double Normal() {  // Box–Muller, both variates used
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(Uniform()));
    const double a = 2.0 * kPi * Uniform();
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }

  SplitMix64 rng_;
  double mu_;
  int n_ = 0;
  double mean_ = 0;
  double m2_ = 0;
  bool has_spare_ = false;
  double spare_ = 0;
};

constexpr uint64_t kNullStream = 1;
constexpr uint64_t kFutilityStream = 2;
constexpr uint64_t kCharacteristicsStream = 3;  // + effect index

// The threshold between the `count` largest values of `v` and the rest (v is reordered): +inf
// when count <= 0, 0 when count >= v.size(), else the midpoint of the count-th and the
// (count+1)-th largest.
double UpperThreshold(std::vector<double>& v, int64_t count) {
  if (count <= 0) return kInf;
  if (count >= static_cast<int64_t>(v.size())) return 0.0;
  std::nth_element(v.begin(), v.begin() + (count - 1), v.end(), std::greater<double>());
  const double kth = v[static_cast<size_t>(count - 1)];
  const double next = *std::max_element(v.begin() + count, v.end());
  if (std::isinf(kth) && std::isinf(next)) return kInf;
  if (std::isinf(kth)) return next * 2.0 + 1.0;
  return 0.5 * (kth + next);
}

// The threshold below which the `count` smallest values lie: 0 when count <= 0, +inf when
// count >= v.size(), else the midpoint of the count-th and (count+1)-th smallest.
double LowerThreshold(std::vector<double>& v, int64_t count) {
  if (count <= 0) return 0.0;
  if (count >= static_cast<int64_t>(v.size())) return kInf;
  std::nth_element(v.begin(), v.begin() + (count - 1), v.end());
  const double kth = v[static_cast<size_t>(count - 1)];
  const double next = *std::min_element(v.begin() + count, v.end());
  if (std::isinf(next)) return std::isinf(kth) ? kInf : kth * 2.0 + 1.0;
  return 0.5 * (kth + next);
}

double AbsT(const Path& p) {
  const double t = p.T();
  return std::isnan(t) ? 0.0 : std::fabs(t);  // an undefined t never crosses
}

}  // namespace

bool ParseSpendingShape(const std::string& name, SpendingShape* out) {
  if (name == "obrien_fleming") {
    *out = SpendingShape::kOBrienFleming;
    return true;
  }
  if (name == "pocock") {
    *out = SpendingShape::kPocock;
    return true;
  }
  return false;
}

std::string SpendingShapeName(SpendingShape shape) {
  return shape == SpendingShape::kPocock ? "pocock" : "obrien_fleming";
}

double SpentError(SpendingShape shape, double total, double t) {
  t = std::clamp(t, 0.0, 1.0);
  if (t <= 0.0) return 0.0;
  if (t >= 1.0) return total;
  if (shape == SpendingShape::kPocock) return total * std::log(1.0 + (std::exp(1.0) - 1.0) * t);
  const double z = NormalQuantile(1.0 - total / 2.0);
  return std::min(total, 2.0 - 2.0 * NormalCdf(z / std::sqrt(t)));
}

std::vector<std::string> CheckPlan(const SequentialPlan& plan) {
  std::vector<std::string> errors;
  if (plan.look_seeds.empty()) errors.push_back("max: no look is planned");
  for (size_t k = 0; k < plan.look_seeds.size(); ++k) {
    if (plan.look_seeds[k] < 2 || (k > 0 && plan.look_seeds[k] <= plan.look_seeds[k - 1])) {
      errors.push_back("initial: the looks must be at increasing seed counts of at least 2");
      break;
    }
  }
  if (!(plan.alpha > 0.0 && plan.alpha < 0.5)) errors.push_back("alpha: must be in (0, 0.5)");
  if (!(plan.futility_effect_sd >= 0.0) || !std::isfinite(plan.futility_effect_sd)) {
    errors.push_back("futility_effect_sd: must be >= 0 and finite");
  }
  if (!(plan.futility_power > 0.5 && plan.futility_power < 1.0)) {
    errors.push_back("futility_power: must be in (0.5, 1)");
  }
  if (plan.simulations < 10000) errors.push_back("simulations: must be at least 10,000");
  return errors;
}

double PairedT(const std::vector<double>& deltas) {
  const size_t n = deltas.size();
  if (n < 2) return kNaN;
  const double mean = Mean(deltas);
  const double sd = SampleSd(deltas);
  if (std::isnan(mean) || std::isnan(sd)) return kNaN;
  if (sd == 0.0) return mean == 0.0 ? kNaN : (mean > 0 ? kInf : -kInf);
  return mean / (sd / std::sqrt(static_cast<double>(n)));
}

SequentialBoundaries ComputeBoundaries(const SequentialPlan& plan) {
  SequentialBoundaries b;
  b.look_seeds = plan.look_seeds;
  const size_t looks = plan.look_seeds.size();
  const double last = static_cast<double>(plan.look_seeds.back());
  const int64_t sims = plan.simulations;
  for (int n : plan.look_seeds) {
    const double t = n / last;
    b.information.push_back(t);
    b.alpha_spent.push_back(SpentError(plan.shape, plan.alpha, t));
  }

  // Efficacy: under the null, ignoring futility (non-binding), choose c_k so that the paths
  // crossing first at look k are the alpha spent between looks k − 1 and k.
  {
    std::vector<Path> alive;
    alive.reserve(static_cast<size_t>(sims));
    for (int64_t i = 0; i < sims; ++i) alive.emplace_back(plan.seed, kNullStream, i, 0.0);
    int64_t crossed = 0;
    std::vector<double> abs_t;
    for (size_t k = 0; k < looks; ++k) {
      abs_t.clear();
      for (Path& p : alive) {
        p.AdvanceTo(plan.look_seeds[k]);
        abs_t.push_back(AbsT(p));
      }
      const int64_t target = std::llround(b.alpha_spent[k] * static_cast<double>(sims));
      std::vector<double> work = abs_t;
      const double c = UpperThreshold(work, target - crossed);
      b.efficacy_t.push_back(c);
      std::vector<Path> next;
      next.reserve(alive.size());
      for (size_t i = 0; i < alive.size(); ++i) {
        if (abs_t[i] >= c) {
          ++crossed;
        } else {
          next.push_back(alive[i]);
        }
      }
      alive.swap(next);
    }
  }

  // Futility: under Δ ~ N(d, 1), choose f_k so that the paths stopping for futility by look k
  // are beta(t_k) (same spending shape, beta = 1 − power); capped at c_k; at the last look
  // f = c (every path stops).
  const double d = plan.futility_effect_sd;
  const double beta = 1.0 - plan.futility_power;
  if (d > 0.0) {
    std::vector<Path> alive;
    alive.reserve(static_cast<size_t>(sims));
    for (int64_t i = 0; i < sims; ++i) alive.emplace_back(plan.seed, kFutilityStream, i, d);
    int64_t stopped = 0;
    std::vector<double> abs_t;
    for (size_t k = 0; k < looks; ++k) {
      const double c = b.efficacy_t[k];
      if (k + 1 == looks) {
        b.futility_t.push_back(c);
        break;
      }
      abs_t.clear();
      std::vector<Path> remaining;
      for (Path& p : alive) {
        p.AdvanceTo(plan.look_seeds[k]);
        const double a = AbsT(p);
        if (a >= c) continue;  // efficacy
        remaining.push_back(p);
        abs_t.push_back(a);
      }
      const int64_t target =
          std::llround(SpentError(plan.shape, beta, b.information[k]) * static_cast<double>(sims));
      std::vector<double> work = abs_t;
      const double f = std::min(c, LowerThreshold(work, target - stopped));
      b.futility_t.push_back(f);
      alive.clear();
      for (size_t i = 0; i < remaining.size(); ++i) {
        if (abs_t[i] < f) {
          ++stopped;
        } else {
          alive.push_back(remaining[i]);
        }
      }
    }
  } else {
    b.futility_t.assign(looks, 0.0);
  }

  // Operating characteristics, from streams independent of the calibration.
  auto characteristics = [&](double effect, uint64_t stream, double* expected_seeds,
                             double* efficacy_rate) {
    double seeds = 0;
    int64_t efficacy = 0;
    for (int64_t i = 0; i < sims; ++i) {
      const SimulatedSweep s = SimulateSweep(b, effect, plan.seed, stream + 16 * i);
      seeds += s.seeds;
      if (s.outcome == LookOutcome::kEfficacy) ++efficacy;
    }
    *expected_seeds = seeds / static_cast<double>(sims);
    *efficacy_rate = static_cast<double>(efficacy) / static_cast<double>(sims);
  };
  double unused = 0;
  characteristics(0.0, kCharacteristicsStream, &b.expected_seeds_null, &b.simulated_alpha);
  if (d > 0.0) {
    characteristics(d, kCharacteristicsStream + 1, &b.expected_seeds_futility_effect, &unused);
  } else {
    b.expected_seeds_futility_effect = kNaN;
  }
  characteristics(2.0, kCharacteristicsStream + 2, &b.expected_seeds_two_sd, &b.power_two_sd);
  return b;
}

std::string LookOutcomeName(LookOutcome outcome) {
  switch (outcome) {
    case LookOutcome::kContinue:
      return "continue";
    case LookOutcome::kEfficacy:
      return "efficacy";
    case LookOutcome::kFutility:
      return "futility";
    case LookOutcome::kMaxSeeds:
      return "max_seeds";
    case LookOutcome::kUndefined:
      return "undefined";
  }
  return "undefined";
}

LookOutcome DecideLook(const SequentialBoundaries& b, int look, double t) {
  const bool last = look + 1 >= static_cast<int>(b.look_seeds.size());
  if (std::isnan(t)) return LookOutcome::kUndefined;
  const double a = std::fabs(t);
  const size_t k =
      static_cast<size_t>(std::clamp(look, 0, static_cast<int>(b.efficacy_t.size()) - 1));
  if (a >= b.efficacy_t[k]) return LookOutcome::kEfficacy;
  if (last) return LookOutcome::kMaxSeeds;
  if (a < b.futility_t[k]) return LookOutcome::kFutility;
  return LookOutcome::kContinue;
}

double StagewiseP(const SequentialPlan& plan, const SequentialBoundaries& b, int look, double t) {
  if (std::isnan(t) || look < 0 || look >= static_cast<int>(b.look_seeds.size())) return kNaN;
  const double a = std::fabs(t);
  const double before = look > 0 ? b.alpha_spent[static_cast<size_t>(look - 1)] : 0.0;
  int64_t beyond = 0;
  for (int64_t i = 0; i < plan.simulations; ++i) {
    Path p(plan.seed, kNullStream, static_cast<uint64_t>(i), 0.0);
    bool crossed = false;
    for (int k = 0; k < look; ++k) {
      p.AdvanceTo(b.look_seeds[static_cast<size_t>(k)]);
      if (AbsT(p) >= b.efficacy_t[static_cast<size_t>(k)]) {
        crossed = true;
        break;
      }
    }
    if (crossed) continue;
    p.AdvanceTo(b.look_seeds[static_cast<size_t>(look)]);
    if (AbsT(p) >= a) ++beyond;
  }
  return std::min(1.0, before + static_cast<double>(beyond) / plan.simulations);
}

void RepeatedInterval(const SequentialBoundaries& b, int look, const std::vector<double>& deltas,
                      double* low, double* high) {
  *low = *high = kNaN;
  if (deltas.size() < 2 || look < 0 || look >= static_cast<int>(b.efficacy_t.size())) return;
  const double mean = Mean(deltas);
  const double se = SampleSd(deltas) / std::sqrt(static_cast<double>(deltas.size()));
  const double c = b.efficacy_t[static_cast<size_t>(look)];
  const double half = std::isinf(c) ? kInf : c * se;
  *low = mean - half;
  *high = mean + half;
}

SimulatedSweep SimulateSweep(const SequentialBoundaries& b, double effect_sd, uint64_t seed,
                             uint64_t stream) {
  Path p(seed, stream, 0, effect_sd);
  SimulatedSweep s;
  for (size_t k = 0; k < b.look_seeds.size(); ++k) {
    p.AdvanceTo(b.look_seeds[k]);
    const LookOutcome o = DecideLook(b, static_cast<int>(k), p.T());
    s.look = static_cast<int>(k);
    s.seeds = b.look_seeds[k];
    s.outcome = o;
    if (o != LookOutcome::kContinue && o != LookOutcome::kUndefined) break;
  }
  return s;
}

}  // namespace rdattn::stats
