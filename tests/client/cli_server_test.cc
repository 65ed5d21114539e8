// `rdattn` against an in-process fake SweepService on an OS-chosen loopback port: the bearer
// token on every call, deadlines, submit idempotency keys, paging, the watch stream with a
// reconnect after UNAVAILABLE (resuming after the last seq), cancel, report, and the mapping of
// server errors to "rdattn: CODE: message" and exit codes.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "client/commands.h"
#include "proto/contract/contract.h"
#include "rdattn/v1/coordinator.grpc.pb.h"

namespace rdattn::client {
namespace {

namespace pb = ::rdattn::v1;

class FakeSweepService final : public pb::SweepService::Service {
 public:
  grpc::Status SubmitSweep(grpc::ServerContext* ctx, const pb::SubmitSweepRequest* req,
                           pb::SubmitSweepResponse* resp) override {
    if (auto s = Auth(ctx); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    auto errors = contract::ExpandSweep(req->spec(), "sw-new");
    if (!errors.ok()) return contract::ToGrpcStatus(errors.status());
    request_ids_.push_back(req->request_id());
    had_deadline_ = ctx->deadline() != std::chrono::system_clock::time_point::max();
    resp->set_created(request_ids_.size() == 1 || request_ids_.back() != request_ids_.front());
    resp->mutable_sweep()->set_sweep_id("sw-new");
    resp->mutable_sweep()->set_state(pb::SWEEP_STATE_PENDING);
    resp->mutable_sweep()->mutable_job_counts()->set_total(static_cast<int>(errors->size()));
    return grpc::Status::OK;
  }

  grpc::Status GetSweep(grpc::ServerContext* ctx, const pb::GetSweepRequest* req,
                        pb::GetSweepResponse* resp) override {
    if (auto s = Auth(ctx); !s.ok()) return s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      gets_.push_back(*req);
    }
    if (req->sweep_id() == "sw-big") return BigSweep(*req, resp);
    if (req->sweep_id() == "text-only") {  // "; " in a message without details: one error
      return grpc::Status(grpc::INVALID_ARGUMENT, "view: x; seeds: y");
    }
    if (req->sweep_id() != "sw1")
      return grpc::Status(grpc::NOT_FOUND, "no sweep " + req->sweep_id());
    *resp->mutable_sweep() = Sweep();
    return grpc::Status::OK;
  }

  grpc::Status ListSweeps(grpc::ServerContext* ctx, const pb::ListSweepsRequest* req,
                          pb::ListSweepsResponse* resp) override {
    if (auto s = Auth(ctx); !s.ok()) return s;
    // Two pages of one sweep each.
    pb::SweepStatus s = Sweep();
    s.clear_jobs();
    if (req->page_token().empty()) {
      resp->set_next_page_token("page2");
    } else {
      s.set_sweep_id("sw0");
    }
    *resp->add_sweeps() = s;
    std::lock_guard<std::mutex> lock(mu_);
    list_states_ = req->states_size();
    return grpc::Status::OK;
  }

  // First call: events 1..3, then UNAVAILABLE. Later calls: the rest after `after_seq`.
  grpc::Status WatchSweep(grpc::ServerContext* ctx, const pb::WatchSweepRequest* req,
                          grpc::ServerWriter<pb::WatchSweepResponse>* writer) override {
    if (auto s = Auth(ctx); !s.ok()) return s;
    int call;
    {
      std::lock_guard<std::mutex> lock(mu_);
      after_seqs_.push_back(req->after_seq());
      call = static_cast<int>(after_seqs_.size());
    }
    for (const pb::WatchEvent& e : Events()) {
      if (e.seq() <= req->after_seq()) continue;
      if (call == 1 && e.seq() > 3) return grpc::Status(grpc::UNAVAILABLE, "coordinator restart");
      pb::WatchSweepResponse r;
      *r.mutable_event() = e;
      writer->Write(r);
    }
    return grpc::Status::OK;
  }

