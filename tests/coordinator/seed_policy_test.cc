// Seed policies end to end in the coordinator's core (docs/sweeps.md "Seed policy"): a real
// SQLite file, the job life cycle driven as a worker would (lease, progress, complete), and the
// looks, added jobs, watch events, status and report that follow. The decisions are checked
// against the design's own stored boundaries, so the test states what each look must decide.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator/clock.h"
#include "coordinator/core.h"
#include "coordinator/seed_policy.h"
#include "coordinator/stats/sequential.h"
#include "coordinator/store.h"
#include "proto/contract/contract.h"
#include "tests/coordinator/test_util.h"
#include "tests/coordinator/tiny_sweep.h"

namespace rdattn::coordinator {
namespace {

namespace pb = ::rdattn::v1;

// A core on a SQLite file; Reopen() replaces it with a new one on the same file (a restart).
class Coordinator {
 public:
  Coordinator() : db_(dir_.File("coord.db")) { Reopen(); }

  void Reopen() {
    core_.reset();
    StatusOr<std::unique_ptr<Store>> store = Store::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    CoreOptions o;
    o.lease_ttl = absl::Seconds(60);
    o.restart_grace = absl::ZeroDuration();
    o.wait_slice = absl::Milliseconds(10);
    core_ = std::make_unique<Core>(std::move(store).value(), &clock_, o);
    pb::RegisterWorkerRequest reg;
    reg.set_worker_id(worker_);
    reg.set_hostname("h");
    reg.set_kind(pb::HARDWARE_KIND_CPU);
    reg.set_slots(1);
    StatusOr<pb::RegisterWorkerResponse> r = core_->RegisterWorker(reg);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    worker_ = r->worker_id();
  }

  Core& core() { return *core_; }

  StatusOr<pb::SubmitSweepResponse> Submit(const pb::SweepSpec& spec, const std::string& req_id) {
    pb::SubmitSweepRequest req;
    req.set_request_id(req_id);
    *req.mutable_spec() = spec;
    return core_->SubmitSweep(req, "");
  }

  // Leases one job and ends it: with an eval at every milestone from `nll`, or failed.
  // Returns its job, or an empty spec when none is pending.
  pb::JobSpec RunOne(const std::function<double(const pb::JobSpec&, int64_t)>& nll,
                     bool fail = false) {
    pb::LeaseJobRequest lr;
    lr.set_worker_id(worker_);
    lr.set_free_slots(1);
    StatusOr<pb::LeaseJobResponse> lease = core_->LeaseJob(lr, [] { return false; });
    EXPECT_TRUE(lease.ok()) << lease.status().ToString();
    if (!lease.ok() || !lease->has_job()) return {};
    const pb::JobSpec job = lease->job();
    uint64_t seq = 0;
    pb::MetricEvent init;
    init.set_seq(++seq);
    init.set_kind(pb::MetricEvent::KIND_INIT);
    EXPECT_TRUE(core_->RecordProgress(lease->lease_id(), init).ok());
    if (!fail) {
      for (int64_t m : {6144, 12288}) {
        pb::MetricEvent e;
        e.set_seq(++seq);
        e.set_kind(pb::MetricEvent::KIND_EVAL);
        e.set_step(m / 512);
        e.set_tokens(m);
        e.set_milestone_tokens(m);
        e.set_val_nll(nll(job, m));
        EXPECT_TRUE(core_->RecordProgress(lease->lease_id(), e).ok());
      }
      pb::MetricEvent fin;
      fin.set_seq(++seq);
      fin.set_kind(pb::MetricEvent::KIND_FINISHED);
      fin.set_step(24);
      EXPECT_TRUE(core_->RecordProgress(lease->lease_id(), fin).ok());
    }
    pb::CompleteJobRequest cr;
    cr.set_worker_id(worker_);
    cr.set_lease_id(lease->lease_id());
    cr.set_job_id(job.job_id());
    cr.set_outcome(fail ? pb::JOB_OUTCOME_FAILED : pb::JOB_OUTCOME_SUCCEEDED);
    cr.set_exit_code(fail ? 1 : 0);
    cr.set_last_event_seq(seq);
    StatusOr<pb::CompleteJobResponse> done = core_->CompleteJob(cr);
    EXPECT_TRUE(done.ok()) << done.status().ToString();
    return job;
  }

