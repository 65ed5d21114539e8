// rdattn-worker end to end against an in-process fake coordinator: the real binary leases one
// job whose "trainer" is a shell script written here, and the fake checks what comes back —
// events in order, the CompleteJob outcome, exit status and stderr tail — for a success, a
// failure, a cancel order (honoured, and ignored until SIGKILL), a worker SIGTERM, mpirun, and
// its /metrics (served, kept for the retention, then removed; bad metrics flags);
// and once with the real rdattn-train on a tiny model, where it is built.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/worker/exposition.h"
#include "tests/worker/fake_coordinator.h"
#include "worker/daemon/launch.h"
#include "worker/daemon/process.h"

#ifndef RDATTN_WORKER_BINARY
#error "RDATTN_WORKER_BINARY must name the rdattn-worker binary"
#endif
#ifndef RDATTN_TRAIN_BINARY
#define RDATTN_TRAIN_BINARY ""  // the trainer is not part of this build
#endif

namespace rdattn::worker {
namespace {

using std::chrono::milliseconds;
using testing::FakeCoordinator;
namespace pb = ::rdattn::v1;

constexpr char kJobId[] = "sw1/S/s1/rd";

// The fake trainer's argument parsing: finds --events.
constexpr char kScriptHead[] = R"(#!/bin/bash
events=""
while [ $# -gt 0 ]; do
  case "$1" in --events) events="$2"; shift 2;; *) shift;; esac
done
)";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Fixture {
  std::string dir;      // per test
  std::string workdir;  // --workdir
  std::string script;   // --train-binary
  std::string log;      // the worker's stderr

  explicit Fixture(const std::string& body) {
    dir = ::testing::TempDir() + "/worker_XXXXXX";
    EXPECT_NE(::mkdtemp(dir.data()), nullptr);
    dir = std::filesystem::path(dir).lexically_normal().string();  // TempDir() ends with '/'
    workdir = dir + "/work";
    script = dir + "/fake-train.sh";
    log = dir + "/worker.log";
    std::ofstream(script) << kScriptHead << body;
    ::chmod(script.c_str(), 0755);
    std::ofstream(dir + "/token") << "test-token\n";
  }

  // Kept for a look when the test failed.
  ~Fixture() {
    std::error_code ec;
    if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir, ec);
  }

  std::string attempt_dir() const { return workdir + "/sw1_S_s1_rd/attempt-1"; }

  std::unique_ptr<ChildProcess> StartWorker(const FakeCoordinator& fake,
                                            std::vector<std::string> extra = {}) const {
    ChildProcess::Options o;
    o.command.argv = {RDATTN_WORKER_BINARY,
                      "--coordinator",
                      fake.address(),
                      "--workdir",
                      workdir,
                      "--train-binary",
                      script,
                      "--token-file",
                      dir + "/token",
                      "--once",
                      "--event-poll",
                      "0.05",
                      "--threads-per-rank",
                      "3",
                      "--lease-wait",
                      "2"};
    o.command.argv.insert(o.command.argv.end(), extra.begin(), extra.end());
    o.stdout_path = log;
    o.stderr_path = log;
    auto child = ChildProcess::Spawn(o);
    EXPECT_TRUE(child.ok()) << child.status().ToString();
    return child.ok() ? std::move(child).value() : nullptr;
  }

  // The worker's exit code (-1 on timeout or signal).
  int WaitForWorker(ChildProcess* worker) const {
    auto exit = worker->Wait(milliseconds(15000));
    EXPECT_TRUE(exit.has_value()) << "rdattn-worker did not exit; its log:\n" << ReadAll(log);
    return exit.has_value() ? exit->exit_code : -1;
  }
};

pb::JobSpec Job(int world_size = 1) {
  pb::JobSpec job;
  job.set_job_id(kJobId);
  job.set_sweep_id("sw1");
  job.set_attempt(1);
  job.mutable_run()->set_run_id(kJobId);
  job.mutable_run()->mutable_model()->set_arm("rd");
  job.mutable_run()->mutable_parallel()->set_world_size(world_size);
  return job;
}

FakeCoordinator::Config WithJob(pb::JobSpec job) {
  FakeCoordinator::Config c;
  c.job = std::move(job);
  return c;
}