  grpc::Status CancelSweep(grpc::ServerContext* ctx, const pb::CancelSweepRequest* req,
                           pb::CancelSweepResponse* resp) override {
    if (auto s = Auth(ctx); !s.ok()) return s;
    if (req->sweep_id() == "done") {
      return grpc::Status(grpc::FAILED_PRECONDITION, "sweep done already ended");
    }
    *resp->mutable_sweep() = Sweep();
    resp->mutable_sweep()->set_state(pb::SWEEP_STATE_CANCELLED);
    return grpc::Status::OK;
  }

  grpc::Status GetReport(grpc::ServerContext* ctx, const pb::GetReportRequest* req,
                         pb::GetReportResponse* resp) override {
    if (auto s = Auth(ctx); !s.ok()) return s;
    pb::Report* r = resp->mutable_report();
    r->set_sweep_id(req->sweep_id());
    r->set_reference_arm("block");
    r->set_confidence_level(req->confidence_level() > 0 ? req->confidence_level() : 0.95);
    for (int i = 0; i < 2; ++i) {
      pb::PairedRow* row = r->add_rows();
      row->set_scale("tiny");
      row->set_milestone_tokens(250000 * (i + 1));
      row->set_arm("rd");
      row->set_reference_arm("block");
      row->set_n(2);
      row->set_mean_delta_nll(-0.01);
      row->set_wins(2);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_report_ = *req;
    }
    if (req->omit_files()) return grpc::Status::OK;
    // Rendered files, as the coordinator returns them; the client keeps those of its --format.
    auto file = [resp](const std::string& name, const std::string& content,
                       const std::string& type) {
      pb::ReportFile* f = resp->add_files();
      f->set_name(name);
      f->set_content(content);
      f->set_media_type(type);
    };
    const std::string png("\x89PNG\r\n\x1a\nfake", 12);
    file("report.md", "# Report sw1\n\nn = 2 of 2\n", "text/markdown");
    file("plots/nll_vs_tokens.png", png, "image/png");
    file("plots/delta_last_milestone.png", png, "image/png");
    file("plots/js_by_layer.png", png, "image/png");
    file("plots/nll_vs_tokens.gp", "plot\n", "text/plain");
    file("paired.csv", "scale,arm\r\ntiny,rd\r\n", "text/csv");
    file("missing.csv", "scale\r\n", "text/csv");
    file("report.json", "{\"sweep_id\": \"sw1\"}\n", "application/json");
    if (req->sweep_id() == "evil") file("../escape.md", "x", "text/markdown");
    return grpc::Status::OK;
  }

  pb::GetReportRequest last_report() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_report_;
  }

  std::vector<uint64_t> after_seqs() {
    std::lock_guard<std::mutex> lock(mu_);
    return after_seqs_;
  }
  std::vector<std::string> request_ids() {
    std::lock_guard<std::mutex> lock(mu_);
    return request_ids_;
  }
  bool had_deadline() {
    std::lock_guard<std::mutex> lock(mu_);
    return had_deadline_;
  }
  int list_states() {
    std::lock_guard<std::mutex> lock(mu_);
    return list_states_;
  }

 private:
  static grpc::Status Auth(grpc::ServerContext* ctx) {
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) return grpc::Status(grpc::UNAUTHENTICATED, "missing bearer token");
    if (std::string(it->second.data(), it->second.size()) != "Bearer secret") {
      return grpc::Status(grpc::UNAUTHENTICATED, "wrong bearer token");
    }
    return grpc::Status::OK;
  }

 public:
  std::vector<pb::GetSweepRequest> gets() {
    std::lock_guard<std::mutex> lock(mu_);
    return gets_;
  }
  void clear_gets() {
    std::lock_guard<std::mutex> lock(mu_);
    gets_.clear();
  }
  static constexpr int kBigJobs = 2345;

