#include "client/coordinator_client.h"

#include <algorithm>
#include <chrono>

#include "proto/contract/contract.h"

namespace rdattn::client {
namespace {

std::shared_ptr<grpc::ChannelCredentials> Credentials(const Connection& c) {
  if (!c.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = c.ca_cert_pem;  // empty: the system roots
  return grpc::SslCredentials(options);
}

// A rendered report (GetReportResponse.files: PNGs, CSVs, JSON) can pass gRPC's 4 MiB default.
constexpr int kMaxReceiveMessageBytes = 256 << 20;

std::shared_ptr<grpc::Channel> MakeChannel(const Connection& c) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  return grpc::CreateCustomChannel(c.address, Credentials(c), args);
}

template <typename Response, typename Call>
StatusOr<Response> Unary(Call call) {
  Response response;
  const grpc::Status status = call(&response);
  if (!status.ok()) return contract::FromGrpcStatus(status);
  return response;
}

}  // namespace

CoordinatorClient::CoordinatorClient(const Connection& connection)
    : connection_(connection),
      channel_(MakeChannel(connection)),
      stub_(pb::SweepService::NewStub(channel_)) {}

void CoordinatorClient::Prepare(grpc::ClientContext* context, Deadline deadline) const {
  if (!connection_.token.empty()) {
    context->AddMetadata("authorization", "Bearer " + connection_.token);
  }
  if (deadline == Deadline::kUnary) {
    context->set_deadline(std::chrono::system_clock::now() + connection_.timeout);
  }
}

StatusOr<pb::SubmitSweepResponse> CoordinatorClient::SubmitSweep(
    const pb::SubmitSweepRequest& request) {
  return Unary<pb::SubmitSweepResponse>([&](pb::SubmitSweepResponse* response) {
    grpc::ClientContext context;
    Prepare(&context, Deadline::kUnary);
    return stub_->SubmitSweep(&context, request, response);
  });
}

StatusOr<pb::GetSweepResponse> CoordinatorClient::GetSweep(const pb::GetSweepRequest& request) {
  return Unary<pb::GetSweepResponse>([&](pb::GetSweepResponse* response) {
    grpc::ClientContext context;
    Prepare(&context, Deadline::kUnary);
    return stub_->GetSweep(&context, request, response);
  });
}

StatusOr<pb::SweepStatus> CoordinatorClient::GetSweepJobs(const std::string& sweep_id,
                                                          int64_t limit, bool* more) {
  pb::GetSweepRequest request;
  request.set_sweep_id(sweep_id);
  request.set_view(pb::SWEEP_VIEW_FULL);
  pb::SweepStatus sweep;
  bool first = true;
  std::string token;
  do {
    const int64_t left = limit > 0 ? limit - sweep.jobs_size() : kJobsPerPage;
    request.set_page_size(static_cast<int32_t>(std::min<int64_t>(kJobsPerPage, left)));
    request.set_page_token(token);
    RDATTN_ASSIGN_OR_RETURN(pb::GetSweepResponse page, GetSweep(request));
    if (first) {
      sweep = std::move(*page.mutable_sweep());
      first = false;
    } else {
      for (pb::JobStatus& j : *page.mutable_sweep()->mutable_jobs()) {
        *sweep.add_jobs() = std::move(j);
      }
    }
    token = page.next_page_token();
    if (!token.empty() && token == request.page_token()) {
      return InternalError("GetSweep of sweep " + sweep_id +
                           " returned the page token it was given (a coordinator bug)");
    }
  } while (!token.empty() && (limit <= 0 || sweep.jobs_size() < limit));
  bool cut = !token.empty();
  if (limit > 0 && sweep.jobs_size() > limit) {  // an older coordinator sent every job
    sweep.mutable_jobs()->DeleteSubrange(static_cast<int>(limit),
                                         sweep.jobs_size() - static_cast<int>(limit));
    cut = true;
  }
  if (more != nullptr) *more = cut;
  return sweep;
}

StatusOr<pb::ListSweepsResponse> CoordinatorClient::ListSweeps(
    const pb::ListSweepsRequest& request) {
  return Unary<pb::ListSweepsResponse>([&](pb::ListSweepsResponse* response) {
    grpc::ClientContext context;
    Prepare(&context, Deadline::kUnary);
    return stub_->ListSweeps(&context, request, response);
  });
}

StatusOr<pb::CancelSweepResponse> CoordinatorClient::CancelSweep(
    const pb::CancelSweepRequest& request) {
  return Unary<pb::CancelSweepResponse>([&](pb::CancelSweepResponse* response) {
    grpc::ClientContext context;
    Prepare(&context, Deadline::kUnary);
    return stub_->CancelSweep(&context, request, response);
  });
}

StatusOr<pb::GetReportResponse> CoordinatorClient::GetReport(const pb::GetReportRequest& request) {
  return Unary<pb::GetReportResponse>([&](pb::GetReportResponse* response) {
    grpc::ClientContext context;
    Prepare(&context, Deadline::kUnary);
    return stub_->GetReport(&context, request, response);
  });
}

Status CoordinatorClient::WatchSweep(
    const pb::WatchSweepRequest& request,
    const std::function<bool(const pb::WatchSweepResponse&)>& on_message) {
  grpc::ClientContext context;
  Prepare(&context, Deadline::kNone);
  std::unique_ptr<grpc::ClientReader<pb::WatchSweepResponse>> reader =
      stub_->WatchSweep(&context, request);
  pb::WatchSweepResponse message;
  while (reader->Read(&message)) {
    if (!on_message(message)) {
      context.TryCancel();
      reader->Finish().IgnoreError();  // CANCELLED by us
      return Status::Ok();
    }
  }
  return contract::FromGrpcStatus(reader->Finish());
}

}  // namespace rdattn::client
