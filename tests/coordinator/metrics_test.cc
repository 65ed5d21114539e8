// The coordinator's Prometheus metrics (docs/metrics.md, "Coordinator"): a real gRPC server on
// 127.0.0.1:0 with metrics on, driven through submit -> lease -> heartbeat -> progress ->
// complete, a failed attempt that is retried, a lease expiry (FakeClock) and an unauthenticated
// call; the exposition text is parsed and every value checked exactly. Also the per-sweep
// retention rule, the null-counters path, and a real exposer fetched over a plain socket.
#include "coordinator/metrics.h"

#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator/auth.h"
#include "coordinator/clock.h"
#include "coordinator/core.h"
#include "coordinator/service.h"
#include "coordinator/store.h"
#include "rdattn/v1/coordinator.grpc.pb.h"
#include "tests/coordinator/test_util.h"
#include "tests/coordinator/tiny_sweep.h"

namespace rdattn::coordinator {
namespace {

namespace pb = ::rdattn::v1;

constexpr char kResearcher[] = "tok-alice-researcher-0123456789";
constexpr char kWorkerToken[] = "tok-worker-0123456789";

using testing::TinySweep;

// One parsed exposition: series "name{k="v",...}" (labels sorted by name) -> value.
class Scrape {
 public:
  explicit Scrape(const std::string& text) : text_(text) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const size_t space = line.rfind(' ');
      std::string series = line.substr(0, space);
      const double value = std::stod(line.substr(space + 1));
      std::string name = series;
      std::map<std::string, std::string> labels;
      const size_t brace = series.find('{');
      if (brace != std::string::npos) {
        name = series.substr(0, brace);
        // k="v",k="v"}  (the tests' label values hold no quotes or commas)
        size_t pos = brace + 1;
        while (pos < series.size() && series[pos] != '}') {
          const size_t eq = series.find('=', pos);
          const size_t end = series.find('"', eq + 2);
          labels[series.substr(pos, eq - pos)] = series.substr(eq + 2, end - eq - 2);
          pos = end + 1;
          if (pos < series.size() && series[pos] == ',') ++pos;
        }
      }
      values_[Key(name, labels)] = value;
    }
  }

  // The value of one series, or nullopt when it is not exported.
  std::optional<double> Get(const std::string& name,
                            const std::map<std::string, std::string>& labels = {}) const {
    auto it = values_.find(Key(name, labels));
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  // Whether any series of `name` has label `label` = `value`.
  bool HasSeriesWith(const std::string& name, const std::string& label,
                     const std::string& value) const {
    const std::string needle = label + "=\"" + value + "\"";
    for (const auto& [key, v] : values_) {
      if (key.rfind(name + "{", 0) == 0 && key.find(needle) != std::string::npos) return true;
    }
    return false;
  }
  const std::string& text() const { return text_; }

 private:
  static std::string Key(const std::string& name,
                         const std::map<std::string, std::string>& labels) {
    std::string key = name + "{";
    for (const auto& [k, v] : labels) key += k + "=\"" + v + "\",";
    return key + "}";
  }
  std::string text_;
  std::map<std::string, double> values_;
};

// A coordinator with metrics on (store + core + server with the interceptor) and stubs.
class MetricsHarness {
 public:
  explicit MetricsHarness(bool auth, absl::Duration retention = absl::Seconds(300)) {
    StatusOr<std::unique_ptr<Store>> store = Store::Open(dir_.File("coord.db"));
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    CoreOptions co;
    co.lease_ttl = absl::Seconds(10);
    co.heartbeat_interval = absl::Seconds(1);
    co.wait_slice = absl::Milliseconds(20);
    core_ = std::make_unique<Core>(std::move(*store), &clock_, co, &metrics_);
    collector_ = std::make_shared<StateCollector>(core_.get(), retention);
    if (auth) {
      auth_ = Authenticator(
          {{kResearcher, Role::kResearcher, "alice"}, {kWorkerToken, Role::kWorker, "node-1"}});
    }
    ServerOptions so;
    so.listen = "127.0.0.1:0";
    so.metrics = &metrics_;
    StatusOr<std::unique_ptr<CoordinatorServer>> server =
        CoordinatorServer::Start(core_.get(), &auth_, so);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
    sweeps_ = pb::SweepService::NewStub(channel_);
    workers_ = pb::WorkerService::NewStub(channel_);
  }
  ~MetricsHarness() {
    server_->Shutdown(absl::Seconds(1));
    server_->Wait();
    server_.reset();
    core_.reset();
  }

