#include "common/cli.h"

#include <gtest/gtest.h>

#include <sstream>
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

TEST(CommonCliTest, DefaultSubcommandIsInsertedBeforeFlagsOnly) {
  auto with_default = [](std::vector<std::string> args) {
    DefaultSubcommand("train", &args);
    return args;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(with_default({"p"}), (V{"p", "train"}));
  EXPECT_EQ(with_default({"p", "--job", "j"}), (V{"p", "train", "--job", "j"}));
  EXPECT_EQ(with_default({"p", "eval", "--shard", "s"}), (V{"p", "eval", "--shard", "s"}));
  EXPECT_EQ(with_default({"p", "--help"}), (V{"p", "--help"}));  // the binary's own help
  EXPECT_EQ(with_default({"p", "-h"}), (V{"p", "-h"}));
  EXPECT_EQ(with_default({"p", "--job", "j", "--help"}), (V{"p", "train", "--job", "j", "--help"}));
}

// An app with two subcommands, as rdattn-train and the client build theirs.
struct SubParsed {
  int code = 0;
  std::string command;
  std::string job;
  int64_t windows = 8;
  std::vector<std::string> shards;
  std::string out;
  std::string err;
};

SubParsed ParseSub(const std::vector<std::string>& args) {
  SubParsed p;
  CLI::App app("test app", "rdattn-test");
  Setup(app);
  app.require_subcommand(1);
  CLI::App* train = app.add_subcommand("train", "train a model");
  train->add_option("--job", p.job, "the job file")->required();
  CLI::App* eval = app.add_subcommand("eval", "evaluate");
  eval->add_option("--windows", p.windows, "windows to read")->check(NonNegativeInteger());
  eval->add_option("--shard", p.shards, "shards")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  std::ostringstream out, err;
  p.code = Parse(app, args, 2, out, err);
  if (p.code < 0) p.command = app.get_subcommands().front()->get_name();
  p.out = out.str();
  p.err = err.str();
  return p;
}

TEST(CommonCliTest, SubcommandsParseTheirOwnFlags) {
  SubParsed p = ParseSub({"rdattn-test", "eval", "--windows=3", "--shard", "a", "b", "--shard=c"});
  EXPECT_EQ(p.code, -1) << p.err;
  EXPECT_EQ(p.command, "eval");
  EXPECT_EQ(p.windows, 3);
  EXPECT_EQ(p.shards, (std::vector<std::string>{"a", "b", "c"}));  // repeated and listed
  p = ParseSub({"rdattn-test", "train", "--job", "j.json"});
  EXPECT_EQ(p.code, -1) << p.err;
  EXPECT_EQ(p.job, "j.json");
  // A flag of another subcommand is not this one's.
  p = ParseSub({"rdattn-test", "train", "--job", "j.json", "--windows", "3"});
  EXPECT_EQ(p.code, 2);
  EXPECT_EQ(p.err,
            "rdattn-test: The following arguments were not expected: 3 --windows (see --help)\n");
}

TEST(CommonCliTest, SubcommandUsageErrorsAreOneLine) {
  EXPECT_EQ(ParseSub({"rdattn-test", "frob"}).err,
            "rdattn-test: unknown command 'frob' (see --help)\n");
  EXPECT_EQ(ParseSub({"rdattn-test", "train"}).err,
            "rdattn-test: --job is required (see --help)\n");
  EXPECT_EQ(ParseSub({"rdattn-test", "eval", "--windows", "-1"}).err,
            "rdattn-test: --windows: '-1' is not a non-negative integer (see --help)\n");
  EXPECT_EQ(ParseSub({"rdattn-test", "eval", "--windows", "2x"}).err,
            "rdattn-test: --windows: '2x' is not a non-negative integer (see --help)\n");
  EXPECT_EQ(ParseSub({"rdattn-test"}).code, 2);
}

TEST(CommonCliTest, HelpOfTheAppAndOfEachSubcommand) {
  SubParsed p = ParseSub({"rdattn-test", "--help"});
  EXPECT_EQ(p.code, 0);
  EXPECT_NE(p.out.find("  train "), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("  eval "), std::string::npos) << p.out;
  p = ParseSub({"rdattn-test", "eval", "--help"});
  EXPECT_EQ(p.code, 0);
  EXPECT_NE(p.out.find("Usage: rdattn-test eval"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("--windows INT:NONNEGATIVE=8"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("windows to read"), std::string::npos) << p.out;
  EXPECT_EQ(p.out.find("--job"), std::string::npos) << p.out;
}

TEST(CommonCliTest, UsageWritesOneLine) {
  CLI::App app("test app", "rdattn-test");
  std::ostringstream err;
  EXPECT_EQ(Usage(app, "--x: bad", 7, err), 7);
  EXPECT_EQ(err.str(), "rdattn-test: --x: bad (see --help)\n");
}

TEST(CommonCliTest, NumberValidatorsNameTheValue) {
  const CLI::Validator positive = PositiveInteger(), non_negative = NonNegativeNumber();
  EXPECT_EQ(positive("3"), "");
  for (const char* bad : {"0", "-2", "x", "2.5", "", "99999999999999999999"}) {
    std::string text = bad;
    EXPECT_EQ(positive(text), "'" + std::string(bad) + "' is not a positive integer") << bad;
  }
  for (const char* good : {"0", "0.05", "3"}) {
    std::string text = good;
    EXPECT_EQ(non_negative(text), "") << good;
  }
  for (const char* bad : {"-1", "nan", "inf", "1e999", "x", ""}) {
    std::string text = bad;
    EXPECT_EQ(non_negative(text), "'" + std::string(bad) + "' is not a number >= 0") << bad;
  }
}

TEST(CommonCliTest, NumberWhereOneOfAndChecksAfterParse) {
  const CLI::Validator positive = NumberWhere([](double v) { return v > 0; }, "must be > 0");
  for (const char* good : {"1", "0.5", "86400"}) {
    std::string text = good;
    EXPECT_EQ(positive(text), "") << good;
  }
  for (const char* bad : {"0", "-1", "x", "", "nan", "inf", "1e999"}) {
    std::string text = bad;
    EXPECT_EQ(positive(text), "must be > 0") << bad;
  }
  const CLI::Validator sync = OneOf({"full", "normal"});
  std::string full = "full", other = "fast";
  EXPECT_EQ(sync(full), "");
  EXPECT_EQ(sync(other), "expected full or normal, got 'fast'");
  std::string three = "c";
  EXPECT_EQ(OneOf({"a", "b", "d"})(three), "expected a, b or d, got 'c'");

  // On the command line: "--flag: rule" from a validator; a check's message as it is, after the
  // required flags and only when the parse got that far.
  int lease = 60;
  double base = 2, cap = 300, need = 0;
  CLI::App app("test", "prog");
  rdattn::cli::Setup(app);
  app.add_option("--lease", lease)->check(positive);
  app.add_option("--base", base);
  app.add_option("--cap", cap);
  app.add_option("--need", need)->required();
  CheckAfterParse(&app, [&] { return cap >= base ? "" : "--cap: must be >= --base"; });
  auto run = [&app](std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    std::ostringstream out, err;
    const int code = Parse(app, args, 2, out, err);
    return std::make_pair(code, err.str());
  };
  EXPECT_EQ(run({"--lease", "0", "--need", "1"}).second,
            "prog: --lease: must be > 0 (see --help)\n");
  EXPECT_EQ(run({"--cap", "1", "--base", "3"}).second, "prog: --need is required (see --help)\n");
  EXPECT_EQ(run({"--cap", "1", "--base", "3", "--need", "0"}).second,
            "prog: --cap: must be >= --base (see --help)\n");
  const auto fine = run({"--cap", "5", "--base", "3", "--need", "4"});
  EXPECT_EQ(fine.first, -1) << fine.second;
}

}  // namespace
}  // namespace rdattn::cli
