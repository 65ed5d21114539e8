// gRPC handlers: authenticate, call Core, map the Status. Nothing else lives here.
#include "coordinator/service.h"

#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>
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

std::optional<std::string_view> AuthorizationHeader(const grpc::ServerContextBase* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return std::nullopt;
  return std::string_view(it->second.data(), it->second.size());
}

StatusOr<Principal> Authorize(const Authenticator& auth, const grpc::ServerContextBase* ctx,
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

// Finishes a unary reactor with a StatusOr's value (into *out) or its error.
template <typename T>
void FinishWith(grpc::ServerUnaryReactor* reactor, StatusOr<T> result, T* out) {
  reactor->Finish(Reply(std::move(result), out));
}

// The real time of the call's deadline (infinite when it has none).
absl::Time CallDeadline(const grpc::CallbackServerContext* ctx) {
  // gRPC gives "no deadline" as a far-future time point (not always time_point::max()).
  const auto d = ctx->deadline();
  const auto now = std::chrono::system_clock::now();
  if (d >= now + std::chrono::hours(24 * 365)) return absl::InfiniteFuture();
  return absl::FromChrono(d);
}

// LeaseJob: a long poll that holds no thread while it waits (Core::LeaseJobAsync). A call
// that is cancelled or passes its deadline is told to the core, which answers it with no job
// and never leases it one.
class LeaseReactor final : public grpc::ServerUnaryReactor {
 public:
  LeaseReactor(Core* core, grpc::CallbackServerContext* ctx, const pb::LeaseJobRequest* req,
               pb::LeaseJobResponse* resp)
      : core_(*core) {
    std::shared_ptr<Core::LeaseWait> wait = core_.LeaseJobAsync(
        *req, CallDeadline(ctx), [this, resp](StatusOr<pb::LeaseJobResponse> r) {
          FinishWith<pb::LeaseJobResponse>(this, std::move(r), resp);
        });
    bool cancelled = false;
    {
      absl::MutexLock lock(&mu_);
      wait_ = wait;
      cancelled = cancelled_;
    }
    if (cancelled) core_.CancelLeaseWait(wait);
  }
  void OnCancel() override {
    std::shared_ptr<Core::LeaseWait> wait;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      wait = wait_;
    }
    if (wait) core_.CancelLeaseWait(wait);
  }
  void OnDone() override { delete this; }

 private:
  Core& core_;
  absl::Mutex mu_;
  std::shared_ptr<Core::LeaseWait> wait_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// ReportProgress: each message is one queued operation of the core (stored in the dispatch
// thread's next group commit); the next message is read once it is stored.
class ProgressReactor final : public grpc::ServerReadReactor<pb::ReportProgressRequest> {
 public:
  ProgressReactor(Core* core, pb::ReportProgressResponse* resp, const Status& denied)
      : core_(*core), resp_(resp) {
    if (!denied.ok()) {
      Finish(contract::ToGrpcStatus(denied));
      return;
    }
    StartRead(&msg_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed the stream: every message read has been stored
      absl::MutexLock lock(&mu_);
      resp_->set_last_seq(static_cast<uint64_t>(last_seq_));
      resp_->set_events_stored(stored_);
      Finish(grpc::Status::OK);
      return;
    }
    std::string lease_id;
    {
      absl::MutexLock lock(&mu_);
      if (lease_id_.empty()) {
        lease_id_ = msg_.lease_id();
      } else if (msg_.lease_id() != lease_id_) {
        Finish(contract::ToGrpcStatus(FieldErrorStatus(
            {{"lease_id", "every message of a stream must carry the same lease"}})));
        return;
      }
      lease_id = lease_id_;
    }
    core_.RecordProgressAsync(lease_id, msg_.event(), [this](StatusOr<Core::ProgressResult> r) {
      if (!r.ok()) {
        Finish(contract::ToGrpcStatus(r.status()));
        return;
      }
      {
        absl::MutexLock lock(&mu_);
        if (r->stored) ++stored_;
        last_seq_ = r->last_seq;
      }
      StartRead(&msg_);
    });
  }
  void OnDone() override { delete this; }

 private:
  Core& core_;
  pb::ReportProgressResponse* resp_;
  pb::ReportProgressRequest msg_;
  // Written on gRPC's threads and the dispatch thread in turn (gRPC orders them; the mutex
  // makes that visible to ThreadSanitizer, as gRPC's own locks are not).
  absl::Mutex mu_;
  std::string lease_id_ ABSL_GUARDED_BY(mu_);
  int64_t stored_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
};

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

// The WorkerService on gRPC's callback API: no call holds a thread while it waits (long polls,
// progress streams, calls queued for the dispatch thread), so the coordinator's threads do not
// grow with the number of workers.
class CoordinatorServer::WorkerServiceImpl final : public pb::WorkerService::CallbackService {
 public:
  WorkerServiceImpl(Core* core, const Authenticator* auth) : core_(*core), auth_(*auth) {}

  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* ctx,
                                           const pb::RegisterWorkerRequest* req,
                                           pb::RegisterWorkerResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kWorker);
    if (!who.ok()) {
      reactor->Finish(contract::ToGrpcStatus(who.status()));
    } else {
      FinishWith(reactor, core_.RegisterWorker(*req), resp);
    }
    return reactor;
  }

  grpc::ServerUnaryReactor* LeaseJob(grpc::CallbackServerContext* ctx,
                                     const pb::LeaseJobRequest* req,
                                     pb::LeaseJobResponse* resp) override {
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kWorker);
    if (!who.ok()) {
      grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
      reactor->Finish(contract::ToGrpcStatus(who.status()));
      return reactor;
    }
    return new LeaseReactor(&core_, ctx, req, resp);
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const pb::HeartbeatRequest* req,
                                      pb::HeartbeatResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kWorker);
    if (!who.ok()) {
      reactor->Finish(contract::ToGrpcStatus(who.status()));
      return reactor;
    }
    core_.HeartbeatAsync(*req, [reactor, resp](StatusOr<pb::HeartbeatResponse> r) {
      FinishWith(reactor, std::move(r), resp);
    });
    return reactor;
  }

  grpc::ServerReadReactor<pb::ReportProgressRequest>* ReportProgress(
      grpc::CallbackServerContext* ctx, pb::ReportProgressResponse* resp) override {
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kWorker);
    return new ProgressReactor(&core_, resp, who.status());
  }

  grpc::ServerUnaryReactor* CompleteJob(grpc::CallbackServerContext* ctx,
                                        const pb::CompleteJobRequest* req,
                                        pb::CompleteJobResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    StatusOr<Principal> who = Authorize(auth_, ctx, ServiceKind::kWorker);
    if (!who.ok()) {
      reactor->Finish(contract::ToGrpcStatus(who.status()));
      return reactor;
    }
    core_.CompleteJobAsync(*req, [reactor, resp](StatusOr<pb::CompleteJobResponse> r) {
      FinishWith(reactor, std::move(r), resp);
    });
    return reactor;
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
