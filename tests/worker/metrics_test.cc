// WorkerMetrics against docs/metrics.md: realistic metric events in, the text exposition out
// (names, label sets, values, histogram buckets and counts, NaN losses), the retention rule, the
// process-wide series; and one real Exposer on 127.0.0.1:0 scraped over a plain socket.
#include "worker/daemon/metrics.h"

#include <gtest/gtest.h>
#include <prometheus/exposer.h>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "tests/worker/exposition.h"

namespace rdattn::worker {
namespace {

namespace pb = ::rdattn::v1;
using testing::Find;
using testing::FindExact;
using testing::Sample;
using Labels = std::map<std::string, std::string>;
using std::chrono::seconds;

constexpr char kJob[] = "sw1/S/s1/rd";

pb::JobSpec Job(const std::string& id = kJob, const std::string& arm = "rd") {
  pb::JobSpec job;
  job.set_job_id(id);
  job.set_sweep_id("sw1");
  job.set_scale("S");
  job.set_arm(arm);
  job.set_seed(1);
  job.set_attempt(1);
  pb::ScheduleSpec* schedule = job.mutable_run()->mutable_schedule();
  schedule->set_total_tokens(10000);
  schedule->set_global_batch_tokens(4096);
  return job;
}

Labels JobLabels(const std::string& id = kJob, const std::string& arm = "rd") {
  return {{"sweep", "sw1"}, {"job_id", id}, {"arm", arm}, {"seed", "1"}, {"scale", "S"}};
}

Labels With(Labels labels, const Labels& extra) {
  for (const auto& [k, v] : extra) labels[k] = v;
  return labels;
}

pb::MetricEvent TrainStep(int64_t step, double loss, double step_seconds) {
  pb::MetricEvent e;
  e.set_kind(pb::MetricEvent::KIND_TRAIN_STEP);
  e.set_seq(static_cast<uint64_t>(step) + 1);
  e.set_step(step);
  e.set_tokens(step * 4096);
  e.set_train_loss(loss);
  e.set_lr(3e-4);
  e.set_grad_norm(1.5);
  e.set_tokens_per_second(1234.5);
  e.set_mfu(0.41);
  e.set_step_seconds(step_seconds);
  e.set_compute_seconds(step_seconds * 0.9);
  e.set_allreduce_seconds(0.002);
  e.set_data_seconds(0.0003);
  e.set_peak_memory_bytes(1000000000);
  return e;
}

pb::MetricEvent Eval(int64_t step) {
  pb::MetricEvent e;
  e.set_kind(pb::MetricEvent::KIND_EVAL);
  e.set_step(step);
  e.set_tokens(step * 4096);
  e.set_milestone_tokens(8000);
  e.set_val_nll(8.5);
  e.set_eval_tokens(2048);
  for (double v : {0.1, 0.2}) e.add_js_nats(v);
  for (double v : {0.14, 0.29}) e.add_js_bits(v);
  e.set_js_mean_nats(0.15);
  for (double v : {1.0, 1.1}) e.add_route_entropy_qk_nats(v);
  for (double v : {0.5, 0.6}) e.add_route_entropy_v_nats(v);
  return e;
}

pb::MetricEvent Finished(int64_t step) {
  pb::MetricEvent e;
  e.set_kind(pb::MetricEvent::KIND_FINISHED);
  e.set_step(step);
  e.set_tokens(step * 4096);
  e.set_test_nll(8.4);
  e.set_eval_tokens(1024);
  e.set_peak_memory_bytes(2000000000);
  return e;
}

std::vector<Sample> Scrape(const WorkerMetrics& metrics) {
  prometheus::TextSerializer serializer;
  return testing::ParseExposition(serializer.Serialize(metrics.registry()->Collect()));
}

// The value of the one series `name` with exactly `labels`; fails the test when absent.
double Value(const std::vector<Sample>& samples, const std::string& name, const Labels& labels) {
  auto s = FindExact(samples, name, labels);
  EXPECT_TRUE(s.has_value()) << name << " with the given labels is missing";
  return s.has_value() ? s->value : std::numeric_limits<double>::quiet_NaN();
}

size_t SeriesOfJob(const std::vector<Sample>& samples, const std::string& id) {
  size_t n = 0;
  for (const Sample& s : samples) {
    auto it = s.labels.find("job_id");
    if (it != s.labels.end() && it->second == id) ++n;
  }
  return n;
}

TEST(BudgetTokensTest, WholeGlobalBatchesUpToTheStop) {
  pb::RunSpec run;
  EXPECT_EQ(BudgetTokens(run), 0);  // no schedule: unknown
  run.mutable_schedule()->set_total_tokens(10000);
  run.mutable_schedule()->set_global_batch_tokens(4096);
  EXPECT_EQ(BudgetTokens(run), 12288);  // 3 steps
  run.mutable_schedule()->set_stop_at_tokens(5000);
  EXPECT_EQ(BudgetTokens(run), 8192);  // stops at step 2
  run.mutable_schedule()->set_stop_at_tokens(8192);
  EXPECT_EQ(BudgetTokens(run), 8192);
  run.mutable_schedule()->set_global_batch_tokens(0);
  EXPECT_EQ(BudgetTokens(run), 8192);
}

TEST(OutcomeLabelTest, OneLabelPerOutcome) {
  EXPECT_EQ(OutcomeLabel(pb::JOB_OUTCOME_SUCCEEDED), "succeeded");
  EXPECT_EQ(OutcomeLabel(pb::JOB_OUTCOME_FAILED), "failed");
  EXPECT_EQ(OutcomeLabel(pb::JOB_OUTCOME_CANCELLED), "cancelled");
  EXPECT_EQ(OutcomeLabel(pb::JOB_OUTCOME_PREEMPTED), "preempted");
}

TEST(WorkerMetricsTest, EventsBecomeGaugesAndHistograms) {
  WorkerMetrics metrics(seconds(300));
  metrics.JobStarted(Job());
  pb::MetricEvent init;
  init.set_kind(pb::MetricEvent::KIND_INIT);
  init.set_param_count(123);
  metrics.Observe(kJob, init);
  metrics.Observe(kJob, TrainStep(1, 10.5, 0.5));
  metrics.Observe(kJob, TrainStep(2, 9.25, 3.0));
  metrics.Observe(kJob, Eval(2));
  pb::MetricEvent checkpoint;
  checkpoint.set_kind(pb::MetricEvent::KIND_CHECKPOINT);
  checkpoint.set_step(2);
  checkpoint.set_tokens(8192);
  metrics.Observe(kJob, checkpoint);
  const auto samples = Scrape(metrics);
  const Labels job = JobLabels();

  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_train_loss", job), 9.25);  // the last step's
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_learning_rate", job), 3e-4);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_grad_norm", job), 1.5);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_tokens_per_second", job), 1234.5);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_model_flops_utilization", job), 0.41);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_peak_memory_bytes", job), 1e9);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_train_step", job), 2);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_train_tokens", job), 8192);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_job_budget_tokens", job), 12288);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_job_running", job), 1);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_val_nll", job), 8.5);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_val_milestone_tokens", job), 8192);  // `tokens`
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_depth_js_divergence", With(job, {{"layer", "0"}})), 0.1);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_depth_js_divergence", With(job, {{"layer", "1"}})), 0.2);
  EXPECT_EQ(Find(samples, "rdattn_depth_js_divergence").size(), 2u);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_depth_js_divergence_mean", job), 0.15);
  EXPECT_DOUBLE_EQ(
      Value(samples, "rdattn_route_entropy_nats", With(job, {{"layer", "0"}, {"route", "qk"}})),
      1.0);
  EXPECT_DOUBLE_EQ(
      Value(samples, "rdattn_route_entropy_nats", With(job, {{"layer", "1"}, {"route", "qk"}})),
      1.1);
  EXPECT_DOUBLE_EQ(
      Value(samples, "rdattn_route_entropy_nats", With(job, {{"layer", "0"}, {"route", "v"}})),
      0.5);
  EXPECT_DOUBLE_EQ(
      Value(samples, "rdattn_route_entropy_nats", With(job, {{"layer", "1"}, {"route", "v"}})),
      0.6);
  EXPECT_EQ(Find(samples, "rdattn_route_entropy_nats").size(), 4u);
  // Not measured yet: no series rather than a misleading 0.
  EXPECT_TRUE(Find(samples, "rdattn_test_nll").empty());
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_nonfinite_loss_total", job), 0);

  // Histograms: one observation per TRAIN_STEP, buckets of docs/metrics.md.
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_step_duration_seconds_count", job), 2);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_step_duration_seconds_sum", job), 3.5);
  const auto step_buckets = Find(samples, "rdattn_step_duration_seconds_bucket", job);
  ASSERT_EQ(step_buckets.size(), 15u);  // 0.01 x 2^k, k = 0..13, and +Inf
  EXPECT_DOUBLE_EQ(std::stod(step_buckets.front().labels.at("le")), 0.01);
  EXPECT_DOUBLE_EQ(std::stod(step_buckets[13].labels.at("le")), 81.92);
  EXPECT_EQ(step_buckets.back().labels.at("le"), "+Inf");
  for (const Sample& b : step_buckets) {
    const double le = b.labels.at("le") == "+Inf" ? INFINITY : std::stod(b.labels.at("le"));
    const double expected = (le >= 0.5 ? 1 : 0) + (le >= 3.0 ? 1 : 0);
    EXPECT_EQ(b.value, expected) << "le=" << b.labels.at("le");
  }
  for (const std::string name : {"rdattn_allreduce_duration_seconds", "rdattn_data_wait_seconds"}) {
    const auto buckets = Find(samples, name + "_bucket", job);
    ASSERT_EQ(buckets.size(), 11u) << name;  // 0.0001 x 4^k, k = 0..9, and +Inf
    EXPECT_DOUBLE_EQ(std::stod(buckets.front().labels.at("le")), 0.0001) << name;
    EXPECT_NEAR(std::stod(buckets[9].labels.at("le")), 26.2144, 1e-9) << name;
    EXPECT_DOUBLE_EQ(Value(samples, name + "_count", job), 2);
  }
  EXPECT_DOUBLE_EQ(
      Value(samples, "rdattn_allreduce_duration_seconds_bucket", With(job, {{"le", "0.0001"}})), 0);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_data_wait_seconds_bucket", With(job, {{"le", "0.0004"}})),
                   2);

  // No label is ever a step, a token count, a milestone, a lease or an attempt: every label
  // of every series is one of the catalogue's. Nor `job`: Prometheus's scrape-job label would
  // rename it exported_job (the job id is `job_id`).
  const std::set<std::string> allowed = {
      "sweep",   "job_id", "arm",    "seed",     "scale",         "layer",       "route",  "le",
      "outcome", "state",  "worker", "hostname", "hardware_kind", "device_name", "version"};
  for (const Sample& s : samples) {
    for (const auto& [name, value] : s.labels) {
      EXPECT_TRUE(allowed.count(name)) << s.name << " carries the label " << name;
    }
    EXPECT_EQ(s.name.rfind("rdattn_", 0), 0u) << s.name;
  }

  metrics.Observe(kJob, Finished(3));
  const auto finished = Scrape(metrics);
  EXPECT_DOUBLE_EQ(Value(finished, "rdattn_test_nll", job), 8.4);
  EXPECT_DOUBLE_EQ(Value(finished, "rdattn_peak_memory_bytes", job), 2e9);
  EXPECT_DOUBLE_EQ(Value(finished, "rdattn_train_step", job), 3);
  EXPECT_DOUBLE_EQ(Value(finished, "rdattn_train_tokens", job), 12288);
  EXPECT_DOUBLE_EQ(Value(finished, "rdattn_worker_events_relayed_total", {}), 6);
}

