#include "coordinator/stats/paired_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rdattn::stats {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kPi = 3.141592653589793238462643383279502884;

// Continued fraction of I_x(a, b) (Numerical Recipes' betacf, evaluated by the modified Lentz
// method). Converges fast for x < (a + 1) / (a + b + 2); the caller uses the symmetry
// I_x(a, b) = 1 − I_{1−x}(b, a) otherwise. NaN if it does not converge.
double BetaContinuedFraction(double a, double b, double x) {
  constexpr int kMaxIterations = 100000;
  constexpr double kEpsilon = 1e-16;
  constexpr double kTiny = 1e-300;
  const double qab = a + b;
  const double qap = a + 1.0;
  const double qam = a - 1.0;
  double c = 1.0;
  double d = 1.0 - qab * x / qap;
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1.0 / d;
  double h = d;
  for (int m = 1; m <= kMaxIterations; ++m) {
    const double dm = m;
    const double m2 = 2.0 * dm;
    // Even step: d_{2m} = m (b − m) x / ((a + 2m − 1)(a + 2m)).
    double aa = dm * (b - dm) * x / ((qam + m2) * (a + m2));
    d = 1.0 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1.0 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    h *= d * c;
    // Odd step: d_{2m+1} = −(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)).
    aa = -(a + dm) * (qab + dm) * x / ((a + m2) * (qap + m2));
    d = 1.0 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1.0 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1.0) < kEpsilon) return h;
  }
  return kNaN;
}

// I_x(a, b) given x, y = 1 − x and their logarithms, each computed by the caller without
// cancellation (the Student t passes x = ν/(ν+t²) and y = t²/(ν+t²) separately).
double IncompleteBetaXY(double a, double b, double x, double y, double log_x, double log_y) {
  if (x <= 0.0) return 0.0;
  if (y <= 0.0) return 1.0;
  const double log_front = a * log_x + b * log_y - LogBeta(a, b);
  if (x < (a + 1.0) / (a + b + 2.0)) {
    return std::exp(log_front) * BetaContinuedFraction(a, b, x) / a;
  }
  return 1.0 - std::exp(log_front) * BetaContinuedFraction(b, a, y) / b;
}

// I_x(a, b) for the noncentral t's starting terms. Like IncompleteBetaXY, except that just on
// the x side of the switch point with a tiny 1 − x (large a, x near 1: t² ≫ df) it sums the
// continued fraction in y = 1 − x instead, because 1 − (a + b) x / (a + 1) cancels there and
// the rounding of x alone costs ~1e-16 / y in relative terms.
double IncompleteBetaNearOne(double a, double b, double x, double y, double log_x, double log_y) {
  const double switch_x = (a + 1.0) / (a + b + 2.0);
  if (x > 0.0 && y > 0.0 && x < switch_x && y < 1e-3 && y < 4.0 * (1.0 - switch_x)) {
    const double log_front = a * log_x + b * log_y - LogBeta(a, b);
    const double cf = BetaContinuedFraction(b, a, y);
    if (!std::isnan(cf)) return 1.0 - std::exp(log_front) * cf / b;
  }
  return IncompleteBetaXY(a, b, x, y, log_x, log_y);
}

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

namespace {

// lgamma(x) − [(x − ½) ln x − x + ½ ln 2π] for x >= 10: the Stirling series
// Σ B_2k / (2k (2k − 1) x^(2k−1)), k = 1..8 (the next term is below 1e-17 at x = 10).
double StirlingCorrection(double x) {
  static const double kCoefficients[] = {1.0 / 12.0,    -1.0 / 360.0,      1.0 / 1260.0,
                                         -1.0 / 1680.0, 1.0 / 1188.0,      -691.0 / 360360.0,
                                         1.0 / 156.0,   -3617.0 / 122400.0};
  const double inv = 1.0 / x;
  const double inv2 = inv * inv;
  double sum = 0.0;
  double power = inv;
  for (double c : kCoefficients) {
    sum += c * power;
    power *= inv2;
  }
  return sum;
}

constexpr double kLnSqrt2Pi = 0.918938533204672741780329736405617640;

}  // namespace

