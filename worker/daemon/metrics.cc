// The worker's Prometheus metrics (see metrics.h; the catalogue is docs/metrics.md).
#include "worker/daemon/metrics.h"

#include <cmath>
#include <utility>
#include <vector>

namespace rdattn::worker {
namespace {

namespace pb = ::rdattn::v1;
using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;

// first × factor^k, k = 0 .. count-1.
Histogram::BucketBoundaries Geometric(double first, double factor, int count) {
  Histogram::BucketBoundaries b;
  double v = first;
  for (int k = 0; k < count; ++k, v *= factor) b.push_back(v);
  return b;
}

const Histogram::BucketBoundaries& StepBuckets() {
  static const auto* b = new Histogram::BucketBoundaries(Geometric(0.01, 2, 14));  // 10 ms .. 82 s
  return *b;
}

const Histogram::BucketBoundaries& ShortBuckets() {
  static const auto* b =
      new Histogram::BucketBoundaries(Geometric(0.0001, 4, 10));  // 0.1 ms .. 26 s
  return *b;
}

std::string SeriesKey(const Family<Gauge>& family, const Labels& extra) {
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(&family));
  for (const auto& [name, value] : extra) key += "\x1f" + name + "=" + value;
  return key;
}

}  // namespace

int64_t BudgetTokens(const pb::RunSpec& run) {
  const pb::ScheduleSpec& s = run.schedule();
  if (s.total_tokens() <= 0) return 0;
  int64_t limit = s.total_tokens();
  if (s.stop_at_tokens() > 0 && s.stop_at_tokens() < limit) limit = s.stop_at_tokens();
  const int64_t batch = s.global_batch_tokens();
  if (batch <= 0) return limit;
  return (limit + batch - 1) / batch * batch;
}

std::string_view OutcomeLabel(pb::JobOutcome outcome) {
  switch (outcome) {
    case pb::JOB_OUTCOME_SUCCEEDED:
      return "succeeded";
    case pb::JOB_OUTCOME_CANCELLED:
      return "cancelled";
    case pb::JOB_OUTCOME_PREEMPTED:
      return "preempted";
    case pb::JOB_OUTCOME_MACHINE_FAILED:
      return "machine_failed";
    default:
      return "failed";
  }
}

struct WorkerMetrics::JobSeries {
  Labels labels;
  // Gauges are created when first set (a series without a measurement would read as 0).
  std::map<std::string, std::pair<Family<Gauge>*, Gauge*>> gauges;
  std::vector<std::pair<Family<Histogram>*, Histogram*>> histograms;
  Histogram* step_duration = nullptr;
  Histogram* allreduce_duration = nullptr;
  Histogram* data_wait = nullptr;
  Counter* nonfinite_loss = nullptr;
  int running = 0;  // attempts of this job running here (JobStarted - JobEnded)
  std::optional<Clock::time_point> ended;
};

