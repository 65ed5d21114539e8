// Special functions and distributions of the report's statistics (distributions.h).
#include "coordinator/stats/distributions.h"

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

// ---- Normal ------------------------------------------------------------------------------

double NormalCdf(double z) {
  if (std::isnan(z)) return kNaN;
  return 0.5 * std::erfc(-z / std::sqrt(2.0));
}

double NormalQuantile(double p) {
  if (!(p > 0.0 && p < 1.0)) return kNaN;
  // Acklam (2003): relative error below 1.15e-9 before refinement.
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  const double lo = 0.02425;
  double x;
  if (p < lo) {
    const double q = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else if (p <= 1.0 - lo) {
    const double q = p - 0.5;
    const double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
  } else {
    const double q = std::sqrt(-2.0 * std::log(1.0 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  }
  // One Halley step on Φ(x) − p.
  const double e = NormalCdf(x) - p;
  const double u = e * std::sqrt(2.0 * kPi) * std::exp(x * x / 2.0);
  return x - u / (1.0 + x * u / 2.0);
}

// ---- Student t ---------------------------------------------------------------------------

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

// ---- Noncentral t ------------------------------------------------------------------------

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

// ---- Binomial(n, ½) ----------------------------------------------------------------------

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

// ---- Random numbers ----------------------------------------------------------------------

uint64_t UniformIndex(SplitMix64& rng, uint64_t n) {
  // r = 2^64 mod n, computed in 64-bit arithmetic as (2^64 − n) mod n.
  const uint64_t r = (0 - n) % n;
  const uint64_t max_kept = std::numeric_limits<uint64_t>::max() - r;
  uint64_t x = rng.Next();
  while (x > max_kept) x = rng.Next();
  return x % n;
}

}  // namespace rdattn::stats
