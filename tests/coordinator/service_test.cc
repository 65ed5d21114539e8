// The coordinator's gRPC services, in process: a real grpc::Server on 127.0.0.1:0 with a real
// SQLite file, called through a client channel. Time for leases comes from a FakeClock, so lease
// expiry is tested without sleeping; long polls and watches use short real-time waits.
#include "coordinator/service.h"

#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "coordinator/auth.h"
#include "coordinator/clock.h"
#include "coordinator/core.h"
#include "coordinator/store.h"
#include "proto/contract/contract.h"
#include "rdattn/v1/coordinator.grpc.pb.h"
#include "tests/coordinator/test_util.h"
#include "tests/coordinator/tiny_sweep.h"

namespace rdattn::coordinator {
namespace {

namespace pb = ::rdattn::v1;
using google::protobuf::util::MessageDifferencer;

constexpr char kResearcher[] = "tok-alice-researcher-0123456789";
constexpr char kResearcherBob[] = "tok-bob-researcher-0123456789";
constexpr char kWorkerToken[] = "tok-worker-0123456789";
constexpr char kAdmin[] = "tok-admin-0123456789";

using testing::TinySweep;

struct HarnessOptions {
  bool auth = false;
  absl::Duration lease_ttl = absl::Seconds(10);
  // The clock starts this much later than the default start (a coordinator restarted later).
  absl::Duration clock_offset = absl::ZeroDuration();
};

// One coordinator (store + core + server) and a channel to it.
class Harness {
 public:
  explicit Harness(HarnessOptions opts = {}, const std::string& db = "") {
    db_path_ = db.empty() ? dir_.File("coord.db") : db;
    StatusOr<std::unique_ptr<Store>> store = Store::Open(db_path_);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    CoreOptions co;
    co.lease_ttl = opts.lease_ttl;
    co.heartbeat_interval = absl::Seconds(1);
    co.wait_slice = absl::Milliseconds(20);
    co.max_lease_wait = absl::Seconds(5);
    co.cancel_grace = absl::Seconds(2);
    clock_.Advance(opts.clock_offset);
    core_ = std::make_unique<Core>(std::move(*store), &clock_, co);
    if (opts.auth) {
      auth_ = Authenticator({{kResearcher, Role::kResearcher, "alice"},
                             {kResearcherBob, Role::kResearcher, "bob"},
                             {kWorkerToken, Role::kWorker, "node-1"},
                             {kAdmin, Role::kAdmin, "ops"}});
    }
    ServerOptions so;
    so.listen = "127.0.0.1:0";
    StatusOr<std::unique_ptr<CoordinatorServer>> server =
        CoordinatorServer::Start(core_.get(), &auth_, so);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    EXPECT_GT(server_->port(), 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
    sweeps_ = pb::SweepService::NewStub(channel_);
    workers_ = pb::WorkerService::NewStub(channel_);
  }
  ~Harness() { Stop(); }

  void Stop() {
    if (server_) {
      server_->Shutdown(absl::Seconds(1));
      server_->Wait();
      server_.reset();
    }
    core_.reset();
  }

  // A context with a deadline and, when given, a bearer token.
  static std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token = "", int seconds = 10) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  }

  grpc::Status Submit(const pb::SweepSpec& spec, const std::string& request_id,
                      pb::SubmitSweepResponse* resp, bool validate_only = false,
                      const std::string& token = "") {
    pb::SubmitSweepRequest req;
    req.set_request_id(request_id);
    *req.mutable_spec() = spec;
    req.set_validate_only(validate_only);
    return sweeps_->SubmitSweep(Ctx(token).get(), req, resp);
  }

