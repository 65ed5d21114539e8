// GetSweep for big sweeps (docs/coordinator.md "Reading big sweeps"): the summary view's counts
// (pair groups by state, jobs per stored milestone, retries, problems), the full view's pages
// (every job exactly once, in order, across pages and while jobs are added; bad tokens named),
// and a 10,000-job sweep whose summary stays a few KB (its time is printed, not asserted).
#include "coordinator/sweep_summary.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "coordinator/clock.h"
#include "coordinator/core.h"
#include "coordinator/store.h"
#include "tests/coordinator/test_util.h"
#include "tests/coordinator/tiny_sweep.h"

namespace rdattn::coordinator {
namespace {

namespace pb = ::rdattn::v1;

std::vector<uint64_t> Seeds(int n) {
  std::vector<uint64_t> out;
  for (int i = 1; i <= n; ++i) out.push_back(static_cast<uint64_t>(i));
  return out;
}

// A coordinator on a real SQLite file. Between Core lifetimes the test edits the store directly
// (job states, stored evaluations) to set up exact situations.
class Harness {
 public:
  Harness() : db_(dir_.File("coord.db")) {}

  std::unique_ptr<Store> OpenStore() {
    StoreOptions o;
    o.synchronous_full = false;  // set-up speed only; nothing here tests durability
    StatusOr<std::unique_ptr<Store>> s = Store::Open(db_, o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  Core& StartCore() {
    core_.reset();
    CoreOptions o;
    o.restart_grace = absl::ZeroDuration();
    o.rng_seed = 7;
    core_ = std::make_unique<Core>(OpenStore(), &clock_, o);
    return *core_;
  }
  void StopCore() { core_.reset(); }
  Core& core() { return *core_; }
  FakeClock& clock() { return clock_; }

  std::string Submit(const pb::SweepSpec& spec, const std::string& request_id) {
    pb::SubmitSweepRequest req;
    req.set_request_id(request_id);
    *req.mutable_spec() = spec;
    StatusOr<pb::SubmitSweepResponse> r = core_->SubmitSweep(req, "");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->sweep().sweep_id() : "";
  }

  StatusOr<pb::GetSweepResponse> Get(const std::string& sweep_id, pb::SweepView view,
                                     int page_size = 0, const std::string& token = "") {
    pb::GetSweepRequest req;
    req.set_sweep_id(sweep_id);
    req.set_view(view);
    req.set_page_size(page_size);
    req.set_page_token(token);
    return core_->GetSweep(req);
  }

 private:
  testing::TempDir dir_;
  std::string db_;
  FakeClock clock_;
  std::unique_ptr<Core> core_;
};

EventRow Eval(const JobRow& job, int attempt, uint64_t seq, int64_t milestone) {
  EventRow e;
  e.sweep_id = job.sweep_id;
  e.job_id = job.id;
  e.kind = EventKind::kMetric;
  e.attempt = attempt;
  e.metric_seq = static_cast<int64_t>(seq);
  e.metric_kind = pb::MetricEvent::KIND_EVAL;
  e.time_us = 2'000'000;
  pb::MetricEvent* m = e.event.mutable_metric_event();
  m->set_seq(seq);
  m->set_job_id(job.id);
  m->set_attempt(attempt);
  m->set_kind(pb::MetricEvent::KIND_EVAL);
  m->set_tokens(milestone + 100);  // tokens may pass the milestone; milestone_tokens counts
  m->set_milestone_tokens(milestone);
  m->set_val_nll(3.0);
  return e;
}

EventRow TrainStep(const JobRow& job, uint64_t seq) {
  EventRow e = Eval(job, 1, seq, 0);
  e.metric_kind = pb::MetricEvent::KIND_TRAIN_STEP;
  e.event.mutable_metric_event()->set_kind(pb::MetricEvent::KIND_TRAIN_STEP);
  e.event.mutable_metric_event()->set_milestone_tokens(0);
  return e;
}

const JobRow& Find(const std::vector<JobRow>& jobs, uint64_t seed, const std::string& arm) {
  for (const JobRow& j : jobs) {
    if (j.spec.seed() == seed && j.spec.arm() == arm) return j;
  }
  ADD_FAILURE() << "no job seed " << seed << " arm " << arm;
  return jobs.front();
}

TEST(SweepSummaryTest, CountsPairGroupsMilestonesRetriesAndProblems) {
  Harness h;
  h.StartCore();
  const std::string sweep = h.Submit(testing::TinySweep(Seeds(4)), "r1");  // 4 groups x 2 arms
  h.StopCore();
  const int64_t now_us = absl::ToUnixMicros(h.clock().Now());
  std::string failed_id, backoff_id;
  {
    std::unique_ptr<Store> store = h.OpenStore();
    StatusOr<std::vector<JobRow>> jobs = store->ListJobs(sweep);
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    ASSERT_EQ(jobs->size(), 8u);
    auto set = [&](uint64_t seed, const std::string& arm, JobState state, int attempts,
                   const std::string& reason = "", int64_t update_us = 1) {
      JobRow j = Find(*jobs, seed, arm);
      j.state = state;
      j.attempts = attempts;
      j.failure_reason = reason;
      j.update_us = update_us;
      j.tokens = 1000 * static_cast<int64_t>(seed);
      if (state == JobState::kRunning) j.tokens_per_second = 250;
      return store->UpdateJob(j);
    };
    uint64_t seq = 0;
    auto eval = [&](uint64_t seed, const std::string& arm, int attempt, int64_t m) {
      EventRow e = Eval(Find(*jobs, seed, arm), attempt, ++seq, m);
      return store->AppendEvent(e).status();
    };
    // Group 1 complete, both arms at both milestones (block's 6144 evaluated twice, by two
    // attempts: one job, counted once).
    ASSERT_TRUE(set(1, "block", JobState::kSucceeded, 2).ok());
    ASSERT_TRUE(set(1, "rd", JobState::kSucceeded, 1).ok());
    for (const std::string arm : {"block", "rd"}) {
      ASSERT_TRUE(eval(1, arm, 1, 6144).ok());
      ASSERT_TRUE(eval(1, arm, 1, 12288).ok());
    }
    ASSERT_TRUE(eval(1, "block", 2, 6144).ok());
    // Group 2 running: block RUNNING past the first milestone, rd PENDING.
    ASSERT_TRUE(set(2, "block", JobState::kRunning, 1).ok());
    ASSERT_TRUE(eval(2, "block", 1, 6144).ok());
    // Group 3 failed: block FAILED, rd SUCCEEDED with both milestones.
    ASSERT_TRUE(set(3, "block", JobState::kFailed, 3, "exit 1: boom", 50).ok());
    failed_id = Find(*jobs, 3, "block").id;
    ASSERT_TRUE(set(3, "rd", JobState::kSucceeded, 1).ok());
    ASSERT_TRUE(eval(3, "rd", 1, 6144).ok());
    ASSERT_TRUE(eval(3, "rd", 1, 12288).ok());
    // Group 4 waiting: rd back to PENDING after a machine failure, backing off.
    {
      JobRow j = Find(*jobs, 4, "rd");
      j.attempts = 1;
      j.machine_failures = 1;
      j.not_before_us = now_us + 60'000'000;
      j.failure_reason = "machine failed: ENOSPC";
      j.update_us = 40;
      ASSERT_TRUE(store->UpdateJob(j).ok());
      backoff_id = j.id;
    }
    // A train step is not an evaluation.
    EventRow step = TrainStep(Find(*jobs, 2, "rd"), ++seq);
    ASSERT_TRUE(store->AppendEvent(step).ok());
  }
  h.StartCore();
  StatusOr<pb::GetSweepResponse> r = h.Get(sweep, pb::SWEEP_VIEW_SUMMARY);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sweep().jobs_size(), 0);
  EXPECT_TRUE(r->next_page_token().empty());
  EXPECT_EQ(r->sweep().job_counts().total(), 8);
  ASSERT_TRUE(r->sweep().has_summary());
  const pb::SweepSummary& s = r->sweep().summary();
  EXPECT_EQ(s.pair_groups().total(), 4);
  EXPECT_EQ(s.pair_groups().complete(), 1);
  EXPECT_EQ(s.pair_groups().running(), 1);
  EXPECT_EQ(s.pair_groups().failed(), 1);
  EXPECT_EQ(s.pair_groups().waiting(), 1);
  ASSERT_EQ(s.milestones_size(), 2) << s.DebugString();
  EXPECT_EQ(s.milestones(0).milestone_tokens(), 6144);
  EXPECT_EQ(s.milestones(0).jobs_expected(), 8);
  EXPECT_EQ(s.milestones(0).jobs_stored(), 4);  // 1/block, 1/rd, 2/block, 3/rd
  EXPECT_EQ(s.milestones(1).milestone_tokens(), 12288);
  EXPECT_EQ(s.milestones(1).jobs_expected(), 8);
  EXPECT_EQ(s.milestones(1).jobs_stored(), 3);
  EXPECT_FALSE(s.milestones_truncated());
  EXPECT_EQ(s.last_common_milestone_tokens(), 0);
  EXPECT_EQ(s.furthest_milestone_tokens(), 12288);
  EXPECT_EQ(s.jobs_retried(), 2);  // 1/block (2 attempts), 3/block (3)
  EXPECT_EQ(s.machine_failures(), 1);
  EXPECT_EQ(s.jobs_backing_off(), 1);
  EXPECT_DOUBLE_EQ(s.tokens_per_second(), 250);
  EXPECT_EQ(s.jobs_with_problems(), 2);
  ASSERT_EQ(s.recent_problems_size(), 2);
  EXPECT_EQ(s.recent_problems(0).job_id(), failed_id);  // newest first
  EXPECT_EQ(s.recent_problems(0).state(), pb::JOB_STATE_FAILED);
  EXPECT_EQ(s.recent_problems(0).attempts(), 3);
  EXPECT_EQ(s.recent_problems(0).reason(), "exit 1: boom");
  EXPECT_EQ(s.recent_problems(1).job_id(), backoff_id);
  EXPECT_EQ(s.recent_problems(1).state(), pb::JOB_STATE_PENDING);

  // BASIC has no summary; the summary view serves no jobs and takes no page.
  StatusOr<pb::GetSweepResponse> basic = h.Get(sweep, pb::SWEEP_VIEW_BASIC);
  ASSERT_TRUE(basic.ok());
  EXPECT_FALSE(basic->sweep().has_summary());
  StatusOr<pb::GetSweepResponse> paged = h.Get(sweep, pb::SWEEP_VIEW_SUMMARY, 10);
  EXPECT_EQ(paged.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(paged.status().message().find("page_size"), std::string::npos);
}

// The stored milestones are counted incrementally (a cache per sweep brought up to date with
// the EVAL events stored since the last call): what comes later is counted, each job once.
TEST(SweepSummaryTest, StoredMilestonesFollowNewEvaluations) {
  Harness h;
  h.StartCore();
  const std::string sweep = h.Submit(testing::TinySweep(Seeds(2)), "r1");
  const std::string other = h.Submit(testing::TinySweep(Seeds(1), 2, {6144, 12288}, "o"), "r2");
  h.StopCore();
  std::unique_ptr<Store> store = h.OpenStore();
  StatusOr<std::vector<JobRow>> jobs = store->ListJobs(sweep);
  StatusOr<std::vector<JobRow>> other_jobs = store->ListJobs(other);
  ASSERT_TRUE(jobs.ok() && other_jobs.ok());
  uint64_t seq = 0;
  auto eval = [&](const JobRow& j, int attempt, int64_t m) {
    EventRow e = Eval(j, attempt, ++seq, m);
    ASSERT_TRUE(store->AppendEvent(e).ok());
  };
  auto counts = [&](const std::string& id) {
    StatusOr<std::map<int64_t, int>> c = store->CountStoredEvalMilestones(id);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *c : std::map<int64_t, int>{};
  };
  EXPECT_TRUE(counts(sweep).empty());
  eval((*jobs)[0], 1, 6144);
  eval((*other_jobs)[0], 1, 6144);  // another sweep's: not counted here
  EXPECT_EQ(counts(sweep), (std::map<int64_t, int>{{6144, 1}}));
  eval((*jobs)[0], 2, 6144);  // the same job again, a later attempt
  eval((*jobs)[1], 1, 6144);
  eval((*jobs)[1], 1, 12288);
  EXPECT_EQ(counts(sweep), (std::map<int64_t, int>{{6144, 2}, {12288, 1}}));
  // Inside a transaction that is rolled back, the rows seen are not kept.
  Status st = store->Transaction([&]() -> Status {
    EventRow e = Eval((*jobs)[2], 1, ++seq, 12288);
    RDATTN_RETURN_IF_ERROR(store->AppendEvent(e).status());
    EXPECT_EQ(counts(sweep), (std::map<int64_t, int>{{6144, 2}, {12288, 2}}));
    return AbortedError("roll back");
  });
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_EQ(counts(sweep), (std::map<int64_t, int>{{6144, 2}, {12288, 1}}));
  EXPECT_EQ(counts(other), (std::map<int64_t, int>{{6144, 1}}));
  // Every job at every milestone: the last common milestone is the last one.
  SweepSummaryFacts facts;
  SweepSummaryFacts::ArmGroup g;
  g.jobs = 2;
  g.spec = (*jobs)[0].spec;
  facts.arm_groups.push_back(g);
  pb::SweepSummary s = MakeSweepSummary(facts, {{6144, 2}, {12288, 1}});
  EXPECT_EQ(s.last_common_milestone_tokens(), 6144);
  EXPECT_EQ(s.furthest_milestone_tokens(), 12288);
  s = MakeSweepSummary(facts, {{6144, 2}, {12288, 2}});
  EXPECT_EQ(s.last_common_milestone_tokens(), 12288);
}

}  // namespace
}  // namespace rdattn::coordinator

namespace rdattn::coordinator {
namespace {

// Job ids of every page of the full view, following next_page_token.
std::vector<std::string> AllPages(Harness& h, const std::string& sweep, int page_size, int* pages) {
  std::vector<std::string> ids;
  std::string token;
  *pages = 0;
  do {
    StatusOr<pb::GetSweepResponse> r = h.Get(sweep, pb::SWEEP_VIEW_FULL, page_size, token);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) break;
    EXPECT_LE(r->sweep().jobs_size(), page_size);
    EXPECT_EQ(r->sweep().job_counts().total(), 50);
    for (const pb::JobStatus& j : r->sweep().jobs()) ids.push_back(j.job().job_id());
    token = r->next_page_token();
    ++*pages;
  } while (!token.empty() && *pages < 100);
  return ids;
}

TEST(SweepSummaryTest, PagesServeEveryJobOnceInOrder) {
  Harness h;
  h.StartCore();
  const std::string sweep = h.Submit(testing::TinySweep(Seeds(25)), "r1");  // 50 jobs
  const std::string other = h.Submit(testing::TinySweep(Seeds(1), 2, {6144, 12288}, "o"), "r2");
  StatusOr<pb::GetSweepResponse> all = h.Get(sweep, pb::SWEEP_VIEW_FULL);  // page_size 0: all
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->sweep().jobs_size(), 50);
  EXPECT_TRUE(all->next_page_token().empty());
  std::vector<std::string> expected;
  for (const pb::JobStatus& j : all->sweep().jobs()) expected.push_back(j.job().job_id());
  // UNSPECIFIED is FULL, as before paging.
  StatusOr<pb::GetSweepResponse> unspecified = h.Get(sweep, pb::SWEEP_VIEW_UNSPECIFIED);
  ASSERT_TRUE(unspecified.ok());
  EXPECT_EQ(unspecified->sweep().jobs_size(), 50);