  static std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token = "") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  }

  std::string Submit(const pb::SweepSpec& spec, const std::string& request_id,
                     const std::string& token = "") {
    pb::SubmitSweepRequest req;
    req.set_request_id(request_id);
    *req.mutable_spec() = spec;
    pb::SubmitSweepResponse resp;
    grpc::Status st = sweeps_->SubmitSweep(Ctx(token).get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.sweep().sweep_id();
  }

  void Register(const std::string& id, int slots, const std::string& token = "") {
    pb::RegisterWorkerRequest req;
    req.set_worker_id(id);
    req.set_hostname("test-host");
    req.set_kind(pb::HARDWARE_KIND_CPU);
    req.set_slots(slots);
    pb::RegisterWorkerResponse resp;
    grpc::Status st = workers_->RegisterWorker(Ctx(token).get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }

  pb::LeaseJobResponse Lease(const std::string& worker, int free_slots,
                             const std::string& token = "") {
    pb::LeaseJobRequest req;
    req.set_worker_id(worker);
    req.set_free_slots(free_slots);
    pb::LeaseJobResponse resp;
    grpc::Status st = workers_->LeaseJob(Ctx(token).get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_FALSE(resp.lease_id().empty()) << "no job leased";
    return resp;
  }

  void Heartbeat(const std::string& worker, int free_slots, const std::vector<std::string>& leases,
                 const std::string& token = "") {
    pb::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_free_slots(free_slots);
    for (const std::string& l : leases) {
      pb::LeaseProgress* p = req.add_leases();
      p->set_lease_id(l);
      p->set_ranks_started(true);
    }
    pb::HeartbeatResponse resp;
    grpc::Status st = workers_->Heartbeat(Ctx(token).get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }

  // Sends the events with these seqs on one ReportProgress stream; returns events_stored.
  // Events of the given seqs, TRAIN_STEPs except that `eval_seq` is the KIND_EVAL of milestone
  // `eval_milestone` (a job is SUCCEEDED only with every milestone's val NLL).
  int64_t Report(const std::string& lease_id, const std::vector<uint64_t>& seqs,
                 const std::string& token = "", uint64_t eval_seq = 0, int64_t eval_milestone = 0) {
    pb::ReportProgressResponse resp;
    auto ctx = Ctx(token);
    auto w = workers_->ReportProgress(ctx.get(), &resp);
    for (uint64_t seq : seqs) {
      pb::ReportProgressRequest req;
      req.set_lease_id(lease_id);
      req.mutable_event()->set_seq(seq);
      req.mutable_event()->set_kind(pb::MetricEvent::KIND_TRAIN_STEP);
      req.mutable_event()->set_step(static_cast<int64_t>(seq));
      if (seq == eval_seq) {
        req.mutable_event()->set_kind(pb::MetricEvent::KIND_EVAL);
        req.mutable_event()->set_milestone_tokens(eval_milestone);
        req.mutable_event()->set_val_nll(2.5);
      }
      if (!w->Write(req)) break;
    }
    w->WritesDone();
    grpc::Status st = w->Finish();
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.events_stored();
  }

  pb::CompleteJobResponse Complete(const pb::LeaseJobResponse& lease, const std::string& worker,
                                   pb::JobOutcome outcome, const std::string& token = "") {
    pb::CompleteJobRequest req;
    req.set_worker_id(worker);
    req.set_lease_id(lease.lease_id());
    req.set_job_id(lease.job().job_id());
    req.set_outcome(outcome);
    req.set_exit_code(outcome == pb::JOB_OUTCOME_FAILED ? 1 : 0);
    pb::CompleteJobResponse resp;
    grpc::Status st = workers_->CompleteJob(Ctx(token).get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  grpc::Status HealthCheck() {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    std::promise<grpc::Status> result;
    generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                      &response, [&](grpc::Status st) { result.set_value(st); });
    return result.get_future().get();
  }

  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() {
    return {metrics_.registry(), collector_};
  }
  Scrape Collect() { return Scrape(SerializeMetrics(collectables())); }

  FakeClock& clock() { return clock_; }
  Core& core() { return *core_; }
  pb::SweepService::Stub& sweeps() { return *sweeps_; }

 private:
  testing::TempDir dir_;
  FakeClock clock_;
  CoordinatorMetrics metrics_;  // outlives the core and the server
  std::unique_ptr<Core> core_;
  std::shared_ptr<StateCollector> collector_;
  Authenticator auth_;
  std::unique_ptr<CoordinatorServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::SweepService::Stub> sweeps_;
  std::unique_ptr<pb::WorkerService::Stub> workers_;
};

using Labels = std::map<std::string, std::string>;

TEST(MetricsTest, DurationBucketsAndCodeNames) {
  const std::vector<double> want = {0.001, 0.004, 0.016,  0.064,  0.256,
                                    1.024, 4.096, 16.384, 65.536, 262.144};
  const std::vector<double> got = GrpcDurationBuckets();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::OK), "OK");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::INVALID_ARGUMENT), "INVALID_ARGUMENT");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::UNAUTHENTICATED), "UNAUTHENTICATED");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::DATA_LOSS), "DATA_LOSS");
}

