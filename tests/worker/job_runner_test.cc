// ResolveRunSpec: what a job's ranks get in job.json.
#include "worker/daemon/job_runner.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

namespace rdattn::worker {
namespace {

pb::LeaseJobResponse Lease() {
  pb::LeaseJobResponse lease;
  lease.set_lease_id("lease-7");
  pb::JobSpec* job = lease.mutable_job();
  job->set_job_id("sw1/S/s1/rd");
  job->set_sweep_id("sw1");
  job->set_attempt(2);
  job->mutable_run()->mutable_model()->set_arm("rd");
  return lease;
}

JobRunnerOptions Options() {
  JobRunnerOptions o;
  o.workdir = "/w";
  o.checkpoint_root = "/shared/ckpt";
  o.threads_per_rank = 3;
  return o;
}

TEST(ResolveRunSpecTest, FillsCheckpointDirThreadsAndIds) {
  const pb::RunSpec spec = ResolveRunSpec(Lease(), Options());
  EXPECT_EQ(spec.checkpoint().dir(), "/shared/ckpt/sw1_S_s1_rd");
  EXPECT_EQ(spec.parallel().threads_per_rank(), 3);
  EXPECT_EQ(spec.job_id(), "sw1/S/s1/rd");
  EXPECT_EQ(spec.run_id(), "sw1/S/s1/rd");
  EXPECT_EQ(spec.sweep_id(), "sw1");
  EXPECT_EQ(spec.model().arm(), "rd");
  EXPECT_TRUE(spec.checkpoint().resume_from().empty());
}

TEST(ResolveRunSpecTest, KeepsWhatTheSpecSets) {
  pb::LeaseJobResponse lease = Lease();
  pb::RunSpec* run = lease.mutable_job()->mutable_run();
  run->mutable_checkpoint()->set_dir("/sweep/ckpt/sw1/S/s1/rd");
  run->mutable_parallel()->set_threads_per_rank(8);
  run->set_run_id("custom-run");
  const pb::RunSpec spec = ResolveRunSpec(lease, Options());
  EXPECT_EQ(spec.checkpoint().dir(), "/sweep/ckpt/sw1/S/s1/rd");
  EXPECT_EQ(spec.parallel().threads_per_rank(), 8);
  EXPECT_EQ(spec.run_id(), "custom-run");
}

TEST(ResolveRunSpecTest, ResumeCheckpointOnlyWhenReadableAndElsewhere) {
  std::string dir = ::testing::TempDir() + "/resolve_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string ckpt = dir + "/ckpt_step_00000020.pt";
  std::ofstream(ckpt) << "x";

  pb::LeaseJobResponse lease = Lease();
  lease.set_resume_checkpoint_path(ckpt);
  EXPECT_EQ(ResolveRunSpec(lease, Options()).checkpoint().resume_from(), ckpt);

  lease.set_resume_checkpoint_path(dir + "/missing.pt");  // not on this worker
  EXPECT_TRUE(ResolveRunSpec(lease, Options()).checkpoint().resume_from().empty());

  // In the job's own directory the trainer finds the newest checkpoint by itself.
  JobRunnerOptions o = Options();
  lease.set_resume_checkpoint_path(ckpt);
  lease.mutable_job()->mutable_run()->mutable_checkpoint()->set_dir(dir);
  EXPECT_TRUE(ResolveRunSpec(lease, o).checkpoint().resume_from().empty());
}

}  // namespace
}  // namespace rdattn::worker
