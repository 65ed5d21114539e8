// The coordinator's metric families, the gRPC interceptor, the scrape-time state collector and
// the exposer (metrics.h).
#include "coordinator/metrics.h"

#include <google/protobuf/descriptor.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <exception>
#include <map>
#include <utility>

#include "common/log.h"
#include "rdattn/v1/coordinator.grpc.pb.h"

namespace rdattn::coordinator {
namespace {

namespace pb = ::rdattn::v1;

// Full method names ("/rdattn.v1.SweepService/SubmitSweep") of the services this server runs.
std::set<std::string, std::less<>> KnownMethods() {
  std::set<std::string, std::less<>> out = {"/grpc.health.v1.Health/Check",
                                            "/grpc.health.v1.Health/Watch"};
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const char* service :
       {pb::SweepService::service_full_name(), pb::WorkerService::service_full_name()}) {
    const google::protobuf::ServiceDescriptor* d = pool->FindServiceByName(service);
    if (d == nullptr) {  // a build error: the generated code is linked in
      RDATTN_LOG(kError) << "no descriptor for " << service;
      std::abort();
    }
    for (int i = 0; i < d->method_count(); ++i) {
      out.insert("/" + std::string(service) + "/" + d->method(i)->name());
    }
  }
  return out;
}

// Times one call; records it once, at the status it sends (or, if it never sends one, when the
// call is torn down, as CANCELLED).
class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(CoordinatorMetrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)), start_(std::chrono::steady_clock::now()) {}
  ~MetricsInterceptor() override {
    if (!recorded_) Record(grpc::StatusCode::CANCELLED);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (!recorded_ && methods->QueryInterceptionHookPoint(
                          grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      Record(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  void Record(grpc::StatusCode code) {
    recorded_ = true;
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
    metrics_->RecordRpc(method_, code, elapsed.count());
  }

  CoordinatorMetrics* metrics_;
  const std::string method_;
  const std::chrono::steady_clock::time_point start_;
  bool recorded_ = false;
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(CoordinatorMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(metrics_, info->method() != nullptr ? info->method() : "");
  }

 private:
  CoordinatorMetrics* metrics_;
};

constexpr std::string_view kJobStates[] = {"pending",   "leased", "running",
                                           "succeeded", "failed", "cancelled"};
static_assert(std::size(kJobStates) == std::size(kAllJobStates));
constexpr SweepState kAllSweepStates[] = {SweepState::kPending, SweepState::kRunning,
                                          SweepState::kSucceeded, SweepState::kFailed,
                                          SweepState::kCancelled};

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

prometheus::MetricFamily Gauges(std::string name, std::string help) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = prometheus::MetricType::Gauge;
  return f;
}

void AddGauge(prometheus::MetricFamily& family, std::vector<prometheus::ClientMetric::Label> labels,
              double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  family.metric.push_back(std::move(m));
}

template <typename State>
int64_t CountOf(const std::map<State, int64_t>& counts, State state) {
  auto it = counts.find(state);
  return it == counts.end() ? 0 : it->second;
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      lease_expiries_(
          prometheus::BuildCounter()
              .Name("rdattn_lease_expiries_total")
              .Help("Leases that expired without a heartbeat (the job was requeued or failed).")
              .Register(*registry_)
              .Add({})),
      job_retries_(
          prometheus::BuildCounter()
              .Name("rdattn_job_retries_total")
              .Help("Attempts that ended without success and were requeued for another attempt.")
              .Register(*registry_)
              .Add({})),
      metric_events_stored_(prometheus::BuildCounter()
                                .Name("rdattn_metric_events_stored_total")
                                .Help("Metric events stored from workers.")
                                .Register(*registry_)
                                .Add({})),
      grpc_requests_(prometheus::BuildCounter()
                         .Name("rdattn_grpc_requests_total")
                         .Help("Finished RPCs by method and gRPC status code.")
                         .Register(*registry_)),
      grpc_duration_(prometheus::BuildHistogram()
                         .Name("rdattn_grpc_request_duration_seconds")
                         .Help("RPC handling time, seconds (long polls and streams included).")
                         .Register(*registry_)),
      known_methods_(KnownMethods()) {}

void CoordinatorMetrics::LeasesExpired(int n) { lease_expiries_.Increment(n); }
void CoordinatorMetrics::JobsRetried(int n) { job_retries_.Increment(n); }
void CoordinatorMetrics::MetricEventsStored(int n) { metric_events_stored_.Increment(n); }

void CoordinatorMetrics::RecordRpc(std::string_view full_method, grpc::StatusCode code,
                                   double seconds) {
  std::string method = "unknown";
  if (known_methods_.find(full_method) != known_methods_.end()) {
    method = std::string(full_method.substr(full_method.rfind('/') + 1));
  }
  grpc_requests_.Add({{"method", method}, {"code", std::string(GrpcCodeName(code))}}).Increment();
  static const std::vector<double>* const kBuckets = new std::vector<double>(GrpcDurationBuckets());
  grpc_duration_.Add({{"method", method}}, *kBuckets).Observe(seconds);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
CoordinatorMetrics::NewInterceptorFactory() {
  return std::make_unique<MetricsInterceptorFactory>(this);
}

std::string_view GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

std::vector<double> GrpcDurationBuckets() {
  std::vector<double> out;
  double bound = 0.001;
  for (int k = 0; k <= 9; ++k, bound *= 4) out.push_back(bound);
  return out;
}

std::vector<prometheus::MetricFamily> StateCollector::Collect() const {
  StatusOr<StateCounts> counts = core_->ReadStateCounts(retention_);
  if (!counts.ok()) {
    RDATTN_LOG(kError) << "metrics: cannot read the store: " << counts.status().ToString();
    return {};
  }
  prometheus::MetricFamily jobs = Gauges("rdattn_jobs", "Jobs in the store by state.");
  for (size_t i = 0; i < std::size(kAllJobStates); ++i) {
    AddGauge(jobs, {{"state", std::string(kJobStates[i])}},
             static_cast<double>(CountOf(counts->jobs, kAllJobStates[i])));
  }
  prometheus::MetricFamily sweeps = Gauges("rdattn_sweeps", "Sweeps in the store by state.");
  for (SweepState s : kAllSweepStates) {
    AddGauge(sweeps, {{"state", Lower(SweepStateName(s))}},
             static_cast<double>(CountOf(counts->sweeps, s)));
  }
  prometheus::MetricFamily sweep_jobs =
      Gauges("rdattn_sweep_jobs",
             "Jobs of one sweep by state (kept for --metrics-retention after the sweep ends).");
  for (const auto& [sweep_id, by_state] : counts->sweep_jobs) {
    for (size_t i = 0; i < std::size(kAllJobStates); ++i) {
      AddGauge(sweep_jobs, {{"sweep", sweep_id}, {"state", std::string(kJobStates[i])}},
               static_cast<double>(CountOf(by_state, kAllJobStates[i])));
    }
  }
  prometheus::MetricFamily slots =
      Gauges("rdattn_worker_slots",
             "Rank slots of each live registered worker, as its heartbeats report them.");
  prometheus::MetricFamily workers =
      Gauges("rdattn_workers", "Registered workers: alive = heartbeat within the lease time.");
  int64_t alive = 0;
  for (const StateCounts::Worker& w : counts->workers) {
    if (!w.alive) continue;
    ++alive;
    AddGauge(slots, {{"worker", w.id}, {"state", "free"}}, w.free_slots);
    AddGauge(slots, {{"worker", w.id}, {"state", "busy"}}, w.busy_slots);
  }
  AddGauge(workers, {{"state", "alive"}}, static_cast<double>(alive));
  AddGauge(workers, {{"state", "lost"}}, static_cast<double>(counts->workers.size()) - alive);
  prometheus::MetricFamily damaged;
  damaged.name = "rdattn_store_checksum_failures_total";
  damaged.help =
      "Reads of stored rows whose checksum did not match (answered DATA_LOSS, left out of every "
      "other metric), since the coordinator started.";
  damaged.type = prometheus::MetricType::Counter;
  {
    prometheus::ClientMetric m;
    m.counter.value = static_cast<double>(counts->checksum_failures);
    damaged.metric.push_back(std::move(m));
  }

  std::vector<prometheus::MetricFamily> out;
  out.push_back(std::move(jobs));
  out.push_back(std::move(sweeps));
  out.push_back(std::move(sweep_jobs));
  out.push_back(std::move(slots));
  out.push_back(std::move(workers));
  out.push_back(std::move(damaged));
  return out;
}

std::string SerializeMetrics(
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables) {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& c : collectables) {
    std::vector<prometheus::MetricFamily> f = c->Collect();
    families.insert(families.end(), std::make_move_iterator(f.begin()),
                    std::make_move_iterator(f.end()));
  }
  return prometheus::TextSerializer().Serialize(families);
}

StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    const std::string& listen, std::vector<std::shared_ptr<prometheus::Collectable>> collectables) {
  const size_t colon = listen.rfind(':');
  const std::string port_text = colon == std::string::npos ? "" : listen.substr(colon + 1);
  const bool port_ok = !port_text.empty() && port_text.size() <= 5 &&
                       std::all_of(port_text.begin(), port_text.end(),
                                   [](char c) { return c >= '0' && c <= '9'; }) &&
                       std::stoi(port_text) <= 65535;
  if (colon == std::string::npos || colon == 0 || !port_ok) {
    return InvalidArgumentError("--metrics-listen: '" + listen +
                                "' is not HOST:PORT (port 0-65535)");
  }
  std::unique_ptr<MetricsExposer> out(new MetricsExposer());
  out->host_ = listen.substr(0, colon);
  out->collectables_ = std::move(collectables);
  try {
    out->exposer_ = std::make_unique<prometheus::Exposer>(listen, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return UnavailableError("--metrics-listen: cannot serve metrics on " + listen + ": " +
                            e.what());
  }
  const std::vector<int> ports = out->exposer_->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0) {
    return UnavailableError("--metrics-listen: cannot serve metrics on " + listen +
                            ": no port bound");
  }
  out->port_ = ports.front();
  for (const auto& c : out->collectables_) out->exposer_->RegisterCollectable(c);
  return out;
}

}  // namespace rdattn::coordinator
