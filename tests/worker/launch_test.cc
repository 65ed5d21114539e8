// Command lines for one rank (a child process) and for W ranks (mpirun).
#include "worker/daemon/launch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace rdattn::worker {
namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

LaunchSpec Spec(int world_size) {
  LaunchSpec s;
  s.train_binary = "/opt/rdattn/bin/rdattn-train";
  s.mpirun = "/usr/bin/mpirun";
  s.world_size = world_size;
  s.threads_per_rank = 4;
  s.job_json = "/w/j/attempt-2/job.json";
  s.events = "/w/j/attempt-2/events.jsonl";
  s.attempt = 2;
  return s;
}

bool HasEnv(const CommandLine& c, const std::string& name, const std::string& value) {
  return std::find(c.env.begin(), c.env.end(), std::make_pair(name, value)) != c.env.end();
}

bool HasEnvName(const CommandLine& c, const std::string& name) {
  return std::any_of(c.env.begin(), c.env.end(), [&](const auto& kv) { return kv.first == name; });
}

TEST(LaunchTest, SingleRankIsTheTrainerItself) {
  const CommandLine c = BuildCommandLine(Spec(1));
  EXPECT_EQ(c.argv, (std::vector<std::string>{"/opt/rdattn/bin/rdattn-train", "train", "--job",
                                              "/w/j/attempt-2/job.json", "--events",
                                              "/w/j/attempt-2/events.jsonl", "--attempt", "2"}));
  EXPECT_TRUE(HasEnv(c, "OMP_NUM_THREADS", "4"));
  EXPECT_TRUE(HasEnv(c, "MKL_NUM_THREADS", "4"));
  EXPECT_FALSE(HasEnvName(c, "OMPI_ALLOW_RUN_AS_ROOT"));
  EXPECT_FALSE(HasEnvName(c, "CUDA_VISIBLE_DEVICES"));
}

TEST(LaunchTest, SeveralRanksGoThroughMpirun) {
  const CommandLine c = BuildCommandLine(Spec(4));
  EXPECT_EQ(c.argv, (std::vector<std::string>{
                        "/usr/bin/mpirun", "-np", "4", "--oversubscribe", "--bind-to", "none", "-x",
                        "OMP_NUM_THREADS", "-x", "MKL_NUM_THREADS", "/opt/rdattn/bin/rdattn-train",
                        "train", "--job", "/w/j/attempt-2/job.json", "--events",
                        "/w/j/attempt-2/events.jsonl", "--attempt", "2"}));
  EXPECT_TRUE(HasEnv(c, "OMP_NUM_THREADS", "4"));
  EXPECT_FALSE(HasEnvName(c, "OMPI_ALLOW_RUN_AS_ROOT"));
}

TEST(LaunchTest, MpirunAsRootGetsTheWaiver) {
  LaunchSpec s = Spec(2);
  s.run_as_root = true;
  const CommandLine c = BuildCommandLine(s);
  EXPECT_TRUE(HasEnv(c, "OMPI_ALLOW_RUN_AS_ROOT", "1"));
  EXPECT_TRUE(HasEnv(c, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"));
  // A single rank needs no waiver even as root: no mpirun.
  s.world_size = 1;
  EXPECT_FALSE(HasEnvName(BuildCommandLine(s), "OMPI_ALLOW_RUN_AS_ROOT"));
}

TEST(LaunchTest, GpusAndThreadFloor) {
  LaunchSpec s = Spec(2);
  s.cuda_visible_devices = "2,3";
  s.threads_per_rank = 0;
  const CommandLine c = BuildCommandLine(s);
  EXPECT_TRUE(HasEnv(c, "CUDA_VISIBLE_DEVICES", "2,3"));
  EXPECT_TRUE(HasEnv(c, "OMP_NUM_THREADS", "1"));
  EXPECT_NE(std::find(c.argv.begin(), c.argv.end(), "CUDA_VISIBLE_DEVICES"), c.argv.end());
}

TEST(LaunchTest, AttemptZeroOmitsTheFlag) {
  LaunchSpec s = Spec(1);
  s.attempt = 0;
  const CommandLine c = BuildCommandLine(s);
  EXPECT_EQ(std::find(c.argv.begin(), c.argv.end(), "--attempt"), c.argv.end());
}

TEST(LaunchTest, MergedEnvironmentOverrides) {
  ::setenv("RDATTN_LAUNCH_TEST", "old", 1);
  ::setenv("OMP_NUM_THREADS", "99", 1);
  CommandLine c;
  c.env = {{"OMP_NUM_THREADS", "4"}, {"RDATTN_NEW", "x"}};
  const std::vector<std::string> env = MergedEnvironment(c);
  auto count = [&](const std::string& entry) { return std::count(env.begin(), env.end(), entry); };
  EXPECT_EQ(count("RDATTN_LAUNCH_TEST=old"), 1);
  EXPECT_EQ(count("OMP_NUM_THREADS=4"), 1);
  EXPECT_EQ(count("OMP_NUM_THREADS=99"), 0);
  EXPECT_EQ(count("RDATTN_NEW=x"), 1);
}

TEST(LaunchTest, FormatQuotes) {
  CommandLine c;
  c.env = {{"A", "1"}};
  c.argv = {"/bin/prog", "plain", "has space", "it's"};
  EXPECT_EQ(FormatCommandLine(c), "A=1 /bin/prog plain 'has space' 'it'\\''s'");
}

TEST(LaunchTest, FindExecutable) {
  auto sh = FindExecutable("sh");
  ASSERT_TRUE(sh.ok()) << sh.status().ToString();
  EXPECT_EQ(sh->back(), 'h');
  EXPECT_EQ(FindExecutable("no-such-program-rdattn").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(FindExecutable("/etc").status().code(), StatusCode::kNotFound);  // a directory
  EXPECT_TRUE(FindExecutable("/bin/sh").ok());
}

}  // namespace
}  // namespace rdattn::worker