  pb::SweepStatus Get(const std::string& id) {
    pb::GetSweepRequest req;
    req.set_sweep_id(id);
    req.set_view(pb::SWEEP_VIEW_FULL);
    StatusOr<pb::GetSweepResponse> r = core_->GetSweep(req);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->sweep() : pb::SweepStatus();
  }

  std::vector<pb::WatchEvent> Events(const std::string& id) {
    std::vector<pb::WatchEvent> out;
    pb::WatchSweepRequest req;
    req.set_sweep_id(id);
    Status st = core_->WatchSweep(
        req,
        [&](const pb::WatchEvent& e) {
          out.push_back(e);
          return true;
        },
        [] { return false; });
    EXPECT_TRUE(st.ok()) << st.ToString();
    return out;
  }

 private:
  testing::TempDir dir_;
  std::string db_;
  FakeClock clock_;
  std::string worker_;
  std::unique_ptr<Core> core_;
};

pb::SweepSpec PolicySweep(std::vector<uint64_t> initial, int max, int step,
                          const std::string& boundary, double futility_sd, int max_attempts = 2) {
  pb::SweepSpec s = testing::TinySweep({}, max_attempts);
  pb::SeedPolicy* p = s.mutable_seed_policy();
  for (uint64_t seed : initial) p->add_initial(seed);
  p->set_max(max);
  p->set_step(step);
  p->set_boundary(boundary);
  p->set_futility_effect_sd(futility_sd);
  p->set_simulations(20000);
  return s;
}

std::vector<std::string> LookLines(const std::vector<pb::WatchEvent>& events) {
  std::vector<std::string> out;
  for (const pb::WatchEvent& e : events) {
    if (e.has_seed_look()) out.push_back(contract::DescribeSeedLook(e.seed_look()));
  }
  return out;
}

TEST(SeedPolicyTest, AddsSeedsUntilTheBoundaryIsCrossedThenStops) {
  Coordinator c;
  StatusOr<pb::SubmitSweepResponse> sub = c.Submit(PolicySweep({1, 2, 3}, 7, 2, "pocock", 0), "r1");
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  const std::string sid = sub->sweep().sweep_id();
  pb::SweepStatus st = c.Get(sid);
  ASSERT_EQ(st.jobs_size(), 6);                             // 3 initial seeds x {block, rd}
  const pb::SequentialDesign d = st.sequential().design();  // a copy: st is reassigned
  ASSERT_EQ(d.look_seeds_size(), 3);
  EXPECT_EQ(d.look_seeds(0), 3);
  EXPECT_EQ(d.look_seeds(1), 5);
  EXPECT_EQ(d.look_seeds(2), 7);
  EXPECT_EQ(d.boundary(), "pocock");
  EXPECT_EQ(d.simulations(), 20000);

  // rd is better by these deltas (nats) at the last milestone; block's NLL is 3.0.
  const std::map<uint64_t, double> delta = {
      {1, -0.020}, {2, -0.021}, {3, -0.005}, {4, -0.020}, {5, -0.019}};
  auto nll = [&](const pb::JobSpec& j, int64_t m) {
    const double base = m == 12288 ? 3.0 : 4.0;
    return j.arm() == "rd" ? base + delta.at(j.seed()) : base;
  };
  // What the design must decide: look 1 (seeds 1-3) continues, look 2 (1-5) crosses.
  const double t1 = stats::PairedT({-0.020, -0.021, -0.005});
  const double t2 = stats::PairedT({-0.020, -0.021, -0.005, -0.020, -0.019});
  ASSERT_LT(std::fabs(t1), d.efficacy_t(0)) << "test data: look 1 must continue";
  ASSERT_GE(std::fabs(t2), d.efficacy_t(1)) << "test data: look 2 must stop for efficacy";

  for (int i = 0; i < 6; ++i) ASSERT_TRUE(c.RunOne(nll).job_id().size() > 0) << i;
  st = c.Get(sid);
  EXPECT_EQ(st.state(), pb::SWEEP_STATE_RUNNING);
  ASSERT_EQ(st.jobs_size(), 10);  // seeds 4 and 5 added
  std::set<uint64_t> seeds;
  for (const pb::JobStatus& j : st.jobs()) seeds.insert(j.job().seed());
  EXPECT_EQ(seeds, (std::set<uint64_t>{1, 2, 3, 4, 5}));
  for (const pb::JobStatus& j : st.jobs()) {
    if (j.job().seed() < 4) continue;
    EXPECT_EQ(j.state(), pb::JOB_STATE_PENDING);
    EXPECT_EQ(j.job().pair_group(), sid + "/tiny/s" + std::to_string(j.job().seed()));
    EXPECT_EQ(j.job().run().init_seed(), j.job().seed());
    EXPECT_EQ(j.job().run().data().data_seed(), j.job().seed());
  }
  ASSERT_EQ(st.sequential().looks_size(), 1);
  EXPECT_EQ(st.sequential().looks(0).decision(), "continue");
  EXPECT_FALSE(st.sequential().stopped());

  // A restart between looks: the design and the first look are in the file.
  c.Reopen();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(c.RunOne(nll).job_id().size() > 0) << i;
  EXPECT_TRUE(c.RunOne(nll).job_id().empty());  // nothing more to run: the policy stopped
  st = c.Get(sid);
  EXPECT_EQ(st.state(), pb::SWEEP_STATE_SUCCEEDED);
  EXPECT_EQ(st.jobs_size(), 10);
  ASSERT_EQ(st.sequential().looks_size(), 2);
  EXPECT_TRUE(st.sequential().stopped());
  EXPECT_EQ(st.sequential().stopped_at_look(), 2);
  const pb::LookComparison& cmp = st.sequential().looks(1).comparisons(0);
  EXPECT_EQ(cmp.outcome(), "efficacy");
  EXPECT_EQ(cmp.decided_at_look(), 2);
  EXPECT_EQ(cmp.n(), 5);
  EXPECT_NEAR(cmp.t_statistic(), t2, 1e-9);
  EXPECT_LE(cmp.adjusted_p(), d.alpha());
  EXPECT_LT(cmp.rci_high(), 0.0);  // the repeated interval excludes no difference

  const std::vector<std::string> lines = LookLines(c.Events(sid));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("look 1 at n = 3: continue, adding seeds 4, 5 [tiny rd: t = ", 0), 0u)
      << lines[0];
  EXPECT_EQ(
      lines[1].rfind("look 2 at n = 5: stop (every comparison crossed a boundary) [tiny rd:", 0),
      0u)
      << lines[1];

