// Exit statuses -> JobOutcome, exit descriptions, and stderr tails.
#include "worker/daemon/outcome.h"

#include <cerrno>

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <csignal>
#include <fstream>
#include <string>

namespace rdattn::worker {
namespace {

namespace pb = ::rdattn::v1;

ExitStatus Exited(int code) { return ExitStatus{code, 0}; }
ExitStatus Signaled(int sig) { return ExitStatus{-1, sig}; }

TEST(OutcomeTest, ExitCodesWithoutStop) {
  EXPECT_EQ(OutcomeFor(Exited(0), StopReason::kNone), pb::JOB_OUTCOME_SUCCEEDED);
  EXPECT_EQ(OutcomeFor(Exited(75), StopReason::kNone), pb::JOB_OUTCOME_PREEMPTED);
  EXPECT_EQ(OutcomeFor(Exited(1), StopReason::kNone), pb::JOB_OUTCOME_FAILED);
  EXPECT_EQ(OutcomeFor(Exited(2), StopReason::kNone), pb::JOB_OUTCOME_FAILED);
  EXPECT_EQ(OutcomeFor(Exited(3), StopReason::kNone), pb::JOB_OUTCOME_FAILED);
  EXPECT_EQ(OutcomeFor(Signaled(SIGKILL), StopReason::kNone), pb::JOB_OUTCOME_FAILED);
  EXPECT_EQ(OutcomeFor(Signaled(SIGSEGV), StopReason::kNone), pb::JOB_OUTCOME_FAILED);
}

TEST(OutcomeTest, CancelOrders) {
  EXPECT_EQ(OutcomeFor(Exited(75), StopReason::kCancel), pb::JOB_OUTCOME_CANCELLED);
  EXPECT_EQ(OutcomeFor(Signaled(SIGKILL), StopReason::kCancel), pb::JOB_OUTCOME_CANCELLED);
  EXPECT_EQ(OutcomeFor(Exited(1), StopReason::kCancel), pb::JOB_OUTCOME_CANCELLED);
  // It finished before the order took effect: the truth wins.
  EXPECT_EQ(OutcomeFor(Exited(0), StopReason::kCancel), pb::JOB_OUTCOME_SUCCEEDED);
}

TEST(OutcomeTest, WorkerShutdownAndExpiredLeasePreempt) {
  EXPECT_EQ(OutcomeFor(Exited(75), StopReason::kShutdown), pb::JOB_OUTCOME_PREEMPTED);
  EXPECT_EQ(OutcomeFor(Signaled(SIGKILL), StopReason::kShutdown), pb::JOB_OUTCOME_PREEMPTED);
  EXPECT_EQ(OutcomeFor(Exited(1), StopReason::kLeaseExpired), pb::JOB_OUTCOME_PREEMPTED);
  EXPECT_EQ(OutcomeFor(Exited(0), StopReason::kShutdown), pb::JOB_OUTCOME_SUCCEEDED);
}

TEST(OutcomeTest, FromWaitStatus) {
  // waitpid encodings: exit code in bits 8..15; a signal in bits 0..6.
  const ExitStatus e = ExitStatusFromWait(3 << 8);
  EXPECT_EQ(e.exit_code, 3);
  EXPECT_EQ(e.term_signal, 0);
  const ExitStatus s = ExitStatusFromWait(SIGKILL);
  EXPECT_EQ(s.exit_code, -1);
  EXPECT_EQ(s.term_signal, SIGKILL);
  EXPECT_EQ(ExitStatusFromWait(0).exit_code, 0);
}

TEST(OutcomeTest, DescribeExit) {
  EXPECT_EQ(DescribeExit(Exited(3)), "exit code 3");
  EXPECT_EQ(DescribeExit(Signaled(SIGKILL)), "killed by signal 9 (SIGKILL)");
}

TEST(OutcomeTest, TailKeepsLastLines) {
  std::string text;
  for (int i = 1; i <= 50; ++i) text += "line " + std::to_string(i) + "\n";
  const std::string tail = TailOfText(text, 40, 4096);
  EXPECT_EQ(tail.substr(0, 8), "line 11\n");
  EXPECT_EQ(tail.substr(tail.size() - 7), "line 50");
  EXPECT_EQ(TailOfText("a\nb\nc", 2, 100), "b\nc");
  EXPECT_EQ(TailOfText("a\nb\nc\n", 2, 100), "b\nc");
  EXPECT_EQ(TailOfText("", 40, 100), "");
  EXPECT_EQ(TailOfText("only", 40, 100), "only");
}

TEST(OutcomeTest, TailIsBoundedInBytesAtLineStarts) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += std::string(200, 'a' + (i % 26)) + "\n";
  const std::string tail = TailOfText(text, 40, 4096);
  EXPECT_LE(tail.size(), 4096u);
  EXPECT_EQ(tail.size(), 20u * 201u - 1u);  // 20 whole lines of 200 + newlines between
  // A single line longer than the bound is cut from the front.
  const std::string long_line(10000, 'z');
  EXPECT_EQ(TailOfText(long_line, 40, 4096), std::string(4096, 'z'));
}

TEST(OutcomeTest, TailIsValidUtf8) {
  EXPECT_EQ(SanitizeUtf8("ok \xc3\xa9 \xff bad"), "ok \xc3\xa9 ? bad");
  EXPECT_EQ(SanitizeUtf8("\xe2\x82"), "??");  // truncated sequence
  // Cutting inside a 2-byte character drops its continuation byte.
  EXPECT_EQ(TailOfText("\xc3\xa9xyz", 1, 4), "xyz");
}

TEST(OutcomeTest, ReadFileTail) {
  std::string dir = ::testing::TempDir() + "/tail_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/stderr.log";
  auto missing = ReadFileTail(path, 40, 4096);
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(*missing, "");
  {
    std::ofstream out(path);
    for (int i = 0; i < 100000; ++i) out << "noise " << i << "\n";
    out << "rdattn-train: INVALID_ARGUMENT: data.train_shards: no file matches\n";
  }
  auto tail = ReadFileTail(path, 40, 4096);
  ASSERT_TRUE(tail.ok());
  EXPECT_LE(tail->size(), 4096u);
  EXPECT_NE(tail->find("noise 99999\nrdattn-train: INVALID_ARGUMENT"), std::string::npos);
  EXPECT_EQ(tail->substr(0, 12), "noise 99961\n");  // exactly the last 40 lines
}

// Machine failures (docs/worker.md "Start failures"): exit 74 is the machine's fault, and the
// errnos of a full or failing disk are told apart from the job's problems.
TEST(OutcomeTest, ExitSeventyFourIsAMachineFailure) {
  EXPECT_EQ(OutcomeFor({kTrainExitMachineFailed, 0}, StopReason::kNone),
            pb::JOB_OUTCOME_MACHINE_FAILED);
  EXPECT_EQ(OutcomeFor({1, 0}, StopReason::kNone), pb::JOB_OUTCOME_FAILED);
  // A stop order decides first: a rank that exits 74 while preempted is PREEMPTED.
  EXPECT_EQ(OutcomeFor({kTrainExitMachineFailed, 0}, StopReason::kShutdown),
            pb::JOB_OUTCOME_PREEMPTED);
  EXPECT_EQ(OutcomeFor({-1, 9}, StopReason::kNone), pb::JOB_OUTCOME_FAILED);
  for (int err : {ENOSPC, EDQUOT, EIO, EROFS}) EXPECT_TRUE(IsMachineErrno(err)) << err;
  for (int err : {0, ENOENT, EACCES, EINVAL, EEXIST}) EXPECT_FALSE(IsMachineErrno(err)) << err;
}

}  // namespace
}  // namespace rdattn::worker