TEST(WorkerMetricsTest, ArmsWithoutASecondRouteExportNoJsSeries) {
  WorkerMetrics metrics(seconds(300));
  metrics.JobStarted(Job("sw1/S/s1/dr", "dr"));
  pb::MetricEvent eval = Eval(2);
  eval.clear_js_nats();
  eval.clear_js_mean_nats();
  eval.clear_route_entropy_v_nats();
  metrics.Observe("sw1/S/s1/dr", eval);
  const auto samples = Scrape(metrics);
  EXPECT_TRUE(Find(samples, "rdattn_depth_js_divergence").empty());
  EXPECT_TRUE(Find(samples, "rdattn_depth_js_divergence_mean").empty());
  EXPECT_EQ(Find(samples, "rdattn_route_entropy_nats", {{"route", "qk"}}).size(), 2u);
  EXPECT_TRUE(Find(samples, "rdattn_route_entropy_nats", {{"route", "v"}}).empty());
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_val_nll", JobLabels("sw1/S/s1/dr", "dr")), 8.5);
}

TEST(WorkerMetricsTest, ArmAndFinishedWithoutTestShards) {
  WorkerMetrics metrics(seconds(300));
  pb::JobSpec job = Job();
  job.clear_arm();
  job.mutable_run()->mutable_model()->set_arm("rd");  // the arm from the RunSpec
  metrics.JobStarted(job);
  pb::MetricEvent finished = Finished(3);
  finished.clear_test_nll();
  finished.clear_eval_tokens();
  metrics.Observe(kJob, finished);
  const auto samples = Scrape(metrics);
  EXPECT_TRUE(Find(samples, "rdattn_test_nll").empty());
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_peak_memory_bytes", JobLabels()), 2e9);
}

