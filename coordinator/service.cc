// gRPC handlers: authenticate, call Core, map the Status. Nothing else lives here.
#include "coordinator/service.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "coordinator/metrics.h"
#include "proto/contract/contract.h"
#include "rdattn/v1/coordinator.grpc.pb.h"

namespace rdattn::coordinator {
namespace {

std::optional<std::string_view> AuthorizationHeader(const grpc::ServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return std::nullopt;
  return std::string_view(it->second.data(), it->second.size());
}

StatusOr<Principal> Authorize(const Authenticator& auth, const grpc::ServerContext* ctx,
                              ServiceKind service) {
  return auth.Check(AuthorizationHeader(ctx), service);
}

// Copies a StatusOr's value into *out, or returns its error as a grpc::Status.
template <typename T>
grpc::Status Reply(StatusOr<T> result, T* out) {
  if (!result.ok()) return contract::ToGrpcStatus(result.status());
  *out = std::move(result).value();
  return grpc::Status::OK;
}

}  // namespace

class CoordinatorServer::SweepServiceImpl final : public pb::SweepService::Service {
 public:
  SweepServiceImpl(Core* core, const Authenticator* auth) : core_(*core), auth_(*auth) {}

  grpc::Status SubmitSweep(grpc::ServerContext* ctx, const pb::SubmitSweepRequest* req,
                           pb::SubmitSweepResponse* resp) override {
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kSweep);
    if (!who.ok()) return contract::ToGrpcStatus(who.status());
    return Reply(core_.SubmitSweep(*req, who->name), resp);
  }

  grpc::Status GetSweep(grpc::ServerContext* ctx, const pb::GetSweepRequest* req,
                        pb::GetSweepResponse* resp) override {
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kSweep);
    if (!who.ok()) return contract::ToGrpcStatus(who.status());
    return Reply(core_.GetSweep(*req), resp);
  }

  grpc::Status ListSweeps(grpc::ServerContext* ctx, const pb::ListSweepsRequest* req,
                          pb::ListSweepsResponse* resp) override {
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kSweep);
    if (!who.ok()) return contract::ToGrpcStatus(who.status());
    return Reply(core_.ListSweeps(*req), resp);
  }

  grpc::Status WatchSweep(grpc::ServerContext* ctx, const pb::WatchSweepRequest* req,
                          grpc::ServerWriter<pb::WatchSweepResponse>* writer) override {
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kSweep);
    if (!who.ok()) return contract::ToGrpcStatus(who.status());
    Status st = core_.WatchSweep(
        *req,
        [&](const pb::WatchEvent& e) {
          pb::WatchSweepResponse msg;
          *msg.mutable_event() = e;
          return writer->Write(msg);
        },
        [ctx] { return ctx->IsCancelled(); });
    return contract::ToGrpcStatus(st);
  }

  grpc::Status CancelSweep(grpc::ServerContext* ctx, const pb::CancelSweepRequest* req,
                           pb::CancelSweepResponse* resp) override {
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kSweep);
    if (!who.ok()) return contract::ToGrpcStatus(who.status());
    std::optional<std::string> owner;
    if (auth_.enabled() && who->role == Role::kResearcher) owner = who->name;
    return Reply(core_.CancelSweep(*req, owner), resp);
  }

  grpc::Status GetReport(grpc::ServerContext* ctx, const pb::GetReportRequest* req,
                         pb::GetReportResponse* resp) override {
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kSweep);
    if (!who.ok()) return contract::ToGrpcStatus(who.status());
    return Reply(core_.GetReport(*req), resp);
  }

 private:
  Core& core_;
  const Authenticator& auth_;
};

class CoordinatorServer::WorkerServiceImpl final : public pb::WorkerService::Service {
 public:
  WorkerServiceImpl(Core* core, const Authenticator* auth) : core_(*core), auth_(*auth) {}

  grpc::Status RegisterWorker(grpc::ServerContext* ctx, const pb::RegisterWorkerRequest* req,
                              pb::RegisterWorkerResponse* resp) override {
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kWorker);
    if (!who.ok()) return contract::ToGrpcStatus(who.status());
    return Reply(core_.RegisterWorker(*req), resp);
  }

  grpc::Status LeaseJob(grpc::ServerContext* ctx, const pb::LeaseJobRequest* req,
                        pb::LeaseJobResponse* resp) override {
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kWorker);
    if (!who.ok()) return contract::ToGrpcStatus(who.status());
    return Reply(core_.LeaseJob(*req, [ctx] { return ctx->IsCancelled(); }), resp);
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const pb::HeartbeatRequest* req,
                         pb::HeartbeatResponse* resp) override {
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kWorker);
    if (!who.ok()) return contract::ToGrpcStatus(who.status());
    return Reply(core_.Heartbeat(*req), resp);
  }

  grpc::Status ReportProgress(grpc::ServerContext* ctx,
                              grpc::ServerReader<pb::ReportProgressRequest>* reader,
                              pb::ReportProgressResponse* resp) override {
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kWorker);
    if (!who.ok()) return contract::ToGrpcStatus(who.status());
    pb::ReportProgressRequest msg;
    std::string lease_id;
    int64_t stored = 0;
    int64_t last_seq = 0;
    while (reader->Read(&msg)) {
      if (lease_id.empty()) {
        lease_id = msg.lease_id();
      } else if (msg.lease_id() != lease_id) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "lease_id: every message of a stream must carry the same lease");
      }
      StatusOr<Core::ProgressResult> r = core_.RecordProgress(lease_id, msg.event());
      if (!r.ok()) return contract::ToGrpcStatus(r.status());
      if (r->stored) ++stored;
      last_seq = r->last_seq;
    }
    resp->set_last_seq(static_cast<uint64_t>(last_seq));
    resp->set_events_stored(stored);
    return grpc::Status::OK;
  }

  grpc::Status CompleteJob(grpc::ServerContext* ctx, const pb::CompleteJobRequest* req,
                           pb::CompleteJobResponse* resp) override {
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kWorker);
    if (!who.ok()) return contract::ToGrpcStatus(who.status());
    return Reply(core_.CompleteJob(*req), resp);
  }

 private:
  Core& core_;
  const Authenticator& auth_;
};

StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    Core* core, const Authenticator* auth, const ServerOptions& options) {
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  s->core_ = core;
  s->sweep_service_ = std::make_unique<SweepServiceImpl>(core, auth);
  s->worker_service_ = std::make_unique<WorkerServiceImpl>(core, auth);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(
      options.listen, options.credentials ? options.credentials : grpc::InsecureServerCredentials(),
      &s->port_);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.RegisterService(s->sweep_service_.get());
  builder.RegisterService(s->worker_service_.get());
  if (options.metrics != nullptr) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(options.metrics->NewInterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return UnavailableError("cannot listen on " + options.listen);
  }
  return s;
}

CoordinatorServer::~CoordinatorServer() {
  Shutdown(absl::Seconds(1));
  Wait();
}

void CoordinatorServer::Shutdown(absl::Duration grace) {
  if (shut_down_ || !server_) return;
  shut_down_ = true;
  core_->Shutdown();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
}

void CoordinatorServer::Wait() {
  if (server_) server_->Wait();
}

}  // namespace rdattn::coordinator
