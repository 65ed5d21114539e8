// The paired statistics of a sweep (paired_stats.h); the special functions are distributions.cc.
#include "coordinator/stats/paired_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "coordinator/stats/distributions.h"

namespace rdattn::stats {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

double SumInOrder(const std::vector<double>& xs) {
  double sum = 0.0;
  for (double x : xs) sum += x;
  return sum;
}

}  // namespace

double Mean(const std::vector<double>& xs) {
  if (xs.empty()) return kNaN;
  return SumInOrder(xs) / static_cast<double>(xs.size());
}

double SampleSd(const std::vector<double>& xs) {
  if (xs.size() < 2) return kNaN;
  const double m = Mean(xs);
  double ss = 0.0;
  for (double x : xs) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(xs.size() - 1));
}

double SignTestP(int wins, int losses) {
  if (wins < 0 || losses < 0) return kNaN;
  const int n = wins + losses;
  if (n == 0) return 1.0;
  return std::min(1.0, 2.0 * BinomialHalfCdf(std::min(wins, losses), n));
}

double TwoSidedTP(double t, double df) {
  if (std::isnan(t) || !(df > 0.0)) return kNaN;
  return std::min(1.0, 2.0 * StudentTUpperTail(std::fabs(t), df));
}

std::vector<double> BootstrapMeans(const std::vector<double>& xs, uint64_t seed, int resamples) {
  std::vector<double> means;
  if (xs.empty() || resamples < 1) return means;
  means.reserve(static_cast<size_t>(resamples));
  SplitMix64 rng(seed);
  const uint64_t n = xs.size();
  for (int b = 0; b < resamples; ++b) {
    double sum = 0.0;
    for (uint64_t j = 0; j < n; ++j) sum += xs[UniformIndex(rng, n)];
    means.push_back(sum / static_cast<double>(n));
  }
  return means;
}

double PercentileSorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty() || !(q >= 0.0) || !(q <= 1.0)) return kNaN;
  const double h = static_cast<double>(sorted.size() - 1) * q;
  const double floor_h = std::floor(h);
  const size_t i = static_cast<size_t>(floor_h);
  if (i + 1 >= sorted.size()) return sorted.back();
  return sorted[i] + (h - floor_h) * (sorted[i + 1] - sorted[i]);
}

// ---- Power -------------------------------------------------------------------------------

double PairedTTestPowerNcp(double ncp, int64_t n, double alpha) {
  if (n < 2 || std::isnan(ncp) || !(alpha > 0.0) || !(alpha < 1.0)) return kNaN;
  const double df = static_cast<double>(n - 1);
  const double crit = StudentTQuantile(1.0 - 0.5 * alpha, df);
  const double upper = 1.0 - NoncentralTCdf(crit, df, ncp);
  const double lower = NoncentralTCdf(-crit, df, ncp);
  return std::min(1.0, upper + lower);
}

double PairedTTestPower(double effect, double sd, int64_t n, double alpha) {
  if (n < 2 || std::isnan(effect) || !(sd >= 0.0) || !(alpha > 0.0) || !(alpha < 1.0)) {
    return kNaN;
  }
  if (sd == 0.0) return effect == 0.0 ? alpha : 1.0;
  return PairedTTestPowerNcp(effect * std::sqrt(static_cast<double>(n)) / sd, n, alpha);
}

double MinimumDetectableEffect(double sd, int64_t n, double alpha, double power) {
  if (n < 2 || !(sd >= 0.0) || !std::isfinite(sd) || !(alpha > 0.0) || !(alpha < 1.0) ||
      !(power > alpha) || !(power < 1.0)) {
    return kNaN;
  }
  if (sd == 0.0) return 0.0;
  double lo = 0.0;
  double hi = 1.0;
  while (PairedTTestPowerNcp(hi, n, alpha) < power) {
    lo = hi;
    hi *= 2.0;
    if (hi > 1e12) return kNaN;
  }
  for (int i = 0; i < 200 && hi - lo > 1e-13 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (PairedTTestPowerNcp(mid, n, alpha) < power) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi) * sd / std::sqrt(static_cast<double>(n));
}