TEST(WorkerMetricsTest, NonFiniteLossOfAFailedRun) {
  WorkerMetrics metrics(seconds(300));
  metrics.JobStarted(Job());
  metrics.Observe(kJob, TrainStep(1, 10.5, 0.5));
  pb::MetricEvent failed;
  failed.set_kind(pb::MetricEvent::KIND_FAILED);
  failed.set_step(2);
  failed.set_train_loss(std::numeric_limits<double>::quiet_NaN());
  failed.set_error("train_loss: NaN at step 2");
  metrics.Observe(kJob, failed);
  auto samples = Scrape(metrics);
  const Labels job = JobLabels();
  EXPECT_TRUE(std::isnan(Value(samples, "rdattn_train_loss", job)));
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_nonfinite_loss_total", job), 1);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_train_step", job), 1);  // a FAILED step is not progress

  // A failure without a loss (an I/O error) changes neither.
  pb::MetricEvent io;
  io.set_kind(pb::MetricEvent::KIND_FAILED);
  io.set_error("data: short read");
  metrics.Observe(kJob, io);
  samples = Scrape(metrics);
  EXPECT_TRUE(std::isnan(Value(samples, "rdattn_train_loss", job)));
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_nonfinite_loss_total", job), 1);

  failed.set_train_loss(std::numeric_limits<double>::infinity());
  metrics.Observe(kJob, failed);
  samples = Scrape(metrics);
  EXPECT_EQ(Value(samples, "rdattn_train_loss", job), std::numeric_limits<double>::infinity());
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_nonfinite_loss_total", job), 2);
}

