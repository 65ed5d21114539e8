// BuildReport on hand-made store rows: pairing per seed, deltas, missing partners, controls.
#include "coordinator/report.h"

#include <gtest/gtest.h>

#include <cmath>

#include "proto/contract/contract.h"

namespace rdattn::coordinator {
namespace {

pb::SweepSpec Spec() {
  pb::SweepSpec s;
  s.set_name("r");
  pb::ScaleSpec* scale = s.add_scales();
  scale->set_name("tiny");
  scale->set_preset("tiny");
  s.add_arms("block");
  s.add_arms("rd");
  for (uint64_t seed : {1, 2, 3}) s.add_seeds(seed);
  pb::ControlSpec* c = s.add_controls();
  c->set_arm("tied");
  c->set_parent_arm("rd");
  c->set_stop_at_tokens(6144);
  s.mutable_data()->add_train_shards("/d/t.bin");
  s.mutable_data()->add_val_shards("/d/v.bin");
  s.mutable_data()->set_tokenizer("byte");
  s.mutable_schedule()->set_total_tokens(12288);
  s.mutable_schedule()->set_global_batch_tokens(512);
  s.mutable_schedule()->set_micro_batch_sequences(8);
  s.mutable_schedule()->add_milestones_tokens(6144);
  s.mutable_schedule()->add_milestones_tokens(12288);
  s.mutable_optim()->set_peak_lr(0.003);
  return s;
}

struct Built {
  ReportInput in;
  int64_t seq = 0;
  void Eval(const std::string& job, int64_t milestone, double nll) {
    EventRow e;
    e.seq = ++seq;
    e.sweep_id = in.sweep.id;
    e.job_id = job;
    e.kind = EventKind::kMetric;
    e.metric_kind = pb::MetricEvent::KIND_EVAL;
    pb::MetricEvent* m = e.event.mutable_metric_event();
    m->set_kind(pb::MetricEvent::KIND_EVAL);
    m->set_job_id(job);
    m->set_milestone_tokens(milestone);
    m->set_val_nll(nll);
    in.eval_events.push_back(e);
  }
  const JobRow& JobOf(uint64_t seed, const std::string& arm) const {
    for (const JobRow& j : in.jobs) {
      if (j.spec.seed() == seed && j.spec.arm() == arm) return j;
    }
    ADD_FAILURE() << "no job " << seed << " " << arm;
    return in.jobs.front();
  }
};

Built Make() {
  Built b;
  b.in.sweep.id = "sw-r";
  b.in.sweep.spec = Spec();
  StatusOr<std::vector<pb::JobSpec>> jobs = contract::ExpandSweep(b.in.sweep.spec, "sw-r");
  EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
  for (const pb::JobSpec& js : *jobs) {
    JobRow j;
    j.id = js.job_id();
    j.sweep_id = "sw-r";
    j.spec = js;
    j.state = JobState::kSucceeded;
    b.in.jobs.push_back(j);
  }
  return b;
}

TEST(ReportTest, ExpectedMilestones) {
  Built b = Make();
  EXPECT_EQ(ExpectedMilestones(b.JobOf(1, "rd").spec.run()), (std::vector<int64_t>{6144, 12288}));
  EXPECT_EQ(ExpectedMilestones(b.JobOf(1, "tied").spec.run()), (std::vector<int64_t>{6144}));
  EXPECT_TRUE(ExpectedMilestones(pb::RunSpec()).empty());
}

TEST(ReportTest, PairsPerSeedAndListsMissingPartners) {
  Built b = Make();
  // An earlier attempt's evaluation of a milestone is replaced by the later one (seq order).
  b.Eval(b.JobOf(1, "rd").id, 6144, 9.9);
  for (uint64_t seed : {1, 2, 3}) {
    const double d = -0.1 * static_cast<double>(seed);  // rd better by 0.1, 0.2, 0.3
    b.Eval(b.JobOf(seed, "block").id, 6144, 4.0);
    b.Eval(b.JobOf(seed, "rd").id, 6144, 4.0 + d);
    b.Eval(b.JobOf(seed, "tied").id, 6144, 4.0 + d + 0.05);
    if (seed != 3) {
      b.Eval(b.JobOf(seed, "block").id, 12288, 3.0);
      b.Eval(b.JobOf(seed, "rd").id, 12288, 3.0 + d);
    }
  }
  b.in.jobs[0].state = JobState::kSucceeded;
  for (JobRow& j : b.in.jobs) {
    if (j.spec.seed() == 3 && j.spec.arm() == "rd") {
      j.state = JobState::kFailed;
      j.failure_reason = "exit code 1";
    }
  }
  pb::Report r = BuildReport(b.in);
  EXPECT_EQ(r.reference_arm(), "block");
  EXPECT_TRUE(r.complete());
  // Rows ordered by scale, milestone, arm: (6144 rd), (6144 tied), (12288 rd).
  ASSERT_EQ(r.rows_size(), 3);
  EXPECT_EQ(r.rows(0).milestone_tokens(), 6144);
  EXPECT_EQ(r.rows(0).arm(), "rd");
  EXPECT_EQ(r.rows(1).arm(), "tied");
  EXPECT_TRUE(r.rows(1).is_control());
  EXPECT_EQ(r.rows(1).reference_arm(), "rd");
  EXPECT_EQ(r.rows(2).milestone_tokens(), 12288);

  const pb::PairedRow& at6k = r.rows(0);
  EXPECT_EQ(at6k.n(), 3);
  EXPECT_NEAR(at6k.pairs(0).delta_nll(), -0.1, 1e-12);  // not 9.9 - 4.0
  EXPECT_NEAR(at6k.mean_delta_nll(), -0.2, 1e-12);
  EXPECT_NEAR(at6k.sd_delta_nll(), 0.1, 1e-12);
  EXPECT_EQ(at6k.wins(), 3);
  EXPECT_NEAR(at6k.ppl_change_of_mean_delta(), std::expm1(-0.2), 1e-12);

  const pb::PairedRow& control = r.rows(1);
  EXPECT_EQ(control.n(), 3);
  EXPECT_EQ(control.wins(), 0);
  // tied vs its parent rd: +0.05 for every seed.
  EXPECT_NEAR(control.mean_delta_nll(), 0.05, 1e-12);
  EXPECT_NEAR(control.pairs(1).delta_nll(), 0.05, 1e-12);

  const pb::PairedRow& at12k = r.rows(2);
  EXPECT_EQ(at12k.n(), 2);  // seed 3 has no pair at 12288
  ASSERT_EQ(r.missing_size(), 2);
  for (const pb::MissingEntry& m : r.missing()) {
    EXPECT_EQ(m.seed(), 3u);
    EXPECT_EQ(m.milestone_tokens(), 12288);
    if (m.arm() == "rd") {
      EXPECT_EQ(m.job_state(), pb::JOB_STATE_FAILED);
      EXPECT_NE(m.reason().find("exit code 1"), std::string::npos);
    } else {
      EXPECT_EQ(m.arm(), "block");
      EXPECT_EQ(m.job_state(), pb::JOB_STATE_SUCCEEDED);
    }
  }
}

TEST(ReportTest, IncompleteWhileJobsRun) {
  Built b = Make();
  b.in.jobs[1].state = JobState::kRunning;
  pb::Report r = BuildReport(b.in);
  EXPECT_FALSE(r.complete());
  for (const pb::PairedRow& row : r.rows()) EXPECT_EQ(row.n(), 0);
  EXPECT_GT(r.missing_size(), 0);
  bool not_reached = false;
  for (const pb::MissingEntry& m : r.missing()) not_reached = not_reached || m.reason() == "not reached yet";
  EXPECT_TRUE(not_reached);
}

}  // namespace
}  // namespace rdattn::coordinator