// The port of the worker's "metrics on http://127.0.0.1:PORT/metrics" log line (exactly one),
// waiting for it up to 10 s; 0 when it never came.
int MetricsPort(const std::string& log) {
  static const std::regex line_re("metrics on http://127\\.0\\.0\\.1:([0-9]+)/metrics");
  for (int i = 0; i < 200; ++i) {
    const std::string text = ReadAll(log);
    auto begin = std::sregex_iterator(text.begin(), text.end(), line_re);
    const auto count = std::distance(begin, std::sregex_iterator());
    if (count > 0) {
      EXPECT_EQ(count, 1) << text;
      return std::stoi((*begin)[1].str());
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  ADD_FAILURE() << "no metrics line in the worker's log:\n" << ReadAll(log);
  return 0;
}

std::vector<testing::Sample> ScrapeWorker(int port) {
  return testing::ParseExposition(testing::HttpBody(testing::HttpGet(port)));
}

size_t SeriesOfJob(const std::vector<testing::Sample>& samples) {
  size_t n = 0;
  for (const auto& s : samples) n += s.labels.count("job_id") && s.labels.at("job_id") == kJobId;
  return n;
}

std::vector<pb::MetricEvent::Kind> Kinds(const std::vector<pb::MetricEvent>& events) {
  std::vector<pb::MetricEvent::Kind> kinds;
  for (const auto& e : events) kinds.push_back(e.kind());
  return kinds;
}

TEST(WorkerTest, SuccessRelaysEventsInOrderAndReportsSucceeded) {
  Fixture f(R"(
echo "threads=$OMP_NUM_THREADS" >&2
printf '{"seq":1,"kind":"KIND_INIT","param_count":"123"}\n' >> "$events"
printf '{"seq":2,"kind":"KIND_FINISHED","step":10,"tokens":"40960"}' >> "$events"
sleep 0.2
printf '\n' >> "$events"
exit 0
)");
  FakeCoordinator fake(WithJob(Job()));
  auto worker = f.StartWorker(fake);
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0) << ReadAll(f.log);

  auto done = fake.WaitForComplete(milliseconds(0));
  ASSERT_TRUE(done.has_value()) << ReadAll(f.log);
  EXPECT_EQ(done->outcome(), pb::JOB_OUTCOME_SUCCEEDED) << done->message();
  EXPECT_EQ(done->exit_code(), 0);
  EXPECT_EQ(done->term_signal(), 0);
  EXPECT_EQ(done->lease_id(), "lease-1");
  EXPECT_EQ(done->job_id(), kJobId);
  EXPECT_EQ(done->worker_id(), "w-1");
  EXPECT_EQ(done->last_event_seq(), 2u);
  EXPECT_TRUE(done->stderr_tail().empty());

  const auto events = fake.stored_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(Kinds(events), (std::vector<pb::MetricEvent::Kind>{pb::MetricEvent::KIND_INIT,
                                                               pb::MetricEvent::KIND_FINISHED}));
  EXPECT_EQ(events[0].seq(), 1u);
  EXPECT_EQ(events[0].param_count(), 123);
  EXPECT_EQ(events[1].seq(), 2u);
  EXPECT_EQ(events[1].tokens(), 40960);
  EXPECT_EQ(events[1].job_id(), kJobId);
  EXPECT_EQ(events[1].attempt(), 1);
  for (const auto& seqs : fake.stream_seqs()) {
    for (size_t i = 1; i < seqs.size(); ++i) EXPECT_LT(seqs[i - 1], seqs[i]);
  }

  // job.json: the lease's RunSpec with the worker's checkpoint dir and threads per rank.
  pb::RunSpec spec;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(ReadAll(f.attempt_dir() + "/job.json"), &spec)
          .ok());
  EXPECT_EQ(spec.checkpoint().dir(), f.workdir + "/checkpoints/sw1_S_s1_rd");
  EXPECT_EQ(spec.parallel().threads_per_rank(), 3);
  EXPECT_EQ(spec.model().arm(), "rd");
  EXPECT_NE(ReadAll(f.attempt_dir() + "/stderr.log").find("threads=3"), std::string::npos);

  const auto registrations = fake.registrations();
  ASSERT_FALSE(registrations.empty());
  EXPECT_EQ(registrations[0].slots(), 1);
  EXPECT_EQ(registrations[0].kind(), pb::HARDWARE_KIND_CPU);
  EXPECT_EQ(ReadAll(f.workdir + "/worker_id"), "w-1\n");
  EXPECT_EQ(fake.unauthenticated_calls(), 0);
}