TEST(WorkerMetricsTest, FinishedJobsAreKeptForTheRetentionThenRemoved) {
  WorkerMetrics metrics(seconds(300));
  const auto t0 = WorkerMetrics::Clock::now();
  metrics.JobStarted(Job());
  metrics.Observe(kJob, TrainStep(1, 10.5, 0.5));
  metrics.Observe(kJob, Eval(2));
  const std::string other = "sw1/S/s2/rd";
  metrics.JobStarted(Job(other));  // still running: never purged
  metrics.JobEnded(kJob, "succeeded", t0);

  auto samples = Scrape(metrics);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_job_running", JobLabels()), 0);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_val_nll", JobLabels()), 8.5);  // the final values stay
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_worker_jobs_finished_total", {{"outcome", "succeeded"}}),
                   1);
  const size_t kept = SeriesOfJob(samples, kJob);
  EXPECT_GT(kept, 20u);

  EXPECT_EQ(metrics.Purge(t0 + seconds(299)), 0);
  EXPECT_EQ(SeriesOfJob(Scrape(metrics), kJob), kept);

  EXPECT_EQ(metrics.Purge(t0 + seconds(300)), 1);
  samples = Scrape(metrics);
  EXPECT_EQ(SeriesOfJob(samples, kJob), 0u);
  EXPECT_GT(SeriesOfJob(samples, other), 0u);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_job_running", JobLabels(other)), 1);
  // Process-wide counters stay.
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_worker_jobs_finished_total", {{"outcome", "succeeded"}}),
                   1);
  EXPECT_EQ(metrics.Purge(t0 + seconds(100000)), 0);
}

TEST(WorkerMetricsTest, ARetriedJobTakesOverItsKeptSeries) {
  WorkerMetrics metrics(seconds(300));
  const auto t0 = WorkerMetrics::Clock::now();
  metrics.JobStarted(Job());
  metrics.Observe(kJob, TrainStep(1, 10.5, 0.5));
  metrics.JobEnded(kJob, "preempted", t0);
  metrics.JobStarted(Job());  // attempt 2 on the same worker, within the retention
  EXPECT_EQ(metrics.Purge(t0 + seconds(1000)), 0);
  auto samples = Scrape(metrics);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_job_running", JobLabels()), 1);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_step_duration_seconds_count", JobLabels()), 1);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_worker_jobs_finished_total", {{"outcome", "preempted"}}),
                   1);
  metrics.JobEnded(kJob, "lease_lost", t0 + seconds(1000));
  EXPECT_EQ(metrics.Purge(t0 + seconds(1299)), 0);
  EXPECT_EQ(metrics.Purge(t0 + seconds(1300)), 1);
  samples = Scrape(metrics);
  EXPECT_EQ(SeriesOfJob(samples, kJob), 0u);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_worker_jobs_finished_total", {{"outcome", "lease_lost"}}),
                   1);
}

