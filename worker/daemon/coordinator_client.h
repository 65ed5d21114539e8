// rdattn-worker's side of rdattn.v1.WorkerService: one method per RPC, each with a deadline and
// the bearer token, each returning a Status (contract::FromGrpcStatus keeps the code). No
// retries here: the caller knows which codes are worth another try (CONVENTIONS B4).
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/sync_stream.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "rdattn/v1/coordinator.grpc.pb.h"

namespace rdattn::worker {

namespace pb = ::rdattn::v1;

struct CoordinatorClientOptions {
  std::string address;      // host:port (any gRPC target)
  std::string token;        // sent as "authorization: Bearer <token>"; empty: none
  std::string ca_cert_pem;  // non-empty: TLS, trusting these roots; empty: plaintext
};

// One ReportProgress client stream. Not thread-safe except Cancel().
class ProgressStream {
 public:
  ProgressStream(std::unique_ptr<grpc::ClientContext> context, pb::ReportProgressResponse* response,
                 std::unique_ptr<grpc::ClientWriter<pb::ReportProgressRequest>> writer);
  ~ProgressStream();
  // false: the stream is broken; Finish() says why.
  bool Write(const pb::ReportProgressRequest& request);
  // Half-closes and waits for the server's answer (the highest stored seq). Call once.
  StatusOr<pb::ReportProgressResponse> Finish();
  // Aborts the stream from any thread; a blocked Write or Finish returns.
  void Cancel();

 private:
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<pb::ReportProgressResponse> response_;
  std::unique_ptr<grpc::ClientWriter<pb::ReportProgressRequest>> writer_;
  bool finished_ = false;
};

// Thread-safe: every method may be called from any thread.
class CoordinatorClient {
 public:
  explicit CoordinatorClient(const CoordinatorClientOptions& options);
  // Over an existing channel (tests).
  CoordinatorClient(std::shared_ptr<grpc::Channel> channel, std::string token);

  using Timeout = std::chrono::milliseconds;

  StatusOr<pb::RegisterWorkerResponse> RegisterWorker(const pb::RegisterWorkerRequest& request,
                                                      Timeout timeout);
  // The long poll. AbortLeasePolls() makes a call in flight, and every later one, return
  // CANCELLED at once.
  StatusOr<pb::LeaseJobResponse> LeaseJob(const pb::LeaseJobRequest& request, Timeout timeout);
  void AbortLeasePolls();
  StatusOr<pb::HeartbeatResponse> Heartbeat(const pb::HeartbeatRequest& request, Timeout timeout);
  StatusOr<pb::CompleteJobResponse> CompleteJob(const pb::CompleteJobRequest& request,
                                                Timeout timeout);
  // Replaces the channel with a new one that connects at once, instead of waiting out gRPC's
  // reconnect backoff and re-resolution delay (about 8 s measured here with gRPC 1.51, longer
  // on a busy host). The heartbeat calls it while the coordinator cannot be reached, so that a
  // restarted coordinator is found within a heartbeat or two. Calls in flight keep the old
  // channel. A client built over an existing channel (tests) keeps it.
  void Reconnect();
  // Opens a ReportProgress stream whose whole life is bounded by `lifetime`. Never null.
  std::unique_ptr<ProgressStream> OpenProgress(Timeout lifetime);

 private:
  std::unique_ptr<grpc::ClientContext> NewContext(Timeout timeout) const;

  std::shared_ptr<pb::WorkerService::Stub> stub() const;

  const std::optional<CoordinatorClientOptions> options_;  // for Reconnect()
  const std::string token_;
  mutable absl::Mutex mu_;
  std::shared_ptr<grpc::Channel> channel_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<pb::WorkerService::Stub> stub_ ABSL_GUARDED_BY(mu_);
  bool lease_polls_aborted_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* lease_call_ ABSL_GUARDED_BY(mu_) = nullptr;  // the LeaseJob in flight
};

}  // namespace rdattn::worker