TEST(MetricsTest, ExactValuesThroughAJobLifeCycle) {
  MetricsHarness h(/*auth=*/true);
  {
    // Before anything: every state exported as 0, counters 0, no per-sweep or per-worker series.
    const Scrape s = h.Collect();
    for (const char* state : {"pending", "leased", "running", "succeeded", "failed", "cancelled"}) {
      EXPECT_EQ(s.Get("rdattn_jobs", {{"state", state}}), 0.0) << state << "\n" << s.text();
    }
    for (const char* state : {"pending", "running", "succeeded", "failed", "cancelled"}) {
      EXPECT_EQ(s.Get("rdattn_sweeps", {{"state", state}}), 0.0) << state;
    }
    EXPECT_EQ(s.Get("rdattn_workers", {{"state", "alive"}}), 0.0);
    EXPECT_EQ(s.Get("rdattn_workers", {{"state", "lost"}}), 0.0);
    EXPECT_EQ(s.Get("rdattn_lease_expiries_total"), 0.0);
    EXPECT_EQ(s.Get("rdattn_job_retries_total"), 0.0);
    EXPECT_EQ(s.Get("rdattn_metric_events_stored_total"), 0.0);
  }

  // An unauthenticated call, then a valid submission: 2 seeds x 2 arms = 4 jobs, 3 attempts each.
  pb::SubmitSweepRequest anon;
  anon.set_request_id("anon");
  *anon.mutable_spec() = TinySweep({1, 2}, 3, {12288}, "metrics-test");
  pb::SubmitSweepResponse anon_resp;
  EXPECT_EQ(h.sweeps().SubmitSweep(MetricsHarness::Ctx().get(), anon, &anon_resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  const std::string sweep =
      h.Submit(TinySweep({1, 2}, 3, {12288}, "metrics-test"), "req-1", kResearcher);
  ASSERT_FALSE(sweep.empty());

  h.Register("wk-a", 4, kWorkerToken);
  h.Register("wk-b", 2, kWorkerToken);
  {
    const Scrape s = h.Collect();
    EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "pending"}}), 4.0) << s.text();
    EXPECT_EQ(s.Get("rdattn_sweeps", {{"state", "pending"}}), 1.0);
    EXPECT_EQ(s.Get("rdattn_sweep_jobs", {{"sweep", sweep}, {"state", "pending"}}), 4.0);
    EXPECT_EQ(s.Get("rdattn_sweep_jobs", {{"sweep", sweep}, {"state", "running"}}), 0.0);
    EXPECT_EQ(s.Get("rdattn_workers", {{"state", "alive"}}), 2.0);
    EXPECT_EQ(s.Get("rdattn_worker_slots", {{"worker", "wk-a"}, {"state", "free"}}), 4.0);
    EXPECT_EQ(s.Get("rdattn_worker_slots", {{"worker", "wk-a"}, {"state", "busy"}}), 0.0);
    EXPECT_EQ(s.Get("rdattn_worker_slots", {{"worker", "wk-b"}, {"state", "free"}}), 2.0);
  }

  // Job 1: lease -> heartbeat (ranks started) -> 3 events (one resent) -> SUCCEEDED.
  const pb::LeaseJobResponse l1 = h.Lease("wk-a", 4, kWorkerToken);
  {
    const Scrape s = h.Collect();
    EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "leased"}}), 1.0);
    EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "pending"}}), 3.0);
    EXPECT_EQ(s.Get("rdattn_sweeps", {{"state", "running"}}), 1.0);
    EXPECT_EQ(s.Get("rdattn_sweeps", {{"state", "pending"}}), 0.0);
  }
  h.Heartbeat("wk-a", 3, {l1.lease_id()}, kWorkerToken);
  {
    const Scrape s = h.Collect();
    EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "running"}}), 1.0);
    EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "leased"}}), 0.0);
    EXPECT_EQ(s.Get("rdattn_sweep_jobs", {{"sweep", sweep}, {"state", "running"}}), 1.0);
    EXPECT_EQ(s.Get("rdattn_worker_slots", {{"worker", "wk-a"}, {"state", "free"}}), 3.0);
    EXPECT_EQ(s.Get("rdattn_worker_slots", {{"worker", "wk-a"}, {"state", "busy"}}), 1.0);
  }
  EXPECT_EQ(
      h.Report(l1.lease_id(), {1, 2, 3}, kWorkerToken, /*eval_seq=*/3, /*eval_milestone=*/12288),
      3);
  EXPECT_EQ(h.Report(l1.lease_id(), {3}, kWorkerToken), 0);  // a resend is not stored again
  EXPECT_EQ(h.Collect().Get("rdattn_metric_events_stored_total"), 3.0);
  EXPECT_FALSE(h.Complete(l1, "wk-a", pb::JOB_OUTCOME_SUCCEEDED, kWorkerToken).will_retry());

  // Job 2: fails once and is requeued (a retry, no expiry).
  const pb::LeaseJobResponse l2 = h.Lease("wk-a", 4, kWorkerToken);
  EXPECT_TRUE(h.Complete(l2, "wk-a", pb::JOB_OUTCOME_FAILED, kWorkerToken).will_retry());
  {
    const Scrape s = h.Collect();
    EXPECT_EQ(s.Get("rdattn_job_retries_total"), 1.0);
    EXPECT_EQ(s.Get("rdattn_lease_expiries_total"), 0.0);
  }

  // Job 3: leased, then its lease runs out (the clock moves past the TTL; wk-b stays silent).
  const pb::LeaseJobResponse l3 = h.Lease("wk-a", 4, kWorkerToken);
  EXPECT_NE(l3.lease_id(), l2.lease_id());
  h.clock().Advance(absl::Seconds(11));
  StatusOr<int> expired = h.core().ExpireLeases();
  ASSERT_TRUE(expired.ok()) << expired.status().ToString();
  EXPECT_EQ(*expired, 1);
  h.Heartbeat("wk-a", 4, {}, kWorkerToken);  // wk-a is alive again, wk-b is lost
  EXPECT_TRUE(h.HealthCheck().ok());

  const Scrape s = h.Collect();
  EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "pending"}}), 3.0) << s.text();
  EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "leased"}}), 0.0);
  EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "running"}}), 0.0);
  EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "succeeded"}}), 1.0);
  EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "failed"}}), 0.0);
  EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "cancelled"}}), 0.0);
  EXPECT_EQ(s.Get("rdattn_sweeps", {{"state", "running"}}), 1.0);
  EXPECT_EQ(s.Get("rdattn_sweep_jobs", {{"sweep", sweep}, {"state", "pending"}}), 3.0);
  EXPECT_EQ(s.Get("rdattn_sweep_jobs", {{"sweep", sweep}, {"state", "succeeded"}}), 1.0);
  EXPECT_EQ(s.Get("rdattn_sweep_jobs", {{"sweep", sweep}, {"state", "failed"}}), 0.0);
  EXPECT_EQ(s.Get("rdattn_workers", {{"state", "alive"}}), 1.0);
  EXPECT_EQ(s.Get("rdattn_workers", {{"state", "lost"}}), 1.0);
  EXPECT_EQ(s.Get("rdattn_worker_slots", {{"worker", "wk-a"}, {"state", "free"}}), 4.0);
  EXPECT_EQ(s.Get("rdattn_worker_slots", {{"worker", "wk-a"}, {"state", "busy"}}), 0.0);
  EXPECT_FALSE(s.HasSeriesWith("rdattn_worker_slots", "worker", "wk-b"))
      << "a lost worker keeps slot series";
  EXPECT_EQ(s.Get("rdattn_lease_expiries_total"), 1.0);
  EXPECT_EQ(s.Get("rdattn_job_retries_total"), 2.0);  // the failure and the expiry
  EXPECT_EQ(s.Get("rdattn_metric_events_stored_total"), 3.0);

  // RPCs: by short method name and status code name.
  EXPECT_EQ(s.Get("rdattn_grpc_requests_total", {{"method", "SubmitSweep"}, {"code", "OK"}}), 1.0);
  EXPECT_EQ(
      s.Get("rdattn_grpc_requests_total", {{"method", "SubmitSweep"}, {"code", "UNAUTHENTICATED"}}),
      1.0);
  EXPECT_EQ(s.Get("rdattn_grpc_requests_total", {{"method", "RegisterWorker"}, {"code", "OK"}}),
            2.0);
  EXPECT_EQ(s.Get("rdattn_grpc_requests_total", {{"method", "LeaseJob"}, {"code", "OK"}}), 3.0);
  EXPECT_EQ(s.Get("rdattn_grpc_requests_total", {{"method", "Heartbeat"}, {"code", "OK"}}), 2.0);
  EXPECT_EQ(s.Get("rdattn_grpc_requests_total", {{"method", "ReportProgress"}, {"code", "OK"}}),
            2.0);
  EXPECT_EQ(s.Get("rdattn_grpc_requests_total", {{"method", "CompleteJob"}, {"code", "OK"}}), 2.0);
  EXPECT_EQ(s.Get("rdattn_grpc_requests_total", {{"method", "Check"}, {"code", "OK"}}), 1.0);
  EXPECT_EQ(s.Get("rdattn_grpc_request_duration_seconds_count", {{"method", "SubmitSweep"}}), 2.0);
  EXPECT_EQ(s.Get("rdattn_grpc_request_duration_seconds_bucket",
                  {{"method", "SubmitSweep"}, {"le", "+Inf"}}),
            2.0);
  EXPECT_TRUE(s.Get("rdattn_grpc_request_duration_seconds_bucket",
                    {{"method", "SubmitSweep"}, {"le", "262.144"}}))
      << "missing the last bucket:\n"
      << s.text();
  EXPECT_TRUE(s.Get("rdattn_grpc_request_duration_seconds_bucket",
                    {{"method", "SubmitSweep"}, {"le", "0.001"}}));
  EXPECT_EQ(s.text().find("rdattn_grpc_requests_total{code=\"OK\",method=\"/"), std::string::npos)
      << "full method names leaked into the label";
}