TEST(WorkerMetricsTest, ZeroRetentionRemovesAtTheNextPurge) {
  WorkerMetrics metrics(seconds(0));
  const auto t0 = WorkerMetrics::Clock::now();
  metrics.JobStarted(Job());
  EXPECT_EQ(metrics.Purge(t0), 0);  // running
  metrics.JobEnded(kJob, "failed", t0);
  EXPECT_EQ(metrics.Purge(t0), 1);
  EXPECT_EQ(SeriesOfJob(Scrape(metrics), kJob), 0u);
}

TEST(WorkerMetricsTest, ProcessSeries) {
  WorkerMetrics metrics(seconds(300));
  auto samples = Scrape(metrics);
  for (const char* outcome : {"succeeded", "failed", "preempted", "cancelled", "lease_lost"}) {
    EXPECT_DOUBLE_EQ(Value(samples, "rdattn_worker_jobs_finished_total", {{"outcome", outcome}}), 0)
        << outcome;
  }
  EXPECT_TRUE(Find(samples, "rdattn_worker_info").empty());  // not registered yet

  metrics.SetWorkerInfo("w-1", "host-a", pb::HARDWARE_KIND_CPU, "Xeon", "0.1.0");
  metrics.SetWorkerInfo("w-2", "host-a", pb::HARDWARE_KIND_GPU, "NVIDIA H200",
                        "0.1.0");  // registered again
  metrics.SetSlots(3, 5);
  metrics.HeartbeatFailed();
  metrics.HeartbeatFailed();
  metrics.HeartbeatSucceeded(std::chrono::system_clock::time_point(seconds(1700000000)));
  metrics.EventParseError();
  metrics.Observe("unknown-job", TrainStep(1, 1, 1));  // counted, exports nothing per job
  metrics.JobFinishedUnstarted("failed");
  samples = Scrape(metrics);
  const auto info = Find(samples, "rdattn_worker_info");
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0].labels, (Labels{{"worker", "w-2"},
                                    {"hostname", "host-a"},
                                    {"hardware_kind", "gpu"},
                                    {"device_name", "NVIDIA H200"},
                                    {"version", "0.1.0"}}));
  EXPECT_EQ(info[0].value, 1);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_worker_local_slots", {{"state", "free"}}), 3);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_worker_local_slots", {{"state", "busy"}}), 5);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_worker_heartbeat_failures_total", {}), 2);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_worker_last_heartbeat_timestamp_seconds", {}),
                   1700000000);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_worker_event_parse_errors_total", {}), 1);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_worker_events_relayed_total", {}), 1);
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_worker_jobs_finished_total", {{"outcome", "failed"}}), 1);
  EXPECT_EQ(SeriesOfJob(samples, "unknown-job"), 0u);
}

TEST(WorkerMetricsExposerTest, ServesTheRegistryOverHttp) {
  WorkerMetrics metrics(seconds(300));
  metrics.JobStarted(Job());
  metrics.Observe(kJob, TrainStep(1, 10.5, 0.5));
  prometheus::Exposer exposer("127.0.0.1:0");
  exposer.RegisterCollectable(metrics.registry());
  const std::vector<int> ports = exposer.GetListeningPorts();
  ASSERT_EQ(ports.size(), 1u);
  ASSERT_GT(ports[0], 0);
  const std::string response = testing::HttpGet(ports[0]);
  ASSERT_EQ(response.rfind("HTTP/1.", 0), 0u) << response;
  EXPECT_NE(response.find(" 200 "), std::string::npos) << response.substr(0, 200);
  const auto samples = testing::ParseExposition(testing::HttpBody(response));
  EXPECT_DOUBLE_EQ(Value(samples, "rdattn_train_loss", JobLabels()), 10.5);
  EXPECT_NE(response.find("# TYPE rdattn_step_duration_seconds histogram"), std::string::npos);
}

}  // namespace
}  // namespace rdattn::worker