TEST(WorkerTest, FailureReportsExitCodeAndStderrTail) {
  Fixture f(R"(
printf '{"seq":1,"kind":"KIND_INIT"}\n' >> "$events"
for i in $(seq 1 50); do echo "line $i" >&2; done
echo "boom: data.train_shards: no file matches" >&2
exit 3
)");
  FakeCoordinator fake(WithJob(Job()));
  auto worker = f.StartWorker(fake);
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0);
  auto done = fake.WaitForComplete(milliseconds(0));
  ASSERT_TRUE(done.has_value()) << ReadAll(f.log);
  EXPECT_EQ(done->outcome(), pb::JOB_OUTCOME_FAILED);
  EXPECT_EQ(done->exit_code(), 3);
  EXPECT_EQ(done->term_signal(), 0);
  EXPECT_NE(done->message().find("exit code 3"), std::string::npos) << done->message();
  const std::string& tail = done->stderr_tail();
  EXPECT_LE(tail.size(), 4096u);
  EXPECT_EQ(tail.substr(0, 8), "line 12\n") << tail;  // the last 40 lines
  EXPECT_NE(tail.find("boom: data.train_shards: no file matches"), std::string::npos) << tail;
  EXPECT_EQ(fake.stored_events().size(), 1u);
}

TEST(WorkerTest, CancelOrderStopsTheRanks) {
  Fixture f(R"(
trap 'echo "got SIGTERM, checkpointing" >&2; exit 75' TERM
printf '{"seq":1,"kind":"KIND_INIT"}\n' >> "$events"
while true; do sleep 0.05; done
)");
  FakeCoordinator::Config config = WithJob(Job());
  config.cancel_after_init = true;
  FakeCoordinator fake(config);
  auto worker = f.StartWorker(fake);
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0);
  auto done = fake.WaitForComplete(milliseconds(0));
  ASSERT_TRUE(done.has_value()) << ReadAll(f.log);
  EXPECT_EQ(done->outcome(), pb::JOB_OUTCOME_CANCELLED) << done->message();
  EXPECT_EQ(done->exit_code(), 75);
  EXPECT_NE(done->message().find("sweep cancelled by the test"), std::string::npos)
      << done->message();
  EXPECT_NE(done->stderr_tail().find("got SIGTERM"), std::string::npos);
  ASSERT_EQ(fake.stored_events().size(), 1u);
  EXPECT_EQ(fake.stored_events()[0].kind(), pb::MetricEvent::KIND_INIT);
  // The heartbeats reported the lease with its ranks running.
  bool started = false;
  for (const auto& hb : fake.heartbeats()) {
    for (const auto& lease : hb.leases())
      started |= lease.lease_id() == "lease-1" && lease.ranks_started();
  }
  EXPECT_TRUE(started);
}

TEST(WorkerTest, CancelKillsRanksThatIgnoreSigtermAfterTheGrace) {
  Fixture f(R"(
trap '' TERM
printf '{"seq":1,"kind":"KIND_INIT"}\n' >> "$events"
while true; do sleep 0.05; done
)");
  FakeCoordinator::Config config = WithJob(Job());
  config.cancel_after_init = true;
  config.cancel_grace_ms = 300;
  FakeCoordinator fake(config);
  auto worker = f.StartWorker(fake);
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0);
  auto done = fake.WaitForComplete(milliseconds(0));
  ASSERT_TRUE(done.has_value()) << ReadAll(f.log);
  EXPECT_EQ(done->outcome(), pb::JOB_OUTCOME_CANCELLED);
  EXPECT_EQ(done->exit_code(), -1);
  EXPECT_EQ(done->term_signal(), SIGKILL);
}

// The progress watchdog (docs/operations.md, "Progress watchdog"): a trainer that stops itself
// (SIGSTOP, as a frozen rank) after three steps is killed and reported FAILED "stalled: ...".
TEST(WorkerTest, WatchdogKillsAFrozenRankAndReportsItStalled) {
  Fixture f(R"(
printf '{"seq":1,"kind":"KIND_INIT"}\n' >> "$events"
for i in 1 2 3; do
  sleep 0.05
  printf '{"seq":%d,"kind":"KIND_TRAIN_STEP","step":%d}\n' $((i + 1)) $i >> "$events"
done
kill -STOP $$
echo "never here" >&2
)");
  FakeCoordinator fake(WithJob(Job()));
  const auto t0 = std::chrono::steady_clock::now();
  auto worker = f.StartWorker(
      fake, {"--stall-floor-seconds", "1", "--stall-factor", "10", "--stall-startup-seconds", "5"});
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0);
  const auto took = std::chrono::steady_clock::now() - t0;
  auto done = fake.WaitForComplete(milliseconds(0));
  ASSERT_TRUE(done.has_value()) << ReadAll(f.log);
  EXPECT_EQ(done->outcome(), pb::JOB_OUTCOME_FAILED) << done->message();
  EXPECT_EQ(done->term_signal(), SIGKILL) << done->message();  // SIGTERM stays pending
  EXPECT_EQ(done->message().rfind("stalled: no progress for ", 0), 0u) << done->message();
  EXPECT_NE(done->message().find("(last event: TRAIN_STEP at step 3; bound "), std::string::npos)
      << done->message();
  EXPECT_NE(done->message().find(" s from step time "), std::string::npos) << done->message();
  EXPECT_EQ(done->stderr_tail().find("never here"), std::string::npos);
  EXPECT_EQ(fake.stored_events().size(), 4u);
  // About 1 s of silence, then 2 s of grace before the SIGKILL.
  EXPECT_LT(took, std::chrono::seconds(10));
  EXPECT_NE(ReadAll(f.log).find("stalled: no progress for"), std::string::npos);
}

