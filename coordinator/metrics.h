// The coordinator's Prometheus metrics (docs/metrics.md, "Coordinator"):
//
//   CoordinatorMetrics  owns a prometheus::Registry with the counters (lease expiries, retries,
//                       metric events stored: Core counts them through CoreCounters) and the gRPC
//                       request counter and duration histogram (a server interceptor records every
//                       RPC of every service, grpc.health.v1 included).
//   StateCollector      the state gauges (jobs, sweeps, per-sweep jobs, worker slots, workers),
//                       computed from the store at scrape time, so they never drift from it.
//   MetricsExposer      serves both at http://HOST:PORT/metrics (prometheus-cpp's Exposer).
//
// Thread-safe. The core, the server and the exposer borrow a CoordinatorMetrics: it must outlive
// them. The StateCollector borrows the Core: destroy the exposer before the core.
#pragma once

#include <absl/time/time.h>
#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status.h>
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "coordinator/core.h"

namespace rdattn::coordinator {

class CoordinatorMetrics final : public CoreCounters {
 public:
  CoordinatorMetrics();
  CoordinatorMetrics(const CoordinatorMetrics&) = delete;
  CoordinatorMetrics& operator=(const CoordinatorMetrics&) = delete;

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

  // CoreCounters.
  void LeasesExpired(int n) override;
  void JobsRetried(int n) override;
  void MetricEventsStored(int n) override;

  // One finished RPC. `full_method` is gRPC's "/package.Service/Method"; the label is "Method"
  // for the coordinator's and the health service's methods, "unknown" for anything else (so a
  // client cannot mint label values).
  void RecordRpc(std::string_view full_method, grpc::StatusCode code, double seconds);

  // For ServerBuilder::experimental().SetInterceptorCreators: times every call from the
  // creation of its interceptor to the status it sends.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewInterceptorFactory();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter& lease_expiries_;
  prometheus::Counter& job_retries_;
  prometheus::Counter& metric_events_stored_;
  prometheus::Family<prometheus::Counter>& grpc_requests_;
  prometheus::Family<prometheus::Histogram>& grpc_duration_;
  const std::set<std::string, std::less<>> known_methods_;  // full names
};

// "OK", "INVALID_ARGUMENT", ... (grpc::StatusCode's names); "UNKNOWN" for numbers out of range.
std::string_view GrpcCodeName(grpc::StatusCode code);

// Bucket bounds of rdattn_grpc_request_duration_seconds: 0.001 × 4^k, k = 0…9.
std::vector<double> GrpcDurationBuckets();

// rdattn_jobs, rdattn_sweeps, rdattn_sweep_jobs, rdattn_worker_slots, rdattn_workers, read from
// the core's store at every Collect(). Every job and sweep state is exported, 0 included.
class StateCollector final : public prometheus::Collectable {
 public:
  // `core` is borrowed. A terminal sweep's rdattn_sweep_jobs series stay for `retention` after
  // its end.
  StateCollector(Core* core, absl::Duration retention) : core_(core), retention_(retention) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  Core* core_;
  const absl::Duration retention_;
};

// The text exposition format (0.0.4) of every family of `collectables`, in order.
std::string SerializeMetrics(
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables);

// An HTTP server answering GET /metrics with `collectables` (held weakly by the exposer, strongly
// here).
class MetricsExposer {
 public:
  // `listen` is HOST:PORT (port 0 picks a free one). A malformed address is INVALID_ARGUMENT,
  // one that cannot be bound UNAVAILABLE; both messages name --metrics-listen.
  static StatusOr<std::unique_ptr<MetricsExposer>> Start(
      const std::string& listen,
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables);

  int port() const { return port_; }  // the bound port
  // "http://HOST:PORT/metrics" with the bound port.
  std::string url() const { return "http://" + host_ + ":" + std::to_string(port_) + "/metrics"; }

 private:
  MetricsExposer() = default;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string host_;
  int port_ = 0;
};

}  // namespace rdattn::coordinator