WorkerMetrics::WorkerMetrics(std::chrono::milliseconds retention)
    : retention_(retention),
      registry_(std::make_shared<prometheus::Registry>()),
      train_loss_(
          BuildGauge()
              .Name("rdattn_train_loss")
              .Help(
                  "Mean training loss over the global batch of the last reported step, nats/token")
              .Register(*registry_)),
      val_nll_(BuildGauge()
                   .Name("rdattn_val_nll")
                   .Help("Validation NLL of the last evaluation, nats/token")
                   .Register(*registry_)),
      val_milestone_tokens_(BuildGauge()
                                .Name("rdattn_val_milestone_tokens")
                                .Help("Training tokens at which rdattn_val_nll was measured")
                                .Register(*registry_)),
      test_nll_(
          BuildGauge()
              .Name("rdattn_test_nll")
              .Help("Test NLL at the end of the run, nats/token (when test shards were given)")
              .Register(*registry_)),
      js_(BuildGauge()
              .Name("rdattn_depth_js_divergence")
              .Help("Jensen-Shannon divergence between the QK and V depth distributions at a "
                    "layer, nats, "
                    "mean over tokens, last evaluation")
              .Register(*registry_)),
      js_mean_(BuildGauge()
                   .Name("rdattn_depth_js_divergence_mean")
                   .Help("Mean over layers of rdattn_depth_js_divergence, nats")
                   .Register(*registry_)),
      route_entropy_(
          BuildGauge()
              .Name("rdattn_route_entropy_nats")
              .Help("Entropy of a route's depth distribution at a layer, nats, last evaluation")
              .Register(*registry_)),
      tokens_per_second_(BuildGauge()
                             .Name("rdattn_tokens_per_second")
                             .Help("Training tokens per second of the whole job, all ranks")
                             .Register(*registry_)),
      mfu_(BuildGauge()
               .Name("rdattn_model_flops_utilization")
               .Help("Model FLOPs utilization, 0-1")
               .Register(*registry_)),
      grad_norm_(BuildGauge()
                     .Name("rdattn_grad_norm")
                     .Help("Global L2 gradient norm before clipping, last reported step")
                     .Register(*registry_)),
      learning_rate_(BuildGauge()
                         .Name("rdattn_learning_rate")
                         .Help("Learning rate of the last reported step")
                         .Register(*registry_)),
      train_step_(BuildGauge()
                      .Name("rdattn_train_step")
                      .Help("Optimizer steps completed")
                      .Register(*registry_)),
      train_tokens_(BuildGauge()
                        .Name("rdattn_train_tokens")
                        .Help("Training tokens consumed")
                        .Register(*registry_)),
      budget_tokens_(BuildGauge()
                         .Name("rdattn_job_budget_tokens")
                         .Help("Training tokens the job trains for in all (its resolved schedule)")
                         .Register(*registry_)),
      peak_memory_(BuildGauge()
                       .Name("rdattn_peak_memory_bytes")
                       .Help("Peak memory of rank 0 (RSS on CPU, allocator peak on CUDA)")
                       .Register(*registry_)),
      job_running_(BuildGauge()
                       .Name("rdattn_job_running")
                       .Help("1 while the job's ranks run on this worker, 0 once it ended")
                       .Register(*registry_)),
      step_duration_(BuildHistogram()
                         .Name("rdattn_step_duration_seconds")
                         .Help("Wall time of one optimizer step")
                         .Register(*registry_)),
      allreduce_duration_(BuildHistogram()
                              .Name("rdattn_allreduce_duration_seconds")
                              .Help("Gradient all-reduce time within a step")
                              .Register(*registry_)),
      data_wait_(BuildHistogram()
                     .Name("rdattn_data_wait_seconds")
                     .Help("Time a step waited for its batch")
                     .Register(*registry_)),
      nonfinite_loss_(BuildCounter()
                          .Name("rdattn_nonfinite_loss_total")
                          .Help("KIND_FAILED events that carried a non-finite train_loss")
                          .Register(*registry_)),
      worker_info_(BuildGauge()
                       .Name("rdattn_worker_info")
                       .Help("Always 1; carries the worker's identity")
                       .Register(*registry_)),
      local_slots_(BuildGauge()
                       .Name("rdattn_worker_local_slots")
                       .Help("This worker's rank slots by state")
                       .Register(*registry_)),
      jobs_finished_(BuildCounter()
                         .Name("rdattn_worker_jobs_finished_total")
                         .Help("Jobs this worker ran to an end, by how they ended")
                         .Register(*registry_)),
      events_relayed_(BuildCounter()
                          .Name("rdattn_worker_events_relayed_total")
                          .Help("Metric events read from trainers' event files")
                          .Register(*registry_)
                          .Add({})),
      event_parse_errors_(BuildCounter()
                              .Name("rdattn_worker_event_parse_errors_total")
                              .Help("Event lines that did not parse (skipped)")
                              .Register(*registry_)
                              .Add({})),
      jobs_stalled_(BuildCounter()
                        .Name("rdattn_worker_jobs_stalled_total")
                        .Help("Jobs stopped by the progress watchdog (no progress within their "
                              "bound)")
                        .Register(*registry_)
                        .Add({})),
      start_failures_(BuildCounter()
                          .Name("rdattn_worker_start_failures_total")
                          .Help("Attempts that failed before or right at their start (the job "
                                "folder could not be written, ENOSPC/EIO, trainer exit 74)")
                          .Register(*registry_)
                          .Add({})),
      healthy_(BuildGauge()
                   .Name("rdattn_worker_healthy")
                   .Help("1 while the worker leases jobs; 0 after --max-start-failures start "
                         "failures in a row, until its disk probe passes")
                   .Register(*registry_)
                   .Add({})),
      heartbeat_failures_(BuildCounter()
                              .Name("rdattn_worker_heartbeat_failures_total")
                              .Help("Heartbeats that failed")
                              .Register(*registry_)
                              .Add({})),
      last_heartbeat_(BuildGauge()
                          .Name("rdattn_worker_last_heartbeat_timestamp_seconds")
                          .Help("Unix time of the last successful heartbeat")
                          .Register(*registry_)
                          .Add({})),
      slots_free_(local_slots_.Add({{"state", "free"}})),
      slots_busy_(local_slots_.Add({{"state", "busy"}})) {
  // Every outcome from the start, so that increase() sees the first one.
  for (std::string_view outcome :
       {"succeeded", "failed", "preempted", "cancelled", "lease_lost", "machine_failed"}) {
    jobs_finished_.Add({{"outcome", std::string(outcome)}});
  }
  healthy_.Set(1);
}