int64_t SeedsNeeded(double effect, double sd, double alpha, double power) {
  if (!std::isfinite(effect) || effect == 0.0 || !(sd >= 0.0) || !std::isfinite(sd) ||
      !(alpha > 0.0) || !(alpha < 1.0) || !(power > alpha) || !(power < 1.0)) {
    return 0;
  }
  if (sd == 0.0) return 2;
  const double d = std::fabs(effect);
  const auto enough = [&](int64_t n) { return PairedTTestPower(d, sd, n, alpha) >= power; };
  if (enough(2)) return 2;
  int64_t lo = 2;  // not enough
  int64_t hi = 4;
  while (!enough(hi)) {
    lo = hi;
    if (hi >= kMaxSeedsSearched) return kSeedsBeyondSearch;
    hi = std::min(kMaxSeedsSearched, 2 * hi);
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (enough(mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

PowerSummary SummarizePower(int n, double sd, double level, double target_delta) {
  PowerSummary s;
  s.alpha = 1.0 - level;
  s.power = kPowerTarget;
  std::vector<std::pair<double, bool>> deltas;
  for (double d : kPlannedDeltas) deltas.emplace_back(d, false);
  if (std::isfinite(target_delta) && target_delta != 0.0) {
    deltas.emplace_back(std::fabs(target_delta), true);
  }
  s.defined = n >= 2 && std::isfinite(sd) && sd >= 0.0 && level > 0.0 && level < 1.0;
  s.mde = s.mde_ncp = kNaN;
  if (!s.defined) {
    s.note = n < 2 ? "n < 2: no sd, so no power figures" : "no power figures (level or sd)";
  } else {
    s.mde = MinimumDetectableEffect(sd, n, s.alpha, s.power);
    s.mde_ncp = sd > 0.0 ? s.mde * std::sqrt(static_cast<double>(n)) / sd : kNaN;
    if (sd == 0.0) s.note = "sd = 0: any non-zero effect is detected with 2 seeds";
  }
  for (const auto& [d, user] : deltas) {
    SeedsForDelta e;
    e.delta = d;
    e.user_given = user;
    e.seeds = s.defined ? SeedsNeeded(d, sd, s.alpha, s.power) : 0;
    e.power_at_n = s.defined ? PairedTTestPower(d, sd, n, s.alpha) : kNaN;
    s.seeds_needed.push_back(e);
  }
  return s;
}

// ---- Robust statistics -------------------------------------------------------------------

double Median(std::vector<double> xs) {
  if (xs.empty()) return kNaN;
  std::sort(xs.begin(), xs.end());
  const size_t mid = xs.size() / 2;
  return xs.size() % 2 == 1 ? xs[mid] : 0.5 * (xs[mid - 1] + xs[mid]);
}

WilcoxonResult WilcoxonSignedRank(const std::vector<double>& deltas) {
  WilcoxonResult w;
  std::vector<std::pair<double, bool>> nonzero;  // |Δ|, Δ > 0
  for (double d : deltas) {
    if (d == 0.0) {
      ++w.zeros;
    } else if (!std::isnan(d)) {
      nonzero.emplace_back(std::fabs(d), d > 0.0);
    }
  }
  std::sort(nonzero.begin(), nonzero.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const int n = static_cast<int>(nonzero.size());
  w.n = n;
  w.p = 1.0;
  w.exact = n <= kWilcoxonExactMax;
  if (n == 0) return w;
  // Doubled midranks: positions p..q (1-based) of equal |Δ| get p + q each.
  std::vector<int> rank2(static_cast<size_t>(n));
  double tie_term = 0.0;  // Σ (t³ − t) over tie groups
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n &&
           nonzero[static_cast<size_t>(j + 1)].first == nonzero[static_cast<size_t>(i)].first)
      ++j;
    const int t = j - i + 1;
    if (t > 1) {
      w.tied_ranks = true;
      tie_term += static_cast<double>(t) * t * t - t;
    }
    for (int k = i; k <= j; ++k) rank2[static_cast<size_t>(k)] = (i + 1) + (j + 1);
    i = j + 1;
  }
  int64_t w2 = 0;
  for (int i = 0; i < n; ++i) {
    if (nonzero[static_cast<size_t>(i)].second) w2 += rank2[static_cast<size_t>(i)];
  }
  w.w_plus = 0.5 * static_cast<double>(w2);
  if (w.exact) {
    // counts[s]: sign patterns whose doubled W+ is s (each count <= 2^25: exact in doubles).
    const int64_t total2 = static_cast<int64_t>(n) * (n + 1);
    std::vector<double> counts(static_cast<size_t>(total2 + 1), 0.0);
    counts[0] = 1.0;
    int64_t reach = 0;
    for (int i = 0; i < n; ++i) {
      const int r = rank2[static_cast<size_t>(i)];
      for (int64_t s = reach; s >= 0; --s) {
        if (counts[static_cast<size_t>(s)] != 0.0)
          counts[static_cast<size_t>(s + r)] += counts[static_cast<size_t>(s)];
      }
      reach += r;
    }
    double below = 0.0, above = 0.0;
    for (int64_t s = 0; s <= total2; ++s) {
      if (s <= w2) below += counts[static_cast<size_t>(s)];
      if (s >= w2) above += counts[static_cast<size_t>(s)];
    }
    const double all = std::ldexp(1.0, n);
    w.p = std::min(1.0, 2.0 * std::min(below, above) / all);
  } else {
    const double nn = n;
    const double mean = nn * (nn + 1.0) / 4.0;
    const double var = nn * (nn + 1.0) * (2.0 * nn + 1.0) / 24.0 - tie_term / 48.0;
    const double z = std::max(0.0, std::fabs(w.w_plus - mean) - 0.5) / std::sqrt(var);
    w.p = std::min(1.0, std::erfc(z / std::sqrt(2.0)));
  }
  return w;
}

RobustSummary SummarizeRobust(const std::vector<double>& deltas) {
  RobustSummary r;
  r.median = Median(deltas);
  std::vector<double> dev;
  dev.reserve(deltas.size());
  for (double d : deltas) dev.push_back(std::fabs(d - r.median));
  r.mad = Median(dev);
  r.mad_scaled = kMadScale * r.mad;
  r.wilcoxon = WilcoxonSignedRank(deltas);
  for (size_t i = 0; i < deltas.size(); ++i) {
    const double d = deltas[i] - r.median;
    double z;
    if (r.mad_scaled > 0.0) {
      z = d / r.mad_scaled;
    } else {
      z = d == 0.0 ? 0.0 : (d > 0.0 ? kInf : -kInf);
    }
    r.robust_z.push_back(z);
    if (std::fabs(d) > kOutlierMads * r.mad_scaled) r.outliers.push_back(i);
  }
  return r;
}

// ---- Trend -------------------------------------------------------------------------------

double OlsSlope(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 2) return kNaN;
  const double mx = Mean(x);
  const double my = Mean(y);
  double sxy = 0.0, sxx = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
  }
  if (!(sxx > 0.0)) return kNaN;
  return sxy / sxx;
}

TrendSummary SummarizeSlopes(const std::vector<double>& slopes, double level, double gap) {
  TrendSummary s;
  s.n = static_cast<int>(slopes.size());
  s.level = level;
  s.mean = Mean(slopes);
  s.sd = SampleSd(slopes);
  s.se = s.n >= 2 ? s.sd / std::sqrt(static_cast<double>(s.n)) : kNaN;
  s.t_critical = s.ci_low = s.ci_high = s.t_statistic = s.t_test_p = kNaN;
  s.reading = "no evidence";
  if (s.n < 2) {
    s.note = s.n == 0 ? "no seed with 2 or more milestones" : "1 seed with a slope: no interval";
    return s;
  }
  if (level > 0.0 && level < 1.0) {
    s.t_critical = StudentTQuantile(0.5 * (1.0 + level), static_cast<double>(s.n - 1));
    s.ci_low = s.mean - s.t_critical * s.se;
    s.ci_high = s.mean + s.t_critical * s.se;
    s.ci_defined = true;
  }
  if (s.se > 0.0) {
    s.t_statistic = s.mean / s.se;
  } else if (s.mean != 0.0) {
    s.t_statistic = s.mean > 0.0 ? kInf : -kInf;
  }
  if (!std::isnan(s.t_statistic)) {
    s.t_test_p = TwoSidedTP(s.t_statistic, static_cast<double>(s.n - 1));
    s.t_test_defined = true;
  }
  const bool excludes_zero = s.ci_defined && (s.ci_low > 0.0 || s.ci_high < 0.0);
  if (excludes_zero) {
    if (std::isfinite(gap) && gap != 0.0) {
      s.reading = (s.mean > 0.0) == (gap > 0.0) ? "the gap widens" : "the gap narrows";
    } else {
      s.note = "the slope's interval excludes 0 but there is no gap at the last milestone";
    }
  }
  return s;
}

PairedSummary Summarize(const std::vector<double>& deltas, uint64_t bootstrap_seed, int resamples,
                        double level) {
  PairedSummary s;
  s.n = static_cast<int>(deltas.size());
  s.level = level;
  s.df = s.n > 0 ? s.n - 1 : 0;
  s.mean = Mean(deltas);
  s.sd = SampleSd(deltas);
  s.se = s.n >= 2 ? s.sd / std::sqrt(static_cast<double>(s.n)) : kNaN;
  s.bootstrap_seed = bootstrap_seed;
  s.bootstrap_resamples = resamples;

  for (double d : deltas) {
    if (d < 0.0) {
      ++s.wins;
    } else if (d > 0.0) {
      ++s.losses;
    } else {
      ++s.ties;
    }
  }
  s.sign_test_p = SignTestP(s.wins, s.losses);

  const bool level_ok = level > 0.0 && level < 1.0;
  s.t_critical = kNaN;
  s.t_ci_low = s.t_ci_high = kNaN;
  s.bootstrap_ci_low = s.bootstrap_ci_high = kNaN;
  s.t_statistic = s.t_test_p = kNaN;
  if (s.n < 2) {
    s.note = "n < 2: no sd, interval or t test";
  } else {
    if (level_ok) {
      s.t_critical = StudentTQuantile(0.5 * (1.0 + level), static_cast<double>(s.df));
      s.t_ci_low = s.mean - s.t_critical * s.se;
      s.t_ci_high = s.mean + s.t_critical * s.se;
      s.t_ci_defined = true;
    }
    if (level_ok && resamples >= 1) {
      std::vector<double> means = BootstrapMeans(deltas, bootstrap_seed, resamples);
      std::sort(means.begin(), means.end());
      const double alpha = 1.0 - level;
      s.bootstrap_ci_low = PercentileSorted(means, alpha / 2.0);
      s.bootstrap_ci_high = PercentileSorted(means, 1.0 - alpha / 2.0);
      s.bootstrap_ci_defined = true;
    }
    if (!level_ok) s.note = "confidence level outside (0, 1): no intervals";
    if (level_ok && resamples < 1) s.note = "bootstrap resamples < 1: no bootstrap interval";
    if (s.se > 0.0) {
      s.t_statistic = s.mean / s.se;
    } else if (s.mean != 0.0) {
      s.t_statistic = s.mean > 0.0 ? kInf : -kInf;  // every Δ equal and non-zero
    }
    if (!std::isnan(s.t_statistic)) {
      s.t_test_p = TwoSidedTP(s.t_statistic, static_cast<double>(s.df));
      s.t_test_defined = true;
    } else {
      s.note = "sd = 0 and mean = 0: t test undefined";
    }
  }

  if (s.n == 0) {
    s.ppl_reduction_mean_per_seed = s.ppl_reduction_of_mean = kNaN;
    s.ppl_change_mean_per_seed = s.ppl_change_of_mean = kNaN;
    s.note = "n = 0: no complete pairs";
  } else {
    std::vector<double> changes;
    changes.reserve(deltas.size());
    for (double d : deltas) changes.push_back(std::expm1(d));  // exp(Δ_i) − 1
    s.ppl_change_mean_per_seed = Mean(changes);
    s.ppl_change_of_mean = std::expm1(s.mean);
    s.ppl_reduction_mean_per_seed = -s.ppl_change_mean_per_seed;
    s.ppl_reduction_of_mean = -s.ppl_change_of_mean;
  }
  return s;
}

}  // namespace rdattn::stats