TEST(MetricsTest, TerminalSweepSeriesLeaveAfterTheRetention) {
  MetricsHarness h(/*auth=*/false, absl::Seconds(300));
  const std::string done = h.Submit(TinySweep({1}, 1, {12288}, "metrics-test"), "req-done");
  const std::string live = h.Submit(TinySweep({2}, 1, {12288}, "metrics-test"), "req-live");
  pb::CancelSweepRequest cancel;
  cancel.set_sweep_id(done);
  pb::CancelSweepResponse cancel_resp;
  ASSERT_TRUE(h.sweeps().CancelSweep(MetricsHarness::Ctx().get(), cancel, &cancel_resp).ok());
  ASSERT_EQ(cancel_resp.sweep().state(), pb::SWEEP_STATE_CANCELLED);  // its jobs were all PENDING

  StateCollector no_retention(&h.core(), absl::ZeroDuration());
  auto scrape_without_retention = [&] {
    return Scrape(prometheus::TextSerializer().Serialize(no_retention.Collect()));
  };
  EXPECT_FALSE(scrape_without_retention().HasSeriesWith("rdattn_sweep_jobs", "sweep", done));
  EXPECT_TRUE(scrape_without_retention().HasSeriesWith("rdattn_sweep_jobs", "sweep", live));

  Scrape s = h.Collect();
  EXPECT_EQ(s.Get("rdattn_sweep_jobs", {{"sweep", done}, {"state", "cancelled"}}), 2.0) << s.text();
  EXPECT_EQ(s.Get("rdattn_sweep_jobs", {{"sweep", done}, {"state", "pending"}}), 0.0);
  EXPECT_EQ(s.Get("rdattn_sweep_jobs", {{"sweep", live}, {"state", "pending"}}), 2.0);

  h.clock().Advance(absl::Seconds(299));
  s = h.Collect();
  EXPECT_EQ(s.Get("rdattn_sweep_jobs", {{"sweep", done}, {"state", "cancelled"}}), 2.0)
      << "gone before the retention";

  h.clock().Advance(absl::Seconds(2));
  s = h.Collect();
  EXPECT_FALSE(s.HasSeriesWith("rdattn_sweep_jobs", "sweep", done)) << s.text();
  EXPECT_EQ(s.Get("rdattn_sweep_jobs", {{"sweep", live}, {"state", "pending"}}), 2.0)
      << "a sweep that is not terminal lost its series";
  // The store-wide gauges keep counting the ended sweep.
  EXPECT_EQ(s.Get("rdattn_sweeps", {{"state", "cancelled"}}), 1.0);
  EXPECT_EQ(s.Get("rdattn_sweeps", {{"state", "pending"}}), 1.0);
  EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "cancelled"}}), 2.0);
  EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "pending"}}), 2.0);
}