WorkerMetrics::~WorkerMetrics() = default;

void WorkerMetrics::SetWorkerInfo(const std::string& worker_id, const std::string& hostname,
                                  pb::HardwareKind kind, const std::string& device_name,
                                  const std::string& version) {
  absl::MutexLock lock(&mu_);
  if (worker_info_series_ != nullptr) worker_info_.Remove(worker_info_series_);
  worker_info_series_ =
      &worker_info_.Add({{"worker", worker_id},
                         {"hostname", hostname},
                         {"hardware_kind", kind == pb::HARDWARE_KIND_GPU ? "gpu" : "cpu"},
                         {"device_name", device_name},
                         {"version", version}});
  worker_info_series_->Set(1);
}

void WorkerMetrics::SetSlots(int free, int busy) {
  slots_free_.Set(free);
  slots_busy_.Set(busy);
}

void WorkerMetrics::HeartbeatSucceeded(std::chrono::system_clock::time_point when) {
  last_heartbeat_.Set(std::chrono::duration<double>(when.time_since_epoch()).count());
}

void WorkerMetrics::HeartbeatFailed() { heartbeat_failures_.Increment(); }

void WorkerMetrics::EventParseError() { event_parse_errors_.Increment(); }

void WorkerMetrics::JobStalled() { jobs_stalled_.Increment(); }

void WorkerMetrics::StartFailure() { start_failures_.Increment(); }

void WorkerMetrics::SetHealthy(bool healthy) { healthy_.Set(healthy ? 1 : 0); }

Gauge* WorkerMetrics::JobGauge(JobSeries& job, Family<Gauge>& family, const Labels& extra) {
  const std::string key = SeriesKey(family, extra);
  auto it = job.gauges.find(key);
  if (it != job.gauges.end()) return it->second.second;
  Labels labels = job.labels;
  for (const auto& [name, value] : extra) labels[name] = value;
  Gauge* gauge = &family.Add(labels);
  job.gauges.emplace(key, std::make_pair(&family, gauge));
  return gauge;
}

void WorkerMetrics::JobStarted(const pb::JobSpec& job) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<JobSeries>& series = jobs_[job.job_id()];
  if (series == nullptr) {
    series = std::make_unique<JobSeries>();
    const std::string& arm = job.arm().empty() ? job.run().model().arm() : job.arm();
    series->labels = {{"sweep", job.sweep_id()},
                      {"job_id", job.job_id()},
                      {"arm", arm},
                      {"seed", std::to_string(job.seed())},
                      {"scale", job.scale()}};
    series->step_duration = &step_duration_.Add(series->labels, StepBuckets());
    series->allreduce_duration = &allreduce_duration_.Add(series->labels, ShortBuckets());
    series->data_wait = &data_wait_.Add(series->labels, ShortBuckets());
    series->histograms = {{&step_duration_, series->step_duration},
                          {&allreduce_duration_, series->allreduce_duration},
                          {&data_wait_, series->data_wait}};
    series->nonfinite_loss = &nonfinite_loss_.Add(series->labels);
  }
  ++series->running;
  series->ended.reset();
  JobGauge(*series, job_running_)->Set(1);
  if (const int64_t budget = BudgetTokens(job.run()); budget > 0) {
    JobGauge(*series, budget_tokens_)->Set(static_cast<double>(budget));
  }
}