// As R's lbeta (nmath/lbeta.c): for large arguments the big lgamma terms, which cancel, are
// replaced by their Stirling corrections so that no precision is lost to the cancellation.
double LogBeta(double a, double b) {
  const double p = std::min(a, b);
  const double q = std::max(a, b);
  if (p >= 10.0) {
    const double corr = StirlingCorrection(p) + StirlingCorrection(q) - StirlingCorrection(p + q);
    return -0.5 * std::log(q) + kLnSqrt2Pi + corr + (p - 0.5) * std::log(p / (p + q)) +
           q * std::log1p(-p / (p + q));
  }
  if (q >= 10.0) {
    const double corr = StirlingCorrection(q) - StirlingCorrection(p + q);
    return std::lgamma(p) + corr + p - p * std::log(p + q) + (q - 0.5) * std::log1p(-p / (p + q));
  }
  return std::lgamma(p) + std::lgamma(q) - std::lgamma(p + q);
}

double RegularizedIncompleteBeta(double a, double b, double x) {
  if (!(a > 0.0) || !(b > 0.0) || !(x >= 0.0) || !(x <= 1.0)) return kNaN;
  if (x == 0.0) return 0.0;
  if (x == 1.0) return 1.0;
  const double y = 1.0 - x;
  return IncompleteBetaXY(a, b, x, y, std::log(x), std::log1p(-x));
}

double StudentTPdf(double t, double df) {
  if (!(df > 0.0) || std::isnan(t)) return kNaN;
  if (std::isinf(t)) return 0.0;
  const double log_pdf = std::lgamma(0.5 * (df + 1.0)) - std::lgamma(0.5 * df) -
                         0.5 * std::log(df * kPi) - 0.5 * (df + 1.0) * std::log1p(t * t / df);
  return std::exp(log_pdf);
}

double StudentTUpperTail(double t, double df) {
  if (!(df > 0.0) || std::isnan(t)) return kNaN;
  if (t == kInf) return 0.0;
  if (t == -kInf) return 1.0;
  if (t < 0.0) return 1.0 - StudentTUpperTail(-t, df);
  if (t == 0.0) return 0.5;
  // P(T > t) = ½ I_x(ν/2, ½) with x = ν / (ν + t²), 1 − x = t² / (ν + t²).
  // Written with u = t / √ν so that t² never overflows: x = 1 / (1 + u²), y = u² / (1 + u²).
  const double u = t / std::sqrt(df);
  if (u > 1e150) {
    // x < 1e-300: I_x(a, b) = x^a (1−x)^b / (a B(a, b)) · cf with cf = 1 and 1 − x = 1 to double
    // precision; ln x = −2 ln u.
    const double a = 0.5 * df;
    return 0.5 * std::exp(-2.0 * a * std::log(u) - LogBeta(a, 0.5)) / a;
  }
  const double u2 = u * u;
  const double x = 1.0 / (1.0 + u2);
  const double y = u2 / (1.0 + u2);
  const double log_x = -std::log1p(u2);
  const double log_y = u2 > 1.0 ? -std::log1p(1.0 / u2) : std::log(u2) - std::log1p(u2);
  return 0.5 * IncompleteBetaXY(0.5 * df, 0.5, x, y, log_x, log_y);
}

double StudentTCdf(double t, double df) {
  if (!(df > 0.0) || std::isnan(t)) return kNaN;
  if (t <= 0.0) return StudentTUpperTail(-t, df);
  return 1.0 - StudentTUpperTail(t, df);
}

