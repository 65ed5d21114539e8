// Fixture tests of coordinator/stats/paired_stats: values computed by hand or from closed forms,
// and a fixed-seed bootstrap pinned bit for bit. tests/stats/crosscheck.py (ctest
// stats_crosscheck) recomputes every value of the "python-crosscheck" block below with an
// independent Python implementation (stdlib only), so the pins are not just "what the C++ said".
#include "coordinator/stats/paired_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "coordinator/stats/distributions.h"

namespace rdattn::stats {
namespace {

constexpr double kPi = 3.141592653589793238462643383279502884;

// The paper's per-seed ΔNLL (RD − Block) at 2.0B tokens, read off Fig. 2 (MODEL.md §7.1).
const std::vector<double> kPaperS = {-0.027, -0.029, -0.030, -0.030, -0.035};
const std::vector<double> kPaperM = {-0.012, -0.018, -0.021, -0.029, -0.043};
const std::vector<double> kSmall = {0.5, -1.25, 2.0, 0.125, -0.3, 1.7, 0.01};

// clang-format off
// BEGIN python-crosscheck
constexpr uint64_t kBootSeed = 20260801;
constexpr int kBootResamples = 10000;
constexpr double kBootLowS = -0.0328;
constexpr double kBootHighS = -0.028199999999999996;
constexpr double kBootLowM = -0.034199999999999994;
constexpr double kBootHighM = -0.0162;
constexpr double kBootLowSmall = -0.14839285714285722;
constexpr double kBootHighSmall = 0.7703571428571429;
constexpr uint64_t kFirstSplitMix0 = 16294208416658607535ULL;
constexpr uint64_t kFirstSplitMix1 = 10451216379200822465ULL;
constexpr double kTTestPS = 2.1563457351144793e-05;
constexpr double kTTestPM = 0.01006784839230289;
constexpr double kMeanS = -0.030199999999999998;
// END python-crosscheck
// clang-format on

double Rel(double got, double want) { return std::fabs(got - want) / std::fabs(want); }

// ---- Descriptive -------------------------------------------------------------------------

TEST(Descriptive, MeanAndSampleSd) {
  EXPECT_EQ(Mean({1.0, 2.0, 3.0, 4.0}), 2.5);
  EXPECT_DOUBLE_EQ(SampleSd({1.0, 2.0, 3.0, 4.0}), std::sqrt(5.0 / 3.0));
  EXPECT_EQ(SampleSd({2.0, 2.0, 2.0}), 0.0);
  EXPECT_TRUE(std::isnan(Mean({})));
  EXPECT_TRUE(std::isnan(SampleSd({1.0})));
  EXPECT_TRUE(std::isnan(SampleSd({})));
}

// ---- Incomplete beta ---------------------------------------------------------------------

TEST(IncompleteBeta, ClosedForms) {
  // x values whose complement 1 − x is exact in doubles, so the symmetry check is fair.
  for (double x : {0x1p-30, 0.0078125, 0.3125, 0.5, 0.77734375, 0.998046875}) {
    for (double a : {0.5, 1.0, 2.5, 7.0, 40.0}) {
      // I_x(a, 1) = x^a, I_x(1, b) = 1 − (1 − x)^b.
      if (std::pow(x, a) > 1e-300) {
        EXPECT_LT(Rel(RegularizedIncompleteBeta(a, 1.0, x), std::pow(x, a)), 1e-13)
            << a << " " << x;
      }
      EXPECT_LT(Rel(RegularizedIncompleteBeta(1.0, a, x), -std::expm1(a * std::log1p(-x))), 1e-13)
          << a << " " << x;
      // Symmetry: I_x(a, b) = 1 − I_{1−x}(b, a), i.e. the two branches of the evaluation agree.
      EXPECT_NEAR(RegularizedIncompleteBeta(a, 3.5, x),
                  1.0 - RegularizedIncompleteBeta(3.5, a, 1.0 - x), 2e-15)
          << a << " " << x;
    }
  }
  // I_x(a, a) at x = ½ is ½; for large a the prefactor is x^a (1−x)^a / B(a, a), whose logarithm
  // is about −1.4 a, so its rounding sets the accuracy (about 1e-16 per unit of the exponent).
  for (double a : {0.5, 1.0, 3.0, 17.5}) {
    EXPECT_NEAR(RegularizedIncompleteBeta(a, a, 0.5), 0.5, 2e-15) << a;
  }
  EXPECT_NEAR(RegularizedIncompleteBeta(200.0, 200.0, 0.5), 0.5, 5e-14);
  // Reference values (50-digit evaluation of the same continued fraction, see docs/report.md):
  // I_0.77(40, 3.5) = 0.00304503270225919391879908..., I_1e-9(0.5, 3.5)
  // = 6.44213914400589139...e-5.
  EXPECT_LT(Rel(RegularizedIncompleteBeta(40.0, 3.5, 0.77), 0.0030450327022591939188), 1e-13);
  EXPECT_LT(Rel(RegularizedIncompleteBeta(0.5, 3.5, 1e-9), 6.4421391440058913965e-05), 1e-13);
  // I_0.4(2, 3) = P(Binomial(4, 0.4) >= 2) = 1 − 0.6^4 − 4·0.4·0.6^3 = 0.5248.
  EXPECT_NEAR(RegularizedIncompleteBeta(2.0, 3.0, 0.4), 0.5248, 1e-15);
  EXPECT_EQ(RegularizedIncompleteBeta(2.0, 3.0, 0.0), 0.0);
  EXPECT_EQ(RegularizedIncompleteBeta(2.0, 3.0, 1.0), 1.0);
  EXPECT_TRUE(std::isnan(RegularizedIncompleteBeta(2.0, 3.0, 1.5)));
  EXPECT_TRUE(std::isnan(RegularizedIncompleteBeta(0.0, 3.0, 0.5)));
}

// ---- Student t ---------------------------------------------------------------------------

// Closed-form CDFs (e.g. Wikipedia "Student's t-distribution", special cases).
double Cdf1(double t) { return 0.5 + std::atan(t) / kPi; }
double Cdf2(double t) { return 0.5 + t / (2.0 * std::sqrt(2.0 + t * t)); }
double Cdf3(double t) {
  const double u = t / std::sqrt(3.0);
  return 0.5 + (u / (1.0 + u * u) + std::atan(u)) / kPi;
}
double Cdf4(double t) {
  const double w = 1.0 + t * t / 4.0;
  return 0.5 + 0.375 * (t / std::sqrt(w)) * (1.0 - t * t / (12.0 * w));
}

TEST(StudentT, CdfMatchesClosedForms) {
  for (double t :
       {-40.0, -7.5, -2.0, -1.0, -0.3, 0.0, 1e-8, 0.3, 1.0, 2.0, 4.302652729749464, 12.7, 100.0}) {
    EXPECT_NEAR(StudentTCdf(t, 1), Cdf1(t), 2e-15) << t;
    EXPECT_NEAR(StudentTCdf(t, 2), Cdf2(t), 2e-15) << t;
    EXPECT_NEAR(StudentTCdf(t, 3), Cdf3(t), 2e-15) << t;
    EXPECT_NEAR(StudentTCdf(t, 4), Cdf4(t), 2e-15) << t;
  }
  EXPECT_EQ(StudentTCdf(1.0, 1), 0.75);
  EXPECT_EQ(StudentTCdf(0.0, 7), 0.5);
  EXPECT_NEAR(StudentTCdf(2.0, 2), 0.9082482904638630, 1e-15);  // 0.5 + 1/√6
  EXPECT_EQ(StudentTCdf(std::numeric_limits<double>::infinity(), 3), 1.0);
  EXPECT_EQ(StudentTCdf(-std::numeric_limits<double>::infinity(), 3), 0.0);
  EXPECT_TRUE(std::isnan(StudentTCdf(1.0, 0.0)));
  EXPECT_TRUE(std::isnan(StudentTCdf(std::nan(""), 3.0)));
}

TEST(StudentT, UpperTailIsAccurateFarOut) {
  // df 1: P(T > t) = atan(1/t)/π; df 2: 1 / (√(2+t²) (√(2+t²) + t)). No cancellation in either.
  for (double t : {10.0, 1e3, 1e6, 1e10, 1e100, 1e200}) {
    EXPECT_LT(Rel(StudentTUpperTail(t, 1), std::atan2(1.0, t) / kPi), 1e-13) << t;
    if (t < 1e150) {
      const double r = std::sqrt(2.0 + t * t);
      EXPECT_LT(Rel(StudentTUpperTail(t, 2), 1.0 / (r * (r + t))), 1e-13) << t;
    }
  }
  EXPECT_LT(Rel(StudentTCdf(-1e6, 1), std::atan2(1.0, 1e6) / kPi), 1e-13);
}

TEST(StudentT, QuantileFixtures) {
  // t_{0.975, df}: the t-interval multipliers for n = 2..6 and 31 seeds. The values are 45-digit
  // quantiles rounded to doubles (crosscheck.py recomputes them). The often-quoted
  // 3.182446305284263 for df 3 is 1.7e-13 too high; the rest agree with the brief's list to 2e-15.
  const struct {
    double p, df, q;
  } fixtures[] = {
      {0.975, 1, 12.706204736174705},  {0.975, 2, 4.302652729749464},
      {0.975, 3, 3.1824463052837095},  {0.975, 4, 2.7764451051977943},
      {0.975, 5, 2.5705818356363155},  {0.975, 30, 2.042272456301238},
      {0.995, 10, 3.1692726726169513}, {0.95, 3, 2.3533634348018238},
      {0.9995, 2, 31.59905457644362},  {0.975, 100, 1.9839715185235522},
      {0.9, 7, 1.4149239276505086},    {0.95, 4, 2.1318467863266504},
  };
  for (const auto& f : fixtures) {
    EXPECT_LT(Rel(StudentTQuantile(f.p, f.df), f.q), 1e-13) << f.p << " " << f.df;
    EXPECT_LT(Rel(StudentTQuantile(1.0 - f.p, f.df), -f.q), 1e-13) << f.p << " " << f.df;
  }
  // The brief's list, to 1e-12.
  EXPECT_LT(Rel(StudentTQuantile(0.975, 1), 12.706204736174698), 1e-12);
  EXPECT_LT(Rel(StudentTQuantile(0.975, 2), 4.302652729749464), 1e-12);
  EXPECT_LT(Rel(StudentTQuantile(0.975, 3), 3.182446305284263), 1e-12);
  EXPECT_LT(Rel(StudentTQuantile(0.975, 4), 2.7764451051977987), 1e-12);
  EXPECT_LT(Rel(StudentTQuantile(0.975, 5), 2.5705818356363146), 1e-12);
  EXPECT_LT(Rel(StudentTQuantile(0.975, 30), 2.0422724563012373), 1e-12);
  // Symmetry and the ends.
  EXPECT_EQ(StudentTQuantile(0.25, 4), -StudentTQuantile(0.75, 4));  // 1 − 0.75 is exact
  EXPECT_EQ(StudentTQuantile(0.5, 4), 0.0);
  EXPECT_EQ(StudentTQuantile(0.0, 4), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(StudentTQuantile(1.0, 4), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(StudentTQuantile(1.2, 4)));
  EXPECT_TRUE(std::isnan(StudentTQuantile(0.5, 0.0)));
}

TEST(StudentT, QuantileMatchesClosedFormsAndInvertsTheCdf) {
  for (double p : {1e-12, 1e-6, 0.001, 0.025, 0.1, 0.3, 0.49, 0.51, 0.7, 0.9, 0.975, 0.999}) {
    // df 1: tan(π (p − ½)) = −cot(π p) (cot(π (1 − p)) for p > ½: no pole to amplify rounding);
    // df 2: (2p − 1) / √(2 p (1 − p)).
    const double q1 = p < 0.5 ? -1.0 / std::tan(kPi * p) : 1.0 / std::tan(kPi * (1.0 - p));
    EXPECT_LT(Rel(StudentTQuantile(p, 1), q1), 1e-12) << p;
    EXPECT_LT(Rel(StudentTQuantile(p, 2), (2 * p - 1) / std::sqrt(2 * p * (1 - p))), 1e-12) << p;
    for (double df : {1.0, 2.0, 3.0, 4.0, 5.0, 7.5, 30.0, 100.0, 1000.0}) {
      const double t = StudentTQuantile(p, df);
      const double back = StudentTCdf(t, df);
      EXPECT_LE(std::fabs(back - p), 1e-13 * std::min(p, 1 - p) + 2e-16) << p << " " << df;
    }
  }
}

// ---- Sign test and binomial --------------------------------------------------------------

TEST(SignTest, ExactValues) {
  EXPECT_EQ(SignTestP(5, 0), 0.0625);  // 2 · 2^-5
  EXPECT_EQ(SignTestP(0, 5), 0.0625);
  EXPECT_EQ(SignTestP(10, 0), 0.001953125);  // 2 · 2^-10
  EXPECT_EQ(SignTestP(1, 5), 0.21875);       // 2 · (1 + 6) / 64
  EXPECT_EQ(SignTestP(5, 1), 0.21875);
  EXPECT_EQ(SignTestP(3, 3), 1.0);       // min(1, 2 · 42/64)
  EXPECT_EQ(SignTestP(0, 0), 1.0);       // nothing to test
  EXPECT_EQ(SignTestP(4, 1), 0.375);     // 2 · (1 + 5) / 32
  EXPECT_EQ(SignTestP(8, 2), 0.109375);  // 2 · (1 + 10 + 45) / 1024
}

TEST(SignTest, BinomialHalfCdf) {
  EXPECT_EQ(BinomialHalfCdf(0, 5), 1.0 / 32.0);
  EXPECT_EQ(BinomialHalfCdf(2, 5), 0.5);
  EXPECT_EQ(BinomialHalfCdf(5, 5), 1.0);
  EXPECT_EQ(BinomialHalfCdf(-1, 5), 0.0);
  // The summed terms and the incomplete-beta form P(X <= k) = I_{1/2}(n − k, k + 1) agree.
  for (int k : {0, 10, 300, 480, 500, 520, 999}) {
    const double sum = BinomialHalfCdf(k, 1000);
    const double beta = RegularizedIncompleteBeta(1000.0 - k, k + 1.0, 0.5);
    EXPECT_LT(Rel(beta, sum), 1e-12) << k;
  }
  EXPECT_NEAR(BinomialHalfCdf(500, 1001), 0.5, 1e-14);    // symmetric
  EXPECT_NEAR(BinomialHalfCdf(5000, 10001), 0.5, 1e-13);  // rescaled sum
  EXPECT_EQ(BinomialHalfCdf(0, 2000), 0.0);               // 2^-2000 underflows
  EXPECT_EQ(BinomialHalfCdf(0, 1000), std::ldexp(1.0, -1000));
}

TEST(TTest, TwoSidedP) {
  // df 1: 2 P(T > 1) = 0.5; df 2: 2 P(T > 2) = 1 − 2/√6.
  EXPECT_NEAR(TwoSidedTP(1.0, 1), 0.5, 1e-15);
  EXPECT_NEAR(TwoSidedTP(-2.0, 2), 1.0 - 2.0 / std::sqrt(6.0), 1e-15);
  EXPECT_EQ(TwoSidedTP(0.0, 3), 1.0);
  EXPECT_EQ(TwoSidedTP(-std::numeric_limits<double>::infinity(), 3), 0.0);
  EXPECT_TRUE(std::isnan(TwoSidedTP(std::nan(""), 3)));
}

// ---- Bootstrap ---------------------------------------------------------------------------

TEST(Bootstrap, SplitMix64ReferenceOutputs) {
  EXPECT_EQ(SplitMix64(0).Next(), kFirstSplitMix0);  // 0xE220A8397B1DCDAF
  EXPECT_EQ(SplitMix64(1).Next(), kFirstSplitMix1);
  EXPECT_EQ(kFirstSplitMix0, 0xE220A8397B1DCDAFULL);
}

TEST(Bootstrap, UniformIndexIsInRangeAndCoversIt) {
  SplitMix64 rng(7);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 50000; ++i) ++counts[UniformIndex(rng, 5)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
  SplitMix64 one(7);
  EXPECT_EQ(UniformIndex(one, 1), 0u);
  // n = 2^63 + 1: r = 2^63 − 1, so about half the draws are rejected; still in range.
  SplitMix64 big(3);
  const uint64_t n = (uint64_t{1} << 63) + 1;
  for (int i = 0; i < 100; ++i) EXPECT_LT(UniformIndex(big, n), n);
}

TEST(Bootstrap, PercentileType7) {
  const std::vector<double> v = {1.0, 2.0, 4.0, 8.0};
  EXPECT_EQ(PercentileSorted(v, 0.0), 1.0);
  EXPECT_EQ(PercentileSorted(v, 1.0), 8.0);
  EXPECT_EQ(PercentileSorted(v, 0.5), 3.0);    // h = 1.5
  EXPECT_EQ(PercentileSorted(v, 0.25), 1.75);  // h = 0.75
  EXPECT_EQ(PercentileSorted({5.0}, 0.3), 5.0);
  EXPECT_TRUE(std::isnan(PercentileSorted({}, 0.5)));
  EXPECT_TRUE(std::isnan(PercentileSorted(v, 1.5)));
}

TEST(Bootstrap, FixedSeedIntervalsArePinnedBitForBit) {
  const PairedSummary s = Summarize(kPaperS, kBootSeed, kBootResamples, 0.95);
  EXPECT_EQ(s.bootstrap_ci_low, kBootLowS);
  EXPECT_EQ(s.bootstrap_ci_high, kBootHighS);
  const PairedSummary m = Summarize(kPaperM, kBootSeed, kBootResamples, 0.95);
  EXPECT_EQ(m.bootstrap_ci_low, kBootLowM);
  EXPECT_EQ(m.bootstrap_ci_high, kBootHighM);
  const PairedSummary small = Summarize(kSmall, 0, 10, 0.9);
  EXPECT_EQ(small.bootstrap_ci_low, kBootLowSmall);
  EXPECT_EQ(small.bootstrap_ci_high, kBootHighSmall);
  // The paper's Fig. 2 bars, read off at ±0.001: S ≈ [−0.033, −0.028], M ≈ [−0.035, −0.016].
  EXPECT_NEAR(s.bootstrap_ci_low, -0.033, 1e-3);
  EXPECT_NEAR(s.bootstrap_ci_high, -0.028, 1e-3);
  EXPECT_NEAR(m.bootstrap_ci_low, -0.035, 1e-3);
  EXPECT_NEAR(m.bootstrap_ci_high, -0.016, 1e-3);
}

TEST(Bootstrap, ReproducibleAndSeedDependent) {
  const std::vector<double> a = BootstrapMeans(kSmall, 99, 500);
  const std::vector<double> b = BootstrapMeans(kSmall, 99, 500);
  ASSERT_EQ(a.size(), 500u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, BootstrapMeans(kSmall, 100, 500));
  EXPECT_TRUE(BootstrapMeans({}, 1, 10).empty());
  EXPECT_TRUE(BootstrapMeans(kSmall, 1, 0).empty());
}

// ---- Summarize ---------------------------------------------------------------------------

TEST(Summarize, PaperScaleS) {
  const PairedSummary s = Summarize(kPaperS, kBootSeed);
  EXPECT_EQ(s.n, 5);
  EXPECT_EQ(s.df, 4);
  EXPECT_EQ(s.mean, kMeanS);
  EXPECT_NEAR(s.mean, -0.0302, 1e-15);
  // Python statistics.stdev and /√5 (see crosscheck.py): 0.0029495762407505265, ...
  EXPECT_LT(Rel(s.sd, 0.0029495762407505265), 1e-13);
  EXPECT_LT(Rel(s.se, 0.0013190905958272924), 1e-13);
  EXPECT_LT(Rel(s.t_critical, 2.7764451051977943), 1e-13);
  EXPECT_TRUE(s.t_ci_defined);
  EXPECT_LT(Rel(s.t_ci_low, -0.03386238262809713), 1e-12);
  EXPECT_LT(Rel(s.t_ci_high, -0.02653761737190287), 1e-12);
  EXPECT_EQ(s.wins, 5);
  EXPECT_EQ(s.losses, 0);
  EXPECT_EQ(s.ties, 0);
  EXPECT_EQ(s.sign_test_p, 0.0625);
  EXPECT_TRUE(s.t_test_defined);
  EXPECT_LT(Rel(s.t_statistic, -22.894560916082874), 1e-12);
  EXPECT_LT(Rel(s.t_test_p, kTTestPS), 1e-12);
  // 1 − exp(mean Δ) with mean Δ = −0.0302: 2.975%; mean of per-seed 1 − exp(Δ_i): 2.9745%.
  EXPECT_NEAR(s.ppl_reduction_of_mean, 0.029748536150584703, 1e-15);
  EXPECT_NEAR(s.ppl_reduction_mean_per_seed, 0.02974516213089513, 1e-15);
  EXPECT_EQ(s.ppl_change_of_mean, -s.ppl_reduction_of_mean);
  EXPECT_EQ(s.ppl_change_mean_per_seed, -s.ppl_reduction_mean_per_seed);
  EXPECT_EQ(s.bootstrap_resamples, 10000);
  EXPECT_EQ(s.bootstrap_seed, kBootSeed);
  EXPECT_TRUE(s.note.empty());
}

TEST(Summarize, PaperScaleMAndHeadlinePerplexity) {
  const PairedSummary m = Summarize(kPaperM, kBootSeed);
  EXPECT_NEAR(m.mean, -0.0246, 1e-15);
  EXPECT_EQ(m.wins, 5);
  EXPECT_LT(Rel(m.t_test_p, kTTestPM), 1e-12);
  EXPECT_LT(Rel(m.t_ci_low, -0.0394637086596713), 1e-12);
  EXPECT_LT(Rel(m.t_ci_high, -0.009736291340328704), 1e-12);
  // MODEL.md §7.1: the mean of per-seed reductions is 2.42%, 1 − exp(−mean) 2.43%.
  EXPECT_NEAR(m.ppl_reduction_mean_per_seed, 0.024244087135334748, 1e-15);
  EXPECT_NEAR(m.ppl_reduction_of_mean, 0.024299885971658663, 1e-15);
  // The paper's headline: 1 − exp(−0.0301) = 2.965% (one delta: both ways agree).
  const PairedSummary one = Summarize({-0.0301}, 1);
  EXPECT_NEAR(one.ppl_reduction_of_mean, 0.029651506152780782, 1e-15);
  EXPECT_NEAR(one.ppl_reduction_mean_per_seed, 0.029651506152780782, 1e-15);
}

TEST(Summarize, FewerThanTwoPairs) {
  const PairedSummary none = Summarize({}, 1);
  EXPECT_EQ(none.n, 0);
  EXPECT_TRUE(std::isnan(none.mean));
  EXPECT_TRUE(std::isnan(none.sd));
  EXPECT_FALSE(none.t_ci_defined);
  EXPECT_FALSE(none.bootstrap_ci_defined);
  EXPECT_FALSE(none.t_test_defined);
  EXPECT_TRUE(std::isnan(none.t_ci_low));
  EXPECT_TRUE(std::isnan(none.bootstrap_ci_high));
  EXPECT_TRUE(std::isnan(none.ppl_reduction_of_mean));
  EXPECT_EQ(none.sign_test_p, 1.0);
  EXPECT_FALSE(none.note.empty());

  const PairedSummary one = Summarize({-0.02}, 1);
  EXPECT_EQ(one.n, 1);
  EXPECT_EQ(one.mean, -0.02);
  EXPECT_TRUE(std::isnan(one.sd));
  EXPECT_TRUE(std::isnan(one.se));
  EXPECT_FALSE(one.t_ci_defined);
  EXPECT_TRUE(std::isnan(one.t_ci_low));
  EXPECT_FALSE(one.bootstrap_ci_defined);
  EXPECT_TRUE(std::isnan(one.bootstrap_ci_low));
  EXPECT_FALSE(one.t_test_defined);
  EXPECT_TRUE(std::isnan(one.t_test_p));
  EXPECT_EQ(one.wins, 1);
  EXPECT_EQ(one.sign_test_p, 1.0);  // min(1, 2 · 1/2)
  EXPECT_NE(one.note.find("n < 2"), std::string::npos);
}

TEST(Summarize, TiesAreCountedAndLeftOutOfTheSignTest) {
  const PairedSummary s = Summarize({-0.01, -0.02, 0.0, -0.03, 0.0, -0.04, -0.05}, 1);
  EXPECT_EQ(s.n, 7);
  EXPECT_EQ(s.wins, 5);
  EXPECT_EQ(s.ties, 2);
  EXPECT_EQ(s.losses, 0);
  EXPECT_EQ(s.sign_test_p, 0.0625);  // 5 of 5 non-zero pairs
  const PairedSummary mixed = Summarize({-0.01, 0.02, -0.03, -0.04, -0.05, -0.06}, 1);
  EXPECT_EQ(mixed.wins, 5);
  EXPECT_EQ(mixed.losses, 1);
  EXPECT_EQ(mixed.sign_test_p, 0.21875);
}

TEST(Summarize, ZeroVariance) {
  const PairedSummary same = Summarize({-0.01, -0.01, -0.01}, 1);
  EXPECT_EQ(same.sd, 0.0);
  EXPECT_TRUE(same.t_ci_defined);
  EXPECT_EQ(same.t_ci_low, -0.01);
  EXPECT_EQ(same.t_ci_high, -0.01);
  EXPECT_EQ(same.bootstrap_ci_low, -0.01);
  EXPECT_TRUE(same.t_test_defined);
  EXPECT_EQ(same.t_test_p, 0.0);
  const PairedSummary zeros = Summarize({0.0, 0.0}, 1);
  EXPECT_FALSE(zeros.t_test_defined);
  EXPECT_TRUE(std::isnan(zeros.t_test_p));
  EXPECT_EQ(zeros.ties, 2);
  EXPECT_EQ(zeros.sign_test_p, 1.0);
}

TEST(Summarize, LevelAndResamples) {
  const PairedSummary s90 = Summarize(kPaperS, kBootSeed, 10000, 0.90);
  const PairedSummary s95 = Summarize(kPaperS, kBootSeed, 10000, 0.95);
  EXPECT_LT(s95.t_ci_low, s90.t_ci_low);
  EXPECT_GT(s95.t_ci_high, s90.t_ci_high);
  EXPECT_LE(s95.bootstrap_ci_low, s90.bootstrap_ci_low);
  EXPECT_LT(Rel(s90.t_critical, 2.1318467863266504), 1e-13);  // t_{0.95, 4}
  const PairedSummary bad = Summarize(kPaperS, kBootSeed, 0, 0.95);
  EXPECT_TRUE(bad.t_ci_defined);
  EXPECT_FALSE(bad.bootstrap_ci_defined);
  const PairedSummary bad_level = Summarize(kPaperS, kBootSeed, 100, 1.0);
  EXPECT_FALSE(bad_level.t_ci_defined);
  EXPECT_FALSE(bad_level.bootstrap_ci_defined);
  EXPECT_TRUE(bad_level.t_test_defined);
}

// ---- Power, robustness, trend (every figure is also recomputed by crosscheck_power.py) -----

TEST(NoncentralT, ZeroNoncentralityIsTheCentralT) {
  for (double df : {1.0, 3.0, 10.0, 150.0}) {
    for (double t : {-5.0, -0.3, 0.0, 0.8, 2.5, 40.0}) {
      EXPECT_NEAR(NoncentralTCdf(t, df, 0.0), StudentTCdf(t, df), 2e-15) << t << " " << df;
    }
  }
}

TEST(NoncentralT, SymmetryLimitsAndLargeNoncentrality) {
  for (double ncp : {-3.0, 0.5, 7.0}) {
    EXPECT_NEAR(NoncentralTCdf(1.7, 6.0, ncp), 1.0 - NoncentralTCdf(-1.7, 6.0, -ncp), 1e-15);
  }
  EXPECT_EQ(NoncentralTCdf(0.0, 5.0, 1.0), NormalCdf(-1.0));  // P(Z + δ <= 0)
  EXPECT_EQ(NoncentralTCdf(std::numeric_limits<double>::infinity(), 5.0, 1.0), 1.0);
  EXPECT_TRUE(std::isnan(NoncentralTCdf(1.0, 0.0, 1.0)));
  // Large df: T' -> Z + δ.
  EXPECT_NEAR(NoncentralTCdf(2.5, 1e7, 1.0), NormalCdf(1.5), 1e-6);
  // Far from the Poisson mode at 0 (λ = 1250): the series starts at the mode; the CDF is
  // increasing in t and its median is near ncp.
  const double a = NoncentralTCdf(45.0, 200.0, 50.0);
  const double b = NoncentralTCdf(55.0, 200.0, 50.0);
  EXPECT_GT(a, 0.0);
  EXPECT_LT(a, 0.5);
  EXPECT_GT(b, 0.5);
  EXPECT_LT(b, 1.0);
}

TEST(Power, ReferenceValues) {
  // R: power.t.test(n = 10, delta = 1, sd = 1, type = "one.sample") = 0.8030962 (its default
  // strict = FALSE counts the upper rejection region only).
  const double c = StudentTQuantile(0.975, 9.0);
  EXPECT_NEAR(1.0 - NoncentralTCdf(c, 9.0, std::sqrt(10.0)), 0.8030962, 5e-8);
  EXPECT_NEAR(PairedTTestPower(1.0, 1.0, 10, 0.05), 0.8030969, 5e-7);  // both regions
  // pwr.t.test(d = 1 / 0.5, power = 0.8, type = "paired"): n = 9.94 / 33.37, so 10 and 34 seeds.
  EXPECT_EQ(SeedsNeeded(1.0, 1.0, 0.05), 10);
  EXPECT_EQ(SeedsNeeded(0.5, 1.0, 0.05), 34);
}

TEST(Power, PowerOfNoEffectIsAlphaAndTheMdeHasEightyPercent) {
  EXPECT_NEAR(PairedTTestPower(0.0, 0.01, 5, 0.05), 0.05, 1e-14);
  EXPECT_NEAR(PairedTTestPower(0.0, 0.01, 40, 0.1), 0.1, 1e-14);
  for (int64_t n : {2, 3, 5, 10, 100}) {
    const double mde = MinimumDetectableEffect(0.004, n, 0.05);
    EXPECT_NEAR(PairedTTestPower(mde, 0.004, n, 0.05), 0.8, 1e-10) << n;
    EXPECT_LT(PairedTTestPower(0.999 * mde, 0.004, n, 0.05), 0.8) << n;
  }
  // The noncentral t needs more than the normal approximation (z_{.975} + z_{.8}) sd / √n,
  // much more at small n, and agrees with it at large n.
  const double z = 1.959963984540054 + 0.8416212335729143;
  EXPECT_GT(MinimumDetectableEffect(1.0, 5, 0.05), 1.3 * z / std::sqrt(5.0));
  EXPECT_NEAR(MinimumDetectableEffect(1.0, 10000, 0.05) / (z / 100.0), 1.0, 2e-4);
}

TEST(Power, SmallAlphaAndTwoSeedsNeedAHugeNoncentrality) {
  // level 0.9999 with n = 2: ncp* ≈ 8159 (λ = ncp²/2 ≈ 3.3e7 Poisson terms around the mode);
  // the series is summed only where its weights matter, so this takes milliseconds.
  const double mde = MinimumDetectableEffect(1.0, 2, 1e-4);
  EXPECT_GT(mde, 5000.0);
  EXPECT_NEAR(PairedTTestPower(mde, 1.0, 2, 1e-4), 0.8, 1e-9);
  EXPECT_EQ(SeedsNeeded(0.01, 0.01, 1e-4), 30);
}

TEST(Power, EdgeCases) {
  EXPECT_TRUE(std::isnan(MinimumDetectableEffect(0.01, 1, 0.05)));  // n < 2
  EXPECT_TRUE(std::isnan(MinimumDetectableEffect(NAN, 5, 0.05)));   // no sd
  EXPECT_EQ(MinimumDetectableEffect(0.0, 5, 0.05), 0.0);            // sd = 0
  EXPECT_EQ(SeedsNeeded(0.01, 0.0, 0.05), 2);                       // sd = 0
  EXPECT_EQ(SeedsNeeded(0.0, 0.01, 0.05), 0);                       // no effect: undefined
  EXPECT_EQ(SeedsNeeded(0.01, NAN, 0.05), 0);
  EXPECT_EQ(SeedsNeeded(1e-6, 1.0, 0.05), kSeedsBeyondSearch);               // > 1,000,000
  EXPECT_EQ(SeedsNeeded(-0.02, 0.01, 0.05), SeedsNeeded(0.02, 0.01, 0.05));  // |Δ|
  // Seeds needed is the smallest n with power >= 0.8.
  const int64_t k = SeedsNeeded(0.01, 0.012, 0.05);
  EXPECT_GE(PairedTTestPower(0.01, 0.012, k, 0.05), 0.8);
  EXPECT_LT(PairedTTestPower(0.01, 0.012, k - 1, 0.05), 0.8);
  EXPECT_GT(k, 10);

  const PowerSummary none = SummarizePower(1, NAN, 0.95, 0.015);
  EXPECT_FALSE(none.defined);
  EXPECT_TRUE(std::isnan(none.mde));
  ASSERT_EQ(none.seeds_needed.size(), 4u);  // 0.01, 0.02, 0.03 and the target, all undefined
  EXPECT_EQ(none.seeds_needed[0].seeds, 0);
  EXPECT_TRUE(none.seeds_needed[3].user_given);
  EXPECT_EQ(none.seeds_needed[3].delta, 0.015);
  const PowerSummary some = SummarizePower(5, 0.0037, 0.9, std::nan(""));
  EXPECT_TRUE(some.defined);
  EXPECT_NEAR(some.alpha, 0.1, 1e-15);
  EXPECT_EQ(some.seeds_needed.size(), 3u);
  EXPECT_NEAR(PairedTTestPower(some.mde, 0.0037, 5, some.alpha), 0.8, 1e-10);
}

TEST(Robust, MedianMadAndOutliers) {
  EXPECT_TRUE(std::isnan(Median({})));
  EXPECT_EQ(Median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(Median({4.0, 1.0, 2.0, 3.0}), 2.5);
  const RobustSummary r = SummarizeRobust({1.0, 2.0, 3.0, 4.0, 100.0});
  EXPECT_EQ(r.median, 3.0);
  EXPECT_EQ(r.mad, 1.0);
  EXPECT_EQ(r.mad_scaled, kMadScale);
  ASSERT_EQ(r.outliers.size(), 1u);
  EXPECT_EQ(r.outliers[0], 4u);
  EXPECT_NEAR(r.robust_z[4], 97.0 / kMadScale, 1e-12);
  // MAD = 0: every Δ that differs from the median is an outlier; equal ones are not.
  const RobustSummary flat = SummarizeRobust({-0.01, -0.01, -0.01, -0.02});
  EXPECT_EQ(flat.mad_scaled, 0.0);
  ASSERT_EQ(flat.outliers.size(), 1u);
  EXPECT_EQ(flat.outliers[0], 3u);
  EXPECT_EQ(flat.robust_z[0], 0.0);
  EXPECT_TRUE(std::isinf(flat.robust_z[3]));
  // n = 1 and n = 2 never flag.
  EXPECT_TRUE(SummarizeRobust({0.5}).outliers.empty());
  EXPECT_TRUE(SummarizeRobust({0.5, -3.0}).outliers.empty());
}

TEST(Robust, WilcoxonExactValuesZerosAndTies) {
  const WilcoxonResult all = WilcoxonSignedRank(kPaperS);  // 5 of 5 negative
  EXPECT_EQ(all.n, 5);
  EXPECT_EQ(all.w_plus, 0.0);
  EXPECT_TRUE(all.exact);
  EXPECT_EQ(all.p, 0.0625);
  const WilcoxonResult none = WilcoxonSignedRank({0.0, 0.0});
  EXPECT_EQ(none.n, 0);
  EXPECT_EQ(none.zeros, 2);
  EXPECT_EQ(none.p, 1.0);
  // {1, −1, 2, 0}: the zero is dropped; |1| and |−1| share midrank 1.5; W+ = 1.5 + 3 = 4.5;
  // the 8 sign patterns give W+ in {0, 1.5, 1.5, 3, 3, 4.5, 4.5, 6}: P(W+ >= 4.5) = 3/8.
  const WilcoxonResult tied = WilcoxonSignedRank({1.0, -1.0, 2.0, 0.0});
  EXPECT_EQ(tied.n, 3);
  EXPECT_EQ(tied.zeros, 1);
  EXPECT_TRUE(tied.tied_ranks);
  EXPECT_EQ(tied.w_plus, 4.5);
  EXPECT_EQ(tied.p, 0.75);
  // 10 of 10 positive: p = 2 / 2^10.
  std::vector<double> ten;
  for (int i = 1; i <= 10; ++i) ten.push_back(0.001 * i);
  EXPECT_EQ(WilcoxonSignedRank(ten).p, 2.0 / 1024.0);
  // Exact up to 25 non-zero Δ, normal above.
  std::vector<double> many;
  for (int i = 1; i <= 26; ++i) many.push_back((i % 3 == 0 ? 1.0 : -1.0) * i);
  EXPECT_FALSE(WilcoxonSignedRank(many).exact);
  many.pop_back();
  EXPECT_TRUE(WilcoxonSignedRank(many).exact);
}

TEST(Trend, SlopeAndReading) {
  EXPECT_NEAR(OlsSlope({1.0, 2.0, 3.0}, {3.0, 5.0, 7.0}), 2.0, 1e-15);
  EXPECT_TRUE(std::isnan(OlsSlope({1.0}, {3.0})));
  EXPECT_TRUE(std::isnan(OlsSlope({2.0, 2.0}, {3.0, 4.0})));
  // A negative gap (the arm is better) with a positive slope: Δ moves toward 0.
  EXPECT_EQ(SummarizeSlopes({0.010, 0.012, 0.011}, 0.95, -0.03).reading, "the gap narrows");
  EXPECT_EQ(SummarizeSlopes({-0.010, -0.012, -0.011}, 0.95, -0.03).reading, "the gap widens");
  EXPECT_EQ(SummarizeSlopes({0.010, 0.012, 0.011}, 0.95, 0.03).reading, "the gap widens");
  EXPECT_EQ(SummarizeSlopes({0.01, -0.012, 0.002}, 0.95, -0.03).reading, "no evidence");
  const TrendSummary one = SummarizeSlopes({0.01}, 0.95, -0.03);
  EXPECT_EQ(one.reading, "no evidence");
  EXPECT_FALSE(one.ci_defined);
  EXPECT_EQ(SummarizeSlopes({}, 0.95, -0.03).n, 0);
  const TrendSummary flat = SummarizeSlopes({0.0, 0.0}, 0.95, -0.03);  // sd = 0, mean = 0
  EXPECT_EQ(flat.reading, "no evidence");
  EXPECT_FALSE(flat.t_test_defined);
  EXPECT_EQ(SummarizeSlopes({0.01, 0.02}, 0.95, 0.0).reading, "no evidence");  // no gap
}

}  // namespace
}  // namespace rdattn::stats