// Under mpirun: rank 1 frozen, rank 0 blocked "in a collective" (ignoring SIGTERM, writing
// nothing): the job stalls and every process of it is killed, mpirun included.
TEST(WorkerTest, WatchdogKillsEveryRankOfAStalledMpirunJob) {
  if (!FindExecutable("mpirun").ok()) GTEST_SKIP() << "mpirun not found";
  Fixture f(R"(
echo $$ > "$(dirname "$events")/rank-$OMPI_COMM_WORLD_RANK.pid"
if [ "$OMPI_COMM_WORLD_RANK" = "0" ]; then
  trap '' TERM
  printf '{"seq":1,"kind":"KIND_INIT"}\n' >> "$events"
  printf '{"seq":2,"kind":"KIND_TRAIN_STEP","step":1}\n' >> "$events"
  while true; do sleep 0.05; done
fi
kill -STOP $$
)");
  FakeCoordinator fake(WithJob(Job(/*world_size=*/2)));
  auto worker = f.StartWorker(
      fake, {"--slots", "2", "--stall-floor-seconds", "1", "--stall-startup-seconds", "1"});
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0);
  auto done = fake.WaitForComplete(milliseconds(0));
  ASSERT_TRUE(done.has_value()) << ReadAll(f.log);
  EXPECT_EQ(done->outcome(), pb::JOB_OUTCOME_FAILED) << done->message();
  EXPECT_EQ(done->message().rfind("stalled: no progress for ", 0), 0u) << done->message();
  for (int rank : {0, 1}) {
    const std::string pid_file = f.attempt_dir() + "/rank-" + std::to_string(rank) + ".pid";
    const pid_t pid = std::atoi(ReadAll(pid_file).c_str());
    ASSERT_GT(pid, 0) << pid_file;
    // Gone, or a zombie about to be reaped by whoever inherited it.
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {
      const std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
      const size_t paren = stat.rfind(')');
      gone = stat.empty() || (paren != std::string::npos && stat.size() > paren + 2 &&
                              (stat[paren + 2] == 'Z' || stat[paren + 2] == 'X'));
      if (!gone) std::this_thread::sleep_for(milliseconds(50));
    }
    EXPECT_TRUE(gone) << "rank " << rank << " (pid " << pid << ") still runs";
  }
}

// Silences within the bound are no stall: a slow start (startup allowance), and a 1.5 s
// "evaluation" after steps of 0.3 s (10 x 0.3 s > 1.5 s > the 1 s floor).
TEST(WorkerTest, WatchdogBoundFollowsTheJobsOwnStepTime) {
  Fixture f(R"(
sleep 1.5
printf '{"seq":1,"kind":"KIND_INIT"}\n' >> "$events"
for i in 1 2 3; do
  sleep 0.3
  printf '{"seq":%d,"kind":"KIND_TRAIN_STEP","step":%d}\n' $((i + 1)) $i >> "$events"
done
sleep 1.5
printf '{"seq":5,"kind":"KIND_EVAL","step":3}\n' >> "$events"
printf '{"seq":6,"kind":"KIND_FINISHED","step":3}\n' >> "$events"
)");
  FakeCoordinator fake(WithJob(Job()));
  auto worker = f.StartWorker(
      fake, {"--stall-floor-seconds", "1", "--stall-factor", "10", "--stall-startup-seconds", "5"});
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0);
  auto done = fake.WaitForComplete(milliseconds(0));
  ASSERT_TRUE(done.has_value()) << ReadAll(f.log);
  EXPECT_EQ(done->outcome(), pb::JOB_OUTCOME_SUCCEEDED) << done->message();
  EXPECT_EQ(ReadAll(f.log).find("stalled"), std::string::npos) << ReadAll(f.log);
}