  // The report: 5 seeds per row, the design and both looks, in every format.
  pb::GetReportRequest rr;
  rr.set_sweep_id(sid);
  StatusOr<pb::GetReportResponse> report = c.core().GetReport(rr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->report().complete());
  ASSERT_EQ(report->report().sequential().looks_size(), 2);
  bool row_seen = false;
  for (const pb::PairedRow& row : report->report().rows()) {
    if (row.milestone_tokens() != 12288 || row.kind() != "main") continue;
    row_seen = true;
    EXPECT_EQ(row.n(), 5);
    EXPECT_EQ(row.n_expected(), 5);
  }
  EXPECT_TRUE(row_seen);
  std::map<std::string, std::string> files;
  for (const pb::ReportFile& f : report->files()) files[f.name()] = f.content();
  ASSERT_TRUE(files.count("report.md"));
  EXPECT_NE(files["report.md"].find("## Seed policy (sequential design)"), std::string::npos);
  EXPECT_NE(files["report.md"].find("The policy stopped at look 2."), std::string::npos);
  ASSERT_TRUE(files.count("looks.csv"));
  EXPECT_NE(files["looks.csv"].find("\n2,5,5,stop,tiny,rd,block,12288,5,"), std::string::npos)
      << files["looks.csv"];
  ASSERT_TRUE(files.count("report.json"));
  EXPECT_NE(files["report.json"].find("\"sequential\": {"), std::string::npos);
}

TEST(SeedPolicyTest, StopsAtMaxSeedsAndKeepsAFailedSeedAsMissing) {
  Coordinator c;
  pb::SweepSpec spec = PolicySweep({1, 2}, 3, 1, "obrien_fleming", 0, /*max_attempts=*/1);
  StatusOr<pb::SubmitSweepResponse> sub = c.Submit(spec, "r2");
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  const std::string sid = sub->sweep().sweep_id();
  // No clear difference: +0.01 then -0.01.
  auto nll = [](const pb::JobSpec& j, int64_t) {
    return j.arm() == "rd" ? 3.0 + (j.seed() % 2 ? 0.01 : -0.01) : 3.0;
  };
  for (int i = 0; i < 4; ++i) ASSERT_FALSE(c.RunOne(nll).job_id().empty());
  pb::SweepStatus st = c.Get(sid);
  ASSERT_EQ(st.sequential().looks_size(), 1);
  EXPECT_EQ(st.sequential().looks(0).decision(), "continue");
  ASSERT_EQ(st.sequential().looks(0).added_seeds_size(), 1);
  EXPECT_EQ(st.sequential().looks(0).added_seeds(0), 3u);
  // Seed 3: block succeeds, rd fails (max_attempts 1).
  for (int i = 0; i < 2; ++i) {
    const pb::JobStatus* next = nullptr;
    st = c.Get(sid);
    for (const pb::JobStatus& j : st.jobs()) {
      if (j.state() == pb::JOB_STATE_PENDING) next = &j;
    }
    ASSERT_NE(next, nullptr);
    const pb::JobSpec ran = c.RunOne(nll, /*fail=*/i == 0 ? false : true);
    ASSERT_FALSE(ran.job_id().empty());
  }
  st = c.Get(sid);
  EXPECT_EQ(st.state(), pb::SWEEP_STATE_FAILED);
  ASSERT_EQ(st.sequential().looks_size(), 2);
  const pb::SeedLook& last = st.sequential().looks(1);
  EXPECT_EQ(last.decision(), "stop");
  EXPECT_EQ(last.reason(), "max seeds reached (3)");
  EXPECT_EQ(last.comparisons(0).n(), 2);  // the failed seed is missing data, not a pair
  EXPECT_EQ(last.comparisons(0).outcome(), "max_seeds");

  pb::GetReportRequest rr;
  rr.set_sweep_id(sid);
  rr.set_omit_files(true);
  StatusOr<pb::GetReportResponse> report = c.core().GetReport(rr);
  ASSERT_TRUE(report.ok());
  bool seed3_missing = false;
  for (const pb::MissingEntry& m : report->report().missing()) {
    if (m.seed() == 3) seed3_missing = true;
  }
  EXPECT_TRUE(seed3_missing);
  for (const pb::PairedRow& row : report->report().rows()) {
    if (row.kind() == "main") {
      EXPECT_EQ(row.n_expected(), 3);
    }
  }
}

TEST(SeedPolicyTest, CancelledSweepAddsNoSeeds) {
  Coordinator c;
  StatusOr<pb::SubmitSweepResponse> sub = c.Submit(PolicySweep({1, 2}, 6, 2, "", 0), "r3");
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  const std::string sid = sub->sweep().sweep_id();
  auto nll = [](const pb::JobSpec&, int64_t) { return 3.0; };
  for (int i = 0; i < 3; ++i) ASSERT_FALSE(c.RunOne(nll).job_id().empty());
  pb::CancelSweepRequest cancel;
  cancel.set_sweep_id(sid);
  ASSERT_TRUE(c.core().CancelSweep(cancel, std::nullopt).ok());
  EXPECT_TRUE(c.RunOne(nll).job_id().empty());
  const pb::SweepStatus st = c.Get(sid);
  EXPECT_EQ(st.state(), pb::SWEEP_STATE_CANCELLED);
  EXPECT_EQ(st.jobs_size(), 4);
  EXPECT_EQ(st.sequential().looks_size(), 0);
}

TEST(SeedPolicyTest, BadPolicyFieldsAreNamed) {
  Coordinator c;
  struct Case {
    std::function<void(pb::SweepSpec&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](pb::SweepSpec& s) { s.add_seeds(1); },
       "seeds: give a list of seeds or a seed policy (seed_policy), not both"},
      {[](pb::SweepSpec& s) { s.mutable_seed_policy()->set_max(100000); }, "seed_policy.max: "},
      {[](pb::SweepSpec& s) { s.mutable_seed_policy()->set_step(0); }, "seed_policy.step: "},
      {[](pb::SweepSpec& s) { s.mutable_seed_policy()->set_alpha(0.9); }, "seed_policy.alpha: "},
      {[](pb::SweepSpec& s) { s.mutable_seed_policy()->set_boundary("pocok"); },
       "seed_policy.boundary: unknown boundary 'pocok'; valid: obrien_fleming, pocock"},
      {[](pb::SweepSpec& s) { s.mutable_seed_policy()->set_futility_effect_sd(-1); },
       "seed_policy.futility_effect_sd: "},
      {[](pb::SweepSpec& s) { s.mutable_seed_policy()->set_futility_power(0.3); },
       "seed_policy.futility_power: "},
      {[](pb::SweepSpec& s) { s.mutable_seed_policy()->set_simulations(50); },
       "seed_policy.simulations: "},
      {[](pb::SweepSpec& s) { s.mutable_seed_policy()->add_initial(2); },
       "seed_policy.initial[3]: duplicate seed 2"},
      {[](pb::SweepSpec& s) { s.mutable_seed_policy()->add_next(9); },
       "seed_policy.next: lists 1 seeds; initial + next must reach max (7)"},
  };
  int n = 0;
  for (const Case& k : cases) {
    pb::SweepSpec spec = PolicySweep({1, 2, 3}, 7, 2, "", 1.0);
    k.edit(spec);
    StatusOr<pb::SubmitSweepResponse> r = c.Submit(spec, "bad-" + std::to_string(n++));
    ASSERT_FALSE(r.ok()) << k.expected;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(k.expected), std::string::npos)
        << r.status().message() << "\n  expected: " << k.expected;
  }
  pb::ListSweepsRequest list;
  StatusOr<pb::ListSweepsResponse> sweeps = c.core().ListSweeps(list);
  ASSERT_TRUE(sweeps.ok());
  EXPECT_EQ(sweeps->sweeps_size(), 0);  // nothing stored

  // The YAML form: `seeds: {...}` is the seed policy; its unknown keys are named.
  StatusOr<pb::SweepSpec> yaml = contract::ParseSweepYaml(
      "name: y\nseeds: {initial: [1, 2, 3], max: 9, step: 3, alpha: 0.05, boundary: pocock}\n");
  ASSERT_TRUE(yaml.ok()) << yaml.status().ToString();
  EXPECT_TRUE(yaml->has_seed_policy());
  EXPECT_EQ(yaml->seed_policy().max(), 9);
  EXPECT_EQ(yaml->seed_policy().initial_size(), 3);
  EXPECT_EQ(yaml->seeds_size(), 0);
  StatusOr<pb::SweepSpec> typo =
      contract::ParseSweepYaml("name: y\nseeds: {initial: [1, 2], maxx: 3}\n");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("seed_policy.maxx: unknown field"), std::string::npos)
      << typo.status().message();
}

