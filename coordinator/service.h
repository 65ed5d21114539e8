// The gRPC face of the coordinator: SweepService and WorkerService (coordinator.proto) plus the
// standard grpc.health.v1 service, on one grpc::Server. Each handler authenticates the call
// (auth.h; per handler, from the "authorization" metadata), calls one Core method and maps the
// Status with contract::ToGrpcStatus. Handlers never block on long work: LeaseJob's long poll
// and WatchSweep wait inside Core on condition variables and end on client cancel or Shutdown.
#pragma once

#include <absl/time/time.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "coordinator/auth.h"
#include "coordinator/core.h"

namespace rdattn::coordinator {

class CoordinatorMetrics;  // coordinator/metrics.h

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";  // host:port; port 0 picks a free one
  // Null: insecure (plaintext).
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // Largest request message accepted; a bigger one is RESOURCE_EXHAUSTED (4 MiB: gRPC's default).
  int max_receive_message_bytes = 4 << 20;
  // Borrowed; null: no RPC metrics. When set, every call of every service (health included)
  // is counted and timed (rdattn_grpc_requests_total, rdattn_grpc_request_duration_seconds).
  CoordinatorMetrics* metrics = nullptr;
};

class CoordinatorServer {
 public:
  // Builds and starts the server. `core` and `auth` are borrowed and must outlive it.
  // A port that cannot be bound: UNAVAILABLE.
  static StatusOr<std::unique_ptr<CoordinatorServer>> Start(Core* core, const Authenticator* auth,
                                                            const ServerOptions& options);
  ~CoordinatorServer();
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  int port() const { return port_; }  // the bound port
  // Ends long polls and watches (Core::Shutdown), then shuts the server down, cancelling calls
  // still running after `grace`. Idempotent.
  void Shutdown(absl::Duration grace);
  // Blocks until the server has shut down.
  void Wait();

 private:
  class SweepServiceImpl;
  class WorkerServiceImpl;
  CoordinatorServer() = default;

  Core* core_ = nullptr;
  std::unique_ptr<SweepServiceImpl> sweep_service_;
  std::unique_ptr<WorkerServiceImpl> worker_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace rdattn::coordinator