TEST(WorkerTest, WatchdogFlagsAreChecked) {
  Fixture f("exit 0\n");
  FakeCoordinator fake(WithJob(Job()));
  for (const char* flag : {"--stall-floor-seconds", "--stall-factor", "--stall-startup-seconds"}) {
    auto worker = f.StartWorker(fake, {std::string(flag) + "=-1"});
    ASSERT_NE(worker, nullptr);
    EXPECT_EQ(f.WaitForWorker(worker.get()), 2) << flag;
    EXPECT_NE(ReadAll(f.log).find(std::string(flag) + ": must be a number >= 0"), std::string::npos)
        << ReadAll(f.log);
  }
}

TEST(WorkerTest, WorkerSigtermPreemptsTheJob) {
  Fixture f(R"(
trap 'echo "checkpoint written" >&2; exit 75' TERM
printf '{"seq":1,"kind":"KIND_INIT"}\n' >> "$events"
while true; do sleep 0.05; done
)");
  FakeCoordinator fake(WithJob(Job()));
  auto worker = f.StartWorker(fake);
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(fake.WaitForStored(1, milliseconds(10000))) << ReadAll(f.log);
  ::kill(worker->pid(), SIGTERM);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0);
  auto done = fake.WaitForComplete(milliseconds(0));
  ASSERT_TRUE(done.has_value()) << ReadAll(f.log);
  EXPECT_EQ(done->outcome(), pb::JOB_OUTCOME_PREEMPTED) << done->message();
  EXPECT_EQ(done->exit_code(), 75);
  EXPECT_NE(done->stderr_tail().find("checkpoint written"), std::string::npos);
}

TEST(WorkerTest, SeveralRanksRunUnderMpirun) {
  if (!FindExecutable("mpirun").ok()) GTEST_SKIP() << "mpirun not found";
  Fixture f(R"(
if [ "$OMPI_COMM_WORLD_RANK" = "0" ]; then
  printf '{"seq":1,"kind":"KIND_INIT","world_size":%s}\n' "$OMPI_COMM_WORLD_SIZE" >> "$events"
  printf '{"seq":2,"kind":"KIND_FINISHED"}\n' >> "$events"
fi
exit 0
)");
  FakeCoordinator fake(WithJob(Job(/*world_size=*/2)));
  auto worker = f.StartWorker(fake, {"--slots", "2"});
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0);
  auto done = fake.WaitForComplete(milliseconds(0));
  ASSERT_TRUE(done.has_value()) << ReadAll(f.log);
  EXPECT_EQ(done->outcome(), pb::JOB_OUTCOME_SUCCEEDED) << done->message() << "\n"
                                                        << done->stderr_tail();
  const auto events = fake.stored_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].world_size(), 2);
  EXPECT_EQ(fake.registrations().at(0).slots(), 2);
}

// --- with the real trainer (skipped where rdattn-train is not built) ---------------------------

// An llm.c-format shard (header: magic, version, count; then uint16 tokens) of a byte-level
// corpus with learnable structure (EOT 256 before every document).
void WriteShard(const std::string& path, uint32_t seed, int docs) {
  static const char* kWords[] = {"the",   "model", "reads",    "depth", "value",
                                 "query", "block", "routes",   "over",  "layers",
                                 "and",   "a",     "residual", "stream"};
  std::vector<uint16_t> tokens;
  uint32_t state = seed;
  auto next = [&] { return (state = state * 1664525u + 1013904223u) >> 16; };
  for (int d = 0; d < docs; ++d) {
    tokens.push_back(256);
    for (int w = 0; w < 60; ++w) {
      if (w) tokens.push_back(' ');
      for (const char* c = kWords[next() % 14]; *c; ++c)
        tokens.push_back(static_cast<uint16_t>(*c));
    }
  }
  int32_t header[256] = {20240520, 1, static_cast<int32_t>(tokens.size())};
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * 2));
}

pb::JobSpec TinyJob(const std::string& data_dir, int steps) {
  pb::JobSpec job = Job();
  pb::RunSpec* run = job.mutable_run();
  run->set_init_seed(5);
  run->mutable_model()->set_preset("tiny");
  run->mutable_data()->add_train_shards(data_dir + "/c_train_*.bin");
  run->mutable_data()->add_val_shards(data_dir + "/c_val_000000.bin");
  run->mutable_data()->set_tokenizer("byte");
  run->mutable_data()->set_data_seed(11);
  run->mutable_data()->set_val_windows(8);
  run->mutable_optim()->set_peak_lr(3e-3);
  run->mutable_optim()->set_warmup_steps(2);
  run->mutable_schedule()->set_total_tokens(steps * 512);
  run->mutable_schedule()->set_global_batch_tokens(512);
  run->mutable_schedule()->set_micro_batch_sequences(2);
  run->mutable_schedule()->add_milestones_tokens(steps / 2 * 512);
  run->mutable_parallel()->set_precision(pb::PRECISION_FP32);
  return job;
}