// docs/examples/paper-seed-policy.yaml: the paper's protocol with a seed policy. It expands to
// the initial 3 seeds' 30 jobs, and its design's simulated error rates are printed (the note of
// issue 14 quotes them).
TEST(SeedPolicyTest, PaperExampleDesign) {
  std::ifstream in(std::string(RDATTN_EXAMPLES_DIR) + "/paper-seed-policy.yaml");
  ASSERT_TRUE(in.good());
  std::ostringstream text;
  text << in.rdbuf();
  StatusOr<pb::SweepSpec> spec = contract::ParseSweepYaml(text.str());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  StatusOr<std::vector<pb::JobSpec>> jobs = contract::ExpandSweep(*spec, "paper");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ(jobs->size(), 30u);  // 2 scales x 3 seeds x (2 arms + 3 controls)
  StatusOr<pb::SequentialState> state = DesignSeedPolicy(spec->seed_policy());
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  const pb::SequentialDesign& d = state->design();
  ASSERT_EQ(d.look_seeds_size(), 5);
  EXPECT_EQ(d.look_seeds(4), 11);
  EXPECT_EQ(d.simulations(), 200000);
  std::printf(
      "paper-seed-policy.yaml: looks at n = 3 5 7 9 11; efficacy |t| >= %.3f %.3f %.3f "
      "%.3f %.3f; futility |t| < %.3f %.3f %.3f %.3f; simulated type-I error %.4f; "
      "expected seeds %.2f (null), %.2f (effect 1 sd), %.2f (effect 2 sd, power %.4f) of "
      "11\n",
      d.efficacy_t(0), d.efficacy_t(1), d.efficacy_t(2), d.efficacy_t(3), d.efficacy_t(4),
      d.futility_t(0), d.futility_t(1), d.futility_t(2), d.futility_t(3), d.simulated_alpha(),
      d.expected_seeds_null(), d.expected_seeds_futility_effect(), d.expected_seeds_two_sd(),
      d.power_two_sd());
  EXPECT_LE(d.simulated_alpha(), 0.05 + 3 * std::sqrt(0.05 * 0.95 / 200000));
  EXPECT_LT(d.expected_seeds_two_sd(), 11);
  EXPECT_LT(d.expected_seeds_null(), 11);
}

}  // namespace
}  // namespace rdattn::coordinator