  for (int size : {1, 7, 49, 50, 51, 5000}) {
    int pages = 0;
    EXPECT_EQ(AllPages(h, sweep, size, &pages), expected) << "page_size " << size;
    EXPECT_EQ(pages, size >= 50 ? 1 : (50 + size - 1) / size) << "page_size " << size;
  }

  // Bad tokens name page_token; so does a token of another sweep.
  StatusOr<pb::GetSweepResponse> first = h.Get(sweep, pb::SWEEP_VIEW_FULL, 7);
  ASSERT_TRUE(first.ok());
  const std::string token = first->next_page_token();
  ASSERT_FALSE(token.empty());
  std::string flipped = token;
  flipped[5] = flipped[5] == '0' ? '1' : '0';
  for (const auto& [sweep_id, bad] : std::vector<std::pair<std::string, std::string>>{
           {sweep, "garbage"}, {sweep, flipped}, {sweep, token + "0"}, {other, token}}) {
    StatusOr<pb::GetSweepResponse> r = h.Get(sweep_id, pb::SWEEP_VIEW_FULL, 7, bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("page_token"), std::string::npos) << r.status().message();
  }
  StatusOr<pb::GetSweepResponse> negative = h.Get(sweep, pb::SWEEP_VIEW_FULL, -1);
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("page_size"), std::string::npos);
  StatusOr<pb::GetSweepResponse> unknown = h.Get(sweep, static_cast<pb::SweepView>(9));
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("view"), std::string::npos);
}