TEST(WorkerTest, RealTrainerRunsATinyJob) {
  const std::string train = RDATTN_TRAIN_BINARY;
  if (train.empty() || !FindExecutable(train).ok()) GTEST_SKIP() << "rdattn-train is not built";
  Fixture f("");
  f.script = train;
  std::filesystem::create_directories(f.dir + "/data");
  WriteShard(f.dir + "/data/c_train_000000.bin", 1, 300);
  WriteShard(f.dir + "/data/c_val_000000.bin", 2, 20);
  FakeCoordinator fake(WithJob(TinyJob(f.dir + "/data", 8)));
  // Not --once: the worker stays up after the job so that its /metrics can be read.
  auto worker = f.StartWorker(
      fake, {"--threads-per-rank", "1", "--once=false", "--metrics-listen", "127.0.0.1:0"});
  ASSERT_NE(worker, nullptr);
  const int port = MetricsPort(f.log);
  auto done = fake.WaitForComplete(milliseconds(40000));
  ASSERT_TRUE(done.has_value()) << ReadAll(f.log);
  // The real trainer's events as gauges: finite losses of a real run, and its progress.
  const auto samples = ScrapeWorker(port);
  for (const char* name :
       {"rdattn_train_loss", "rdattn_val_nll", "rdattn_train_step", "rdattn_job_budget_tokens"}) {
    const auto found = testing::Find(samples, name, {{"job_id", kJobId}, {"arm", "rd"}});
    ASSERT_EQ(found.size(), 1u) << name << "\n" << testing::HttpBody(testing::HttpGet(port));
    EXPECT_TRUE(std::isfinite(found[0].value) && found[0].value > 0)
        << name << " " << found[0].value_text;
  }
  EXPECT_EQ(testing::Find(samples, "rdattn_train_step", {{"job_id", kJobId}})[0].value, 8);
  EXPECT_EQ(testing::Find(samples, "rdattn_job_budget_tokens", {{"job_id", kJobId}})[0].value,
            8 * 512);
  ::kill(worker->pid(), SIGTERM);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0);
  EXPECT_EQ(done->outcome(), pb::JOB_OUTCOME_SUCCEEDED) << done->message() << "\n"
                                                        << done->stderr_tail();
  const auto events = fake.stored_events();
  ASSERT_FALSE(events.empty());
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].seq(), i + 1);
  EXPECT_EQ(events.front().kind(), pb::MetricEvent::KIND_INIT);
  EXPECT_FALSE(events.front().init_param_checksum().empty());
  EXPECT_EQ(events.back().kind(), pb::MetricEvent::KIND_FINISHED);
  EXPECT_EQ(events.back().step(), 8);
  EXPECT_EQ(done->last_event_seq(), events.size());
  const std::string ckpt_dir = f.workdir + "/checkpoints/sw1_S_s1_rd/";
  EXPECT_EQ(done->checkpoint_path().substr(0, ckpt_dir.size()), ckpt_dir)
      << done->checkpoint_path();
}

TEST(WorkerTest, RealTrainerUnderMpirunCheckpointsOnCancel) {
  const std::string train = RDATTN_TRAIN_BINARY;
  if (train.empty() || !FindExecutable(train).ok()) GTEST_SKIP() << "rdattn-train is not built";
  if (!FindExecutable("mpirun").ok()) GTEST_SKIP() << "mpirun not found";
  Fixture f("");
  f.script = train;
  std::filesystem::create_directories(f.dir + "/data");
  WriteShard(f.dir + "/data/c_train_000000.bin", 1, 300);
  WriteShard(f.dir + "/data/c_val_000000.bin", 2, 20);
  pb::JobSpec job = TinyJob(f.dir + "/data", 100000);  // far more steps than the test waits for
  job.mutable_run()->mutable_parallel()->set_world_size(2);
  job.mutable_run()->mutable_schedule()->clear_milestones_tokens();
  FakeCoordinator::Config config = WithJob(job);
  config.cancel_after_init = true;
  config.cancel_grace_ms = 20000;  // the ranks checkpoint and exit 75 well before
  FakeCoordinator fake(config);
  auto worker = f.StartWorker(fake, {"--slots", "2", "--threads-per-rank", "1"});
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0);
  auto done = fake.WaitForComplete(milliseconds(0));
  ASSERT_TRUE(done.has_value()) << ReadAll(f.log);
  EXPECT_EQ(done->outcome(), pb::JOB_OUTCOME_CANCELLED) << done->message() << "\n"
                                                        << done->stderr_tail();
  EXPECT_EQ(done->exit_code(), 75) << done->message() << "\n" << done->stderr_tail();
  const auto events = fake.stored_events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().kind(), pb::MetricEvent::KIND_INIT);
  EXPECT_EQ(events.front().world_size(), 2);
  EXPECT_EQ(events.back().kind(), pb::MetricEvent::KIND_CHECKPOINT);  // written on SIGTERM
  EXPECT_EQ(done->checkpoint_path(), events.back().checkpoint_path());
  EXPECT_FALSE(done->checkpoint_path().empty());
}