double StudentTQuantile(double p, double df) {
  if (!(df > 0.0) || !(p >= 0.0) || !(p <= 1.0)) return kNaN;
  if (p == 0.0) return -kInf;
  if (p == 1.0) return kInf;
  if (p == 0.5) return 0.0;
  // Solve P(T > t) = q for t > 0 with q = min(p, 1 − p) (1 − p is exact for p >= 0.5), then
  // give t the sign of p − ½. Working on the upper tail keeps small q accurate.
  const double q = p < 0.5 ? p : 1.0 - p;
  const double sign = p < 0.5 ? -1.0 : 1.0;
  // Bracket [lo, hi] with tail(lo) > q >= tail(hi).
  double lo = 0.0;
  double hi = 1.0;
  while (StudentTUpperTail(hi, df) > q) {
    lo = hi;
    hi *= 2.0;
    if (hi > 1e300) return sign * kInf;
  }
  double t = 0.5 * (lo + hi);
  for (int iteration = 0; iteration < 400; ++iteration) {
    const double g = StudentTUpperTail(t, df) - q;  // decreasing in t
    if (g == 0.0) break;
    if (g > 0.0) {
      lo = t;
    } else {
      hi = t;
    }
    // Newton step on g (g' = −pdf); bisection when it leaves the bracket.
    const double pdf = StudentTPdf(t, df);
    double next = pdf > 0.0 ? t + g / pdf : kNaN;
    if (!(next > lo && next < hi)) {
      // Geometric midpoint while the bracket spans orders of magnitude, arithmetic otherwise.
      next = (lo > 0.0 && hi > 4.0 * lo) ? std::sqrt(lo * hi) : 0.5 * (lo + hi);
    }
    const bool converged = std::fabs(next - t) <= 4e-16 * std::fabs(next);
    t = next;
    if (converged || hi - lo <= 4e-16 * hi) break;
  }
  return sign * t;
}

