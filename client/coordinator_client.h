// The client's side of SweepService: one channel, the bearer token on every call, a deadline
// on every unary call (WatchSweep has none: it lasts as long as the sweep). Results are
// rdattn::Status (converted 1:1 from grpc::Status by the contract library; an INVALID_ARGUMENT's
// google.rpc.BadRequest details become Status::field_errors()).
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "client/settings.h"
#include "common/status.h"
#include "rdattn/v1/coordinator.grpc.pb.h"

namespace rdattn::client {

namespace pb = ::rdattn::v1;

class CoordinatorClient {
 public:
  explicit CoordinatorClient(const Connection& connection);

  StatusOr<pb::SubmitSweepResponse> SubmitSweep(const pb::SubmitSweepRequest& request);
  StatusOr<pb::GetSweepResponse> GetSweep(const pb::GetSweepRequest& request);
  StatusOr<pb::ListSweepsResponse> ListSweeps(const pb::ListSweepsRequest& request);
  StatusOr<pb::CancelSweepResponse> CancelSweep(const pb::CancelSweepRequest& request);
  StatusOr<pb::GetReportResponse> GetReport(const pb::GetReportRequest& request);

  // The sweep with its jobs, read through GetSweep's pages (FULL view, kJobsPerPage jobs a call,
  // following next_page_token), at most `limit` jobs (0: every job). The counts, state and spec
  // are the first page's. *more (optional) says that the sweep has jobs past the limit. A
  // coordinator older than paging answers with every job at once, which is taken as it is.
  StatusOr<pb::SweepStatus> GetSweepJobs(const std::string& sweep_id, int64_t limit = 0,
                                         bool* more = nullptr);
  static constexpr int kJobsPerPage = 1000;

  // Reads the stream until it ends, `on_message` returns false (the call is then cancelled and
  // OK returned), or it fails. Returns the stream's final status.
  Status WatchSweep(const pb::WatchSweepRequest& request,
                    const std::function<bool(const pb::WatchSweepResponse&)>& on_message);

 private:
  enum class Deadline { kUnary, kNone };
  void Prepare(grpc::ClientContext* context, Deadline deadline) const;

  Connection connection_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::SweepService::Stub> stub_;
};

}  // namespace rdattn::client