// A fake trainer's events, as served by the worker's /metrics after the job ended (the
// retention keeps them): the catalogue's names and label sets, the relay's counters.
constexpr char kMetricsScript[] = R"(
printf '{"seq":1,"kind":"KIND_INIT","step":0,"tokens":"0"}\n' >> "$events"
printf '{"seq":2,"kind":"KIND_TRAIN_STEP","step":1,"tokens":"4096","train_loss":10.5,"lr":0.0003,"step_seconds":0.5,"allreduce_seconds":0.001,"data_seconds":0.0002}\n' >> "$events"
printf '{"seq":3,"kind":"KIND_EVAL","step":1,"tokens":"4096","val_nll":8.75,"js_nats":[0.1,0.2],"js_mean_nats":0.15,"route_entropy_qk_nats":[1.0,1.1],"route_entropy_v_nats":[0.5,0.6]}\n' >> "$events"
printf 'not json\n' >> "$events"
printf '{"seq":4,"kind":"KIND_FINISHED","step":2,"tokens":"8192"}\n' >> "$events"
exit 0
)";

pb::JobSpec MetricsJob() {
  pb::JobSpec job = Job();
  job.set_arm("rd");
  job.set_seed(7);
  job.set_scale("S");
  job.mutable_run()->mutable_schedule()->set_total_tokens(8000);
  job.mutable_run()->mutable_schedule()->set_global_batch_tokens(4096);
  return job;
}

TEST(WorkerTest, ServesMetricsOfItsJobs) {
  Fixture f(kMetricsScript);
  FakeCoordinator fake(WithJob(MetricsJob()));
  // Not --once: the worker stays up after the job, so the test can scrape the kept series.
  auto worker = f.StartWorker(fake, {"--once=false", "--metrics-listen", "127.0.0.1:0"});
  ASSERT_NE(worker, nullptr);
  const int port = MetricsPort(f.log);
  ASSERT_GT(port, 0);
  auto done = fake.WaitForComplete(milliseconds(15000));
  ASSERT_TRUE(done.has_value()) << ReadAll(f.log);
  EXPECT_EQ(done->outcome(), pb::JOB_OUTCOME_SUCCEEDED) << done->message();

  std::vector<testing::Sample> samples;
  for (int i = 0; i < 100; ++i) {  // until a heartbeat has succeeded (every 200 ms)
    samples = ScrapeWorker(port);
    auto hb = testing::FindExact(samples, "rdattn_worker_last_heartbeat_timestamp_seconds", {});
    if (hb.has_value() && hb->value > 0) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  const std::map<std::string, std::string> job = {
      {"sweep", "sw1"}, {"job_id", kJobId}, {"arm", "rd"}, {"seed", "7"}, {"scale", "S"}};
  auto value = [&](const std::string& name, std::map<std::string, std::string> labels) {
    auto s = testing::FindExact(samples, name, labels);
    EXPECT_TRUE(s.has_value()) << name << " missing; scraped:\n"
                               << testing::HttpBody(testing::HttpGet(port));
    return s.has_value() ? s->value : -1.0;
  };
  EXPECT_EQ(value("rdattn_train_loss", job), 10.5);
  EXPECT_EQ(value("rdattn_val_nll", job), 8.75);
  EXPECT_EQ(value("rdattn_val_milestone_tokens", job), 4096);
  EXPECT_EQ(value("rdattn_train_tokens", job), 8192);
  EXPECT_EQ(value("rdattn_job_budget_tokens", job), 8192);
  EXPECT_EQ(value("rdattn_job_running", job), 0);  // ended, kept for the retention
  EXPECT_EQ(value("rdattn_step_duration_seconds_count", job), 1);
  auto layer1 = job;
  layer1["layer"] = "1";
  EXPECT_EQ(value("rdattn_depth_js_divergence", layer1), 0.2);
  layer1["route"] = "v";
  EXPECT_EQ(value("rdattn_route_entropy_nats", layer1), 0.6);
  EXPECT_EQ(value("rdattn_worker_jobs_finished_total", {{"outcome", "succeeded"}}), 1);
  EXPECT_EQ(value("rdattn_worker_events_relayed_total", {}), 4);
  EXPECT_EQ(value("rdattn_worker_event_parse_errors_total", {}), 1);
  EXPECT_EQ(value("rdattn_worker_local_slots", {{"state", "free"}}), 1);
  EXPECT_EQ(value("rdattn_worker_local_slots", {{"state", "busy"}}), 0);
  EXPECT_GT(value("rdattn_worker_last_heartbeat_timestamp_seconds", {}), 1.6e9);
  const auto info = testing::Find(samples, "rdattn_worker_info");
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0].labels.at("worker"), "w-1");
  EXPECT_EQ(info[0].labels.at("hardware_kind"), "cpu");

  ::kill(worker->pid(), SIGTERM);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0) << ReadAll(f.log);
}