double BinomialHalfCdf(int k, int n) {
  if (n < 0) return kNaN;
  if (k < 0) return 0.0;
  if (k >= n) return 1.0;
  // Σ_{i<=k} C(n, i) · 2^-n with C(n, i + 1) = C(n, i) · (n − i) / (i + 1): exact in doubles while
  // the binomials stay below 2^53 (n <= 56), a few ulps per term otherwise. Term and sum are
  // rescaled by 2^-900 whenever the term passes 2^900, so any n works.
  double term = 1.0;
  double sum = 1.0;
  int exponent = 0;
  for (int i = 0; i < k; ++i) {
    term = term * static_cast<double>(n - i) / static_cast<double>(i + 1);
    sum += term;
    if (term > 0x1p900) {
      term = std::ldexp(term, -900);
      sum = std::ldexp(sum, -900);
      exponent += 900;
    }
  }
  return std::min(1.0, std::ldexp(sum, exponent - n));
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

uint64_t SplitMix64::Next() {
  state_ += 0x9E3779B97F4A7C15ULL;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t UniformIndex(SplitMix64& rng, uint64_t n) {
  // r = 2^64 mod n, computed in 64-bit arithmetic as (2^64 − n) mod n.
  const uint64_t r = (0 - n) % n;
  const uint64_t max_kept = std::numeric_limits<uint64_t>::max() - r;
  uint64_t x = rng.Next();
  while (x > max_kept) x = rng.Next();
  return x % n;
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

double NormalCdf(double z) {
  if (std::isnan(z)) return kNaN;
  return 0.5 * std::erfc(-z / std::sqrt(2.0));
}

double NoncentralTCdf(double t, double df, double ncp) {
  if (std::isnan(t) || std::isnan(ncp) || !(df > 0.0)) return kNaN;
  if (std::isinf(ncp)) return ncp > 0.0 ? 0.0 : 1.0;
  if (t < 0.0) return 1.0 - NoncentralTCdf(-t, df, -ncp);
  if (t == kInf) return 1.0;
  const double base = NormalCdf(-ncp);
  if (t == 0.0) return base;
  // x = t² / (t² + df) and y = 1 − x = df / (t² + df), written with u = t / √df.
  const double u = t / std::sqrt(df);
  const double u2 = u * u;
  const double x = u2 / (1.0 + u2);
  const double y = 1.0 / (1.0 + u2);
  const double log_x = u2 > 1.0 ? -std::log1p(1.0 / u2) : std::log(u2) - std::log1p(u2);
  const double log_y = -std::log1p(u2);
  const double b = 0.5 * df;
  const double lam = 0.5 * ncp * ncp;
  const double c = ncp / std::sqrt(2.0);
  if (lam == 0.0) return std::min(1.0, base + 0.5 * IncompleteBetaXY(0.5, b, x, y, log_x, log_y));
  // Start at the Poisson mode k and sum outward. Along a = j + ½ (P terms) and a = j + 1 (Q
  // terms), I_x(a + 1, b) = I_x(a, b) − g(a) with g(a) = x^a y^b / (a B(a, b)) and
  // g(a + 1) = g(a) · x (a + b) / (a + 1).
  const double k = std::floor(lam);
  const double log_lam = std::log(lam);
  double log_p_k, log_q_k;
  if (k < 10.0) {
    log_p_k = -lam + k * log_lam - std::lgamma(k + 1.0);
    log_q_k = -lam + k * log_lam - std::lgamma(k + 1.5);
  } else {
    // −λ + k ln λ − ln k! has terms of size λ that cancel; as in Loader's dpois:
    // ln P_k = −bd0(k, λ) − ½ ln(2πk) − stirlerr(k), bd0 = k ln(k/λ) + λ − k (|λ − k| < 1 here),
    // and ln Q_k = ln P_k + ln Γ(k + 1) − ln Γ(k + 3/2) by Stirling's series as well.
    const double bd0 = k * std::log1p((k - lam) / lam) + (lam - k);
    log_p_k = -bd0 - 0.5 * std::log(2.0 * kPi * k) - StirlingCorrection(k);
    const double lgamma_ratio = -(k + 0.5) * std::log1p(0.5 / (k + 1.0)) - 0.5 * std::log(k + 1.5) +
                                0.5 + StirlingCorrection(k + 1.0) - StirlingCorrection(k + 1.5);
    log_q_k = log_p_k + lgamma_ratio;
  }
  const double p_k = std::exp(log_p_k);
  const double q_k = std::exp(log_q_k);
  const auto g_of = [&](double a) {
    return std::exp(a * log_x + b * log_y - LogBeta(a, b) - std::log(a));
  };
  const double a_p = k + 0.5;
  const double a_q = k + 1.0;
  const double i_p_k = IncompleteBetaNearOne(a_p, b, x, y, log_x, log_y);
  const double i_q_k = IncompleteBetaNearOne(a_q, b, x, y, log_x, log_y);
  const double g_p_k = g_of(a_p);
  const double g_q_k = g_of(a_q);
  constexpr double kNegligible = 1e-18;
  constexpr int kMaxTerms = 10000000;
  double sum = p_k * i_p_k + c * q_k * i_q_k;
  {  // forward: j = k + 1, k + 2, ...
    double p = p_k, q = q_k, ip = i_p_k, iq = i_q_k, gp = g_p_k, gq = g_q_k;
    double ap = a_p, aq = a_q;
    for (int i = 1; i < kMaxTerms; ++i) {
      const double j = k + i;
      ip = std::max(0.0, ip - gp);
      iq = std::max(0.0, iq - gq);
      gp *= x * (ap + b) / (ap + 1.0);
      gq *= x * (aq + b) / (aq + 1.0);
      ap += 1.0;
      aq += 1.0;
      p *= lam / j;
      q *= lam / (j + 0.5);
      sum += p * ip + c * q * iq;
      // Past the mode the weights fall at least geometrically with ratio r = λ / (j + 1) < 1
      // (and I_x falls too), so what is left is below weight / (1 − r).
      const double r = lam / (j + 1.0);
      if (r < 1.0 && (p + std::fabs(c) * q) < kNegligible * (1.0 - r)) break;
    }
  }
  {  // backward: j = k − 1, ..., 0; I_x(a − 1, b) = I_x(a, b) + g(a − 1)
    double p = p_k, q = q_k, ip = i_p_k, iq = i_q_k, gp = g_p_k, gq = g_q_k;
    double ap = a_p, aq = a_q;
    for (double j = k - 1.0; j >= 0.0; j -= 1.0) {
      // g(a − 1) = g(a) · a / (x (a − 1 + b))
      gp *= ap / (x * (ap - 1.0 + b));
      gq *= aq / (x * (aq - 1.0 + b));
      ap -= 1.0;
      aq -= 1.0;
      ip = std::min(1.0, ip + gp);
      iq = std::min(1.0, iq + gq);
      p *= (j + 1.0) / lam;
      q *= (j + 1.5) / lam;
      sum += p * ip + c * q * iq;
      // Below the mode the weights fall with ratio j / λ < 1 towards j = 0 (I_x <= 1).
      if (p + std::fabs(c) * q < kNegligible * (1.0 - j / lam)) break;
    }
  }
  return std::min(1.0, std::max(0.0, base + 0.5 * sum));
}

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
