// ResolveRunSpec: what a job's ranks get in job.json.
#include "worker/daemon/job_runner.h"

#include <gtest/gtest.h>

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

TEST(ResolveRunSpecTest, PassesTheLeasesCheckpointAndStoredMilestonesToTheTrainer) {
  pb::LeaseJobResponse lease = Lease();
  lease.set_resume_checkpoint_path("/elsewhere/ckpt_step_00000020.pt");
  lease.add_stored_eval_milestones(4096);
  lease.add_stored_eval_milestones(8192);
  const pb::RunSpec spec = ResolveRunSpec(lease, Options());
  // The trainer decides (readable, newer than its own directory's) and warns when it cannot.
  EXPECT_EQ(spec.checkpoint().coordinator_checkpoint(), "/elsewhere/ckpt_step_00000020.pt");
  EXPECT_TRUE(spec.checkpoint().resume_from().empty());
  EXPECT_TRUE(spec.checkpoint().stored_evals_known());
  ASSERT_EQ(spec.checkpoint().stored_eval_milestones_size(), 2);
  EXPECT_EQ(spec.checkpoint().stored_eval_milestones(0), 4096);
  EXPECT_EQ(spec.checkpoint().stored_eval_milestones(1), 8192);

  // A first attempt: nothing stored, and that is known.
  const pb::RunSpec fresh = ResolveRunSpec(Lease(), Options());
  EXPECT_TRUE(fresh.checkpoint().stored_evals_known());
  EXPECT_EQ(fresh.checkpoint().stored_eval_milestones_size(), 0);
  EXPECT_TRUE(fresh.checkpoint().coordinator_checkpoint().empty());
}

}  // namespace
}  // namespace rdattn::worker
