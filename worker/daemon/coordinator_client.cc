// WorkerService calls with deadlines and the bearer token (see coordinator_client.h).
#include "worker/daemon/coordinator_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "proto/contract/contract.h"

namespace rdattn::worker {
namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const CoordinatorClientOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.ca_cert_pem.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.ca_cert_pem;
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  // Keep long polls and long progress streams alive through idle NATs and proxies.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  // Reconnect quickly after a coordinator restart: attempts 0.5 s apart at first, at most 2 s
  // (gRPC's default grows to 120 s). The connect timeout keeps gRPC's default (20 s): a short
  // one fails the handshake with a coordinator that is busy starting, and backs off again.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1000);
  // A channel of its own subchannels: a replacement channel (Reconnect) really connects anew.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(options.address, creds, args);
}

// Call sites compute `status` first: the order of evaluation of arguments is unspecified, so
// Result(stub->Call(..., &response), response) could copy the response before the call.
template <typename T>
StatusOr<T> Result(const grpc::Status& status, T response) {
  if (!status.ok()) return contract::FromGrpcStatus(status);
  return response;
}

// One unary call of the WorkerService: `call` on `stub` with `context`.
template <typename Request, typename Response>
StatusOr<Response> Call(pb::WorkerService::Stub& stub,
                        grpc::Status (pb::WorkerService::Stub::*call)(grpc::ClientContext*,
                                                                      const Request&, Response*),
                        grpc::ClientContext* context, const Request& request) {
  Response response;
  const grpc::Status status = (stub.*call)(context, request, &response);
  return Result(status, std::move(response));
}

}  // namespace

// --- ProgressStream ----------------------------------------------------------------------------

ProgressStream::ProgressStream(
    std::unique_ptr<grpc::ClientContext> context, pb::ReportProgressResponse* response,
    std::unique_ptr<grpc::ClientWriter<pb::ReportProgressRequest>> writer)
    : context_(std::move(context)), response_(response), writer_(std::move(writer)) {}

ProgressStream::~ProgressStream() {
  if (!finished_) {
    context_->TryCancel();
    const grpc::Status ignored = writer_->Finish();  // cancelled: nothing to learn
    (void)ignored;
  }
}

bool ProgressStream::Write(const pb::ReportProgressRequest& request) {
  return !finished_ && writer_->Write(request);
}

StatusOr<pb::ReportProgressResponse> ProgressStream::Finish() {
  if (finished_) return FailedPreconditionError("ReportProgress stream already finished");
  finished_ = true;
  writer_->WritesDone();
  const grpc::Status status = writer_->Finish();
  return Result(status, pb::ReportProgressResponse(*response_));
}

void ProgressStream::Cancel() { context_->TryCancel(); }

// --- CoordinatorClient -------------------------------------------------------------------------

CoordinatorClient::CoordinatorClient(const CoordinatorClientOptions& options)
    : options_(options), token_(options.token) {
  channel_ = MakeChannel(options);
  stub_ = pb::WorkerService::NewStub(channel_);
}

CoordinatorClient::CoordinatorClient(std::shared_ptr<grpc::Channel> channel, std::string token)
    : token_(std::move(token)),
      channel_(std::move(channel)),
      stub_(pb::WorkerService::NewStub(channel_)) {}

std::shared_ptr<pb::WorkerService::Stub> CoordinatorClient::stub() const {
  absl::MutexLock lock(&mu_);
  return stub_;
}

void CoordinatorClient::Reconnect() {
  if (!options_) return;
  std::shared_ptr<grpc::Channel> channel = MakeChannel(*options_);
  std::shared_ptr<pb::WorkerService::Stub> stub = pb::WorkerService::NewStub(channel);
  absl::MutexLock lock(&mu_);
  channel_ = std::move(channel);
  stub_ = std::move(stub);
}

std::unique_ptr<grpc::ClientContext> CoordinatorClient::NewContext(Timeout timeout) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
  return context;
}

StatusOr<pb::RegisterWorkerResponse> CoordinatorClient::RegisterWorker(
    const pb::RegisterWorkerRequest& request, Timeout timeout) {
  auto context = NewContext(timeout);
  return Call(*stub(), &pb::WorkerService::Stub::RegisterWorker, context.get(), request);
}

StatusOr<pb::LeaseJobResponse> CoordinatorClient::LeaseJob(const pb::LeaseJobRequest& request,
                                                           Timeout timeout) {
  auto context = NewContext(timeout);
  {
    absl::MutexLock lock(&mu_);
    if (lease_polls_aborted_) return CancelledError("LeaseJob: the worker is shutting down");
    lease_call_ = context.get();
  }
  StatusOr<pb::LeaseJobResponse> result =
      Call(*stub(), &pb::WorkerService::Stub::LeaseJob, context.get(), request);
  {
    absl::MutexLock lock(&mu_);
    lease_call_ = nullptr;
  }
  return result;
}

void CoordinatorClient::AbortLeasePolls() {
  absl::MutexLock lock(&mu_);
  lease_polls_aborted_ = true;
  if (lease_call_ != nullptr) lease_call_->TryCancel();
}

StatusOr<pb::HeartbeatResponse> CoordinatorClient::Heartbeat(const pb::HeartbeatRequest& request,
                                                             Timeout timeout) {
  auto context = NewContext(timeout);
  return Call(*stub(), &pb::WorkerService::Stub::Heartbeat, context.get(), request);
}

StatusOr<pb::CompleteJobResponse> CoordinatorClient::CompleteJob(
    const pb::CompleteJobRequest& request, Timeout timeout) {
  auto context = NewContext(timeout);
  return Call(*stub(), &pb::WorkerService::Stub::CompleteJob, context.get(), request);
}

std::unique_ptr<ProgressStream> CoordinatorClient::OpenProgress(Timeout lifetime) {
  auto context = NewContext(lifetime);
  auto* response = new pb::ReportProgressResponse();
  auto writer = stub()->ReportProgress(context.get(), response);
  return std::make_unique<ProgressStream>(std::move(context), response, std::move(writer));
}

}  // namespace rdattn::worker