// Metrics off: a core without counters and a server without the interceptor do the same work.
TEST(MetricsTest, NullCountersKeepTheCoreWorking) {
  testing::TempDir dir;
  StatusOr<std::unique_ptr<Store>> store = Store::Open(dir.File("coord.db"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  FakeClock clock;
  CoreOptions co;
  co.lease_ttl = absl::Seconds(10);
  Core core(std::move(*store), &clock, co, /*counters=*/nullptr);
  pb::SubmitSweepRequest submit;
  submit.set_request_id("req");
  *submit.mutable_spec() = TinySweep({1}, 2, {12288}, "metrics-test");
  ASSERT_TRUE(core.SubmitSweep(submit, "").ok());
  pb::RegisterWorkerRequest reg;
  reg.set_worker_id("wk-a");
  reg.set_kind(pb::HARDWARE_KIND_CPU);
  reg.set_slots(1);
  ASSERT_TRUE(core.RegisterWorker(reg).ok());
  pb::LeaseJobRequest lease;
  lease.set_worker_id("wk-a");
  lease.set_free_slots(1);
  StatusOr<pb::LeaseJobResponse> l1 = core.LeaseJob(lease, nullptr);
  ASSERT_TRUE(l1.ok() && !l1->lease_id().empty());
  pb::MetricEvent event;
  event.set_seq(1);
  event.set_kind(pb::MetricEvent::KIND_TRAIN_STEP);
  ASSERT_TRUE(core.RecordProgress(l1->lease_id(), event).ok());
  pb::CompleteJobRequest fail;
  fail.set_lease_id(l1->lease_id());
  fail.set_outcome(pb::JOB_OUTCOME_FAILED);
  StatusOr<pb::CompleteJobResponse> done = core.CompleteJob(fail);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->will_retry());
  // The failed job waits out its retry backoff: the second lease takes the other job.
  StatusOr<pb::LeaseJobResponse> l2 = core.LeaseJob(lease, nullptr);
  ASSERT_TRUE(l2.ok() && !l2->lease_id().empty());
  EXPECT_NE(l2->job().job_id(), l1->job().job_id());
  clock.Advance(absl::Seconds(11));
  StatusOr<int> expired = core.ExpireLeases();
  ASSERT_TRUE(expired.ok());
  EXPECT_EQ(*expired, 1);
  StatusOr<StateCounts> counts = core.ReadStateCounts(absl::Seconds(300));
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->jobs[JobState::kPending], 2);  // one after its failure, one after its expiry
  ASSERT_EQ(counts->workers.size(), 1u);
  EXPECT_FALSE(counts->workers[0].alive);
}

