#include "common/cli.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rdattn::cli {
namespace {

std::vector<const char*> Argv(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  argv.reserve(args.size());
  for (const std::string& a : args) argv.push_back(a.c_str());
  return argv;
}

std::vector<std::string> Spell(const std::vector<std::string>& args) {
  const std::vector<const char*> argv = Argv(args);
  return DashSpelling(static_cast<int>(argv.size()), argv.data());
}

TEST(CommonCliTest, UnderscoresInFlagNamesBecomeDashes) {
  EXPECT_EQ(
      Spell({"prog", "--metrics_listen=127.0.0.1:0", "--lease_seconds", "30", "--db", "a_b.db"}),
      (std::vector<std::string>{"prog", "--metrics-listen=127.0.0.1:0", "--lease-seconds", "30",
                                "--db", "a_b.db"}));
}

TEST(CommonCliTest, ValuesProgramNameAndArgumentsAfterDoubleDashAreKept) {
  EXPECT_EQ(Spell({"my_prog", "--tls_cert=/a_b/c_d.pem", "-x_y", "--", "--not_a_flag"}),
            (std::vector<std::string>{"my_prog", "--tls-cert=/a_b/c_d.pem", "-x_y", "--",
                                      "--not_a_flag"}));
}

struct Parsed {
  int code = 0;
  int seconds = 60;
  bool once = false;
  std::string err;
  std::string out;
};

Parsed ParseArgs(const std::vector<std::string>& args) {
  Parsed p;
  CLI::App app("test app", "rdattn-test");
  Setup(app);
  app.add_option("--lease-seconds", p.seconds, "lease lifetime");
  app.add_flag("--once", p.once, "one job");
  const std::vector<const char*> argv = Argv(args);
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  p.code = Parse(app, static_cast<int>(argv.size()), argv.data(), 2);
  p.out = testing::internal::GetCapturedStdout();
  p.err = testing::internal::GetCapturedStderr();
  return p;
}

TEST(CommonCliTest, BothSpellingsParse) {
  Parsed p = ParseArgs({"rdattn-test", "--lease-seconds", "5", "--once=true"});
  EXPECT_EQ(p.code, -1);
  EXPECT_EQ(p.seconds, 5);
  EXPECT_TRUE(p.once);
  p = ParseArgs({"rdattn-test", "--lease_seconds=7", "--lease-seconds", "9"});
  EXPECT_EQ(p.code, -1);
  EXPECT_EQ(p.seconds, 9);  // the last one wins
  EXPECT_FALSE(p.once);
}

TEST(CommonCliTest, HelpListsFlagsWithDefaultsAndExitsZero) {
  const Parsed p = ParseArgs({"rdattn-test", "--help"});
  EXPECT_EQ(p.code, 0);
  EXPECT_NE(p.out.find("--lease-seconds"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("=60"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("lease lifetime"), std::string::npos) << p.out;
}

TEST(CommonCliTest, UsageErrorsNameTheFlagAndExitWithTheUsageCode) {
  Parsed p = ParseArgs({"rdattn-test", "--lease-seconds", "soon"});
  EXPECT_EQ(p.code, 2);
  EXPECT_NE(p.err.find("rdattn-test: "), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("--lease-seconds"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("(see --help)"), std::string::npos) << p.err;
  p = ParseArgs({"rdattn-test", "--no-such-flag"});
  EXPECT_EQ(p.code, 2);
  EXPECT_NE(p.err.find("--no-such-flag"), std::string::npos) << p.err;
  p = ParseArgs({"rdattn-test", "stray"});
  EXPECT_EQ(p.code, 2);
  EXPECT_NE(p.err.find("stray"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace rdattn::cli
