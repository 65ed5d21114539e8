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

// A metric family of `registry` (prometheus-cpp's builder, written once per kind).
Family<Gauge>& Gauges(prometheus::Registry& registry, const std::string& name,
                      const std::string& help) {
  return BuildGauge().Name(name).Help(help).Register(registry);
}
Family<Counter>& Counters(prometheus::Registry& registry, const std::string& name,
                          const std::string& help) {
  return BuildCounter().Name(name).Help(help).Register(registry);
}
Family<Histogram>& Histograms(prometheus::Registry& registry, const std::string& name,
                              const std::string& help) {
  return BuildHistogram().Name(name).Help(help).Register(registry);
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
          Gauges(*registry_, "rdattn_train_loss",
                 "Mean training loss over the global batch of the last reported step, nats/token")),
      val_nll_(Gauges(*registry_, "rdattn_val_nll",
                      "Validation NLL of the last evaluation, nats/token")),
      val_milestone_tokens_(Gauges(*registry_, "rdattn_val_milestone_tokens",
                                   "Training tokens at which rdattn_val_nll was measured")),
      test_nll_(Gauges(*registry_, "rdattn_test_nll",
                       "Test NLL at the end of the run, nats/token (when test shards were given)")),
      js_(Gauges(*registry_, "rdattn_depth_js_divergence",
                 "Jensen-Shannon divergence between the QK and V depth distributions at a "
                 "layer, nats, "
                 "mean over tokens, last evaluation")),
      js_mean_(Gauges(*registry_, "rdattn_depth_js_divergence_mean",
                      "Mean over layers of rdattn_depth_js_divergence, nats")),
      route_entropy_(
          Gauges(*registry_, "rdattn_route_entropy_nats",
                 "Entropy of a route's depth distribution at a layer, nats, last evaluation")),
      tokens_per_second_(Gauges(*registry_, "rdattn_tokens_per_second",
                                "Training tokens per second of the whole job, all ranks")),
      mfu_(Gauges(*registry_, "rdattn_model_flops_utilization", "Model FLOPs utilization, 0-1")),
      grad_norm_(Gauges(*registry_, "rdattn_grad_norm",
                        "Global L2 gradient norm before clipping, last reported step")),
      learning_rate_(
          Gauges(*registry_, "rdattn_learning_rate", "Learning rate of the last reported step")),
      train_step_(Gauges(*registry_, "rdattn_train_step", "Optimizer steps completed")),
      train_tokens_(Gauges(*registry_, "rdattn_train_tokens", "Training tokens consumed")),
      budget_tokens_(Gauges(*registry_, "rdattn_job_budget_tokens",
                            "Training tokens the job trains for in all (its resolved schedule)")),
      peak_memory_(Gauges(*registry_, "rdattn_peak_memory_bytes",
                          "Peak memory of rank 0 (RSS on CPU, allocator peak on CUDA)")),
      job_running_(Gauges(*registry_, "rdattn_job_running",
                          "1 while the job's ranks run on this worker, 0 once it ended")),
      step_duration_(Histograms(*registry_, "rdattn_step_duration_seconds",
                                "Wall time of one optimizer step")),
      allreduce_duration_(Histograms(*registry_, "rdattn_allreduce_duration_seconds",
                                     "Gradient all-reduce time within a step")),
      data_wait_(
          Histograms(*registry_, "rdattn_data_wait_seconds", "Time a step waited for its batch")),
      nonfinite_loss_(Counters(*registry_, "rdattn_nonfinite_loss_total",
                               "KIND_FAILED events that carried a non-finite train_loss")),
      worker_info_(
          Gauges(*registry_, "rdattn_worker_info", "Always 1; carries the worker's identity")),
      local_slots_(
          Gauges(*registry_, "rdattn_worker_local_slots", "This worker's rank slots by state")),
      jobs_finished_(Counters(*registry_, "rdattn_worker_jobs_finished_total",
                              "Jobs this worker ran to an end, by how they ended")),
      events_relayed_(Counters(*registry_, "rdattn_worker_events_relayed_total",
                               "Metric events read from trainers' event files")
                          .Add({})),
      event_parse_errors_(Counters(*registry_, "rdattn_worker_event_parse_errors_total",
                                   "Event lines that did not parse (skipped)")
                              .Add({})),
      jobs_stalled_(Counters(*registry_, "rdattn_worker_jobs_stalled_total",
                             "Jobs stopped by the progress watchdog (no progress within their "
                             "bound)")
                        .Add({})),
      start_failures_(Counters(*registry_, "rdattn_worker_start_failures_total",
                               "Attempts that failed before or right at their start (the job "
                               "folder could not be written, ENOSPC/EIO, trainer exit 74)")
                          .Add({})),
      healthy_(Gauges(*registry_, "rdattn_worker_healthy",
                      "1 while the worker leases jobs; 0 after --max-start-failures start "
                      "failures in a row, until its disk probe passes")
                   .Add({})),
      heartbeat_failures_(
          Counters(*registry_, "rdattn_worker_heartbeat_failures_total", "Heartbeats that failed")
              .Add({})),
      last_heartbeat_(Gauges(*registry_, "rdattn_worker_last_heartbeat_timestamp_seconds",
                             "Unix time of the last successful heartbeat")
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
