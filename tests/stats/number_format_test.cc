// common/number_format.h: the one rule per output for report numbers (docs/report.md "Files").
#include "common/number_format.h"

#include <gtest/gtest.h>

#include <limits>

namespace rdattn::numfmt {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(NumberFormat, PValueHasOneRuleForReportMdAndTheCli) {
  EXPECT_EQ(PValue(1.0, "n/a"), "1.0000");
  EXPECT_EQ(PValue(0.03125, "n/a"), "0.0312");
  EXPECT_EQ(PValue(1e-4, "n/a"), "0.0001");
  EXPECT_EQ(PValue(9.99e-5, "n/a"), "9.99e-05");
  EXPECT_EQ(PValue(3.2e-7, "-"), "3.20e-07");
  EXPECT_EQ(PValue(0.0, "-"), "0.00e+00");
  EXPECT_EQ(PValue(kNaN, "n/a"), "n/a");
  EXPECT_EQ(PValue(kNaN, "-"), "-");
  EXPECT_EQ(PValue(kInf, "-"), "-");
}

TEST(NumberFormat, FixedSignedAndGeneral) {
  EXPECT_EQ(Fixed(0.123456, 4, "n/a"), "0.1235");
  EXPECT_EQ(Fixed(kNaN, 4, "n/a"), "n/a");
  EXPECT_EQ(Fixed(-kInf, 4, "n/a"), "-inf");
  EXPECT_EQ(Signed(0.0123, 4, "n/a"), "+0.0123");
  EXPECT_EQ(Signed(-0.03, 4, "n/a"), "-0.0300");
  EXPECT_EQ(Signed(kNaN, 4, "-"), "-");
  EXPECT_EQ(General(0.05, "%.4g", "n/a"), "0.05");
  EXPECT_EQ(General(kInf, "%.3f", "n/a"), "inf");
  EXPECT_EQ(General(kNaN, "%.3f", "n/a"), "n/a");
}

TEST(NumberFormat, ShortestReadsBackAndLeavesNaNEmpty) {
  for (double v : {0.1, 1e-7, 370081792.0, -0.017712632815043133, 2.2250738585072014e-308}) {
    EXPECT_EQ(std::stod(Shortest(v)), v) << Shortest(v);
  }
  EXPECT_EQ(Shortest(0.1), "0.1");
  EXPECT_EQ(Shortest(370081792.0), "370081792");
  EXPECT_EQ(Shortest(kNaN), "");
  EXPECT_EQ(Shortest(kInf), "inf");
  EXPECT_EQ(Shortest(-kInf), "-inf");
}

}  // namespace
}  // namespace rdattn::numfmt