TEST(WorkerTest, MetricsOfAFinishedJobGoAfterTheRetention) {
  Fixture f(kMetricsScript);
  FakeCoordinator fake(WithJob(MetricsJob()));
  auto worker = f.StartWorker(
      fake, {"--once=false", "--metrics-listen", "127.0.0.1:0", "--metrics-retention", "0"});
  ASSERT_NE(worker, nullptr);
  const int port = MetricsPort(f.log);
  ASSERT_GT(port, 0);
  ASSERT_TRUE(fake.WaitForComplete(milliseconds(15000)).has_value()) << ReadAll(f.log);
  // Purged by the next heartbeat (every 200 ms).
  std::vector<testing::Sample> samples;
  for (int i = 0; i < 100; ++i) {
    samples = ScrapeWorker(port);
    if (!samples.empty() && SeriesOfJob(samples) == 0) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_FALSE(samples.empty());
  EXPECT_EQ(SeriesOfJob(samples), 0u) << testing::HttpBody(testing::HttpGet(port));
  auto finished =
      testing::FindExact(samples, "rdattn_worker_jobs_finished_total", {{"outcome", "succeeded"}});
  ASSERT_TRUE(finished.has_value());
  EXPECT_EQ(finished->value, 1);
  ::kill(worker->pid(), SIGTERM);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0) << ReadAll(f.log);
}

TEST(WorkerTest, MetricsFlagsAreChecked) {
  // A busy address: the worker says which flag and exits 2 before registering.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string busy = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--metrics-listen", busy},
        {"--metrics-listen", "127.0.0.1"},
        {"--metrics-listen", "127.0.0.1:99999"},
        {"--metrics-listen", "127.0.0.1:0", "--metrics-retention", "-1"},
        {"--metrics-listen", "127.0.0.1:0", "--metrics-retention", "soon"}}) {
    Fixture f("exit 0\n");
    FakeCoordinator fake(WithJob(Job()));
    auto worker = f.StartWorker(fake, flags);
    ASSERT_NE(worker, nullptr);
    EXPECT_EQ(f.WaitForWorker(worker.get()), 2) << flags.back() << "\n" << ReadAll(f.log);
    const std::string& flag = flags[flags.size() - 2];
    EXPECT_NE(ReadAll(f.log).find(flag), std::string::npos) << ReadAll(f.log);
    EXPECT_TRUE(fake.registrations().empty()) << flags.back();
  }
  ::close(fd);
}

TEST(WorkerTest, ExitsWhenIdle) {
  Fixture f("exit 0\n");
  FakeCoordinator fake({});  // no job to hand out
  const auto start = std::chrono::steady_clock::now();
  auto worker = f.StartWorker(fake, {"--exit-when-idle", "0.5"});
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 0) << ReadAll(f.log);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
  EXPECT_EQ(fake.registrations().size(), 1u);
  EXPECT_TRUE(fake.completions().empty());
}

TEST(WorkerTest, WrongTokenExitsWithAUsageError) {
  Fixture f("exit 0\n");
  std::ofstream(f.dir + "/token") << "wrong\n";
  FakeCoordinator fake(WithJob(Job()));
  auto worker = f.StartWorker(fake);
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(f.WaitForWorker(worker.get()), 2);
  EXPECT_GE(fake.unauthenticated_calls(), 1);
  EXPECT_TRUE(fake.completions().empty());
  EXPECT_EQ(ReadAll(f.log).find("wrong"), std::string::npos) << "the token must not be logged";
}

}  // namespace
}  // namespace rdattn::worker