// Pages go by creation order (seq): jobs added while a reader pages through (a seed policy adds
// pair groups) come on a later page, and none is served twice or skipped.
TEST(SweepSummaryTest, PagesAreStableWhileJobsAreAdded) {
  Harness h;
  h.StartCore();
  const std::string sweep = h.Submit(testing::TinySweep(Seeds(5)), "r1");  // 10 jobs
  h.StopCore();
  std::unique_ptr<Store> store = h.OpenStore();
  StatusOr<std::vector<JobRow>> jobs = store->ListJobs(sweep);
  ASSERT_TRUE(jobs.ok());
  std::vector<std::string> seen;
  int64_t after = 0;
  int added = 0;
  while (true) {
    StatusOr<std::vector<JobRow>> page = store->ListJobsPage(sweep, after, 4);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    if (page->empty()) break;
    for (const JobRow& j : *page) seen.push_back(j.id);
    after = page->back().seq;
    if (added < 3) {  // a new job after each of the first pages
      JobRow extra = jobs->front();
      extra.id = sweep + "/added-" + std::to_string(added++);
      extra.spec.set_job_id(extra.id);
      ASSERT_TRUE(store->InsertJob(extra).ok());
    }
  }
  ASSERT_EQ(seen.size(), 13u);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 13u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(seen[i], (*jobs)[i].id);
  EXPECT_EQ(seen.back(), sweep + "/added-2");
}

