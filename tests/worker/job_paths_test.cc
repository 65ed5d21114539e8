// Job directory naming and sanitizing.
#include "worker/daemon/job_paths.h"

#include <gtest/gtest.h>

namespace rdattn::worker {
namespace {

TEST(JobPathsTest, SanitizeReplacesSlashes) {
  EXPECT_EQ(SanitizeJobId("sw1/S/s1/rd"), "sw1_S_s1_rd");
  EXPECT_EQ(SanitizeJobId("plain-id_1.2"), "plain-id_1.2");
}

TEST(JobPathsTest, SanitizeReplacesUnsafeCharacters) {
  EXPECT_EQ(SanitizeJobId("a b:c*d\\e"), "a_b_c_d_e");
  EXPECT_EQ(SanitizeJobId("caf\xc3\xa9"), "caf__");
}

TEST(JobPathsTest, SanitizeNeverClimbs) {
  EXPECT_EQ(SanitizeJobId(""), "_");
  EXPECT_EQ(SanitizeJobId("."), "_.");
  EXPECT_EQ(SanitizeJobId(".."), "_..");
  EXPECT_EQ(SanitizeJobId("../etc"), ".._etc");  // one component: no '/' left
  EXPECT_EQ(SanitizeJobId("/abs"), "_abs");
}

TEST(JobPathsTest, AttemptDirectoryAndFiles) {
  const JobPaths p = MakeJobPaths("/w", "sw1/S/s1/rd", 3);
  EXPECT_EQ(p.dir, "/w/sw1_S_s1_rd/attempt-3");
  EXPECT_EQ(p.job_json, "/w/sw1_S_s1_rd/attempt-3/job.json");
  EXPECT_EQ(p.events, "/w/sw1_S_s1_rd/attempt-3/events.jsonl");
  EXPECT_EQ(p.stderr_log, "/w/sw1_S_s1_rd/attempt-3/stderr.log");
  EXPECT_EQ(p.stdout_log, "/w/sw1_S_s1_rd/attempt-3/stdout.log");
  EXPECT_EQ(MakeJobPaths("/w/", "j", 0).dir, "/w/j/attempt-0");
}

TEST(JobPathsTest, CheckpointDirIsPerJobNotPerAttempt) {
  EXPECT_EQ(CheckpointDirFor("/ckpt", "sw1/S/s1/rd"), "/ckpt/sw1_S_s1_rd");
  EXPECT_EQ(CheckpointDirFor("/ckpt/", "j"), "/ckpt/j");
}

}  // namespace
}  // namespace rdattn::worker
