// ParseReportOptions (coordinator/report_options.h): a GetReport request's fields -> ReportOptions,
// every out-of-range field one field error with its path, in the request's field order.
#include "coordinator/report_options.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace rdattn::coordinator {
namespace {

pb::GetReportRequest Valid() {
  pb::GetReportRequest req;
  req.set_sweep_id("sw-1");
  return req;
}

std::vector<std::string> Texts(const FieldErrorsOr<ReportOptions>& r) {
  std::vector<std::string> out;
  for (const FieldError& e : r.errors()) out.push_back(e.Text());
  return out;
}

TEST(ParseReportOptionsTest, DefaultsForZeroFields) {
  FieldErrorsOr<ReportOptions> r = ParseReportOptions(Valid());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->confidence_level, kDefaultConfidenceLevel);
  EXPECT_EQ(r->bootstrap_resamples, kDefaultBootstrapResamples);
  EXPECT_EQ(r->target_delta, 0.0);
  EXPECT_TRUE(r->formats.empty());
  EXPECT_FALSE(r->omit_files);
  EXPECT_EQ(r->reference_arm, "");
}

TEST(ParseReportOptionsTest, ValuesPassThrough) {
  pb::GetReportRequest req = Valid();
  req.set_reference_arm("rd");
  req.set_confidence_level(0.9);
  req.set_bootstrap_resamples(kMaxBootstrapResamples);
  req.set_target_delta_nll(0.015);
  req.add_formats("csv");
  req.add_formats("json");
  req.add_formats("csv");
  req.set_omit_files(true);
  FieldErrorsOr<ReportOptions> r = ParseReportOptions(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reference_arm, "rd");
  EXPECT_EQ(r->confidence_level, 0.9);
  EXPECT_EQ(r->bootstrap_resamples, kMaxBootstrapResamples);
  EXPECT_EQ(r->target_delta, 0.015);
  EXPECT_EQ(r->formats, (std::set<std::string>{"csv", "json"}));
  EXPECT_TRUE(r->omit_files);
}

// One bad field: one error, and the status text is exactly "path: reason".
TEST(ParseReportOptionsTest, EachBadFieldIsOneFieldError) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  struct Case {
    std::string what;
    void (*mutate)(pb::GetReportRequest&);
    std::string error;
  };
  const std::string level = "confidence_level: must be in (0, 1), or 0 for 0.95";
  const std::string resamples = "bootstrap_resamples: must be in [1, 1000000], or 0 for 10000";
  const std::string delta = "target_delta_nll: must be a finite number of nats >= 0 (0: none)";
  const std::vector<Case> cases = {
      {"no sweep", [](pb::GetReportRequest& r) { r.clear_sweep_id(); }, "sweep_id: required"},
      {"level 1", [](pb::GetReportRequest& r) { r.set_confidence_level(1.0); }, level},
      {"level < 0", [](pb::GetReportRequest& r) { r.set_confidence_level(-0.1); }, level},
      {"level NaN", [](pb::GetReportRequest& r) { r.set_confidence_level(kNaN); }, level},
      {"resamples < 0", [](pb::GetReportRequest& r) { r.set_bootstrap_resamples(-1); }, resamples},
      {"resamples > max",
       [](pb::GetReportRequest& r) { r.set_bootstrap_resamples(kMaxBootstrapResamples + 1); },
       resamples},
      {"delta < 0", [](pb::GetReportRequest& r) { r.set_target_delta_nll(-1e-9); }, delta},
      {"delta inf", [](pb::GetReportRequest& r) { r.set_target_delta_nll(kInf); }, delta},
      {"delta NaN", [](pb::GetReportRequest& r) { r.set_target_delta_nll(kNaN); }, delta},
      {"format",
       [](pb::GetReportRequest& r) {
         r.add_formats("md");
         r.add_formats("pdf");
       },
       "formats[1]: expected md, csv or json, got 'pdf'"},
  };
  for (const Case& c : cases) {
    pb::GetReportRequest req = Valid();
    c.mutate(req);
    FieldErrorsOr<ReportOptions> r = ParseReportOptions(req);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(Texts(r), std::vector<std::string>{c.error}) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_EQ(r.status().message(), c.error) << c.what;
  }
}

TEST(ParseReportOptionsTest, EveryBadFieldReportedInFieldOrder) {
  pb::GetReportRequest req;  // no sweep_id
  req.set_confidence_level(2.0);
  req.set_bootstrap_resamples(-5);
  req.set_target_delta_nll(-1.0);
  req.add_formats("html");
  req.add_formats("md");
  req.add_formats("");
  FieldErrorsOr<ReportOptions> r = ParseReportOptions(req);
  ASSERT_FALSE(r.ok());
  std::vector<std::string> paths;
  for (const FieldError& e : r.errors()) paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"sweep_id", "confidence_level", "bootstrap_resamples",
                                             "target_delta_nll", "formats[0]", "formats[2]"}));
  EXPECT_EQ(r.errors().back().reason, "expected md, csv or json, got ''");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rdattn::coordinator