  pb::SweepStatus Get(const std::string& id) {
    pb::GetSweepRequest req;
    req.set_sweep_id(id);
    pb::GetSweepResponse resp;
    grpc::Status st = sweeps_->GetSweep(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.sweep();
  }

  pb::JobStatus Job(const std::string& sweep_id, const std::string& job_id) {
    const pb::SweepStatus sweep = Get(sweep_id);
    for (const pb::JobStatus& j : sweep.jobs()) {
      if (j.job().job_id() == job_id) return j;
    }
    ADD_FAILURE() << "no job " << job_id;
    return {};
  }

  std::string Register(const std::string& id = "", pb::HardwareKind kind = pb::HARDWARE_KIND_CPU,
                       int slots = 1) {
    pb::RegisterWorkerRequest req;
    req.set_worker_id(id);
    req.set_hostname("test-host");
    req.set_kind(kind);
    req.set_slots(slots);
    pb::RegisterWorkerResponse resp;
    grpc::Status st = workers_->RegisterWorker(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.heartbeat_interval().seconds(), 1);
    EXPECT_EQ(resp.lease_ttl().seconds(), absl::ToInt64Seconds(core_->options().lease_ttl));
    return resp.worker_id();
  }

  pb::LeaseJobResponse Lease(const std::string& worker, int wait_ms = 0, int free_slots = 1) {
    pb::LeaseJobRequest req;
    req.set_worker_id(worker);
    req.set_free_slots(free_slots);
    req.mutable_wait()->set_seconds(wait_ms / 1000);
    req.mutable_wait()->set_nanos((wait_ms % 1000) * 1'000'000);
    pb::LeaseJobResponse resp;
    grpc::Status st = workers_->LeaseJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  grpc::Status Report(const std::string& lease_id, const std::vector<pb::MetricEvent>& events,
                      pb::ReportProgressResponse* resp) {
    auto ctx = Ctx();
    std::unique_ptr<grpc::ClientWriter<pb::ReportProgressRequest>> w =
        workers_->ReportProgress(ctx.get(), resp);
    for (const pb::MetricEvent& e : events) {
      pb::ReportProgressRequest req;
      req.set_lease_id(lease_id);
      *req.mutable_event() = e;
      if (!w->Write(req)) break;
    }
    w->WritesDone();
    return w->Finish();
  }

  grpc::Status Complete(const pb::LeaseJobResponse& lease, const std::string& worker,
                        pb::JobOutcome outcome, pb::CompleteJobResponse* resp, int exit_code = 0,
                        const std::string& stderr_tail = "") {
    pb::CompleteJobRequest req;
    req.set_worker_id(worker);
    req.set_lease_id(lease.lease_id());
    req.set_job_id(lease.job().job_id());
    req.set_outcome(outcome);
    req.set_exit_code(exit_code);
    req.set_stderr_tail(stderr_tail);
    return workers_->CompleteJob(Ctx().get(), req, resp);
  }

  pb::HeartbeatResponse Heartbeat(const std::string& worker, const std::vector<std::string>& leases,
                                  bool ranks_started = false) {
    pb::HeartbeatRequest req;
    req.set_worker_id(worker);
    for (const std::string& l : leases) {
      pb::LeaseProgress* p = req.add_leases();
      p->set_lease_id(l);
      p->set_ranks_started(ranks_started);
    }
    pb::HeartbeatResponse resp;
    grpc::Status st = workers_->Heartbeat(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  // Every event of a watch from after_seq until the stream ends.
  grpc::Status Watch(const std::string& sweep_id, uint64_t after_seq,
                     std::vector<pb::WatchEvent>* out, int seconds = 10) {
    pb::WatchSweepRequest req;
    req.set_sweep_id(sweep_id);
    req.set_after_seq(after_seq);
    auto ctx = Ctx("", seconds);
    std::unique_ptr<grpc::ClientReader<pb::WatchSweepResponse>> r =
        sweeps_->WatchSweep(ctx.get(), req);
    pb::WatchSweepResponse msg;
    while (r->Read(&msg)) out->push_back(msg.event());
    return r->Finish();
  }

  FakeClock& clock() { return clock_; }
  Core& core() { return *core_; }
  CoordinatorServer& server() { return *server_; }
  pb::SweepService::Stub& sweeps() { return *sweeps_; }
  pb::WorkerService::Stub& workers() { return *workers_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  const std::string& db_path() const { return db_path_; }

 private:
  testing::TempDir dir_;
  std::string db_path_;
  FakeClock clock_;
  std::unique_ptr<Core> core_;
  Authenticator auth_;
  std::unique_ptr<CoordinatorServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::SweepService::Stub> sweeps_;
  std::unique_ptr<pb::WorkerService::Stub> workers_;
};

pb::MetricEvent Event(uint64_t seq, pb::MetricEvent::Kind kind, int64_t step = 0) {
  pb::MetricEvent e;
  e.set_seq(seq);
  e.set_kind(kind);
  e.set_step(step);
  e.set_tokens(step * 512);
  return e;
}

pb::MetricEvent Eval(uint64_t seq, int64_t milestone, double nll) {
  pb::MetricEvent e = Event(seq, pb::MetricEvent::KIND_EVAL, milestone / 512);
  e.set_milestone_tokens(milestone);
  e.set_val_nll(nll);
  return e;
}

// --- submission ------------------------------------------------------------------------------

TEST(ServiceTest, SubmitValidatesStoresAndIsIdempotent) {
  Harness h;
  // Invalid: every bad field named, nothing stored.
  pb::SweepSpec bad = TinySweep();
  bad.clear_seeds();
  bad.add_arms("nonsense");
  bad.mutable_schedule()->set_global_batch_tokens(-1);
  pb::SubmitSweepResponse resp;
  grpc::Status st = h.Submit(bad, "req-bad", &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("seeds"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("arms[2]"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("global_batch_tokens"), std::string::npos)
      << st.error_message();
  // ... each also as a google.rpc.BadRequest field violation in the status details, the message
  // being their join.
  const Status wire = contract::FromGrpcStatus(st);
  std::set<std::string> fields;
  for (const FieldError& e : wire.field_errors()) fields.insert(e.path);
  EXPECT_TRUE(fields.count("seeds") && fields.count("arms[2]") &&
              fields.count("schedule.global_batch_tokens"))
      << st.error_message();
  EXPECT_EQ(JoinFieldErrors(wire.field_errors()), st.error_message());
  // A missing request id is named too.
  st = h.Submit(TinySweep(), "", &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("request_id"), std::string::npos);

  // validate_only: the plan, nothing stored.
  st = h.Submit(TinySweep(), "req-plan", &resp, /*validate_only=*/true);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.planned_jobs_size(), 4);
  EXPECT_EQ(resp.sweep().sweep_id(), "");

  pb::ListSweepsResponse list;
  ASSERT_TRUE(h.sweeps().ListSweeps(Harness::Ctx().get(), pb::ListSweepsRequest(), &list).ok());
  EXPECT_EQ(list.sweeps_size(), 0) << "an invalid or validate-only submission stored something";

  // Valid: stored, jobs PENDING at attempt 0.
  st = h.Submit(TinySweep(), "req-1", &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(resp.created());
  const std::string id = resp.sweep().sweep_id();
  EXPECT_TRUE(std::regex_match(id, std::regex("sw-[0-9a-f]{8}"))) << id;
  EXPECT_EQ(resp.sweep().state(), pb::SWEEP_STATE_PENDING);
  EXPECT_EQ(resp.sweep().job_counts().total(), 4);
  EXPECT_EQ(resp.sweep().job_counts().pending(), 4);
  pb::SweepStatus got = h.Get(id);
  ASSERT_EQ(got.jobs_size(), 4);
  for (const pb::JobStatus& j : got.jobs()) {
    EXPECT_EQ(j.state(), pb::JOB_STATE_PENDING);
    EXPECT_EQ(j.attempts(), 0);
    EXPECT_EQ(j.job().sweep_id(), id);
    EXPECT_EQ(j.job().job_id().rfind(id + "/", 0), 0u) << j.job().job_id();
  }

  // The same request again: the same sweep, no new jobs.
  pb::SubmitSweepResponse again;
  ASSERT_TRUE(h.Submit(TinySweep(), "req-1", &again).ok());
  EXPECT_FALSE(again.created());
  EXPECT_EQ(again.sweep().sweep_id(), id);
  ASSERT_TRUE(h.sweeps().ListSweeps(Harness::Ctx().get(), pb::ListSweepsRequest(), &list).ok());
  EXPECT_EQ(list.sweeps_size(), 1);
  EXPECT_EQ(list.sweeps(0).job_counts().total(), 4);
  EXPECT_EQ(list.sweeps(0).jobs_size(), 0);  // basic view
  // The same request id with another spec is refused.
  pb::SweepSpec other = TinySweep({7});
  EXPECT_EQ(h.Submit(other, "req-1", &again).error_code(), grpc::StatusCode::ALREADY_EXISTS);

  pb::GetSweepRequest missing;
  missing.set_sweep_id("sw-00000000");
  pb::GetSweepResponse gr;
  EXPECT_EQ(h.sweeps().GetSweep(Harness::Ctx().get(), missing, &gr).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST(ServiceTest, ListSweepsPagesAndFilters) {
  Harness h;
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    pb::SubmitSweepResponse resp;
    ASSERT_TRUE(
        h.Submit(TinySweep({static_cast<uint64_t>(i + 1)}), "req-" + std::to_string(i), &resp)
            .ok());
    ids.push_back(resp.sweep().sweep_id());
  }
  pb::ListSweepsRequest req;
  req.set_page_size(2);
  std::vector<std::string> seen;
  for (int page = 0; page < 5; ++page) {
    pb::ListSweepsResponse resp;
    ASSERT_TRUE(h.sweeps().ListSweeps(Harness::Ctx().get(), req, &resp).ok());
    for (const pb::SweepStatus& s : resp.sweeps()) seen.push_back(s.sweep_id());
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  EXPECT_EQ(seen, std::vector<std::string>(ids.rbegin(), ids.rend()));  // newest first, each once

  pb::ListSweepsRequest filtered;
  filtered.add_states(pb::SWEEP_STATE_SUCCEEDED);
  pb::ListSweepsResponse none;
  ASSERT_TRUE(h.sweeps().ListSweeps(Harness::Ctx().get(), filtered, &none).ok());
  EXPECT_EQ(none.sweeps_size(), 0);
  pb::ListSweepsRequest bad;
  bad.set_page_token("garbage");
  EXPECT_EQ(h.sweeps().ListSweeps(Harness::Ctx().get(), bad, &none).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// --- the whole life of a sweep ---------------------------------------------------------------

TEST(ServiceTest, LeaseReportCompleteWatchAndReport) {
  Harness h;
  pb::SubmitSweepResponse sub;
  ASSERT_TRUE(h.Submit(TinySweep(), "req-life", &sub).ok());
  const std::string sid = sub.sweep().sweep_id();
  const std::string worker = h.Register();
  EXPECT_TRUE(std::regex_match(worker, std::regex("wk-[0-9a-f]{8}"))) << worker;

  // NLL per (seed, arm) at the two milestones: rd is better by 0.1 (seed 1) and 0.3 (seed 2).
  auto nll = [](uint64_t seed, const std::string& arm, int64_t milestone) {
    double base = milestone == 6144 ? 4.0 : 3.0;
    if (arm == "rd") base -= seed == 1 ? 0.1 : 0.3;
    return base;
  };
  uint64_t mid_seq = 0;
  for (int n = 0; n < 4; ++n) {
    pb::LeaseJobResponse lease = h.Lease(worker);
    ASSERT_TRUE(lease.has_job()) << "job " << n;
    EXPECT_EQ(lease.job().attempt(), 1);
    EXPECT_FALSE(lease.lease_id().empty());
    EXPECT_GT(lease.lease_expire_time().seconds(), absl::ToUnixSeconds(h.clock().Now()));
    const std::string job_id = lease.job().job_id();
    EXPECT_EQ(h.Job(sid, job_id).state(), pb::JOB_STATE_LEASED);

    pb::MetricEvent init = Event(1, pb::MetricEvent::KIND_INIT);
    init.set_init_param_checksum("fnv:" + std::to_string(lease.job().seed()));
    pb::MetricEvent step = Event(2, pb::MetricEvent::KIND_TRAIN_STEP, 12);
    step.set_train_loss(3.5);
    step.set_tokens_per_second(1000);
    std::vector<pb::MetricEvent> events = {
        init,
        step,
        Eval(3, 6144, nll(lease.job().seed(), lease.job().arm(), 6144)),
        step /* a resend: stored once */,
        Eval(4, 12288, nll(lease.job().seed(), lease.job().arm(), 12288)),
        Event(5, pb::MetricEvent::KIND_FINISHED, 24)};
    pb::ReportProgressResponse ack;
    grpc::Status st = h.Report(lease.lease_id(), events, &ack);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(ack.events_stored(), 5);
    EXPECT_EQ(ack.last_seq(), 5u);
    pb::JobStatus running = h.Job(sid, job_id);
    EXPECT_EQ(running.state(), pb::JOB_STATE_RUNNING);
    EXPECT_EQ(running.step(), 24);
    EXPECT_EQ(running.last_train_loss(), 3.5);
    EXPECT_EQ(running.last_val_nll(), nll(lease.job().seed(), lease.job().arm(), 12288));
    EXPECT_EQ(running.tokens_per_second(), 1000);
    EXPECT_EQ(running.init_param_checksum(), "fnv:" + std::to_string(lease.job().seed()));
    if (n == 1) mid_seq = h.Get(sid).last_event_seq();

    pb::CompleteJobResponse done;
    ASSERT_TRUE(h.Complete(lease, worker, pb::JOB_OUTCOME_SUCCEEDED, &done).ok());
    EXPECT_EQ(done.job_state(), pb::JOB_STATE_SUCCEEDED);
    EXPECT_FALSE(done.will_retry());
    // The lease is gone: more events or a second completion are ABORTED.
    EXPECT_EQ(
        h.Report(lease.lease_id(), {Event(9, pb::MetricEvent::KIND_TRAIN_STEP)}, &ack).error_code(),
        grpc::StatusCode::ABORTED);
    EXPECT_EQ(h.Complete(lease, worker, pb::JOB_OUTCOME_SUCCEEDED, &done).error_code(),
              grpc::StatusCode::ABORTED);
  }
  EXPECT_FALSE(h.Lease(worker).has_job());
  pb::SweepStatus final_status = h.Get(sid);
  EXPECT_EQ(final_status.state(), pb::SWEEP_STATE_SUCCEEDED);
  EXPECT_EQ(final_status.job_counts().succeeded(), 4);
  EXPECT_TRUE(final_status.has_end_time());

  // Watch from the start: ends by itself after the terminal sweep change, seqs increasing.
  std::vector<pb::WatchEvent> all;
  grpc::Status st = h.Watch(sid, 0, &all);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_FALSE(all.empty());
  for (size_t i = 1; i < all.size(); ++i) EXPECT_GT(all[i].seq(), all[i - 1].seq());
  EXPECT_TRUE(all.back().has_sweep_state_change());
  EXPECT_EQ(all.back().sweep_state_change().to_state(), pb::SWEEP_STATE_SUCCEEDED);
  EXPECT_EQ(all.back().seq(), final_status.last_event_seq());
  int metrics = 0, job_changes = 0;
  for (const pb::WatchEvent& e : all) {
    EXPECT_EQ(e.sweep_id(), sid);
    metrics += e.has_metric_event();
    job_changes += e.has_job_state_change();
  }
  EXPECT_EQ(metrics, 4 * 5);
  EXPECT_EQ(job_changes, 4 * 4);  // created PENDING, LEASED, RUNNING, SUCCEEDED

  // Resume from the middle: exactly the rest.
  std::vector<pb::WatchEvent> rest;
  ASSERT_TRUE(h.Watch(sid, mid_seq, &rest).ok());
  std::vector<pb::WatchEvent> expected;
  for (const pb::WatchEvent& e : all) {
    if (e.seq() > mid_seq) expected.push_back(e);
  }
  ASSERT_EQ(rest.size(), expected.size());
  for (size_t i = 0; i < rest.size(); ++i)
    EXPECT_TRUE(MessageDifferencer::Equals(rest[i], expected[i]));
  // Resuming past the end of an ended sweep returns at once.
  std::vector<pb::WatchEvent> nothing;
  ASSERT_TRUE(h.Watch(sid, final_status.last_event_seq(), &nothing).ok());
  EXPECT_TRUE(nothing.empty());

  // The report pairs rd with block per seed at both milestones.
  pb::GetReportRequest rreq;
  rreq.set_sweep_id(sid);
  pb::GetReportResponse rresp;
  ASSERT_TRUE(h.sweeps().GetReport(Harness::Ctx().get(), rreq, &rresp).ok());
  const pb::Report& report = rresp.report();
  EXPECT_TRUE(report.complete());
  EXPECT_EQ(report.reference_arm(), "block");
  ASSERT_EQ(report.rows_size(), 2);
  EXPECT_EQ(report.missing_size(), 0);
  const pb::PairedRow& last = report.rows(1);
  EXPECT_EQ(last.milestone_tokens(), 12288);
  EXPECT_EQ(last.arm(), "rd");
  EXPECT_EQ(last.n(), 2);
  EXPECT_NEAR(last.mean_delta_nll(), -0.2, 1e-12);
  EXPECT_EQ(last.wins(), 2);
  ASSERT_EQ(last.pairs_size(), 2);
  EXPECT_EQ(last.pairs(0).seed(), 1u);
  EXPECT_NEAR(last.pairs(0).delta_nll(), -0.1, 1e-12);
  // The rendered files come along: report.md, three PNGs drawn by gnuplot, CSVs, report.json.
  std::set<std::string> names;
  for (const pb::ReportFile& f : rresp.files()) {
    names.insert(f.name());
    if (f.media_type() == "image/png") {
      EXPECT_EQ(f.content().substr(0, 4), "\x89PNG") << f.name();
    }
  }
  EXPECT_TRUE(rresp.warning().empty()) << rresp.warning();
  for (const char* name : {"report.md", "plots/nll_vs_tokens.png", "plots/delta_last_milestone.png",
                           "plots/js_by_layer.png", "paired.csv", "report.json"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  // A bad request is INVALID_ARGUMENT; omit_files returns the Report alone.
  pb::GetReportRequest bad = rreq;
  bad.add_formats("pdf");
  pb::GetReportResponse bad_resp;
  EXPECT_EQ(h.sweeps().GetReport(Harness::Ctx().get(), bad, &bad_resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  bad = rreq;
  bad.set_reference_arm("nope");
  EXPECT_EQ(h.sweeps().GetReport(Harness::Ctx().get(), bad, &bad_resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // A target effect reaches the power rows; a negative or non-finite one is refused.
  pb::GetReportRequest target = rreq;
  target.set_omit_files(true);
  target.set_target_delta_nll(0.04);
  pb::GetReportResponse target_resp;
  ASSERT_TRUE(h.sweeps().GetReport(Harness::Ctx().get(), target, &target_resp).ok());
  bool user_row = false;
  for (const pb::SeedsNeeded& need : target_resp.report().rows(1).seeds_needed()) {
    if (need.user_given()) user_row = need.delta_nll() == 0.04;
  }
  EXPECT_TRUE(user_row) << target_resp.report().rows(1).DebugString();
  for (double bad : {-0.01, std::numeric_limits<double>::infinity(), std::nan("")}) {
    target.set_target_delta_nll(bad);
    grpc::Status st = h.sweeps().GetReport(Harness::Ctx().get(), target, &target_resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_NE(st.error_message().find("target_delta_nll"), std::string::npos) << st.error_message();
  }
  pb::GetReportRequest plain = rreq;
  plain.set_omit_files(true);
  pb::GetReportResponse plain_resp;
  ASSERT_TRUE(h.sweeps().GetReport(Harness::Ctx().get(), plain, &plain_resp).ok());
  EXPECT_EQ(plain_resp.files_size(), 0);
  EXPECT_EQ(plain_resp.report().rows_size(), 2);
}

TEST(ServiceTest, ProgressForUnknownLeaseIsAborted) {
  Harness h;
  pb::ReportProgressResponse ack;
  EXPECT_EQ(h.Report("ls-unknown", {Event(1, pb::MetricEvent::KIND_INIT)}, &ack).error_code(),
            grpc::StatusCode::ABORTED);
  pb::LeaseJobRequest req;
  req.set_worker_id("wk-unknown");
  pb::LeaseJobResponse resp;
  EXPECT_EQ(h.workers().LeaseJob(Harness::Ctx().get(), req, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  pb::HeartbeatRequest hb;
  hb.set_worker_id("wk-unknown");
  pb::HeartbeatResponse hbr;
  EXPECT_EQ(h.workers().Heartbeat(Harness::Ctx().get(), hb, &hbr).error_code(),
            grpc::StatusCode::NOT_FOUND);
  pb::RegisterWorkerRequest reg;  // no kind, no slots
  pb::RegisterWorkerResponse regr;
  grpc::Status st = h.workers().RegisterWorker(Harness::Ctx().get(), reg, &regr);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("kind"), std::string::npos);
  EXPECT_NE(st.error_message().find("slots"), std::string::npos);
  EXPECT_EQ(contract::FromGrpcStatus(st).field_errors(),
            (std::vector<FieldError>{{"kind", "must be HARDWARE_KIND_CPU or HARDWARE_KIND_GPU"},
                                     {"slots", "must be > 0"}}));
  EXPECT_EQ(st.error_message(),
            "kind: must be HARDWARE_KIND_CPU or HARDWARE_KIND_GPU; slots: must be > 0");
}

// A check of one field is a BadRequest violation too, not only text: every INVALID_ARGUMENT of
// the services carries its field errors, and the message is their join as before.
TEST(ServiceTest, SingleFieldChecksCarryTheirFieldInTheDetails) {
  Harness h;
  auto expect_field = [](const grpc::Status& st, const std::string& path,
                         const std::string& reason) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << path;
    EXPECT_EQ(st.error_message(), path + ": " + reason);
    EXPECT_EQ(contract::FromGrpcStatus(st).field_errors(),
              (std::vector<FieldError>{{path, reason}}));
  };
  pb::GetSweepRequest get;  // no sweep_id
  pb::GetSweepResponse getr;
  expect_field(h.sweeps().GetSweep(Harness::Ctx().get(), get, &getr), "sweep_id", "required");
  get.set_sweep_id("sw-anything");
  get.set_view(pb::SWEEP_VIEW_SUMMARY);
  get.set_page_size(5);
  expect_field(h.sweeps().GetSweep(Harness::Ctx().get(), get, &getr), "page_size",
               "pages are of the full view's jobs; view is SWEEP_VIEW_SUMMARY");
  pb::ListSweepsRequest list;
  list.add_states(static_cast<pb::SweepState>(99));
  pb::ListSweepsResponse listr;
  expect_field(h.sweeps().ListSweeps(Harness::Ctx().get(), list, &listr), "states[0]",
               "not a sweep state");
  pb::LeaseJobRequest lease;  // no worker_id
  pb::LeaseJobResponse leaser;
  expect_field(h.workers().LeaseJob(Harness::Ctx().get(), lease, &leaser), "worker_id", "required");
  pb::CompleteJobRequest done;  // no lease_id
  pb::CompleteJobResponse doner;
  expect_field(h.workers().CompleteJob(Harness::Ctx().get(), done, &doner), "lease_id", "required");
}

// --- long poll -------------------------------------------------------------------------------

TEST(ServiceTest, LongPollWaitsAndWakesOnSubmit) {
  Harness h;
  const std::string worker = h.Register();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(h.Lease(worker, /*wait_ms=*/300).has_job());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250));

  std::future<pb::LeaseJobResponse> polled =
      std::async(std::launch::async, [&] { return h.Lease(worker, 5000); });
  // The poll must be waiting (it found no job and blocked) before the submit, so the job can
  // only reach it through the wake-up, not through its first look.
  const auto wait_until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (h.core().WaitingLeasePolls() == 0 && std::chrono::steady_clock::now() < wait_until) {
    std::this_thread::yield();
  }
  ASSERT_EQ(h.core().WaitingLeasePolls(), 1) << "the long poll never started waiting";
  t0 = std::chrono::steady_clock::now();
  pb::SubmitSweepResponse sub;
  ASSERT_TRUE(h.Submit(TinySweep({1}), "req-poll", &sub).ok());
  pb::LeaseJobResponse got = polled.get();
  EXPECT_TRUE(got.has_job());
  // Woken by the submit, well before the poll's own 5 s deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(h.core().WaitingLeasePolls(), 0);

  // Gang: a job of world size 1 never goes to a worker with no free slot.
  EXPECT_FALSE(h.Lease(worker, 0, /*free_slots=*/0).has_job());
}

TEST(ServiceTest, ShutdownEndsLongPollsAndWatches) {
  Harness h;
  const std::string worker = h.Register();
  pb::SubmitSweepResponse sub;
  ASSERT_TRUE(h.Submit(TinySweep({1}), "req-shutdown", &sub).ok());
  std::future<grpc::Status> watch = std::async(std::launch::async, [&] {
    std::vector<pb::WatchEvent> events;
    return h.Watch(sub.sweep().sweep_id(), 0, &events, 30);
  });
  pb::LeaseJobRequest lreq;
  lreq.set_worker_id(worker);
  lreq.set_free_slots(0);  // nothing fits: waits
  lreq.mutable_wait()->set_seconds(30);
  std::future<grpc::Status> poll = std::async(std::launch::async, [&] {
    pb::LeaseJobResponse resp;
    return h.workers().LeaseJob(Harness::Ctx("", 30).get(), lreq, &resp);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  h.Stop();
  ASSERT_EQ(watch.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  ASSERT_EQ(poll.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(watch.get().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(poll.get().ok());  // an empty lease; the worker polls again
}

// --- cancel ----------------------------------------------------------------------------------

TEST(ServiceTest, CancelReachesRunningJobsThroughHeartbeats) {
  Harness h;
  const std::string worker = h.Register();
  pb::SubmitSweepResponse sub;
  ASSERT_TRUE(h.Submit(TinySweep(), "req-cancel", &sub).ok());
  const std::string sid = sub.sweep().sweep_id();
  pb::LeaseJobResponse lease = h.Lease(worker);
  ASSERT_TRUE(lease.has_job());
  pb::HeartbeatResponse hb = h.Heartbeat(worker, {lease.lease_id()}, /*ranks_started=*/true);
  ASSERT_EQ(hb.renewed_size(), 1);
  EXPECT_EQ(hb.cancel_orders_size(), 0);
  EXPECT_EQ(h.Job(sid, lease.job().job_id()).state(), pb::JOB_STATE_RUNNING);
  // Watch live while cancelling.
  std::future<std::vector<pb::WatchEvent>> watch = std::async(std::launch::async, [&] {
    std::vector<pb::WatchEvent> events;
    EXPECT_TRUE(h.Watch(sid, sub.sweep().last_event_seq(), &events).ok());
    return events;
  });

  pb::CancelSweepRequest creq;
  creq.set_sweep_id(sid);
  creq.set_reason("wrong lr");
  pb::CancelSweepResponse cresp;
  ASSERT_TRUE(h.sweeps().CancelSweep(Harness::Ctx().get(), creq, &cresp).ok());
  EXPECT_EQ(cresp.sweep().job_counts().cancelled(), 3);  // the pending ones, at once
  EXPECT_EQ(cresp.sweep().job_counts().running(), 1);
  EXPECT_EQ(cresp.sweep().state(), pb::SWEEP_STATE_RUNNING);  // still stopping
  EXPECT_FALSE(h.Lease(worker).has_job());

  hb = h.Heartbeat(worker, {lease.lease_id()});
  ASSERT_EQ(hb.cancel_orders_size(), 1);
  EXPECT_EQ(hb.cancel_orders(0).lease_id(), lease.lease_id());
  EXPECT_EQ(hb.cancel_orders(0).job_id(), lease.job().job_id());
  EXPECT_NE(hb.cancel_orders(0).reason().find("wrong lr"), std::string::npos);
  EXPECT_EQ(hb.cancel_orders(0).grace().seconds(), 2);
  EXPECT_EQ(hb.renewed_size(), 0);  // a cancelled lease is not renewed

  pb::CompleteJobResponse done;
  ASSERT_TRUE(h.Complete(lease, worker, pb::JOB_OUTCOME_CANCELLED, &done).ok());
  EXPECT_EQ(done.job_state(), pb::JOB_STATE_CANCELLED);
  pb::SweepStatus s = h.Get(sid);
  EXPECT_EQ(s.state(), pb::SWEEP_STATE_CANCELLED);
  EXPECT_NE(s.message().find("wrong lr"), std::string::npos);
  std::vector<pb::WatchEvent> seen = watch.get();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().sweep_state_change().to_state(), pb::SWEEP_STATE_CANCELLED);
  EXPECT_EQ(h.sweeps().CancelSweep(Harness::Ctx().get(), creq, &cresp).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

// --- failures and leases ---------------------------------------------------------------------

TEST(ServiceTest, ExpiredLeaseRequeuesThenFails) {
  Harness h;
  const std::string worker = h.Register();
  pb::SubmitSweepResponse sub;
  ASSERT_TRUE(h.Submit(TinySweep({1}), "req-expire", &sub).ok());  // max_attempts 2
  const std::string sid = sub.sweep().sweep_id();
  pb::LeaseJobResponse first = h.Lease(worker);
  ASSERT_TRUE(first.has_job());
  const std::string job_id = first.job().job_id();

  // Renewal pushes the expiry out.
  h.clock().Advance(absl::Seconds(8));
  pb::HeartbeatResponse hb = h.Heartbeat(worker, {first.lease_id()});
  ASSERT_EQ(hb.renewed_size(), 1);
  h.clock().Advance(absl::Seconds(8));
  EXPECT_EQ(*h.core().ExpireLeases(), 0);

  // No heartbeat for longer than the lease: requeued, reason recorded.
  h.clock().Advance(absl::Seconds(3));
  EXPECT_EQ(*h.core().ExpireLeases(), 1);
  pb::JobStatus j = h.Job(sid, job_id);
  EXPECT_EQ(j.state(), pb::JOB_STATE_PENDING);
  EXPECT_EQ(j.attempts(), 1);
  EXPECT_NE(j.failure_reason().find("lease expired on worker " + worker), std::string::npos)
      << j.failure_reason();
  // The old lease is lost for the worker.
  hb = h.Heartbeat(worker, {first.lease_id()});
  ASSERT_EQ(hb.lost_lease_ids_size(), 1);
  EXPECT_EQ(hb.lost_lease_ids(0), first.lease_id());
  pb::ReportProgressResponse ack;
  EXPECT_EQ(h.Report(first.lease_id(), {Event(1, pb::MetricEvent::KIND_INIT)}, &ack).error_code(),
            grpc::StatusCode::ABORTED);

  // Attempt 2 (the requeued job is the oldest, once its backoff ended) expires too: FAILED.
  EXPECT_TRUE(j.has_not_before());
  h.clock().Advance(absl::Minutes(5));  // the longest backoff
  pb::LeaseJobResponse second = h.Lease(worker);
  ASSERT_TRUE(second.has_job());
  EXPECT_EQ(second.job().job_id(), job_id);
  EXPECT_EQ(second.job().attempt(), 2);
  h.clock().Advance(absl::Seconds(11));
  EXPECT_EQ(*h.core().ExpireLeases(), 1);
  j = h.Job(sid, job_id);
  EXPECT_EQ(j.state(), pb::JOB_STATE_FAILED);
  EXPECT_NE(j.failure_reason().find("lease expired on worker " + worker), std::string::npos);
}

TEST(ServiceTest, FailedAttemptsRetryPreemptionIsFree) {
  Harness h;
  const std::string worker = h.Register();
  pb::SubmitSweepResponse sub;
  ASSERT_TRUE(h.Submit(TinySweep({1}), "req-fail", &sub).ok());  // max_attempts 2
  const std::string sid = sub.sweep().sweep_id();

  pb::LeaseJobResponse a1 = h.Lease(worker);
  const std::string job_id = a1.job().job_id();
  pb::ReportProgressResponse ack;
  pb::MetricEvent ckpt = Event(1, pb::MetricEvent::KIND_CHECKPOINT, 10);
  ckpt.set_checkpoint_path("/ckpt/step10.pt");
  ASSERT_TRUE(h.Report(a1.lease_id(), {ckpt}, &ack).ok());
  pb::CompleteJobResponse done;
  ASSERT_TRUE(h.Complete(a1, worker, pb::JOB_OUTCOME_PREEMPTED, &done).ok());
  EXPECT_EQ(done.job_state(), pb::JOB_STATE_PENDING);
  EXPECT_TRUE(done.will_retry());

  pb::LeaseJobResponse a2 = h.Lease(worker);
  EXPECT_EQ(a2.job().job_id(), job_id);
  EXPECT_EQ(a2.job().attempt(), 2);
  EXPECT_EQ(a2.resume_checkpoint_path(), "/ckpt/step10.pt");
  ASSERT_TRUE(h.Complete(a2, worker, pb::JOB_OUTCOME_FAILED, &done, 3, "Traceback\nboom\n").ok());
  EXPECT_EQ(done.job_state(), pb::JOB_STATE_PENDING);  // 1 counted attempt of 2
  EXPECT_TRUE(done.will_retry());
  EXPECT_NE(h.Job(sid, job_id).failure_reason().find("(job failure, counted against max_attempts)"),
            std::string::npos);

  h.clock().Advance(absl::Minutes(5));  // the longest backoff
  pb::LeaseJobResponse a3 = h.Lease(worker);
  EXPECT_EQ(a3.job().attempt(), 3);
  ASSERT_TRUE(h.Complete(a3, worker, pb::JOB_OUTCOME_FAILED, &done, 7, "oom\n").ok());
  EXPECT_EQ(done.job_state(), pb::JOB_STATE_FAILED);
  EXPECT_FALSE(done.will_retry());
  pb::JobStatus j = h.Job(sid, job_id);
  EXPECT_EQ(j.state(), pb::JOB_STATE_FAILED);
  EXPECT_NE(j.failure_reason().find("exit code 7"), std::string::npos) << j.failure_reason();
  EXPECT_NE(j.failure_reason().find("oom"), std::string::npos) << j.failure_reason();

  // The report names the failed job's cells as missing rather than dropping them.
  pb::GetReportRequest rreq;
  rreq.set_sweep_id(sid);
  pb::GetReportResponse rresp;
  ASSERT_TRUE(h.sweeps().GetReport(Harness::Ctx().get(), rreq, &rresp).ok());
  EXPECT_FALSE(rresp.report().complete());
  EXPECT_GT(rresp.report().rows_size(), 0);
  bool failed_listed = false;
  for (const pb::MissingEntry& m : rresp.report().missing()) {
    if (m.job_id() == job_id && m.job_state() == pb::JOB_STATE_FAILED) failed_listed = true;
  }
  EXPECT_TRUE(failed_listed);
}

// --- retries: backoff, machine failures, not the same worker ---------------------------------

// A machine failure (the worker could not write the job folder) does not use max_attempts; the
// job backs off, a waiting long poll wakes when the backoff ends, and the reason says which
// kind of failure it was. After machine_failure_factor (10) x max_attempts of them it ends.
TEST(ServiceTest, MachineFailureBacksOffAndIsNotCounted) {
  Harness h;
  const std::string worker = h.Register();
  pb::SubmitSweepResponse sub;
  ASSERT_TRUE(h.Submit(TinySweep({1}), "req-machine", &sub).ok());  // max_attempts 2
  const std::string sid = sub.sweep().sweep_id();
  pb::LeaseJobResponse a1 = h.Lease(worker);
  const std::string job_id = a1.job().job_id();
  pb::CompleteJobRequest req;
  req.set_worker_id(worker);
  req.set_lease_id(a1.lease_id());
  req.set_outcome(pb::JOB_OUTCOME_MACHINE_FAILED);
  req.set_exit_code(-1);
  req.set_message("cannot prepare the job: job.json: write failed: No space left on device");
  pb::CompleteJobResponse done;
  ASSERT_TRUE(h.workers().CompleteJob(Harness::Ctx().get(), req, &done).ok());
  EXPECT_EQ(done.job_state(), pb::JOB_STATE_PENDING);
  EXPECT_TRUE(done.will_retry());
  const absl::Time failed_at = h.clock().Now();
  pb::JobStatus j = h.Job(sid, job_id);
  EXPECT_EQ(j.attempts(), 1);
  EXPECT_EQ(j.machine_failures(), 1);
  EXPECT_NE(j.failure_reason().find("machine failure on " + worker), std::string::npos)
      << j.failure_reason();
  EXPECT_NE(j.failure_reason().find("No space left on device"), std::string::npos);
  EXPECT_NE(j.failure_reason().find("not counted against max_attempts"), std::string::npos);
  // The first backoff: in [base/2, base] = [1 s, 2 s].
  ASSERT_TRUE(j.has_not_before());
  const absl::Duration wait = absl::FromUnixSeconds(j.not_before().seconds()) +
                              absl::Nanoseconds(j.not_before().nanos()) - failed_at;
  EXPECT_GE(wait, absl::Seconds(1));
  EXPECT_LE(wait, absl::Seconds(2));

  // In backoff: the worker gets the sweep's other job, not this one.
  pb::LeaseJobResponse other = h.Lease(worker);
  ASSERT_TRUE(other.has_job());
  EXPECT_NE(other.job().job_id(), job_id);
  ASSERT_TRUE(h.Complete(other, worker, pb::JOB_OUTCOME_CANCELLED, &done).ok());
  EXPECT_FALSE(h.Lease(worker).has_job());  // only the job in backoff is left

  // Fail it again; a waiting long poll gets it when the backoff ends (not before).
  h.clock().Advance(absl::Seconds(2));
  pb::LeaseJobResponse a2 = h.Lease(worker);
  ASSERT_EQ(a2.job().job_id(), job_id);
  req.set_lease_id(a2.lease_id());
  ASSERT_TRUE(h.workers().CompleteJob(Harness::Ctx().get(), req, &done).ok());
  std::future<pb::LeaseJobResponse> poll =
      std::async(std::launch::async, [&] { return h.Lease(worker, 4000); });
  EXPECT_EQ(poll.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  h.clock().Advance(absl::Seconds(5));  // past the second backoff (at most 4 s)
  ASSERT_EQ(poll.wait_for(std::chrono::milliseconds(2000)), std::future_status::ready);
  pb::LeaseJobResponse a3 = poll.get();
  ASSERT_EQ(a3.job().job_id(), job_id);
  EXPECT_EQ(a3.job().attempt(), 3);

  // 20 machine failures (10 x max_attempts 2) end the job; attempts far past max_attempts.
  pb::LeaseJobResponse a = a3;
  for (int n = 3; n <= 20; ++n) {
    req.set_lease_id(a.lease_id());
    ASSERT_TRUE(h.workers().CompleteJob(Harness::Ctx().get(), req, &done).ok());
    if (n < 20) {
      ASSERT_EQ(done.job_state(), pb::JOB_STATE_PENDING) << n;
      h.clock().Advance(absl::Minutes(5));
      a = h.Lease(worker);
      ASSERT_EQ(a.job().job_id(), job_id) << n;
    }
  }
  EXPECT_EQ(done.job_state(), pb::JOB_STATE_FAILED);
  j = h.Job(sid, job_id);
  EXPECT_EQ(j.attempts(), 20);
  EXPECT_EQ(j.machine_failures(), 20);
  EXPECT_FALSE(j.has_not_before());
  EXPECT_NE(j.failure_reason().find("machine failure on " + worker + " (attempt 20; 20 of 20"),
            std::string::npos)
      << j.failure_reason();
}

// A failed job goes to another live worker that can take it, not back to the one that failed
// it; when no other can (busy), it may go back.
TEST(ServiceTest, FailedJobIsNotLeasedBackToItsWorkerWhileAnotherCanTakeIt) {
  Harness h;
  const std::string a = h.Register("wk-a");
  pb::SubmitSweepResponse sub;
  ASSERT_TRUE(h.Submit(TinySweep({1}), "req-other-worker", &sub).ok());
  const std::string sid = sub.sweep().sweep_id();
  pb::LeaseJobResponse a1 = h.Lease(a);
  const std::string failed_job = a1.job().job_id();
  pb::CompleteJobResponse done;
  ASSERT_TRUE(h.Complete(a1, a, pb::JOB_OUTCOME_FAILED, &done, 1, "boom\n").ok());
  ASSERT_TRUE(done.will_retry());
  const std::string b = h.Register("wk-b");  // live, one free slot
  h.clock().Advance(absl::Seconds(3));       // past the first backoff (<= 2 s)
  pb::LeaseJobResponse next = h.Lease(a);
  ASSERT_TRUE(next.has_job());
  EXPECT_NE(next.job().job_id(), failed_job);  // the older job is kept for wk-b
  pb::LeaseJobResponse on_b = h.Lease(b);
  EXPECT_EQ(on_b.job().job_id(), failed_job);
  EXPECT_EQ(on_b.job().attempt(), 2);

  // wk-a fails its job too; wk-b is busy (its heartbeat says 0 free slots): back to wk-a.
  ASSERT_TRUE(h.Complete(next, a, pb::JOB_OUTCOME_FAILED, &done, 1, "boom\n").ok());
  h.Heartbeat(b, {on_b.lease_id()});
  h.clock().Advance(absl::Seconds(3));
  pb::LeaseJobResponse again = h.Lease(a);
  EXPECT_EQ(again.job().job_id(), next.job().job_id());
}

TEST(ServiceTest, StateSurvivesRestartAndLeasesKeepExpiring) {
  testing::TempDir dir;
  const std::string db = dir.File("restart.db");
  std::string sid, job_id, worker;
  {
    Harness h({}, db);
    worker = h.Register();
    pb::SubmitSweepResponse sub;
    ASSERT_TRUE(h.Submit(TinySweep({1}), "req-restart", &sub).ok());
    sid = sub.sweep().sweep_id();
    pb::LeaseJobResponse lease = h.Lease(worker);
    job_id = lease.job().job_id();
  }
  Harness h({}, db);
  pb::SweepStatus s = h.Get(sid);
  EXPECT_EQ(s.state(), pb::SWEEP_STATE_RUNNING);
  EXPECT_EQ(h.Job(sid, job_id).state(), pb::JOB_STATE_LEASED);
  pb::SubmitSweepResponse again;
  ASSERT_TRUE(h.Submit(TinySweep({1}), "req-restart", &again).ok());
  EXPECT_FALSE(again.created());
  EXPECT_EQ(again.sweep().sweep_id(), sid);
  h.clock().Advance(absl::Seconds(11));
  EXPECT_EQ(*h.core().ExpireLeases(), 1);
  EXPECT_EQ(h.Job(sid, job_id).state(), pb::JOB_STATE_PENDING);
  // The worker id is still known after the restart.
  EXPECT_TRUE(h.Lease(worker).has_job());
}

TEST(ServiceTest, RestartedCoordinatorGivesWorkersOneLeasePeriod) {
  testing::TempDir dir;
  const std::string db = dir.File("grace.db");
  std::string sid, job_id, worker, lease_id;
  {
    Harness h({}, db);
    worker = h.Register();
    pb::SubmitSweepResponse sub;
    ASSERT_TRUE(h.Submit(TinySweep({1}), "req-grace", &sub).ok());
    sid = sub.sweep().sweep_id();
    pb::LeaseJobResponse lease = h.Lease(worker);
    job_id = lease.job().job_id();
    lease_id = lease.lease_id();
  }
  // Back 30 s later: the stored lease ran out while the coordinator was away.
  HarnessOptions later;
  later.clock_offset = absl::Seconds(30);
  Harness h(later, db);
  EXPECT_EQ(*h.core().ExpireLeases(), 0);
  h.clock().Advance(absl::Seconds(9));
  EXPECT_EQ(*h.core().ExpireLeases(), 0) << "a lease expired within the restart grace";
  // The worker reconnects and renews; the lease lives on.
  pb::HeartbeatResponse hb = h.Heartbeat(worker, {lease_id}, /*ranks_started=*/true);
  ASSERT_EQ(hb.renewed_size(), 1);
  EXPECT_EQ(hb.lost_lease_ids_size(), 0);
  h.clock().Advance(absl::Seconds(5));
  EXPECT_EQ(*h.core().ExpireLeases(), 0);
  EXPECT_EQ(h.Job(sid, job_id).attempts(), 1);
  EXPECT_EQ(h.Job(sid, job_id).state(), pb::JOB_STATE_RUNNING);
  // A worker that never comes back loses the lease one lease period after its last renewal.
  h.clock().Advance(absl::Seconds(6));
  EXPECT_EQ(*h.core().ExpireLeases(), 1);
  EXPECT_EQ(h.Job(sid, job_id).state(), pb::JOB_STATE_PENDING);
}

TEST(ServiceTest, SucceededOnlyWithEveryResult) {
  Harness h;
  const std::string worker = h.Register();
  pb::SubmitSweepResponse sub;
  pb::SweepSpec spec = TinySweep({1}, /*max_attempts=*/3);
  spec.mutable_data()->add_test_shards("/data/test.bin");
  spec.mutable_data()->set_test_windows(8);
  ASSERT_TRUE(h.Submit(spec, "req-results", &sub).ok());
  const std::string sid = sub.sweep().sweep_id();

  // Attempt 1 says it finished but only milestone 6144 reached the coordinator, and no test NLL.
  pb::LeaseJobResponse a1 = h.Lease(worker);
  const std::string job_id = a1.job().job_id();
  EXPECT_EQ(a1.stored_eval_milestones_size(), 0);
  pb::ReportProgressResponse ack;
  ASSERT_TRUE(h.Report(a1.lease_id(),
                       {Event(1, pb::MetricEvent::KIND_INIT), Eval(2, 6144, 4.0),
                        Event(3, pb::MetricEvent::KIND_FINISHED, 24)},
                       &ack)
                  .ok());
  pb::CompleteJobResponse done;
  ASSERT_TRUE(h.Complete(a1, worker, pb::JOB_OUTCOME_SUCCEEDED, &done).ok());
  EXPECT_EQ(done.job_state(), pb::JOB_STATE_PENDING);
  EXPECT_TRUE(done.will_retry());
  pb::JobStatus j = h.Job(sid, job_id);
  EXPECT_NE(j.failure_reason().find("reported SUCCEEDED, but the val NLL of milestone(s) 12288"),
            std::string::npos)
      << j.failure_reason();
  EXPECT_NE(j.failure_reason().find("the test NLL is not stored"), std::string::npos)
      << j.failure_reason();

  // Attempt 2 is told what is stored; it re-evaluates the rest and finishes with a test NLL.
  h.clock().Advance(absl::Minutes(5));  // the longest backoff
  pb::LeaseJobResponse a2 = h.Lease(worker);
  ASSERT_EQ(a2.job().job_id(), job_id);
  EXPECT_EQ(a2.job().attempt(), 2);
  ASSERT_EQ(a2.stored_eval_milestones_size(), 1);
  EXPECT_EQ(a2.stored_eval_milestones(0), 6144);
  pb::MetricEvent fin = Event(3, pb::MetricEvent::KIND_FINISHED, 24);
  fin.set_test_nll(3.25);
  fin.set_eval_tokens(8 * 64);
  ASSERT_TRUE(h.Report(a2.lease_id(),
                       {Event(1, pb::MetricEvent::KIND_INIT), Eval(2, 12288, 3.0), fin}, &ack)
                  .ok());
  ASSERT_TRUE(h.Complete(a2, worker, pb::JOB_OUTCOME_SUCCEEDED, &done).ok());
  EXPECT_EQ(done.job_state(), pb::JOB_STATE_SUCCEEDED);
  j = h.Job(sid, job_id);
  EXPECT_EQ(j.state(), pb::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(j.last_val_nll(), 3.0);
}

// --- auth ------------------------------------------------------------------------------------

TEST(ServiceTest, AuthCodesRolesAndOwnership) {
  HarnessOptions with_auth;
  with_auth.auth = true;
  Harness h(with_auth);
  pb::SubmitSweepRequest sreq;
  sreq.set_request_id("req-auth");
  *sreq.mutable_spec() = TinySweep({1});
  pb::SubmitSweepResponse sresp;
  EXPECT_EQ(h.sweeps().SubmitSweep(Harness::Ctx().get(), sreq, &sresp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(h.sweeps().SubmitSweep(Harness::Ctx("not-a-token").get(), sreq, &sresp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(h.sweeps().SubmitSweep(Harness::Ctx(kWorkerToken).get(), sreq, &sresp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(h.sweeps().SubmitSweep(Harness::Ctx(kResearcher).get(), sreq, &sresp).ok());
  EXPECT_EQ(sresp.sweep().spec().owner(), "alice");

  pb::RegisterWorkerRequest reg;
  reg.set_kind(pb::HARDWARE_KIND_CPU);
  reg.set_slots(1);
  pb::RegisterWorkerResponse regr;
  EXPECT_EQ(h.workers().RegisterWorker(Harness::Ctx(kResearcher).get(), reg, &regr).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(h.workers().RegisterWorker(Harness::Ctx().get(), reg, &regr).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(h.workers().RegisterWorker(Harness::Ctx(kWorkerToken).get(), reg, &regr).ok());
  EXPECT_TRUE(h.workers().RegisterWorker(Harness::Ctx(kAdmin).get(), reg, &regr).ok());

  // Owner filter and cancel ownership.
  pb::ListSweepsRequest lreq;
  lreq.set_owner("alice");
  pb::ListSweepsResponse lresp;
  ASSERT_TRUE(h.sweeps().ListSweeps(Harness::Ctx(kResearcherBob).get(), lreq, &lresp).ok());
  EXPECT_EQ(lresp.sweeps_size(), 1);
  pb::CancelSweepRequest creq;
  creq.set_sweep_id(sresp.sweep().sweep_id());
  pb::CancelSweepResponse cresp;
  EXPECT_EQ(h.sweeps().CancelSweep(Harness::Ctx(kResearcherBob).get(), creq, &cresp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(h.sweeps().CancelSweep(Harness::Ctx(kResearcher).get(), creq, &cresp).ok());
  EXPECT_EQ(cresp.sweep().state(), pb::SWEEP_STATE_CANCELLED);

  // The standard health service answers without a token: SERVING.
  grpc::GenericStub generic(h.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> result;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status st) { result.set_value(st); });
  grpc::Status st = result.get_future().get();
  ASSERT_TRUE(st.ok()) << st.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING
}

// --- issue 24: verified results and the store epoch ---------------------------------------------

// A LeaseJob whose caller has left (cancelled, past its deadline) leases nothing: asked before a
// job is taken and again, inside the transaction, after it is taken; the lease is rolled back, so
// the job stays PENDING with no attempt used, and the next caller gets it as attempt 1 (before,
// the job was LEASED to nobody and its lease expired later as a failed attempt).
TEST(ServiceTest, ACallerThatLeftIsLeasedNothing) {
  Harness h;
  const std::string worker = h.Register();
  pb::SubmitSweepResponse sub;
  ASSERT_TRUE(h.Submit(TinySweep({1}), "req-left", &sub).ok());
  const std::string sid = sub.sweep().sweep_id();
  pb::LeaseJobRequest req;
  req.set_worker_id(worker);
  req.set_free_slots(1);
  for (int present_for : {0, 1}) {  // gone at once; gone while its job was being taken
    int asked = 0;
    StatusOr<pb::LeaseJobResponse> r =
        h.core().LeaseJob(req, [&] { return ++asked > present_for; });
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->lease_id().empty())
        << "leased " << r->job().job_id() << " to a caller that left";
    EXPECT_GT(asked, present_for);
    const pb::SweepStatus st = h.Get(sid);
    for (const pb::JobStatus& j : st.jobs()) {
      EXPECT_EQ(j.state(), pb::JOB_STATE_PENDING) << j.job().job_id();
      EXPECT_EQ(j.attempts(), 0) << j.job().job_id();
    }
  }
  pb::LeaseJobResponse next = h.Lease(worker);
  ASSERT_FALSE(next.lease_id().empty());
  EXPECT_EQ(next.job().attempt(), 1);
}

// A job whose stored EVAL event fails its checksum is not leased, and it does not stop the jobs
// behind it: LeaseJob answers OK and hands out the next job (it failed every LeaseJob with
// DATA_LOSS before, which stopped all scheduling).
TEST(ServiceTest, AJobWithDamagedResultsDoesNotStopLeasing) {
  testing::TempDir dir;
  const std::string db = dir.File("damaged-event.db");
  std::string damaged;
  {
    Harness h({}, db);
    const std::string worker = h.Register();
    pb::SubmitSweepResponse sub;
    ASSERT_TRUE(h.Submit(TinySweep({1}), "req-damaged", &sub).ok());
    pb::LeaseJobResponse lease = h.Lease(worker);
    damaged = lease.job().job_id();
    pb::ReportProgressResponse rr;
    ASSERT_TRUE(h.Report(lease.lease_id(), {Eval(1, 512, 3.25)}, &rr).ok());
    pb::CompleteJobResponse done;  // preempted: PENDING again at once, no backoff
    ASSERT_TRUE(h.Complete(lease, worker, pb::JOB_OUTCOME_PREEMPTED, &done).ok());
    ASSERT_EQ(done.job_state(), pb::JOB_STATE_PENDING);
  }
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw,
                                 "UPDATE events SET time_us = time_us + 1 WHERE job_id = ?1 AND "
                                 "metric_kind = 3",
                                 -1, &st, nullptr),
              SQLITE_OK);
    sqlite3_bind_text(st, 1, damaged.c_str(), -1, SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    ASSERT_EQ(sqlite3_changes(raw), 1);
    sqlite3_close(raw);
  }
  Harness h({}, db);
  const std::string worker = h.Register();
  pb::LeaseJobResponse next = h.Lease(worker);  // EXPECTs an OK answer
  ASSERT_FALSE(next.lease_id().empty());
  EXPECT_NE(next.job().job_id(), damaged);
  const std::string other = h.Register("wk-other");
  pb::LeaseJobResponse none = h.Lease(other);
  EXPECT_TRUE(none.lease_id().empty()) << "the damaged job was leased: " << none.job().job_id();
}

// Every event carries the store's epoch; a watch resuming with another epoch is told to restart
// from 0 (FAILED_PRECONDITION) instead of silently reading renumbered events. A val NLL flipped
// in the file is DATA_LOSS naming the job and the field, never the number, in GetSweep,
// GetReport and WatchSweep.
TEST(ServiceTest, StoreEpochInWatchesAndDamagedResultsAreDataLoss) {
  testing::TempDir dir;
  const std::string db = dir.File("epoch.db");
  std::string sid, job_id, epoch;
  const double nll = 3.2407233715057373;
  {
    Harness h({}, db);
    const std::string worker = h.Register();
    pb::SubmitSweepResponse sub;
    ASSERT_TRUE(h.Submit(TinySweep({1}), "req-epoch", &sub).ok());
    sid = sub.sweep().sweep_id();
    pb::LeaseJobResponse lease = h.Lease(worker);
    job_id = lease.job().job_id();
    pb::ReportProgressResponse rr;
    ASSERT_TRUE(h.Report(lease.lease_id(), {Eval(1, 512, nll)}, &rr).ok());
    EXPECT_DOUBLE_EQ(h.Job(sid, job_id).last_val_nll(), nll);

    std::vector<pb::WatchEvent> events;
    h.Watch(sid, 0, &events, /*seconds=*/1);  // the sweep runs on: ends at the deadline
    ASSERT_FALSE(events.empty());
    epoch = events.front().store_epoch();
    EXPECT_EQ(epoch.size(), 16u);
    for (const pb::WatchEvent& e : events) EXPECT_EQ(e.store_epoch(), epoch);

    auto watch_with = [&](const std::string& with_epoch, std::vector<pb::WatchEvent>* out) {
      pb::WatchSweepRequest req;
      req.set_sweep_id(sid);
      req.set_after_seq(1);
      req.set_store_epoch(with_epoch);
      auto ctx = Harness::Ctx("", 1);
      auto r = h.sweeps().WatchSweep(ctx.get(), req);
      pb::WatchSweepResponse msg;
      while (r->Read(&msg)) out->push_back(msg.event());
      return r->Finish();
    };
    std::vector<pb::WatchEvent> same, other;
    EXPECT_EQ(watch_with(epoch, &same).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_EQ(same.size() + 1, events.size());
    const grpc::Status told = watch_with("0123456789abcdef", &other);
    EXPECT_EQ(told.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(told.error_message().find("restart the watch from seq 0"), std::string::npos)
        << told.error_message();
    EXPECT_TRUE(other.empty());
  }
  // One bit of the job's stored val NLL, flipped through a plain SQLite connection.
  uint64_t bits;
  std::memcpy(&bits, &nll, sizeof bits);
  bits ^= 1;
  double flipped;
  std::memcpy(&flipped, &bits, sizeof flipped);
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw, "UPDATE jobs SET last_val_nll = ?1 WHERE id = ?2", -1, &st,
                                 nullptr),
              SQLITE_OK);
    sqlite3_bind_double(st, 1, flipped);
    sqlite3_bind_text(st, 2, job_id.c_str(), -1, SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    // And the EVAL event's copy of it, in its blob.
    ASSERT_EQ(sqlite3_prepare_v2(raw, "SELECT seq, blob FROM events WHERE metric_kind = 3", -1, &st,
                                 nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    const int64_t seq = sqlite3_column_int64(st, 0);
    std::string blob(static_cast<const char*>(sqlite3_column_blob(st, 1)),
                     sqlite3_column_bytes(st, 1));
    sqlite3_finalize(st);
    const size_t at = blob.find(std::string(reinterpret_cast<const char*>(&nll), 8));
    ASSERT_NE(at, std::string::npos);
    blob[at] ^= 1;
    ASSERT_EQ(
        sqlite3_prepare_v2(raw, "UPDATE events SET blob = ?1 WHERE seq = ?2", -1, &st, nullptr),
        SQLITE_OK);
    sqlite3_bind_blob(st, 1, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, seq);
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(raw);
  }
  Harness h({}, db);
  auto expect_data_loss = [&](const grpc::Status& st, const std::string& field) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS) << st.error_message();
    EXPECT_NE(st.error_message().find("job " + job_id), std::string::npos) << st.error_message();
    EXPECT_NE(st.error_message().find(field), std::string::npos) << st.error_message();
    EXPECT_EQ(st.error_message().find("3.24"), std::string::npos) << st.error_message();
  };
  pb::GetSweepRequest get;
  get.set_sweep_id(sid);
  get.set_view(pb::SWEEP_VIEW_FULL);
  pb::GetSweepResponse got;
  expect_data_loss(h.sweeps().GetSweep(Harness::Ctx().get(), get, &got), "last_val_nll");
  EXPECT_EQ(got.sweep().jobs_size(), 0);
  pb::GetReportRequest rreq;
  rreq.set_sweep_id(sid);
  pb::GetReportResponse rresp;
  expect_data_loss(h.sweeps().GetReport(Harness::Ctx().get(), rreq, &rresp), "last_val_nll");
  std::vector<pb::WatchEvent> events;
  expect_data_loss(h.Watch(sid, 0, &events, 2), "val_nll");
  // The job row's own value back in place: the report now stops at the event's copy.
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw, "UPDATE jobs SET last_val_nll = ?1 WHERE id = ?2", -1, &st,
                                 nullptr),
              SQLITE_OK);
    sqlite3_bind_double(st, 1, nll);
    sqlite3_bind_text(st, 2, job_id.c_str(), -1, SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(raw);
  }
  EXPECT_TRUE(h.sweeps().GetSweep(Harness::Ctx().get(), get, &got).ok());
  expect_data_loss(h.sweeps().GetReport(Harness::Ctx().get(), rreq, &rresp),
                   "val_nll (KIND_EVAL event)");
}

}  // namespace
}  // namespace rdattn::coordinator
