// The client's pieces that need no server: argv parsing, connection settings (flags, env,
// config file), SHA-256 and the default request id, the text formatting, the watch printer
// (throttling, ETA, end of stream), and `rdattn validate` / `help` / usage errors run in-process.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "client/commands.h"
#include "client/format.h"
#include "client/options.h"
#include "client/settings.h"
#include "client/watch_printer.h"
#include "common/sha256.h"
#include "tests/common/fake_env.h"

namespace rdattn::client {
namespace {

using test::FakeEnv;
using test::WriteTemp;

struct CliResult {
  int code = 0;
  std::string out;
  std::string err;
};

CliResult Cli(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  args.insert(args.begin(), "rdattn");
  std::ostringstream out, err;
  CliResult r;
  r.code = RunCli(args, out, err, FakeEnv(std::move(env)));
  r.out = out.str();
  r.err = err.str();
  return r;
}

struct FlagSpecForTest {
  std::string flag;
  std::string text;
};

// --- argv ----------------------------------------------------------------------------------

TEST(CliArgsTest, ParsesFlagsAndPositionals) {
  // A repeated value flag keeps every value (--state running --state=bogus: the second is read).
  const CliResult r = Cli({"list", "--state", "running", "--all", "--state=bogus", "--coordinator",
                           "unix:/nonexistent", "--", "--not-a-flag"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("The following argument was not expected: --not-a-flag"), std::string::npos)
      << r.err;
  const CliResult s = Cli({"--coordinator", "unix:/nonexistent", "list", "--state", "running",
                           "--all", "--state=bogus"});
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("--state: unknown state 'bogus'"), std::string::npos) << s.err;
}

TEST(CliArgsTest, RejectsBadFlags) {
  EXPECT_EQ(Cli({"list", "--nope"}).err,
            "rdattn: The following argument was not expected: --nope (see --help)\n");
  EXPECT_EQ(Cli({"list", "--state"}).err,
            "rdattn: --state: 1 required TEXT missing (see --help)\n");
  EXPECT_EQ(Cli({"get", "-x"}).code, 2);
  // A switch is on with no value or =true, off with =false: validate lists the jobs or not.
  const std::string sweep = std::string(RDATTN_EXAMPLES_DIR) + "/cpu-demo.yaml";
  const CliResult on = Cli({"validate", sweep, "--jobs=true"});
  const CliResult off = Cli({"validate", sweep, "--jobs=false"});
  EXPECT_EQ(on.code, 0) << on.err;
  EXPECT_EQ(off.code, 0) << off.err;
  EXPECT_EQ(on.out, Cli({"validate", sweep, "--jobs"}).out);
  EXPECT_EQ(off.out, Cli({"validate", sweep}).out);
  EXPECT_NE(on.out, off.out);
  // Each flag's value is checked by its validator, naming the flag (exit 2, before any call).
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"list", "--page-size", "abc"},
        {"list", "--page-size", "0"},
        {"report", "x", "--confidence", "2"},
        {"report", "x", "--resamples", "1000001"},
        {"watch", "x", "--from-seq", "-1"},
        {"list", "--timeout", "-1"}}) {
    const CliResult r = Cli(bad);
    EXPECT_EQ(r.code, 2) << bad[1];
    EXPECT_EQ(r.err.rfind("rdattn: " + bad[bad.size() - 2] + ": ", 0), 0u) << r.err;
  }
}

// --- settings ------------------------------------------------------------------------------

// The ConnectionOptions RunCli would pass for these connection flags ("--tls" a switch, the
// others "--name value").
ConnectionOptions MustParseArgs(const std::vector<std::string>& argv) {
  ConnectionOptions o;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& name = argv[i];
    if (name == "--tls") {
      o.flags.tls = true;
      continue;
    }
    EXPECT_LT(i + 1, argv.size()) << name;
    const std::string value = i + 1 < argv.size() ? argv[++i] : "";
    if (name == "--coordinator") o.flags.coordinator = value;
    if (name == "--token") o.flags.token = value;
    if (name == "--token-file") o.flags.token_file = value;
    if (name == "--ca-cert") o.flags.ca_cert = value;
    if (name == "--timeout") o.timeout_seconds = std::stod(value);
    if (name == "--config") o.config = value;
  }
  return o;
}