// GET `path` from 127.0.0.1:port over a plain TCP socket (HTTP/1.0); the whole response.
std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    ADD_FAILURE() << "cannot connect to 127.0.0.1:" << port;
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  EXPECT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return response;
}

TEST(MetricsTest, ExposerServesMetricsOverHttp) {
  MetricsHarness h(/*auth=*/false);
  const std::string sweep = h.Submit(TinySweep({1}, 1, {12288}, "metrics-test"), "req-1");
  StatusOr<std::unique_ptr<MetricsExposer>> exposer =
      MetricsExposer::Start("127.0.0.1:0", h.collectables());
  ASSERT_TRUE(exposer.ok()) << exposer.status().ToString();
  const int port = (*exposer)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ((*exposer)->url(), "http://127.0.0.1:" + std::to_string(port) + "/metrics");

  const std::string response = HttpGet(port, "/metrics");
  ASSERT_EQ(response.rfind("HTTP/1.", 0), 0u) << response;
  EXPECT_NE(response.find(" 200 "), std::string::npos) << response.substr(0, 200);
  const size_t body = response.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  const Scrape s(response.substr(body + 4));
  EXPECT_EQ(s.Get("rdattn_jobs", {{"state", "pending"}}), 2.0) << s.text();
  EXPECT_EQ(s.Get("rdattn_sweep_jobs", {{"sweep", sweep}, {"state", "pending"}}), 2.0);
  EXPECT_EQ(s.Get("rdattn_grpc_requests_total", {{"method", "SubmitSweep"}, {"code", "OK"}}), 1.0);
  EXPECT_EQ(s.Get("rdattn_lease_expiries_total"), 0.0);

  // The same port again: busy, an error that names the flag.
  StatusOr<std::unique_ptr<MetricsExposer>> busy =
      MetricsExposer::Start("127.0.0.1:" + std::to_string(port), h.collectables());
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(busy.status().message().find("--metrics-listen"), std::string::npos)
      << busy.status().ToString();
  // Malformed addresses.
  for (const char* bad :
       {"127.0.0.1", "127.0.0.1:", ":9401", "127.0.0.1:http", "127.0.0.1:70000"}) {
    StatusOr<std::unique_ptr<MetricsExposer>> st = MetricsExposer::Start(bad, h.collectables());
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.status().message().find("--metrics-listen"), std::string::npos)
        << st.status().ToString();
  }
}

}  // namespace
}  // namespace rdattn::coordinator