void WorkerMetrics::Observe(const std::string& job_id, const pb::MetricEvent& event) {
  events_relayed_.Increment();
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  JobSeries& job = *it->second;
  auto set = [&](Family<Gauge>& family, double value, const Labels& extra = {})
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { JobGauge(job, family, extra)->Set(value); };
  switch (event.kind()) {
    case pb::MetricEvent::KIND_INIT:
    case pb::MetricEvent::KIND_CHECKPOINT:
      break;
    case pb::MetricEvent::KIND_TRAIN_STEP:
      set(train_loss_, event.train_loss());
      set(learning_rate_, event.lr());
      set(grad_norm_, event.grad_norm());
      set(tokens_per_second_, event.tokens_per_second());
      set(mfu_, event.mfu());
      if (event.peak_memory_bytes() > 0)
        set(peak_memory_, static_cast<double>(event.peak_memory_bytes()));
      job.step_duration->Observe(event.step_seconds());
      job.allreduce_duration->Observe(event.allreduce_seconds());
      job.data_wait->Observe(event.data_seconds());
      break;
    case pb::MetricEvent::KIND_EVAL: {
      set(val_nll_, event.val_nll());
      set(val_milestone_tokens_, static_cast<double>(event.tokens()));
      for (int l = 0; l < event.js_nats_size(); ++l) {
        set(js_, event.js_nats(l), {{"layer", std::to_string(l)}});
      }
      if (event.js_nats_size() > 0) set(js_mean_, event.js_mean_nats());
      for (int l = 0; l < event.route_entropy_qk_nats_size(); ++l) {
        set(route_entropy_, event.route_entropy_qk_nats(l),
            {{"layer", std::to_string(l)}, {"route", "qk"}});
      }
      for (int l = 0; l < event.route_entropy_v_nats_size(); ++l) {
        set(route_entropy_, event.route_entropy_v_nats(l),
            {{"layer", std::to_string(l)}, {"route", "v"}});
      }
      break;
    }
    case pb::MetricEvent::KIND_FINISHED:
      if (event.eval_tokens() > 0 || event.test_nll() != 0) set(test_nll_, event.test_nll());
      if (event.peak_memory_bytes() > 0)
        set(peak_memory_, static_cast<double>(event.peak_memory_bytes()));
      break;
    case pb::MetricEvent::KIND_FAILED:
      if (!std::isfinite(event.train_loss())) {
        set(train_loss_, event.train_loss());
        job.nonfinite_loss->Increment();
      }
      return;  // step and tokens are "when known": keep the last good ones
    default:
      return;
  }
  // Every kind but FAILED carries where training stands (INIT: where it starts or resumes).
  set(train_step_, static_cast<double>(event.step()));
  set(train_tokens_, static_cast<double>(event.tokens()));
}

void WorkerMetrics::JobFinishedUnstarted(std::string_view outcome) {
  jobs_finished_.Add({{"outcome", std::string(outcome)}}).Increment();
}

void WorkerMetrics::JobEnded(const std::string& job_id, std::string_view outcome,
                             Clock::time_point now) {
  JobFinishedUnstarted(outcome);
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second->running <= 0) return;
  if (--it->second->running > 0) return;
  JobGauge(*it->second, job_running_)->Set(0);
  it->second->ended = now;
}

void WorkerMetrics::RemoveSeries(JobSeries& job) {
  for (auto& [key, entry] : job.gauges) entry.first->Remove(entry.second);
  job.gauges.clear();
  for (auto& [family, histogram] : job.histograms) family->Remove(histogram);
  job.histograms.clear();
  nonfinite_loss_.Remove(job.nonfinite_loss);
  job.nonfinite_loss = nullptr;
}

int WorkerMetrics::Purge(Clock::time_point now) {
  absl::MutexLock lock(&mu_);
  int removed = 0;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const std::optional<Clock::time_point>& ended = it->second->ended;
    if (!ended.has_value() || now - *ended < retention_) {
      ++it;
      continue;
    }
    RemoveSeries(*it->second);
    it = jobs_.erase(it);
    ++removed;
  }
  return removed;
}

}  // namespace rdattn::worker