 private:
  // A sweep of kBigJobs jobs served as the coordinator does: the summary view, or pages of the
  // full view (at most 1,000 jobs; page_size 0 over 1,000 refused).
  static grpc::Status BigSweep(const pb::GetSweepRequest& req, pb::GetSweepResponse* resp) {
    pb::SweepStatus* s = resp->mutable_sweep();
    s->set_sweep_id("sw-big");
    s->set_state(pb::SWEEP_STATE_RUNNING);
    s->mutable_job_counts()->set_total(kBigJobs);
    if (req.view() == pb::SWEEP_VIEW_SUMMARY) {
      pb::SweepSummary* m = s->mutable_summary();
      m->mutable_pair_groups()->set_total(1173);
      m->mutable_pair_groups()->set_complete(1000);
      m->mutable_pair_groups()->set_running(170);
      m->mutable_pair_groups()->set_failed(3);
      pb::MilestoneCount* c = m->add_milestones();
      c->set_milestone_tokens(6144);
      c->set_jobs_expected(kBigJobs);
      c->set_jobs_stored(2100);
      m->set_furthest_milestone_tokens(6144);
      m->set_jobs_with_problems(1);
      pb::JobProblem* p = m->add_recent_problems();
      p->set_job_id("sw-big/tiny/s7/rd");
      p->set_state(pb::JOB_STATE_FAILED);
      p->set_attempts(3);
      p->set_reason("exit 1: out of memory\nmore lines");
      return grpc::Status::OK;
    }
    if (req.view() != pb::SWEEP_VIEW_FULL) return grpc::Status::OK;
    if (req.page_size() == 0) {
      return grpc::Status(grpc::INVALID_ARGUMENT, "page_size: 0 asks for too many jobs");
    }
    const int first = req.page_token().empty() ? 0 : std::stoi(req.page_token());
    const int end = std::min(kBigJobs, first + std::min(req.page_size(), 1000));
    for (int i = first; i < end; ++i) {
      pb::JobStatus* j = s->add_jobs();
      j->mutable_job()->set_job_id("sw-big/tiny/s" + std::to_string(i) + "/block");
      j->set_state(pb::JOB_STATE_SUCCEEDED);
    }
    if (end < kBigJobs) resp->set_next_page_token(std::to_string(end));
    return grpc::Status::OK;
  }

  static pb::SweepStatus Sweep() {
    pb::SweepStatus s;
    s.set_sweep_id("sw1");
    s.mutable_spec()->set_name("demo");
    s.set_state(pb::SWEEP_STATE_RUNNING);
    s.mutable_job_counts()->set_total(2);
    for (const char* arm : {"block", "rd"}) {
      pb::JobStatus* j = s.add_jobs();
      j->mutable_job()->set_job_id(std::string("sw1/tiny/s1/") + arm);
      j->mutable_job()->mutable_run()->mutable_schedule()->set_total_tokens(8192);
      j->set_state(pb::JOB_STATE_PENDING);
    }
    return s;
  }

  static std::vector<pb::WatchEvent> Events() {
    std::vector<pb::WatchEvent> out;
    auto change = [&out](uint64_t seq, const std::string& arm, pb::JobState from, pb::JobState to) {
      pb::WatchEvent e;
      e.set_seq(seq);
      auto* c = e.mutable_job_state_change();
      c->set_job_id("sw1/tiny/s1/" + arm);
      c->set_from_state(from);
      c->set_to_state(to);
      out.push_back(e);
    };
    auto step = [&out](uint64_t seq, const std::string& arm, int64_t tokens) {
      pb::WatchEvent e;
      e.set_seq(seq);
      auto* m = e.mutable_metric_event();
      m->set_kind(pb::MetricEvent::KIND_TRAIN_STEP);
      m->set_job_id("sw1/tiny/s1/" + arm);
      m->set_step(tokens / 4096);
      m->set_tokens(tokens);
      m->set_train_loss(3.0);
      m->set_tokens_per_second(4096);
      out.push_back(e);
    };
    change(1, "block", pb::JOB_STATE_PENDING, pb::JOB_STATE_RUNNING);
    step(2, "block", 4096);
    change(3, "rd", pb::JOB_STATE_PENDING, pb::JOB_STATE_RUNNING);
    step(5, "rd", 4096);  // seqs need not be contiguous
    step(6, "block", 8192);
    change(7, "block", pb::JOB_STATE_RUNNING, pb::JOB_STATE_SUCCEEDED);
    change(8, "rd", pb::JOB_STATE_RUNNING, pb::JOB_STATE_SUCCEEDED);
    pb::WatchEvent end;
    end.set_seq(9);
    end.mutable_sweep_state_change()->set_from_state(pb::SWEEP_STATE_RUNNING);
    end.mutable_sweep_state_change()->set_to_state(pb::SWEEP_STATE_SUCCEEDED);
    out.push_back(end);
    return out;
  }

