// A tiny in-process rdattn.v1.WorkerService for the worker tests: hands out at most one job,
// records everything the worker sends, and can inject cancel orders and broken event streams.
// Listens on 127.0.0.1 with an OS-chosen port.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "rdattn/v1/coordinator.grpc.pb.h"

namespace rdattn::worker::testing {

namespace pb = ::rdattn::v1;

class FakeCoordinator final : public pb::WorkerService::Service {
 public:
  struct Config {
    std::string token = "test-token";  // required as "authorization: Bearer <token>"
    std::optional<pb::JobSpec> job;    // handed out by the first LeaseJob
    std::string lease_id = "lease-1";
    int heartbeat_interval_ms = 200;
    bool cancel_after_init = false;  // cancel order once a KIND_INIT event is stored
    int cancel_grace_ms = 5000;
    int fail_streams = 0;  // the first N ReportProgress streams fail after one event
  };

  explicit FakeCoordinator(Config config) : config_(std::move(config)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }

  ~FakeCoordinator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutting_down_ = true;
      cv_.notify_all();
    }
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // Waits until at least n distinct events are stored; false on timeout.
  bool WaitForStored(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return stored_.size() >= n; });
  }

  std::optional<pb::CompleteJobRequest> WaitForComplete(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !completions_.empty(); });
    if (completions_.empty()) return std::nullopt;
    return completions_.front();
  }

  // Stored events, deduplicated by seq, in seq order.
  std::vector<pb::MetricEvent> stored_events() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<pb::MetricEvent> out;
    for (const auto& [seq, event] : stored_) out.push_back(event);
    return out;
  }
  // Seqs as received, one list per stream (duplicates across streams are allowed).
  std::vector<std::vector<uint64_t>> stream_seqs() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stream_seqs_;
  }
  std::vector<std::string> stream_leases() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stream_leases_;
  }
  std::vector<pb::CompleteJobRequest> completions() const {
    std::lock_guard<std::mutex> lock(mu_);
    return completions_;
  }
  std::vector<pb::HeartbeatRequest> heartbeats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return heartbeats_;
  }
  std::vector<pb::RegisterWorkerRequest> registrations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return registrations_;
  }
  int unauthenticated_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return unauthenticated_;
  }

  // --- WorkerService ---------------------------------------------------------------------------

  grpc::Status RegisterWorker(grpc::ServerContext* context,
                              const pb::RegisterWorkerRequest* request,
                              pb::RegisterWorkerResponse* response) override {
    if (!Authorized(context)) return Unauthenticated();
    std::lock_guard<std::mutex> lock(mu_);
    registrations_.push_back(*request);
    response->set_worker_id(request->worker_id().empty() ? "w-1" : request->worker_id());
    response->mutable_heartbeat_interval()->set_nanos(config_.heartbeat_interval_ms * 1000000);
    response->mutable_lease_ttl()->set_seconds(30);
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status LeaseJob(grpc::ServerContext* context, const pb::LeaseJobRequest* request,
                        pb::LeaseJobResponse* response) override {
    if (!Authorized(context)) return Unauthenticated();
    std::unique_lock<std::mutex> lock(mu_);
    lease_requests_.push_back(*request);
    if (config_.job.has_value() && !handed_out_) {
      handed_out_ = true;
      *response->mutable_job() = *config_.job;
      response->set_lease_id(config_.lease_id);
      cv_.notify_all();
      return grpc::Status::OK;
    }
    const auto wait = std::chrono::milliseconds(request->wait().seconds() * 1000 +
                                                request->wait().nanos() / 1000000);
    cv_.wait_for(lock, std::min(wait, std::chrono::milliseconds(1000)),
                 [&] { return shutting_down_ || context->IsCancelled(); });
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext* context, const pb::HeartbeatRequest* request,
                         pb::HeartbeatResponse* response) override {
    if (!Authorized(context)) return Unauthenticated();
    std::lock_guard<std::mutex> lock(mu_);
    heartbeats_.push_back(*request);
    bool init_stored = false;
    for (const auto& [seq, event] : stored_)
      init_stored |= event.kind() == pb::MetricEvent::KIND_INIT;
    for (const pb::LeaseProgress& lease : request->leases()) {
      pb::LeaseRenewal* renewal = response->add_renewed();
      renewal->set_lease_id(lease.lease_id());
      renewal->set_last_stored_event_seq(stored_.empty() ? 0 : stored_.rbegin()->first);
      if (config_.cancel_after_init && init_stored && !cancel_sent_) {
        cancel_sent_ = true;
        pb::CancelOrder* order = response->add_cancel_orders();
        order->set_lease_id(lease.lease_id());
        order->set_job_id(lease.job_id());
        order->set_reason("sweep cancelled by the test");
        order->mutable_grace()->set_seconds(config_.cancel_grace_ms / 1000);
        order->mutable_grace()->set_nanos((config_.cancel_grace_ms % 1000) * 1000000);
      }
    }
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status ReportProgress(grpc::ServerContext* context,
                              grpc::ServerReader<pb::ReportProgressRequest>* reader,
                              pb::ReportProgressResponse* response) override {
    if (!Authorized(context)) return Unauthenticated();
    size_t index;
    {
      std::lock_guard<std::mutex> lock(mu_);
      index = stream_seqs_.size();
      stream_seqs_.emplace_back();
      stream_leases_.emplace_back();
    }
    pb::ReportProgressRequest request;
    int64_t stored_here = 0;
    while (reader->Read(&request)) {
      std::lock_guard<std::mutex> lock(mu_);
      stream_seqs_[index].push_back(request.event().seq());
      stream_leases_[index] = request.lease_id();
      if (stored_.emplace(request.event().seq(), request.event()).second) ++stored_here;
      cv_.notify_all();
      if (static_cast<int>(index) < config_.fail_streams) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "injected stream failure");
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    response->set_last_seq(stored_.empty() ? 0 : stored_.rbegin()->first);
    response->set_events_stored(stored_here);
    return grpc::Status::OK;
  }

  grpc::Status CompleteJob(grpc::ServerContext* context, const pb::CompleteJobRequest* request,
                           pb::CompleteJobResponse* response) override {
    if (!Authorized(context)) return Unauthenticated();
    std::lock_guard<std::mutex> lock(mu_);
    completions_.push_back(*request);
    response->set_job_state(request->outcome() == pb::JOB_OUTCOME_SUCCEEDED
                                ? pb::JOB_STATE_SUCCEEDED
                                : pb::JOB_STATE_FAILED);
    cv_.notify_all();
    return grpc::Status::OK;
  }

 private:
  bool Authorized(grpc::ServerContext* context) {
    const auto& md = context->client_metadata();
    auto it = md.find("authorization");
    const bool ok = it != md.end() &&
                    std::string(it->second.data(), it->second.size()) == "Bearer " + config_.token;
    if (!ok) {
      std::lock_guard<std::mutex> lock(mu_);
      ++unauthenticated_;
    }
    return ok;
  }
  static grpc::Status Unauthenticated() {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad token");
  }

  const Config config_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool shutting_down_ = false;
  bool handed_out_ = false;
  bool cancel_sent_ = false;
  int unauthenticated_ = 0;
  std::map<uint64_t, pb::MetricEvent> stored_;
  std::vector<std::vector<uint64_t>> stream_seqs_;
  std::vector<std::string> stream_leases_;
  std::vector<pb::RegisterWorkerRequest> registrations_;
  std::vector<pb::LeaseJobRequest> lease_requests_;
  std::vector<pb::HeartbeatRequest> heartbeats_;
  std::vector<pb::CompleteJobRequest> completions_;
};

}  // namespace rdattn::worker::testing
