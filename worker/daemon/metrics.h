// The worker's Prometheus metrics (docs/metrics.md, "Worker: per job" and "Worker: the
// process"): one registry holding every family, fed by the relay (each metric event a job's
// trainer writes), the job runners (start and end of a job) and the worker's loops (slots,
// heartbeats). rdattn-worker serves the registry with prometheus-cpp's Exposer; this class does
// no I/O. Thread-safe.
//
// Retention: a job's series are kept while it runs and for `retention` after it ends; Purge
// removes them after that (docs/metrics.md, "Finished jobs").
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rdattn/v1/coordinator.pb.h"
#include "rdattn/v1/run_spec.pb.h"

namespace rdattn::worker {

// Tokens a job trains for in all: its schedule up to stop_at_tokens (when set), rounded up to
// whole global batches (the trainer stops at the first step reaching it; tokens = step ×
// global_batch_tokens). 0 when the spec gives no total_tokens.
int64_t BudgetTokens(const ::rdattn::v1::RunSpec& run);

// The `outcome` label of rdattn_worker_jobs_finished_total.
inline constexpr std::string_view kOutcomeLeaseLost = "lease_lost";
std::string_view OutcomeLabel(::rdattn::v1::JobOutcome outcome);

class WorkerMetrics {
 public:
  using Clock = std::chrono::steady_clock;

  explicit WorkerMetrics(std::chrono::milliseconds retention);
  ~WorkerMetrics();
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // For the Exposer (and tests' TextSerializer).
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  std::chrono::milliseconds retention() const { return retention_; }

  // --- the process
  // rdattn_worker_info; a later call (the id changed on registration) replaces the series.
  void SetWorkerInfo(const std::string& worker_id, const std::string& hostname,
                     ::rdattn::v1::HardwareKind kind, const std::string& device_name,
                     const std::string& version);
  void SetSlots(int free, int busy);
  void HeartbeatSucceeded(std::chrono::system_clock::time_point when);
  void HeartbeatFailed();
  // An events.jsonl line that did not parse.
  void EventParseError();
  // The progress watchdog stopped a job that made no progress (docs/operations.md).
  void JobStalled();
  // Start failures (docs/worker.md "Start failures"): rdattn_worker_start_failures_total and
  // rdattn_worker_healthy (1 while the worker leases, 0 while it probes after N in a row).
  void StartFailure();
  void SetHealthy(bool healthy);

  // --- per job (by job id; labels from the JobSpec)
  // The job's ranks start: creates its series, rdattn_job_running = 1, the budget gauge. A job
  // id whose series are still kept from an earlier attempt takes them over.
  void JobStarted(const ::rdattn::v1::JobSpec& job);
  // One relayed metric event of that job (counted in rdattn_worker_events_relayed_total; its
  // values go to the job's series when JobStarted was called for it).
  void Observe(const std::string& job_id, const ::rdattn::v1::MetricEvent& event);
  // The job is over (once per JobStarted): rdattn_worker_jobs_finished_total{outcome}++, and
  // when no other attempt of the job runs here, rdattn_job_running = 0 and its series are
  // removed by the first Purge at or after `now + retention`.
  void JobEnded(const std::string& job_id, std::string_view outcome, Clock::time_point now);
  // A job that ended before its ranks started (no JobStarted): only the finished counter.
  void JobFinishedUnstarted(std::string_view outcome);
  // Removes the series of every job that ended at least `retention` before `now`.
  // Returns how many jobs it removed.
  int Purge(Clock::time_point now);

 private:
  struct JobSeries;

  prometheus::Gauge* JobGauge(JobSeries& job, prometheus::Family<prometheus::Gauge>& family,
                              const prometheus::Labels& extra = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveSeries(JobSeries& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::chrono::milliseconds retention_;
  const std::shared_ptr<prometheus::Registry> registry_;

  // Per job.
  prometheus::Family<prometheus::Gauge>& train_loss_;
  prometheus::Family<prometheus::Gauge>& val_nll_;
  prometheus::Family<prometheus::Gauge>& val_milestone_tokens_;
  prometheus::Family<prometheus::Gauge>& test_nll_;
  prometheus::Family<prometheus::Gauge>& js_;
  prometheus::Family<prometheus::Gauge>& js_mean_;
  prometheus::Family<prometheus::Gauge>& route_entropy_;
  prometheus::Family<prometheus::Gauge>& tokens_per_second_;
  prometheus::Family<prometheus::Gauge>& mfu_;
  prometheus::Family<prometheus::Gauge>& grad_norm_;
  prometheus::Family<prometheus::Gauge>& learning_rate_;
  prometheus::Family<prometheus::Gauge>& train_step_;
  prometheus::Family<prometheus::Gauge>& train_tokens_;
  prometheus::Family<prometheus::Gauge>& budget_tokens_;
  prometheus::Family<prometheus::Gauge>& peak_memory_;
  prometheus::Family<prometheus::Gauge>& job_running_;
  prometheus::Family<prometheus::Histogram>& step_duration_;
  prometheus::Family<prometheus::Histogram>& allreduce_duration_;
  prometheus::Family<prometheus::Histogram>& data_wait_;
  prometheus::Family<prometheus::Counter>& nonfinite_loss_;

  // The process.
  prometheus::Family<prometheus::Gauge>& worker_info_;
  prometheus::Family<prometheus::Gauge>& local_slots_;
  prometheus::Family<prometheus::Counter>& jobs_finished_;
  prometheus::Counter& events_relayed_;
  prometheus::Counter& event_parse_errors_;
  prometheus::Counter& jobs_stalled_;
  prometheus::Counter& start_failures_;
  prometheus::Gauge& healthy_;
  prometheus::Counter& heartbeat_failures_;
  prometheus::Gauge& last_heartbeat_;
  prometheus::Gauge& slots_free_;
  prometheus::Gauge& slots_busy_;

  absl::Mutex mu_;
  prometheus::Gauge* worker_info_series_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::map<std::string, std::unique_ptr<JobSeries>> jobs_ ABSL_GUARDED_BY(mu_);  // by job id
};

}  // namespace rdattn::worker