  std::mutex mu_;
  std::vector<pb::GetSweepRequest> gets_;
  std::vector<uint64_t> after_seqs_;
  std::vector<std::string> request_ids_;
  bool had_deadline_ = false;
  int list_states_ = 0;
  pb::GetReportRequest last_report_;
};

class CliServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  struct Result {
    int code = 0;
    std::string out;
    std::string err;
  };

  // Runs rdattn with the fake's address and the token from the environment.
  Result Run(std::vector<std::string> args, const std::string& token = "secret") {
    args.insert(args.begin(), "rdattn");
    args.push_back("--timeout");
    args.push_back("10");
    const std::map<std::string, std::string> env = {
        {"RDATTN_COORDINATOR", "127.0.0.1:" + std::to_string(port_)},
        {"RDATTN_TOKEN", token},
        {"HOME", "/nonexistent-home"}};
    EnvGetter getter = [env](const std::string& name) -> std::optional<std::string> {
      auto it = env.find(name);
      if (it == env.end()) return std::nullopt;
      return it->second;
    };
    std::ostringstream out, err;
    Result r;
    r.code = RunCli(args, out, err, getter);
    r.out = out.str();
    r.err = err.str();
    return r;
  }

  FakeSweepService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(CliServerTest, SubmitSendsTokenDeadlineAndStableRequestId) {
  const std::string file = std::string(RDATTN_EXAMPLES_DIR) + "/cpu-demo.yaml";
  const Result first = Run({"submit", file});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(first.out, "sw-new\n");  // the id alone on stdout
  EXPECT_NE(first.err.find("submitted sweep sw-new: 6 jobs"), std::string::npos) << first.err;
  EXPECT_TRUE(service_.had_deadline());

  const Result again = Run({"submit", file});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, "sw-new\n");
  EXPECT_NE(again.err.find("was already submitted"), std::string::npos) << again.err;
  const auto ids = service_.request_ids();
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(ids[0].rfind("sha256:", 0), 0u);

  const Result explicit_id = Run({"submit", file, "--request-id", "mine"});
  ASSERT_EQ(explicit_id.code, 0) << explicit_id.err;
  EXPECT_EQ(service_.request_ids().back(), "mine");
}

TEST_F(CliServerTest, WrongTokenIsUnauthenticated) {
  const Result r = Run({"get", "sw1"}, "wrong");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "rdattn: UNAUTHENTICATED: wrong bearer token\n");
}

