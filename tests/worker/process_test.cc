// ChildProcess: output files, exit statuses, and stopping a whole session of processes.
#include "worker/daemon/process.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <csignal>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace rdattn::worker {
namespace {

using std::chrono::milliseconds;

std::string TempDir() {
  std::string dir = ::testing::TempDir() + "/process_XXXXXX";
  EXPECT_NE(::mkdtemp(dir.data()), nullptr);
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ChildProcess::Options Shell(const std::string& script, const std::string& dir) {
  ChildProcess::Options o;
  o.command.argv = {"/bin/sh", "-c", script};
  o.command.env = {{"RDATTN_TEST_VAR", "42"}};
  o.stdout_path = dir + "/stdout.log";
  o.stderr_path = dir + "/stderr.log";
  return o;
}

// Waits until `n` processes of the session run `sleep` (exec'd, not merely forked: a signal
// that lands between fork and exec is lost to the shell's own handler).
bool WaitForSleepers(pid_t sid, int n) {
  for (int i = 0; i < 500; ++i) {
    int sleepers = 0;
    for (pid_t member : SessionMembers(sid)) {
      std::ifstream comm("/proc/" + std::to_string(member) + "/comm");
      std::string name;
      if (std::getline(comm, name) && name == "sleep") ++sleepers;
    }
    if (sleepers >= n) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

TEST(ChildProcessTest, ExitCodeOutputAndEnvironment) {
  const std::string dir = TempDir();
  auto child = ChildProcess::Spawn(Shell("echo out $RDATTN_TEST_VAR; echo err >&2; exit 3", dir));
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  auto exit = (*child)->Wait(milliseconds(10000));
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 3);
  EXPECT_EQ(exit->term_signal, 0);
  EXPECT_EQ(ReadAll(dir + "/stdout.log"), "out 42\n");
  EXPECT_EQ(ReadAll(dir + "/stderr.log"), "err\n");
  // Later calls return the same status.
  EXPECT_EQ((*child)->Wait(milliseconds(0))->exit_code, 3);
}

TEST(ChildProcessTest, MissingProgramIsNotFound) {
  ChildProcess::Options o;
  o.command.argv = {"/no/such/rdattn-train"};
  EXPECT_EQ(ChildProcess::Spawn(o).status().code(), StatusCode::kNotFound);
}

TEST(ChildProcessTest, SignalReachesEveryProcessOfTheSession) {
  const std::string dir = TempDir();
  auto child = ChildProcess::Spawn(Shell("sleep 30 & sleep 30 & wait", dir));
  ASSERT_TRUE(child.ok());
  const pid_t pid = (*child)->pid();
  ASSERT_TRUE(WaitForSleepers(pid, 2));
  EXPECT_FALSE((*child)->Wait(milliseconds(0)).has_value());
  (*child)->SignalRanks(SIGTERM);
  auto exit = (*child)->Wait(milliseconds(10000));
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->term_signal, SIGTERM);
  for (int i = 0; i < 200 && !SessionMembers(pid).empty(); ++i)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(SessionMembers(pid).empty());
}

TEST(ChildProcessTest, StraysAreKilledWhenTheLauncherExits) {
  const std::string dir = TempDir();
  auto child = ChildProcess::Spawn(Shell("sleep 30 & exit 0", dir));
  ASSERT_TRUE(child.ok());
  const pid_t pid = (*child)->pid();
  auto exit = (*child)->Wait(milliseconds(10000));
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 0);
  for (int i = 0; i < 200 && !SessionMembers(pid).empty(); ++i)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(SessionMembers(pid).empty());
}

TEST(ChildProcessTest, UnderMpirunOnlyTheRanksGetTheSignal) {
  const std::string dir = TempDir();
  ChildProcess::Options o = Shell(
      "trap 'echo launcher-signalled' TERM; sleep 30 & wait $!; echo ranks-done; exit 7", dir);
  o.launcher_is_mpirun = true;
  auto child = ChildProcess::Spawn(o);
  ASSERT_TRUE(child.ok());
  ASSERT_TRUE(WaitForSleepers((*child)->pid(), 1));
  (*child)->SignalRanks(SIGTERM);
  auto exit = (*child)->Wait(milliseconds(10000));
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 7);
  EXPECT_EQ(ReadAll(dir + "/stdout.log"), "ranks-done\n");
}

TEST(ChildProcessTest, KillAllEndsProcessesThatIgnoreSigterm) {
  const std::string dir = TempDir();
  auto child = ChildProcess::Spawn(Shell("trap '' TERM; sleep 30 & wait", dir));
  ASSERT_TRUE(child.ok());
  ASSERT_TRUE(WaitForSleepers((*child)->pid(), 1));
  (*child)->SignalRanks(SIGTERM);
  EXPECT_FALSE((*child)->Wait(milliseconds(300)).has_value());
  (*child)->KillAll();
  auto exit = (*child)->Wait(milliseconds(10000));
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->term_signal, SIGKILL);
}

}  // namespace
}  // namespace rdattn::worker