TEST(SettingsTest, DefaultsWithNothingSet) {
  auto c = ResolveConnection(MustParseArgs({}), FakeEnv({{"HOME", "/nonexistent-home"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->address, "127.0.0.1:50051");
  EXPECT_EQ(c->address_source, "default");
  EXPECT_TRUE(c->token.empty());
  EXPECT_EQ(c->token_source, "none");
  EXPECT_EQ(c->timeout, std::chrono::seconds(30));
  EXPECT_FALSE(c->tls);
}

TEST(SettingsTest, FlagBeatsEnvBeatsConfigFile) {
  const std::string token_file = WriteTemp("token.txt", "  file-token\n");
  const std::string config =
      WriteTemp("config.yaml", "coordinator: cfg-host:1\ntoken: cfg-token\ntimeout_seconds: 5\n");
  const auto env = FakeEnv({{"RDATTN_CONFIG", config}});

  auto from_config = ResolveConnection(MustParseArgs({}), env);
  ASSERT_TRUE(from_config.ok()) << from_config.status().ToString();
  EXPECT_EQ(from_config->address, "cfg-host:1");
  EXPECT_EQ(from_config->token, "cfg-token");
  EXPECT_EQ(from_config->timeout, std::chrono::seconds(5));

  auto from_env =
      ResolveConnection(MustParseArgs({}), FakeEnv({{"RDATTN_CONFIG", config},
                                                    {"RDATTN_COORDINATOR", "env-host:2"},
                                                    {"RDATTN_TOKEN", "env-token"}}));
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(from_env->address, "env-host:2");
  EXPECT_EQ(from_env->token, "env-token");
  EXPECT_EQ(from_env->token_source, "RDATTN_TOKEN");

  auto from_flags =
      ResolveConnection(MustParseArgs({"--coordinator", "flag-host:3", "--token-file", token_file,
                                       "--timeout", "0.5"}),
                        FakeEnv({{"RDATTN_CONFIG", config}, {"RDATTN_TOKEN", "env-token"}}));
  ASSERT_TRUE(from_flags.ok()) << from_flags.status().ToString();
  EXPECT_EQ(from_flags->address, "flag-host:3");
  EXPECT_EQ(from_flags->token, "file-token");  // trimmed
  EXPECT_EQ(from_flags->token_source, "--token-file");
  EXPECT_EQ(from_flags->timeout, std::chrono::milliseconds(500));
}

TEST(SettingsTest, ConfigFileUnderHome) {
  const std::string home = ::testing::TempDir() + "/home";
  std::remove((home + "/.config/rdattn/config.yaml").c_str());
  ASSERT_EQ(std::system(("mkdir -p '" + home + "/.config/rdattn'").c_str()), 0);
  std::ofstream(home + "/.config/rdattn/config.yaml") << "coordinator: home-host:4\n";
  auto c = ResolveConnection(MustParseArgs({}), FakeEnv({{"HOME", home}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->address, "home-host:4");
}

TEST(SettingsTest, ErrorsNameTheirSource) {
  const std::string bad = WriteTemp("bad-config.yaml", "coordinater: x\n");
  auto unknown = ResolveConnection(MustParseArgs({"--config", bad}), FakeEnv({}));
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("coordinater: unknown key"), std::string::npos)
      << unknown.status().message();

  auto missing = ResolveConnection(MustParseArgs({"--config", "/nonexistent/c.yaml"}), FakeEnv({}));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  auto no_token_file =
      ResolveConnection(MustParseArgs({"--token-file", "/nonexistent/t"}), FakeEnv({}));
  EXPECT_NE(no_token_file.status().message().find("--token-file"), std::string::npos);

  auto bad_token = ResolveConnection(MustParseArgs({"--token", "a\x01b"}), FakeEnv({}));
  EXPECT_EQ(bad_token.status().code(), StatusCode::kInvalidArgument);

  // --timeout's own check is its validator (CliArgsTest); the config file's is here.
  const std::string bad_timeout_config = WriteTemp("bad-timeout.yaml", "timeout_seconds: -1\n");
  auto bad_timeout =
      ResolveConnection(MustParseArgs({"--config", bad_timeout_config}), FakeEnv({}));
  EXPECT_NE(bad_timeout.status().message().find("timeout_seconds"), std::string::npos);
}

// --- The request id (SHA-256 itself is tested in tests/data/sha256_test.cc)
// --------------------------------------------------------------

TEST(RequestIdTest, SameFileAndOwnerSameId) {
  const std::string a = DefaultRequestId("name: x\n", "", "tok");
  EXPECT_EQ(a, DefaultRequestId("name: x\n", "", "tok"));
  EXPECT_EQ(a.rfind("sha256:", 0), 0u);
  EXPECT_EQ(a.size(), 7u + 64u);
  EXPECT_NE(a, DefaultRequestId("name: y\n", "", "tok"));
  EXPECT_NE(a, DefaultRequestId("name: x\n", "", "other-token"));
  EXPECT_NE(a, DefaultRequestId("name: x\n", "alice", "tok"));
  EXPECT_EQ(DefaultRequestId("f", "alice", "t1"), DefaultRequestId("f", "alice", "t2"));
}

// --- formatting ----------------------------------------------------------------------------

TEST(FormatTest, HumanNumbers) {
  EXPECT_EQ(HumanTokens(4096), "4096");
  EXPECT_EQ(HumanTokens(491520), "491.5k");
  EXPECT_EQ(HumanTokens(1000000), "1.00M");
  EXPECT_EQ(HumanTokens(500170752), "500.2M");
  EXPECT_EQ(HumanTokens(2000158720), "2.00B");
  EXPECT_EQ(HumanRate(2100), "2.10k");
  EXPECT_EQ(HumanRate(512.25), "512.2");
  EXPECT_EQ(HumanDuration(9), "9s");
  EXPECT_EQ(HumanDuration(252), "4m12s");
  EXPECT_EQ(HumanDuration(11040), "3h04m");
  EXPECT_EQ(HumanDuration(90000), "1d01h");
  EXPECT_EQ(HumanDuration(-1), "?");
  EXPECT_EQ(Fixed(1.23456, 3), "1.235");
  google::protobuf::Timestamp t;
  EXPECT_EQ(FormatTime(t), "-");
  t.set_seconds(1714564984);
  EXPECT_EQ(FormatTime(t), "2024-05-01T12:03:04Z");
}

TEST(FormatTest, StatesAndEta) {
  EXPECT_EQ(JobStateName(pb::JOB_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(SweepStateName(pb::SWEEP_STATE_SUCCEEDED), "SUCCEEDED");
  EXPECT_EQ(ParseSweepState("running"), pb::SWEEP_STATE_RUNNING);
  EXPECT_EQ(ParseSweepState("SWEEP_STATE_FAILED"), pb::SWEEP_STATE_FAILED);
  EXPECT_FALSE(ParseSweepState("unspecified").has_value());
  EXPECT_FALSE(ParseSweepState("nope").has_value());
  EXPECT_TRUE(IsTerminal(pb::JOB_STATE_CANCELLED));
  EXPECT_FALSE(IsTerminal(pb::SWEEP_STATE_RUNNING));

  pb::JobSpec job;
  job.mutable_run()->mutable_schedule()->set_total_tokens(1000000);
  EXPECT_EQ(TargetTokens(job), 1000000);
  job.mutable_run()->mutable_schedule()->set_stop_at_tokens(250000);
  EXPECT_EQ(TargetTokens(job), 250000);
  EXPECT_DOUBLE_EQ(*EtaSeconds(50000, 250000, 1000.0), 200.0);
  EXPECT_DOUBLE_EQ(*EtaSeconds(300000, 250000, 1000.0), 0.0);
  EXPECT_FALSE(EtaSeconds(50000, 250000, 0).has_value());
  EXPECT_FALSE(EtaSeconds(50000, 0, 10).has_value());
  EXPECT_EQ(ShortJobId("sw1/tiny/s1/rd", "sw1"), "tiny/s1/rd");
  EXPECT_EQ(ShortJobId("other/tiny/s1/rd", "sw1"), "other/tiny/s1/rd");
}

TEST(FormatTest, TableAlignsColumns) {
  Table t({"NAME", ">N"});
  t.AddRow({"a", "1"});
  t.AddRow({"long-name", "100"});
  EXPECT_EQ(t.Render(),
            "NAME         N\n"
            "a            1\n"
            "long-name  100\n");
}

pb::SweepStatus TwoJobSweep() {
  pb::SweepStatus s;
  s.set_sweep_id("sw1");
  s.mutable_spec()->set_name("demo");
  s.set_state(pb::SWEEP_STATE_RUNNING);
  s.mutable_job_counts()->set_total(2);
  s.mutable_job_counts()->set_running(1);
  s.mutable_job_counts()->set_pending(1);
  for (const char* arm : {"block", "rd"}) {
    pb::JobStatus* j = s.add_jobs();
    j->mutable_job()->set_job_id(std::string("sw1/tiny/s1/") + arm);
    j->mutable_job()->mutable_run()->mutable_schedule()->set_total_tokens(1000000);
    j->set_state(std::string(arm) == "block" ? pb::JOB_STATE_RUNNING : pb::JOB_STATE_PENDING);
  }
  pb::JobStatus* running = s.mutable_jobs(0);
  running->set_attempts(1);
  running->set_step(120);
  running->set_tokens(491520);
  running->set_last_train_loss(2.34567);
  running->set_last_val_nll(2.5);
  running->set_tokens_per_second(2100);
  running->set_worker_id("w-1");
  return s;
}

TEST(FormatTest, SweepTable) {
  const std::string text = FormatSweep(TwoJobSweep());
  EXPECT_NE(text.find("sweep    sw1  (demo)"), std::string::npos) << text;
  EXPECT_NE(text.find("state    RUNNING"), std::string::npos);
  EXPECT_NE(text.find("2 total: 1 pending, 0 leased, 1 running"), std::string::npos);
  EXPECT_NE(text.find("tiny/s1/block  RUNNING"), std::string::npos) << text;
  EXPECT_NE(text.find("491.5k/1.00M  2.3457   2.5000  2.10k  w-1"), std::string::npos) << text;
  EXPECT_NE(text.find("tiny/s1/rd     PENDING"), std::string::npos) << text;
  const std::string list = FormatSweepList({TwoJobSweep()});
  EXPECT_NE(list.find("sw1    demo  -      RUNNING"), std::string::npos) << list;
}

TEST(FormatTest, ReportTable) {
  pb::Report r;
  r.set_sweep_id("sw1");
  r.set_reference_arm("block");
  r.set_confidence_level(0.95);
  r.set_complete(true);
  pb::PairedRow* row = r.add_rows();
  row->set_scale("S");
  row->set_milestone_tokens(2000158720);
  row->set_arm("rd");
  row->set_reference_arm("block");
  row->set_n(5);
  row->set_mean_reference_nll(3.1);
  row->set_mean_arm_nll(3.075);
  row->set_mean_delta_nll(-0.025);
  row->set_sd_delta_nll(0.004);
  row->set_t_ci_low(-0.03);
  row->set_t_ci_high(-0.02);
  row->set_ppl_change_of_mean_delta(-0.0247);
  row->set_wins(5);
  row->set_sign_test_p(0.0625);
  row->set_t_test_p(0.0002);
  pb::PairedRow* control = r.add_rows();
  *control = *row;
  control->set_arm("tied");
  control->set_is_control(true);
  pb::MissingEntry* m = r.add_missing();
  m->set_scale("M");
  m->set_seed(3);
  m->set_arm("rd");
  m->set_reason("job FAILED: out of memory");
  const std::string text = FormatReport(r);
  EXPECT_NE(text.find("reference arm block, 95% intervals, complete"), std::string::npos) << text;
  EXPECT_NE(text.find("S          2.00B  rd     block  5"), std::string::npos) << text;
  EXPECT_NE(text.find("-0.0250"), std::string::npos) << text;
  EXPECT_NE(text.find("-2.47%"), std::string::npos) << text;
  EXPECT_NE(text.find("5/5"), std::string::npos) << text;
  // p-values by report.md's rule (common/number_format.h): 0.0002 -> "0.0002" (was "2.0e-04").
  EXPECT_NE(text.find("0.0625"), std::string::npos) << text;
  EXPECT_NE(text.find("0.0002"), std::string::npos) << text;
  EXPECT_NE(text.find("tied*"), std::string::npos) << text;
  EXPECT_NE(text.find("M seed 3 rd: job FAILED: out of memory"), std::string::npos) << text;
}

// --- watch printer -------------------------------------------------------------------------

pb::WatchEvent Step(uint64_t seq, const std::string& job, int64_t tokens, double tps) {
  pb::WatchEvent e;
  e.set_seq(seq);
  pb::MetricEvent* m = e.mutable_metric_event();
  m->set_kind(pb::MetricEvent::KIND_TRAIN_STEP);
  m->set_job_id(job);
  m->set_step(tokens / 4096);
  m->set_tokens(tokens);
  m->set_train_loss(2.5);
  m->set_tokens_per_second(tps);
  return e;
}

TEST(WatchPrinterTest, ProgressLinesWithEtaAndThrottling) {
  WatchPrinter p(TwoJobSweep(), WatchPrinterOptions{10.0});
  auto lines = p.OnEvent(Step(1, "sw1/tiny/s1/block", 500000, 1000), 0.0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "tiny/s1/block  step 122  tokens 500.0k/1.00M (50.0%)  loss 2.5000  1.00k tok/s  ETA "
            "8m20s");
  EXPECT_TRUE(p.OnEvent(Step(2, "sw1/tiny/s1/block", 504096, 1000), 5.0).empty());  // throttled
  EXPECT_EQ(p.OnEvent(Step(3, "sw1/tiny/s1/rd", 4096, 1000), 5.0).size(), 1u);      // other job
  EXPECT_EQ(p.OnEvent(Step(4, "sw1/tiny/s1/block", 508192, 1000), 10.5).size(), 1u);
  EXPECT_TRUE(p.OnEvent(Step(4, "sw1/tiny/s1/block", 508192, 1000), 100).empty());  // replayed
  EXPECT_EQ(p.last_seq(), 4u);
}

TEST(WatchPrinterTest, StateChangesEvalsAndTheEnd) {
  WatchPrinter p(TwoJobSweep(), WatchPrinterOptions{0.0});
  pb::WatchEvent change;
  change.set_seq(10);
  auto* c = change.mutable_job_state_change();
  c->set_job_id("sw1/tiny/s1/rd");
  c->set_from_state(pb::JOB_STATE_RUNNING);
  c->set_to_state(pb::JOB_STATE_SUCCEEDED);
  c->set_attempt(1);
  c->set_worker_id("w-2");
  auto lines = p.OnEvent(change, 0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "tiny/s1/rd  RUNNING -> SUCCEEDED  (attempt 1, worker w-2)  [1/2 jobs ended]");

  pb::WatchEvent eval;
  eval.set_seq(11);
  auto* m = eval.mutable_metric_event();
  m->set_kind(pb::MetricEvent::KIND_EVAL);
  m->set_job_id("sw1/tiny/s1/block");
  m->set_milestone_tokens(250000);
  m->set_val_nll(1.0);
  lines = p.OnEvent(eval, 0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "tiny/s1/block  eval at 250.0k tokens: val NLL 1.0000 (ppl 2.72)");

  EXPECT_FALSE(p.ended());
  pb::WatchEvent end;
  end.set_seq(12);
  end.mutable_sweep_state_change()->set_from_state(pb::SWEEP_STATE_RUNNING);
  end.mutable_sweep_state_change()->set_to_state(pb::SWEEP_STATE_FAILED);
  lines = p.OnEvent(end, 0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "sweep sw1: RUNNING -> FAILED");
  EXPECT_TRUE(p.ended());
  EXPECT_EQ(p.final_state(), pb::SWEEP_STATE_FAILED);
}

// --- the CLI in-process ----------------------------------------------------------------------

TEST(CliTest, ValidateExample) {
  const CliResult r = Cli({"validate", std::string(RDATTN_EXAMPLES_DIR) + "/cpu-demo.yaml"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("6 jobs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tiny/s1: block rd"), std::string::npos) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;

  const CliResult json =
      Cli({"validate", "--format", "json", std::string(RDATTN_EXAMPLES_DIR) + "/cpu-demo.yaml"});
  EXPECT_EQ(json.code, 0) << json.err;
  EXPECT_NE(json.out.find("\"planned_jobs\""), std::string::npos);
}

TEST(CliTest, ValidateReportsEveryError) {
  const std::string path = WriteTemp("bad-sweep.yaml", R"(
name: bad
scales: [{name: a, preset: tiny, shape: {width: 63}}]
arms: [block, rd]
seeds: [1, 1]
data: {train_shards: [a.bin], tokenizer: byte}
optim: {peak_lr: 1e-3}
schedule: {total_tokens: 65536, global_batch_tokens: 4096}
)");
  const CliResult r = Cli({"validate", path});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("rdattn: INVALID_ARGUMENT: 2 errors in " + path + ":"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("\n  seeds[1]: duplicate seed 1\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\n  scales[0].shape.width: 63 is not divisible"), std::string::npos)
      << r.err;

  const std::string one = WriteTemp("bad-one.json", R"({"name": "x", "sedes": [1]})");
  const CliResult j = Cli({"validate", one});
  EXPECT_EQ(j.code, 2);
  EXPECT_EQ(j.err, "rdattn: INVALID_ARGUMENT: " + one +
                       ": sedes: unknown field (did you mean 'seeds'?)\n");

  const CliResult missing = Cli({"validate", "/nonexistent/sweep.yaml"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(missing.err.rfind("rdattn: NOT_FOUND: /nonexistent/sweep.yaml", 0), 0u) << missing.err;
}

TEST(CliTest, UsageErrorsAndHelp) {
  const CliResult none = Cli({});
  EXPECT_EQ(none.code, 2);
  EXPECT_EQ(none.err, "rdattn: no command given (see --help)\n");
  const CliResult help = Cli({"help"});
  EXPECT_EQ(help.code, 0);
  for (const char* cmd : {"validate", "submit", "list", "get", "watch", "cancel", "report"}) {
    EXPECT_NE(help.out.find(std::string("  ") + cmd + " "), std::string::npos) << cmd;
  }
  EXPECT_EQ(Cli({"--help"}).code, 0);
  EXPECT_EQ(Cli({"--help"}).out, help.out);
  const CliResult one = Cli({"help", "watch"});
  EXPECT_EQ(one.code, 0);
  EXPECT_NE(one.out.find("Usage: rdattn watch [OPTIONS] ID"), std::string::npos) << one.out;
  EXPECT_EQ(Cli({"watch", "--help"}).out, one.out);
  const CliResult unknown = Cli({"frobnicate"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_EQ(unknown.err, "rdattn: unknown command 'frobnicate' (see --help)\n");
  EXPECT_EQ(Cli({"help", "frobnicate"}).code, 2);
  EXPECT_EQ(Cli({"get"}).err, "rdattn: ID is required (see --help)\n");  // missing ID
  EXPECT_EQ(Cli({"get", "a", "b"}).code, 2);                             // too many
  const CliResult wrong_flag = Cli({"get", "x", "--watch"});  // a flag of another command
  EXPECT_EQ(wrong_flag.code, 2);
  EXPECT_EQ(wrong_flag.err,
            "rdattn: The following argument was not expected: --watch (see --help)\n");
  EXPECT_EQ(Cli({"validate", "x.yaml", "--coordinator", "h:1"}).code, 2);  // offline command
  const CliResult offline = Cli({"--coordinator", "h:1", "validate", "x.yaml"});
  EXPECT_EQ(offline.code, 2);
  EXPECT_EQ(offline.err, "rdattn: validate does not take --coordinator (see --help)\n");
  EXPECT_EQ(Cli({"list", "--state", "bogus", "--coordinator", "unix:/nonexistent"}).code, 2);
}

// --help on the binary and on every command lists each flag with its help text and default.
TEST(CliTest, HelpListsEveryFlagWithItsDefault) {
  const CliResult top = Cli({"--help"});
  for (const FlagSpecForTest& f :
       std::vector<FlagSpecForTest>{{"--coordinator", "=127.0.0.1:50051"},
                                    {"--timeout", "=30"},
                                    {"--token-file", "RDATTN_TOKEN_FILE"},
                                    {"--tls", "root certificates"},
                                    {"--config", "=~/.config/rdattn/config.yaml"}}) {
    EXPECT_NE(top.out.find(f.flag), std::string::npos) << f.flag << "\n" << top.out;
    EXPECT_NE(top.out.find(f.text), std::string::npos) << f.text << "\n" << top.out;
  }
  const std::map<std::string, std::vector<std::string>> flags = {
      {"validate", {"FILE", "--jobs", "--format TEXT=text"}},
      {"submit", {"FILE", "--request-id", "--validate-only", "--watch", "--interval TEXT=10"}},
      {"list", {"--state", "--owner", "--page-size", "--page-token", "--all", "--coordinator"}},
      {"get", {"ID", "--format TEXT=text", "--token"}},
      {"watch", {"ID", "--from-seq TEXT=0", "--interval", "--format", "redrawn in"}},
      {"cancel", {"ID", "--reason TEXT=cancelled with rdattn cancel"}},
      {"report", {"ID", "--out", "--reference", "--level", "--resamples", "--target-delta"}},
  };
  for (const auto& [command, names] : flags) {
    const CliResult r = Cli({command, "--help"});
    EXPECT_EQ(r.code, 0) << command;
    for (const std::string& n : names)
      EXPECT_NE(r.out.find(n), std::string::npos) << n << "\n" << r.out;
  }
  EXPECT_EQ(Cli({"validate", "--help"}).out.find("--coordinator"), std::string::npos);
}

TEST(CliTest, UnreachableCoordinatorIsUnavailable) {
  const CliResult r = Cli({"get", "sw1", "--coordinator",
                           "unix:" + ::testing::TempDir() + "/no-such.sock", "--timeout", "5"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.rfind("rdattn: UNAVAILABLE: ", 0), 0u) << r.err;
}

}  // namespace
}  // namespace rdattn::client