TEST_F(CliServerTest, GetAndNotFound) {
  const Result r = Run({"get", "sw1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("tiny/s1/block  PENDING"), std::string::npos) << r.out;
  const Result json = Run({"get", "sw1", "--format", "json"});
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_NE(json.out.find("\"sweep_id\": \"sw1\""), std::string::npos) << json.out;
  const Result missing = Run({"get", "nope"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(missing.err, "rdattn: NOT_FOUND: no sweep nope\n");
}

// `get` reads the summary in one call, then the jobs page by page (all, or --limit of them);
// `watch --format json` asks only for the summary view, the text lines for every page.
TEST_F(CliServerTest, GetReadsTheSummaryThenEveryPage) {
  auto count = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const Result r = Run({"get", "sw-big"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("pairs    1173 total: 1000 complete, 170 running, 0 waiting, 3 failed"),
            std::string::npos)
      << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find("6144 2100/2345"), std::string::npos) << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find("tiny/s7/rd FAILED (attempt 3): exit 1: out of memory\n"), std::string::npos)
      << r.out.substr(0, 2000);
  EXPECT_EQ(count(r.out, " SUCCEEDED "), FakeSweepService::kBigJobs);
  EXPECT_NE(r.out.find("tiny/s0/block "), std::string::npos);
  EXPECT_NE(r.out.find("tiny/s2344/block "), std::string::npos);
  EXPECT_EQ(r.out.find("jobs shown"), std::string::npos);
  std::vector<pb::GetSweepRequest> gets = service_.gets();
  ASSERT_EQ(gets.size(), 4u);  // the summary, then 3 pages of at most 1,000
  EXPECT_EQ(gets[0].view(), pb::SWEEP_VIEW_SUMMARY);
  for (size_t i = 1; i < gets.size(); ++i) {
    EXPECT_EQ(gets[i].view(), pb::SWEEP_VIEW_FULL);
    EXPECT_EQ(gets[i].page_size(), 1000);
  }
  EXPECT_EQ(gets[3].page_token(), "2000");

  service_.clear_gets();
  const Result few = Run({"get", "sw-big", "--limit", "5"});
  ASSERT_EQ(few.code, 0) << few.err;
  EXPECT_EQ(count(few.out, " SUCCEEDED "), 5);
  EXPECT_NE(few.out.find("(5 of 2345 jobs shown; --limit N shows more)"), std::string::npos)
      << few.out;
  gets = service_.gets();
  ASSERT_EQ(gets.size(), 2u);
  EXPECT_EQ(gets[1].page_size(), 5);

  service_.clear_gets();
  const Result none = Run({"get", "sw-big", "--limit", "0", "--format", "json"});
  ASSERT_EQ(none.code, 0) << none.err;
  EXPECT_NE(none.out.find("\"pair_groups\""), std::string::npos) << none.out;
  EXPECT_EQ(none.out.find("\"jobs\""), std::string::npos) << none.out;
  EXPECT_EQ(service_.gets().size(), 1u);

  const Result bad = Run({"get", "sw-big", "--limit", "-1"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--limit"), std::string::npos) << bad.err;

  service_.clear_gets();
  ASSERT_EQ(Run({"watch", "sw1", "--format", "json"}).code, 0);
  for (const pb::GetSweepRequest& g : service_.gets()) {
    EXPECT_EQ(g.view(), pb::SWEEP_VIEW_SUMMARY) << g.DebugString();
  }
  service_.clear_gets();
  ASSERT_EQ(Run({"watch", "sw1", "--format", "text", "--interval", "0"}).code, 0);
  gets = service_.gets();
  ASSERT_FALSE(gets.empty());
  EXPECT_EQ(gets[0].view(), pb::SWEEP_VIEW_FULL);
  EXPECT_EQ(gets[0].page_size(), 1000);
}

TEST_F(CliServerTest, ListPages) {
  const Result one = Run({"list", "--state", "running,pending"});
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(service_.list_states(), 2);
  EXPECT_NE(one.out.find("sw1"), std::string::npos);
  EXPECT_NE(one.out.find("more: rdattn list --page-token page2"), std::string::npos) << one.out;
  const Result all = Run({"list", "--all"});
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_NE(all.out.find("sw0"), std::string::npos) << all.out;
  EXPECT_EQ(all.out.find("more:"), std::string::npos) << all.out;
}

TEST_F(CliServerTest, WatchReconnectsAndEndsWithTheSweep) {
  const Result r = Run({"watch", "sw1", "--interval", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(service_.after_seqs(), (std::vector<uint64_t>{0, 3}));
  EXPECT_NE(r.err.find("reconnecting after seq 3"), std::string::npos) << r.err;
  const std::vector<std::string> expected = {
      "tiny/s1/block  PENDING -> RUNNING",
      "tiny/s1/block  step 1  tokens 4096/8192 (50.0%)  loss 3.0000  4.10k tok/s  ETA 1s",
      "tiny/s1/rd  PENDING -> RUNNING",
      "tiny/s1/rd  step 1",
      "tiny/s1/block  step 2  tokens 8192/8192 (100.0%)",
      "tiny/s1/block  RUNNING -> SUCCEEDED  [1/2 jobs ended]",
      "tiny/s1/rd  RUNNING -> SUCCEEDED  [2/2 jobs ended]",
      "sweep sw1: RUNNING -> SUCCEEDED"};
  size_t pos = 0;
  for (const std::string& line : expected) {
    const size_t at = r.out.find(line, pos);
    ASSERT_NE(at, std::string::npos) << "missing in order: " << line << "\n" << r.out;
    pos = at + line.size();
  }
}

TEST_F(CliServerTest, WatchJsonPrintsEveryEventOnce) {
  const Result r = Run({"watch", "sw1", "--format", "json", "--from-seq", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(service_.after_seqs(), (std::vector<uint64_t>{1, 3}));
  std::istringstream lines(r.out);
  std::string line;
  std::vector<std::string> seqs;
  while (std::getline(lines, line)) {
    const size_t at = line.find("\"seq\":\"");
    ASSERT_NE(at, std::string::npos) << line;
    seqs.push_back(line.substr(at + 7, line.find('"', at + 7) - at - 7));
  }
  EXPECT_EQ(seqs, (std::vector<std::string>{"2", "3", "5", "6", "7", "8", "9"}));
}

TEST_F(CliServerTest, CancelAndReport) {
  const Result c = Run({"cancel", "sw1"});
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(c.out, "sweep sw1: CANCELLED\n");
  const Result ended = Run({"cancel", "done"});
  EXPECT_EQ(ended.code, 1);
  EXPECT_EQ(ended.err, "rdattn: FAILED_PRECONDITION: sweep done already ended\n");

  const Result r = Run({"report", "sw1", "--confidence", "0.9"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("90% intervals"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("250.0k"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("500.0k"), std::string::npos) << r.out;
  EXPECT_TRUE(service_.last_report().omit_files());  // text: nothing rendered
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST_F(CliServerTest, ReportWritesFilesOfItsFormat) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("rdattn-report-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string out = (dir / "out").string();  // created by the command

  const Result md = Run({"report", "sw1", "--format", "md", "--out", out, "--reference", "block",
                         "--level", "0.9", "--resamples", "500"});
  ASSERT_EQ(md.code, 0) << md.err;
  const pb::GetReportRequest req = service_.last_report();
  EXPECT_EQ(req.reference_arm(), "block");
  EXPECT_DOUBLE_EQ(req.confidence_level(), 0.9);
  EXPECT_EQ(req.bootstrap_resamples(), 500);
  EXPECT_FALSE(req.omit_files());
  ASSERT_EQ(req.formats_size(), 1);
  EXPECT_EQ(req.formats(0), "md");
  EXPECT_NE(md.out.find("report: " + out + "/report.md\n"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("plot: " + out + "/plots/js_by_layer.png\n"), std::string::npos) << md.out;
  EXPECT_EQ(Slurp(out + "/report.md"), "# Report sw1\n\nn = 2 of 2\n");
  for (const char* png : {"nll_vs_tokens.png", "delta_last_milestone.png", "js_by_layer.png"}) {
    EXPECT_EQ(Slurp(out + "/plots/" + png).substr(0, 4), "\x89PNG") << png;
  }
  EXPECT_TRUE(fs::exists(out + "/plots/nll_vs_tokens.gp"));
  EXPECT_FALSE(fs::exists(out + "/paired.csv"));  // not md's
  EXPECT_FALSE(fs::exists(out + "/report.json"));
  for (const auto& e : fs::recursive_directory_iterator(out)) {  // no temporary files left
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }

  const Result csv = Run({"report", "sw1", "--format", "csv", "--out", out});
  ASSERT_EQ(csv.code, 0) << csv.err;
  EXPECT_NE(csv.out.find("report: " + out + "/paired.csv\n"), std::string::npos) << csv.out;
  EXPECT_EQ(Slurp(out + "/paired.csv"), "scale,arm\r\ntiny,rd\r\n");
  EXPECT_TRUE(fs::exists(out + "/missing.csv"));

  const Result json = Run({"report", "sw1", "--format", "json", "--out", out});
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_EQ(json.out, "report: " + out + "/report.json\n");
  EXPECT_EQ(Slurp(out + "/report.json"), "{\"sweep_id\": \"sw1\"}\n");

  // Without --out: md and json go to stdout; csv needs a folder; --out needs a file format.
  const Result md_stdout = Run({"report", "sw1", "--format", "md"});
  ASSERT_EQ(md_stdout.code, 0) << md_stdout.err;
  EXPECT_EQ(md_stdout.out, "# Report sw1\n\nn = 2 of 2\n");
  EXPECT_EQ(Run({"report", "sw1", "--format", "csv"}).code, 2);
  EXPECT_EQ(Run({"report", "sw1", "--format", "text", "--out", out}).code, 2);
  EXPECT_EQ(Run({"report", "sw1", "--format", "pdf"}).code, 2);
  EXPECT_EQ(Run({"report", "sw1", "--resamples", "0"}).code, 2);

  // A file name that would leave the folder is refused, and nothing is written.
  const Result evil = Run({"report", "evil", "--format", "md", "--out", (dir / "evil").string()});
  EXPECT_EQ(evil.code, 1);
  EXPECT_NE(evil.err.find("unsafe name"), std::string::npos) << evil.err;
  EXPECT_FALSE(fs::exists(dir / "escape.md"));
  fs::remove_all(dir);
}

TEST_F(CliServerTest, ServerValidationErrorsExitTwo) {
  const std::string bad = ::testing::TempDir() + "/server-bad.yaml";
  {
    std::ofstream f(bad);
    f << "name: x\nscales: [{preset: tiny}]\narms: [block]\nseeds: [1, 1]\n"
         "data: {train_shards: [a], tokenizer: byte}\noptim: {peak_lr: 1e-3}\n"
         "schedule: {total_tokens: 8192, global_batch_tokens: 4096}\n";
  }
  const Result r = Run({"submit", bad});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "rdattn: INVALID_ARGUMENT: " + bad + ": seeds[1]: duplicate seed 1\n");
}

// Several field errors come as the status details' google.rpc.BadRequest and are printed one per
// line as sent: a reason that reads like a second error ("; seeds: ...") stays whole.
TEST_F(CliServerTest, ServerFieldErrorsArePrintedFromTheDetails) {
  const std::string bad = ::testing::TempDir() + "/server-two-errors.yaml";
  const std::string yaml =
      "name: x\nscales: [{name: a, preset: tiny, shape: {width: 63}}]\n"
      "arms: [\"x; seeds: y\", block]\nseeds: [1]\n"
      "data: {train_shards: [a], tokenizer: byte}\noptim: {peak_lr: 1e-3}\n"
      "schedule: {total_tokens: 65536, global_batch_tokens: 4096}\n";
  {
    std::ofstream f(bad);
    f << yaml;
  }
  // What the fake sends: ExpandSweep's errors.
  const auto spec = contract::ParseSweepYaml(yaml);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const auto sent = contract::ExpandSweep(*spec, "sw-new");
  ASSERT_EQ(sent.errors().size(), 2u) << sent.status().message();
  ASSERT_EQ(sent.errors()[0].path, "arms[0]");
  ASSERT_NE(sent.errors()[0].reason.find("; valid: "), std::string::npos);

  const Result r = Run({"submit", bad});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "rdattn: INVALID_ARGUMENT: 2 errors in " + bad + ":\n  " +
                       sent.errors()[0].Text() + "\n  " + sent.errors()[1].Text() + "\n");
}

// A message without details is printed as it came: the client does not guess field errors.
TEST_F(CliServerTest, MessageWithoutDetailsIsOneError) {
  const Result r = Run({"get", "text-only"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "rdattn: INVALID_ARGUMENT: view: x; seeds: y\n");
}

}  // namespace
}  // namespace rdattn::client