TEST(SweepSummaryTest, PageTokensAreOpaqueAndBoundToTheirSweep) {
  const std::string t = JobPageToken("sw-1", 42);
  StatusOr<int64_t> back = ParseJobPageToken("sw-1", t);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, 42);
  EXPECT_FALSE(ParseJobPageToken("sw-2", t).ok());
  StatusOr<int64_t> first = ParseJobPageToken("sw-1", "");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 0);
  EXPECT_FALSE(ParseJobPageToken("sw-1", JobPageToken("sw-1", 0)).ok());  // seq 0 is no page
}

}  // namespace
}  // namespace rdattn::coordinator

namespace rdattn::coordinator {
namespace {

void StdSystemHack() {
  if (std::system("cp /tmp/rdattn_coord_TenThousand*/coord.db* /tmp/h27/") != 0) ADD_FAILURE();
}
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<size_t>(std::lround(p * static_cast<double>(v.size() - 1)))];
}

// A 10,000-job sweep (5,000 seeds x 2 arms, 14 events per job as a real run stores them): the
// summary is a few KB (asserted) and its time is printed, as are the full view's page times.
// No timed assertion: the machine is shared.
TEST(SweepSummaryTest, TenThousandJobSweepSummaryIsAFewKB) {
  constexpr int kSeeds = 5000;
  Harness h;
  h.StartCore();
  auto t0 = std::chrono::steady_clock::now();
  const std::string sweep = h.Submit(testing::TinySweep(Seeds(kSeeds)), "big");
  ASSERT_FALSE(sweep.empty());
  auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  std::printf("[ figures  ] submit of %d jobs: %.0f ms\n", 2 * kSeeds, ms_since(t0));
  h.StopCore();
  t0 = std::chrono::steady_clock::now();
  int64_t events = 0;
  {
    std::unique_ptr<Store> store = h.OpenStore();
    StatusOr<std::vector<JobRow>> jobs = store->ListJobs(sweep);
    ASSERT_TRUE(jobs.ok());
    ASSERT_EQ(jobs->size(), 2u * kSeeds);
    Status st = store->Transaction([&]() -> Status {
      int i = 0;
      for (JobRow j : *jobs) {
        const int kind = i++ % 10;  // 6 in 10 SUCCEEDED, 2 RUNNING, 2 PENDING
        uint64_t seq = 0;
        if (kind < 8) {
          EventRow e = TrainStep(j, ++seq);
          e.metric_kind = pb::MetricEvent::KIND_INIT;
          e.event.mutable_metric_event()->set_kind(pb::MetricEvent::KIND_INIT);
          RDATTN_RETURN_IF_ERROR(store->AppendEvent(e).status());
          for (int step = 0; step < 8; ++step) {
            EventRow t = TrainStep(j, ++seq);
            RDATTN_RETURN_IF_ERROR(store->AppendEvent(t).status());
          }
          for (int64_t m : {6144, 12288}) {
            if (kind >= 6 && m == 12288) break;
            EventRow ev = Eval(j, 1, ++seq, m);
            RDATTN_RETURN_IF_ERROR(store->AppendEvent(ev).status());
            EventRow ck = TrainStep(j, ++seq);
            ck.metric_kind = pb::MetricEvent::KIND_CHECKPOINT;
            RDATTN_RETURN_IF_ERROR(store->AppendEvent(ck).status());
          }
          j.state = kind < 6 ? JobState::kSucceeded : JobState::kRunning;
          j.attempts = 1;
          j.tokens = kind < 6 ? 12288 : 7000;
          j.tokens_per_second = 1000;
          RDATTN_RETURN_IF_ERROR(store->UpdateJob(j));
        }
        events += static_cast<int64_t>(seq);
      }
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  std::printf("[ figures  ] %lld events stored in %.0f ms\n", static_cast<long long>(events),
              ms_since(t0));

  if (getenv("H27_KEEP")) {
    StdSystemHack();
  }
  h.StartCore();
  // Wall time and this thread's CPU time per call (the CPU time is the firm figure on a shared
  // machine); BASIC beside it, to tell the summary's own cost.
  std::vector<double> summary_ms, summary_cpu_ms, basic_ms, basic_cpu_ms;
  pb::GetSweepResponse summary;
  for (int i = 0; i < 101; ++i) {
    for (pb::SweepView view : {pb::SWEEP_VIEW_SUMMARY, pb::SWEEP_VIEW_BASIC}) {
      const double cpu0 = ThreadCpuMs();
      t0 = std::chrono::steady_clock::now();
      StatusOr<pb::GetSweepResponse> r = h.Get(sweep, view);
      const double wall = ms_since(t0), cpu = ThreadCpuMs() - cpu0;
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (view == pb::SWEEP_VIEW_SUMMARY) {
        summary_ms.push_back(wall);
        summary_cpu_ms.push_back(cpu);
        summary = *r;
      } else {
        basic_ms.push_back(wall);
        basic_cpu_ms.push_back(cpu);
      }
    }
  }
  // The first summary reads every stored evaluation (the milestone cache is cold).
  const double first_ms = summary_ms.front(), first_cpu_ms = summary_cpu_ms.front();
  summary_ms.erase(summary_ms.begin());
  summary_cpu_ms.erase(summary_cpu_ms.begin());
  const pb::SweepSummary& s = summary.sweep().summary();
  EXPECT_EQ(s.pair_groups().total(), kSeeds);
  EXPECT_EQ(s.milestones_size(), 2);
  EXPECT_EQ(s.milestones(0).jobs_stored(), 8 * kSeeds * 2 / 10);
  EXPECT_EQ(s.milestones(1).jobs_stored(), 6 * kSeeds * 2 / 10);
  EXPECT_EQ(summary.sweep().job_counts().succeeded(), 6 * kSeeds * 2 / 10);
  const size_t summary_bytes = s.ByteSizeLong();
  const size_t reply_bytes = summary.ByteSizeLong();
  const size_t spec_bytes = summary.sweep().spec().ByteSizeLong();
  // A few KB: the summary itself, and the reply but for the spec as submitted (its 5,000 seeds).
  EXPECT_LT(summary_bytes, 4096u);
  EXPECT_LT(reply_bytes - spec_bytes, 4096u);
  std::printf(
      "[ figures  ] GetSweep SUMMARY at %d jobs: first (cold) %.1f ms wall / %.1f ms CPU, then "
      "p50 %.2f / p99 %.2f ms wall, p50 %.2f / p99 %.2f ms CPU (100 calls); BASIC p50 %.2f / "
      "p99 %.2f ms wall, p50 %.2f / p99 %.2f ms CPU; summary %zu bytes, reply %zu bytes (spec "
      "%zu of them)\n",
      2 * kSeeds, first_ms, first_cpu_ms, Percentile(summary_ms, 0.5), Percentile(summary_ms, 0.99),
      Percentile(summary_cpu_ms, 0.5), Percentile(summary_cpu_ms, 0.99), Percentile(basic_ms, 0.5),
      Percentile(basic_ms, 0.99), Percentile(basic_cpu_ms, 0.5), Percentile(basic_cpu_ms, 0.99),
      summary_bytes, reply_bytes, spec_bytes);

  // Full view: page_size 0 is refused at this size (naming page_size); pages of 1,000.
  StatusOr<pb::GetSweepResponse> unpaged = h.Get(sweep, pb::SWEEP_VIEW_FULL);
  EXPECT_EQ(unpaged.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unpaged.status().message().find("page_size"), std::string::npos);
  std::vector<double> page_ms, page_cpu_ms;
  size_t page_bytes = 0;
  std::set<std::string> ids;
  std::string token;
  do {
    const double cpu0 = ThreadCpuMs();
    t0 = std::chrono::steady_clock::now();
    StatusOr<pb::GetSweepResponse> r = h.Get(sweep, pb::SWEEP_VIEW_FULL, 5000, token);
    page_ms.push_back(ms_since(t0));
    page_cpu_ms.push_back(ThreadCpuMs() - cpu0);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->sweep().jobs_size(), kMaxJobsPerPage);  // 5,000 asked, 1,000 served
    page_bytes = std::max(page_bytes, r->ByteSizeLong());
    for (const pb::JobStatus& j : r->sweep().jobs()) ids.insert(j.job().job_id());
    token = r->next_page_token();
  } while (!token.empty());
  EXPECT_EQ(ids.size(), 2u * kSeeds);
  std::printf(
      "[ figures  ] GetSweep FULL at %d jobs: %zu pages of %d, per page p50 %.1f / max "
      "%.1f ms wall, p50 %.1f / max %.1f ms CPU; largest page %zu bytes\n",
      2 * kSeeds, page_ms.size(), kMaxJobsPerPage, Percentile(page_ms, 0.5),
      Percentile(page_ms, 1.0), Percentile(page_cpu_ms, 0.5), Percentile(page_cpu_ms, 1.0),
      page_bytes);

  // Where the summary's time goes: its store reads, called directly (CPU ms, p50 of 50 calls).
  h.StopCore();
  std::unique_ptr<Store> store = h.OpenStore();
  ASSERT_TRUE(store->CountStoredEvalMilestones(sweep).ok());  // warm the milestone cache
  std::vector<double> facts_cpu, milestones_cpu, basic_facts_cpu;
  for (int i = 0; i < 50; ++i) {
    double cpu0 = ThreadCpuMs();
    ASSERT_TRUE(store->GetSweepSummaryFacts(sweep, 0, kMaxSummaryProblems).ok());
    facts_cpu.push_back(ThreadCpuMs() - cpu0);
    cpu0 = ThreadCpuMs();
    ASSERT_TRUE(store->CountStoredEvalMilestones(sweep).ok());
    milestones_cpu.push_back(ThreadCpuMs() - cpu0);
    cpu0 = ThreadCpuMs();
    ASSERT_TRUE(store->GetSweepFacts(sweep).ok());
    basic_facts_cpu.push_back(ThreadCpuMs() - cpu0);
  }
  std::printf(
      "[ figures  ] of which (CPU p50): GetSweepSummaryFacts %.2f ms, "
      "CountStoredEvalMilestones (warm) %.3f ms, GetSweepFacts (BASIC's counts) %.2f ms\n",
      Percentile(facts_cpu, 0.5), Percentile(milestones_cpu, 0.5),
      Percentile(basic_facts_cpu, 0.5));
}

}  // namespace
}  // namespace rdattn::coordinator
