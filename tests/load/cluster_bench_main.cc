// rdattn-cluster-bench: the control-plane benchmark (tests/load/README.md, docs/benchmarks.md
// "Control plane", issue 27). It starts nothing: it talks to a running coordinator
// (--coordinator HOST:PORT) as W simulated workers speaking the real WorkerService protocol, and
// measures what the coordinator costs and how it answers.
//
// The run:
//   1. W workers register (kind CPU, --slots each), heartbeat every --heartbeat-seconds listing
//      their leases with progress, and long-poll LeaseJob (wait --lease-wait-seconds, deadline
//      10 s longer, as rdattn-worker does).
//   2. Idle phase: --idle-seconds with every worker registered and polling and no job; the
//      coordinator's CPU over it is the idle cost of W waiting workers.
//   3. One sweep of J jobs (J/2 seeds x {block, rd} of the tiny preset, 3 validation milestones,
//      a test shard) is submitted. Each leased job streams 14 events over --job-seconds on one
//      ReportProgress stream (INIT, 6 TRAIN_STEP, EVAL + CHECKPOINT at each milestone, FINISHED
//      with a test NLL), then CompleteJob(SUCCEEDED). Each EVAL's val_nll is a hash of the job
//      id and the milestone, so a job that ends with another job's NLL is caught.
//   4. Two readers call GetSweep and ListSweeps in a loop meanwhile.
//   5. When every job SUCCEEDED (or --max-seconds passed) the jobs are read back with GetSweep:
//      every job must be SUCCEEDED with its own last val NLL.
// With --coordinator-pid it samples the coordinator's /proc every 0.5 s (CPU, RSS, threads); with
// --db the store's size per job and per event; with --metrics-url its lease-expiry counter.
//
// --probe-jobs N1,N2,... is the other mode: one worker, no contention, the per-call latency of
// LeaseJob, ReportProgress, CompleteJob and GetSweep with N pending jobs in the store, for each N.
//
// Exit 0 only when every job SUCCEEDED with its own NLL and no RPC failed; 1 otherwise (what
// failed is printed); 2 on a usage error.
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_callback.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/cli.h"
#include "common/connection_flags.h"
#include "common/strings.h"
#include "proto/contract/contract.h"
#include "rdattn/v1/coordinator.grpc.pb.h"
#include "runspec/run_config.h"
#include "tests/coordinator/tiny_sweep.h"

namespace {

namespace pb = ::rdattn::v1;
using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
double SecondsBetween(Clock::time_point a, Clock::time_point b) { return MsBetween(a, b) / 1000.0; }
Millis ToMillis(double seconds) {
  return Millis(static_cast<int64_t>(std::llround(seconds * 1000)));
}

std::string CodeName(grpc::StatusCode c) {
  static const char* const names[] = {"OK",
                                      "CANCELLED",
                                      "UNKNOWN",
                                      "INVALID_ARGUMENT",
                                      "DEADLINE_EXCEEDED",
                                      "NOT_FOUND",
                                      "ALREADY_EXISTS",
                                      "PERMISSION_DENIED",
                                      "RESOURCE_EXHAUSTED",
                                      "FAILED_PRECONDITION",
                                      "ABORTED",
                                      "OUT_OF_RANGE",
                                      "UNIMPLEMENTED",
                                      "INTERNAL",
                                      "UNAVAILABLE",
                                      "DATA_LOSS",
                                      "UNAUTHENTICATED"};
  const int i = static_cast<int>(c);
  return i >= 0 && i <= 16 ? names[i] : "CODE_" + std::to_string(i);
}

// The val NLL a job reports at a milestone (milestone -1: its test NLL): a hash of both, in
// [2, 5), exactly representable, so the value read back must be equal, not close.
double NllOf(const std::string& job_id, int64_t milestone) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over the id, then splitmix64 with the milestone
  for (unsigned char c : job_id) h = (h ^ c) * 1099511628211ULL;
  h ^= static_cast<uint64_t>(milestone) + 0x9e3779b97f4a7c15ULL;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return 2.0 + static_cast<double>(h % 3000000) / 1e6;
}

// ------------------------------------------------------------------------------------------
// Figures
// ------------------------------------------------------------------------------------------

enum Rpc {
  kRegister,
  kLeaseJob,   // a call made while jobs were pending (after the submission) that got a job
  kLeaseWake,  // a call waiting before the submission that got a job: submission -> job
  kLeaseIdle,  // a call that got no job (its whole duration, ~ the wait)
  kHeartbeat,
  kProgress,  // a ReportProgress stream: WritesDone -> the server's answer
  kComplete,
  kGetSweep,
  kListSweeps,
  kSubmit,
  kRpcCount
};
const char* const kRpcNames[kRpcCount] = {"RegisterWorker",
                                          "LeaseJob (job pending)",
                                          "LeaseJob (wake at submit)",
                                          "LeaseJob (idle poll)",
                                          "Heartbeat",
                                          "ReportProgress (close)",
                                          "CompleteJob",
                                          "GetSweep",
                                          "ListSweeps",
                                          "SubmitSweep"};
// The RPC an error is counted under.
const char* const kRpcBase[kRpcCount] = {
    "RegisterWorker", "LeaseJob",    "LeaseJob", "LeaseJob",   "Heartbeat",
    "ReportProgress", "CompleteJob", "GetSweep", "ListSweeps", "SubmitSweep"};

struct Row {
  int64_t count = 0;
  double p50 = 0, p99 = 0, max = 0;
};

// Nearest-rank percentiles of `ms` (sorted in place).
Row Summarize(std::vector<double>& ms) {
  Row r;
  r.count = static_cast<int64_t>(ms.size());
  if (ms.empty()) return r;
  std::sort(ms.begin(), ms.end());
  auto rank = [&](double p) {
    const size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(ms.size())));
    return ms[std::min(ms.size() - 1, k == 0 ? 0 : k - 1)];
  };
  r.p50 = rank(0.50);
  r.p99 = rank(0.99);
  r.max = ms.back();
  return r;
}

class Stats {
 public:
  void Add(Rpc r, double ms) {
    std::lock_guard<std::mutex> lock(mu_);
    ms_[r].push_back(ms);
  }
  void Error(Rpc r, const grpc::Status& st, const std::string& what = "") {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string key = std::string(kRpcBase[r]) + " " + CodeName(st.error_code());
    ++codes_[key];
    ++errors_;
    if (samples_.size() < 12)
      samples_.push_back(key + (what.empty() ? "" : " (" + what + ")") + ": " + st.error_message());
  }
  // A problem that is not an RPC error (a lost lease, a job not SUCCEEDED after CompleteJob).
  void Problem(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (problems_.size() < 12) problems_.push_back(what);
  }
  int64_t errors() {
    std::lock_guard<std::mutex> lock(mu_);
    return errors_;
  }
  Row Summary(Rpc r) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<double> copy = ms_[r];
    return Summarize(copy);
  }
  std::map<std::string, int64_t> codes() {
    std::lock_guard<std::mutex> lock(mu_);
    return codes_;
  }
  std::vector<std::string> samples() {
    std::lock_guard<std::mutex> lock(mu_);
    return samples_;
  }
  std::vector<std::string> problems() {
    std::lock_guard<std::mutex> lock(mu_);
    return problems_;
  }

  std::atomic<int64_t> lost_leases{0};  // heartbeat answers naming a running lease lost
  // ... naming a lease whose CompleteJob was sent after the heartbeat (a benign race)
  std::atomic<int64_t> lost_after_complete{0};
  std::atomic<int64_t> stream_retries{0};  // progress streams opened again after a failure
  std::atomic<int64_t> aborted{0};         // ABORTED answers (a stale lease)
  std::atomic<int64_t> cancel_orders{0};   // cancel orders in heartbeat answers (none expected)
  std::atomic<int64_t> not_succeeded{0};   // CompleteJob(SUCCEEDED) answered another state
  std::atomic<int64_t> events_sent{0};     // events written on progress streams
  std::atomic<int64_t> events_stored{0};   // ReportProgressResponse.events_stored, summed
  std::atomic<int64_t> leases{0};          // leases received (all, repeats included)
  std::atomic<int64_t> repeat_leases{0};   // leases of a job this run had leased before

 private:
  std::mutex mu_;
  std::vector<double> ms_[kRpcCount];
  std::map<std::string, int64_t> codes_;
  std::vector<std::string> samples_;
  std::vector<std::string> problems_;
  int64_t errors_ = 0;
};

// ------------------------------------------------------------------------------------------
// The coordinator's process: /proc samples, Prometheus, the store's files
// ------------------------------------------------------------------------------------------

struct ProcSample {
  double t = 0;      // seconds since the sampler started
  double cpu_s = 0;  // user + system CPU seconds
  int64_t rss_kb = 0;
  int64_t hwm_kb = 0;
  int64_t threads = 0;
};

// Reads /proc/<pid>/stat and /proc/<pid>/status; false when the process is gone.
bool ReadProc(int pid, ProcSample* s) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!stat || !std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');  // the command may contain spaces
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 2));
  std::vector<std::string> f;
  std::string tok;
  while (rest >> tok) f.push_back(tok);
  // Fields after the command start at field 3 (state); utime is field 14, stime 15.
  if (f.size() < 13) return false;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  s->cpu_s = (std::stod(f[11]) + std::stod(f[12])) / tick;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  while (std::getline(status, line)) {
    auto value = [&](const char* key, int64_t* out) {
      const size_t n = std::strlen(key);
      if (line.compare(0, n, key) == 0) *out = std::stoll(line.substr(n));
    };
    value("VmRSS:", &s->rss_kb);
    value("VmHWM:", &s->hwm_kb);
    value("Threads:", &s->threads);
  }
  return true;
}

class ProcSampler {
 public:
  explicit ProcSampler(int pid) : pid_(pid) {
    if (pid_ > 0) thread_ = std::thread([this] { Loop(); });
  }
  ~ProcSampler() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  bool enabled() const { return pid_ > 0; }
  // A sample now (not kept in the series); cpu_s -1 when there is no process to read.
  ProcSample Now() const {
    ProcSample s;
    s.cpu_s = -1;
    if (pid_ > 0) ReadProc(pid_, &s);
    return s;
  }
  std::vector<ProcSample> series() {
    std::lock_guard<std::mutex> lock(mu_);
    return series_;
  }
  bool lost() {
    std::lock_guard<std::mutex> lock(mu_);
    return lost_;
  }

 private:
  void Loop() {
    const Clock::time_point t0 = Clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      ProcSample s;
      const bool ok = ReadProc(pid_, &s);
      s.t = SecondsBetween(t0, Clock::now());
      lock.lock();
      if (ok) {
        series_.push_back(s);
      } else {
        lost_ = true;
      }
      cv_.wait_for(lock, Millis(500), [this] { return stop_; });
    }
  }
  const int pid_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool lost_ = false;
  std::vector<ProcSample> series_;
  std::thread thread_;
};

// GET of a plain http:// URL; the body, or "" with *error set.
std::string HttpGet(const std::string& url, std::string* error) {
  const std::string prefix = "http://";
  if (url.compare(0, prefix.size(), prefix) != 0) {
    *error = "--metrics-url: must start with http://";
    return "";
  }
  std::string rest = url.substr(prefix.size());
  const size_t slash = rest.find('/');
  const std::string hostport = rest.substr(0, slash);
  const std::string path = slash == std::string::npos ? "/" : rest.substr(slash);
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos) {
    *error = "--metrics-url: no port in " + url;
    return "";
  }
  const std::string host = hostport.substr(0, colon), port = hostport.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
    *error = "cannot resolve " + hostport;
    return "";
  }
  const int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  const bool connected = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0;
  freeaddrinfo(res);
  if (!connected) {
    *error = "cannot connect to " + hostport + ": " + std::strerror(errno);
    if (fd >= 0) close(fd);
    return "";
  }
  const std::string req =
      "GET " + path + " HTTP/1.0\r\nHost: " + hostport + "\r\nConnection: close\r\n\r\n";
  if (send(fd, req.data(), req.size(), 0) != static_cast<ssize_t>(req.size())) {
    *error = "cannot send to " + hostport;
    close(fd);
    return "";
  }
  std::string reply;
  char buf[65536];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = reply.find("\r\n\r\n");
  if (reply.compare(0, 12, "HTTP/1.0 200") != 0 && reply.compare(0, 12, "HTTP/1.1 200") != 0) {
    *error = url + ": " + reply.substr(0, reply.find('\r'));
    return "";
  }
  return body == std::string::npos ? "" : reply.substr(body + 4);
}

// The sum of a Prometheus counter's samples (all label sets); -1 when absent.
double PromValue(const std::string& body, const std::string& name) {
  std::istringstream in(body);
  std::string line;
  double sum = -1;
  while (std::getline(in, line)) {
    if (line.compare(0, name.size(), name) != 0 || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != ' ' && next != '{') continue;
    const size_t sp = line.rfind(' ');
    try {
      sum = std::max(sum, 0.0) + std::stod(line.substr(sp + 1));
    } catch (const std::exception&) {
    }
  }
  return sum;
}

int64_t FileSize(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

// ------------------------------------------------------------------------------------------
// A timer queue run by a few threads: every reaction to a gRPC callback and every paced event
// runs here, so the tool's threads stay bounded whatever W is.
// ------------------------------------------------------------------------------------------

class Scheduler {
 public:
  explicit Scheduler(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~Scheduler() { Stop(); }
  void At(Clock::time_point t, std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      q_.push(Item{t, seq_++, std::move(fn)});
    }
    cv_.notify_one();
  }
  void Post(std::function<void()> fn) { At(Clock::now(), std::move(fn)); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
    std::lock_guard<std::mutex> lock(mu_);
    while (!q_.empty()) q_.pop();
  }

 private:
  struct Item {
    Clock::time_point t;
    uint64_t seq;
    std::function<void()> fn;
  };
  struct Later {
    bool operator()(const Item& a, const Item& b) const {
      return a.t > b.t || (a.t == b.t && a.seq > b.seq);
    }
  };
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (q_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const Clock::time_point t = q_.top().t;
      if (Clock::now() < t) {
        cv_.wait_until(lock, t);
        continue;
      }
      std::function<void()> fn = std::move(const_cast<Item&>(q_.top()).fn);
      q_.pop();
      if (!q_.empty()) cv_.notify_one();  // another item may be due for another thread
      lock.unlock();
      fn();
      fn = nullptr;  // release captures outside the lock
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Item, std::vector<Item>, Later> q_;
  uint64_t seq_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// ------------------------------------------------------------------------------------------
// Options and the shared state of a run
// ------------------------------------------------------------------------------------------

struct Flags {
  rdattn::cli::ConnectionFlags connection;
  // Read by the check after parse from --reader-view and --probe-jobs.
  pb::SweepView reader_view_value = pb::SWEEP_VIEW_UNSPECIFIED;
  std::vector<int> probe_sizes;
  std::string worker_token;
  int workers = 100;
  int jobs = 1000;
  int slots = 1;
  double heartbeat_seconds = 5;
  double lease_wait_seconds = 30;
  double job_seconds = 3;
  double idle_seconds = 10;
  int channels = 0;
  int threads = 2;
  int readers = 2;
  double reader_interval_ms = 1000;
  std::string reader_view = "auto";
  double rpc_timeout = 30;
  double max_seconds = 900;
  int coordinator_pid = 0;
  std::string db;
  std::string metrics_url;
  std::string json;
  std::string probe_jobs;
  int probe_samples = 30;
  std::string label;
};

// A page size for GetSweep FULL when this build's proto has paging (GetSweepRequest.page_size);
// set through reflection so the tool builds before and after paging exists.
constexpr int kVerifyPageSize = 1000;

bool SetIntField(google::protobuf::Message* m, const char* name, int value) {
  const google::protobuf::FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(name);
  if (f == nullptr || f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_INT32)
    return false;
  m->GetReflection()->SetInt32(m, f, value);
  return true;
}
bool SetStringField(google::protobuf::Message* m, const char* name, const std::string& value) {
  const google::protobuf::FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(name);
  if (f == nullptr || f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_STRING)
    return false;
  m->GetReflection()->SetString(m, f, value);
  return true;
}
std::string GetStringField(const google::protobuf::Message& m, const char* name) {
  const google::protobuf::FieldDescriptor* f = m.GetDescriptor()->FindFieldByName(name);
  if (f == nullptr || f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_STRING) return "";
  return m.GetReflection()->GetString(m, f);
}

// "auto" -> SUMMARY when this build's proto has it, else FULL; else SWEEP_VIEW_<NAME>.
bool ParseView(const std::string& name, pb::SweepView* view) {
  std::string upper = name;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper == "AUTO") {
    if (pb::SweepView_Parse("SWEEP_VIEW_SUMMARY", view)) return true;
    *view = pb::SWEEP_VIEW_FULL;
    return true;
  }
  return pb::SweepView_Parse("SWEEP_VIEW_" + upper, view) && *view != pb::SWEEP_VIEW_UNSPECIFIED;
}
std::string ViewName(pb::SweepView v) {
  std::string s = pb::SweepView_Name(v);
  return s.substr(std::string("SWEEP_VIEW_").size());
}

struct Bench {
  Flags flags;
  std::string token, worker_token;
  Stats stats;
  std::unique_ptr<Scheduler> sched;
  pb::SweepView reader_view = pb::SWEEP_VIEW_FULL;

  std::atomic<bool> stopping{false};
  std::atomic<int64_t> inflight{0};  // async calls and streams not yet answered
  std::atomic<int> registered{0};
  std::atomic<bool> submitting{false};
  Clock::time_point t0;            // the run's start
  Clock::time_point submit_start;  // written before `submitting` turns true; times count from it

  std::mutex jobs_mu;
  std::set<std::string> leased_jobs;
  std::set<std::string> succeeded_jobs;
  double all_leased_s = -1, all_succeeded_s = -1;  // since submit_start

  std::mutex milestones_mu;
  std::map<std::string, std::vector<rdattn::EvalMilestone>> milestones_by_schedule;

  void Prepare(grpc::ClientContext* ctx, const std::string& tok, Millis timeout) const {
    if (!tok.empty()) ctx->AddMetadata("authorization", "Bearer " + tok);
    ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  }

  // The milestones the coordinator expects a val NLL for (report_input.cc ExpectedMilestones: the
  // resolved schedule's EvalMilestones), cached by schedule.
  std::vector<rdattn::EvalMilestone> Milestones(const pb::RunSpec& run) {
    std::string key;
    run.schedule().SerializeToString(&key);
    {
      std::lock_guard<std::mutex> lock(milestones_mu);
      auto it = milestones_by_schedule.find(key);
      if (it != milestones_by_schedule.end()) return it->second;
    }
    auto cfg = rdattn::contract::ParseRunSpec(run);
    std::vector<rdattn::EvalMilestone> m;
    if (cfg.ok()) m = rdattn::EvalMilestones(cfg->schedule);
    std::lock_guard<std::mutex> lock(milestones_mu);
    milestones_by_schedule[key] = m;
    return m;
  }

  void Leased(const std::string& job_id) {
    std::lock_guard<std::mutex> lock(jobs_mu);
    if (!leased_jobs.insert(job_id).second) {
      ++stats.repeat_leases;
      return;
    }
    if (static_cast<int>(leased_jobs.size()) == flags.jobs)
      all_leased_s = SecondsBetween(submit_start, Clock::now());
  }
  void Succeeded(const std::string& job_id) {
    std::lock_guard<std::mutex> lock(jobs_mu);
    if (succeeded_jobs.insert(job_id).second &&
        static_cast<int>(succeeded_jobs.size()) == flags.jobs)
      all_succeeded_s = SecondsBetween(submit_start, Clock::now());
  }
  int succeeded() {
    std::lock_guard<std::mutex> lock(jobs_mu);
    return static_cast<int>(succeeded_jobs.size());
  }
};

// One async unary call: its context, request, response and start time live until its callback
// has run on the scheduler.
template <typename Req, typename Resp>
struct Call {
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
  Clock::time_point t0;
};

// Starts `start(ctx, req, resp, callback)` and runs done(call, status) on the scheduler.
template <typename Req, typename Resp, typename Start, typename Done>
std::shared_ptr<Call<Req, Resp>> CallAsync(Bench& b, const std::string& tok, Millis timeout,
                                           Req req, Start start, Done done) {
  auto call = std::make_shared<Call<Req, Resp>>();
  call->req = std::move(req);
  b.Prepare(&call->ctx, tok, timeout);
  call->t0 = Clock::now();
  ++b.inflight;
  start(&call->ctx, &call->req, &call->resp, [&b, call, done](const grpc::Status& st) {
    const Clock::time_point t1 = Clock::now();
    b.sched->Post([&b, call, done, st, t1] {
      done(*call, st, MsBetween(call->t0, t1));
      --b.inflight;
    });
  });
  return call;
}

// ------------------------------------------------------------------------------------------
// A job's ReportProgress stream: events are queued and written one at a time (the callback
// API allows one outstanding write); WritesDone after the last.
// ------------------------------------------------------------------------------------------

class ProgressStream : public grpc::ClientWriteReactor<pb::ReportProgressRequest> {
 public:
  using DoneFn =
      std::function<void(const grpc::Status&, const pb::ReportProgressResponse&, double close_ms)>;
  ProgressStream(Bench& b, pb::WorkerService::Stub* stub, Millis lifetime, DoneFn done)
      : b_(b), done_fn_(std::move(done)) {
    b.Prepare(&ctx_, b.worker_token, lifetime);
    ++b.inflight;
    stub->async()->ReportProgress(&ctx_, &resp_, this);
    StartCall();
  }
  void Write(pb::ReportProgressRequest req) {
    bool start = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_ || closing_) return;
      queue_.push_back(std::move(req));
      if (!writing_) start = Next();
    }
    if (start) StartWrite(&current_);
  }
  void Close() {
    bool writes_done = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_ || closing_) return;
      closing_ = true;
      close_t0_ = Clock::now();
      if (!writing_ && queue_.empty()) writes_done = true;
    }
    if (writes_done) StartWritesDone();
  }
  void Cancel() { ctx_.TryCancel(); }

  void OnWriteDone(bool ok) override {
    bool start = false, writes_done = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) return;  // the stream broke: OnDone follows with the status
      ++b_.stats.events_sent;
      if (!queue_.empty()) {
        start = Next();
      } else if (closing_) {
        writes_done = true;
      }
    }
    if (start) StartWrite(&current_);
    if (writes_done) StartWritesDone();
  }
  void OnDone(const grpc::Status& st) override {
    const Clock::time_point t1 = Clock::now();
    double close_ms = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      if (closing_) close_ms = MsBetween(close_t0_, t1);
    }
    // The owner keeps this object alive (shared_ptr) until the posted reaction has run.
    Bench& b = b_;
    DoneFn fn = done_fn_;
    pb::ReportProgressResponse resp = resp_;
    b.sched->Post([&b, fn, st, resp, close_ms] {
      fn(st, resp, close_ms);
      --b.inflight;
    });
  }

 private:
  // Moves the next queued event into current_; the caller starts the write outside the lock.
  bool Next() {
    current_ = std::move(queue_.front());
    queue_.erase(queue_.begin());
    writing_ = true;
    return true;
  }
  Bench& b_;
  DoneFn done_fn_;
  grpc::ClientContext ctx_;
  pb::ReportProgressResponse resp_;
  std::mutex mu_;
  std::vector<pb::ReportProgressRequest> queue_;
  pb::ReportProgressRequest current_;
  bool writing_ = false, closing_ = false, done_ = false;
  Clock::time_point close_t0_;
};

// ------------------------------------------------------------------------------------------
// A simulated worker
// ------------------------------------------------------------------------------------------

constexpr int kTrainSteps = 6;  // TRAIN_STEP events per job: 2 + 6 + 2 x 3 milestones = 14

struct SimJob {
  std::string lease_id, job_id, pair_group;
  int attempt = 0;
  std::vector<rdattn::EvalMilestone> milestones;
  Clock::time_point leased_at;
  // Progress, under the worker's mutex.
  int64_t step = 0, tokens = 0;
  uint64_t last_seq = 0;
  bool started = false;
  bool lost = false;
  bool completing = false;  // its stream ended and CompleteJob was sent
  // Every event written so far (a broken stream is replaced and they are sent again: the
  // coordinator stores by (job, attempt, seq), as rdattn-worker's relay relies on), whether the
  // last tick closed the stream, and how many streams broke.
  std::vector<pb::ReportProgressRequest> events;
  bool closed = false;
  int stream_failures = 0;
  std::shared_ptr<ProgressStream> stream;
};

class SimWorker : public std::enable_shared_from_this<SimWorker> {
 public:
  SimWorker(Bench& b, int index, std::shared_ptr<pb::WorkerService::Stub> stub, uint64_t seed)
      : b_(b), index_(index), stub_(std::move(stub)), rng_(seed), free_slots_(b.flags.slots) {}

  void Register() {
    pb::RegisterWorkerRequest req;
    req.set_hostname("bench-" + std::to_string(getpid()) + "-w" + std::to_string(index_));
    req.set_kind(pb::HARDWARE_KIND_CPU);
    req.set_slots(b_.flags.slots);
    req.set_version("rdattn-cluster-bench");
    req.set_device_name("simulated");
    auto self = shared_from_this();
    CallAsync<pb::RegisterWorkerRequest, pb::RegisterWorkerResponse>(
        b_, b_.worker_token, ToMillis(b_.flags.rpc_timeout), std::move(req),
        [this](auto* ctx, auto* rq, auto* rs, auto cb) {
          stub_->async()->RegisterWorker(ctx, rq, rs, std::move(cb));
        },
        [self](Call<pb::RegisterWorkerRequest, pb::RegisterWorkerResponse>& c,
               const grpc::Status& st, double ms) { self->Registered(c, st, ms); });
  }

  // Stops the long poll in flight (at the end of the run).
  void CancelPoll() {
    std::function<void()> cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancel = cancel_poll_;
    }
    if (cancel) cancel();
  }

 private:
  void Registered(Call<pb::RegisterWorkerRequest, pb::RegisterWorkerResponse>& c,
                  const grpc::Status& st, double ms) {
    if (!st.ok()) {
      b_.stats.Error(kRegister, st);
      if (b_.stopping) return;
      auto self = shared_from_this();
      b_.sched->At(Clock::now() + Millis(1000), [self] { self->Register(); });
      return;
    }
    b_.stats.Add(kRegister, ms);
    {
      std::lock_guard<std::mutex> lock(mu_);
      id_ = c.resp.worker_id();
    }
    ++b_.registered;
    // Heartbeats start at a random phase of the interval, as workers started at different
    // times would.
    std::uniform_real_distribution<double> phase(0, b_.flags.heartbeat_seconds);
    auto self = shared_from_this();
    b_.sched->At(Clock::now() + ToMillis(phase(rng_)), [self] { self->Heartbeat(); });
    MaybePoll();
  }

  void Heartbeat() {
    if (b_.stopping) return;
    pb::HeartbeatRequest req;
    {
      std::lock_guard<std::mutex> lock(mu_);
      req.set_worker_id(id_);
      req.set_free_slots(free_slots_);
      for (const auto& [lease, job] : jobs_) {
        pb::LeaseProgress* lp = req.add_leases();
        lp->set_lease_id(lease);
        lp->set_job_id(job->job_id);
        lp->set_step(job->step);
        lp->set_tokens(job->tokens);
        lp->set_last_event_seq(job->last_seq);
        lp->set_ranks_started(job->started);
      }
    }
    // rdattn-worker's heartbeat deadline: max(2 x interval, 2 s).
    const Millis deadline = std::max(ToMillis(2 * b_.flags.heartbeat_seconds), Millis(2000));
    const Clock::time_point sent = Clock::now();
    auto self = shared_from_this();
    CallAsync<pb::HeartbeatRequest, pb::HeartbeatResponse>(
        b_, b_.worker_token, deadline, std::move(req),
        [this](auto* ctx, auto* rq, auto* rs, auto cb) {
          stub_->async()->Heartbeat(ctx, rq, rs, std::move(cb));
        },
        [self, sent](Call<pb::HeartbeatRequest, pb::HeartbeatResponse>& c, const grpc::Status& st,
                     double ms) { self->HeartbeatDone(c, st, ms, sent); });
  }

  void HeartbeatDone(Call<pb::HeartbeatRequest, pb::HeartbeatResponse>& c, const grpc::Status& st,
                     double ms, Clock::time_point sent) {
    if (st.ok()) {
      b_.stats.Add(kHeartbeat, ms);
      b_.stats.cancel_orders += c.resp.cancel_orders_size();
      for (const std::string& lease : c.resp.lost_lease_ids()) {
        std::shared_ptr<SimJob> job;
        std::shared_ptr<ProgressStream> stream;
        {
          std::lock_guard<std::mutex> lock(mu_);
          auto it = jobs_.find(lease);
          if (it == jobs_.end() || it->second->completing) {
            // CompleteJob was sent after this heartbeat listed the lease and got there first:
            // the lease ended normally, nothing was lost.
            ++b_.stats.lost_after_complete;
            continue;
          }
          job = it->second;
          job->lost = true;
          stream = job->stream;
        }
        ++b_.stats.lost_leases;
        b_.stats.Problem("heartbeat: lease " + lease + " of job " + job->job_id + " lost");
        if (stream) stream->Cancel();  // its OnDone ends the job
      }
    } else if (!(b_.stopping && st.error_code() == grpc::StatusCode::CANCELLED)) {
      b_.stats.Error(kHeartbeat, st);
    }
    if (b_.stopping) return;
    // The next one an interval after this one was sent (at once when it took longer).
    const Clock::time_point next =
        std::max(sent + ToMillis(b_.flags.heartbeat_seconds), Clock::now());
    auto self = shared_from_this();
    b_.sched->At(next, [self] { self->Heartbeat(); });
  }

  void MaybePoll() {
    pb::LeaseJobRequest req;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (b_.stopping || polling_ || free_slots_ <= 0 || id_.empty()) return;
      polling_ = true;
      req.set_worker_id(id_);
      req.set_free_slots(free_slots_);
    }
    const Millis wait = ToMillis(b_.flags.lease_wait_seconds);
    req.mutable_wait()->set_seconds(wait.count() / 1000);
    req.mutable_wait()->set_nanos(static_cast<int32_t>(wait.count() % 1000) * 1000000);
    const bool before_submit = !b_.submitting;
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      gen = ++poll_gen_;
    }
    auto self = shared_from_this();
    auto call = CallAsync<pb::LeaseJobRequest, pb::LeaseJobResponse>(
        b_, b_.worker_token, wait + Millis(10000), std::move(req),
        [this](auto* ctx, auto* rq, auto* rs, auto cb) {
          stub_->async()->LeaseJob(ctx, rq, rs, std::move(cb));
        },
        [self, before_submit](Call<pb::LeaseJobRequest, pb::LeaseJobResponse>& c,
                              const grpc::Status& st,
                              double ms) { self->LeaseDone(c, st, ms, before_submit); });
    std::lock_guard<std::mutex> lock(mu_);
    if (polling_ && poll_gen_ == gen) cancel_poll_ = [call] { call->ctx.TryCancel(); };
  }

  void LeaseDone(Call<pb::LeaseJobRequest, pb::LeaseJobResponse>& c, const grpc::Status& st,
                 double ms, bool before_submit) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      polling_ = false;
      cancel_poll_ = nullptr;
    }
    if (!st.ok()) {
      if (b_.stopping && st.error_code() == grpc::StatusCode::CANCELLED) return;
      b_.stats.Error(kLeaseJob, st);
      auto self = shared_from_this();
      b_.sched->At(Clock::now() + Millis(500), [self] { self->MaybePoll(); });
      return;
    }
    if (!c.resp.has_job()) {
      b_.stats.Add(kLeaseIdle, ms);
      MaybePoll();
      return;
    }
    if (before_submit) {
      // Waiting since before the submission: the time from the submission's start.
      b_.stats.Add(kLeaseWake, MsBetween(b_.submit_start, Clock::now()));
    } else {
      b_.stats.Add(kLeaseJob, ms);
    }
    ++b_.stats.leases;
    StartJob(c.resp);
    MaybePoll();
  }

  void StartJob(const pb::LeaseJobResponse& lease) {
    auto job = std::make_shared<SimJob>();
    job->lease_id = lease.lease_id();
    job->job_id = lease.job().job_id();
    job->pair_group = lease.job().pair_group();
    job->attempt = lease.job().attempt();
    job->milestones = b_.Milestones(lease.job().run());
    job->leased_at = Clock::now();
    b_.Leased(job->job_id);
    if (b_.stopping) return;  // the run ended (--max-seconds): the job is not run
    auto self = shared_from_this();
    auto stream = NewStream(job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job->stream = std::move(stream);
      --free_slots_;
      jobs_[job->lease_id] = job;
    }
    for (int k = 0; k <= kTrainSteps; ++k) {
      const Clock::time_point t = job->leased_at + ToMillis(b_.flags.job_seconds * k / kTrainSteps);
      b_.sched->At(t, [self, job, k] { self->Tick(job, k); });
    }
  }

  // A progress stream for `job`, with rdattn-worker's deadline (stream max age 60 s + 30 s slack).
  std::shared_ptr<ProgressStream> NewStream(const std::shared_ptr<SimJob>& job) {
    auto self = shared_from_this();
    return std::make_shared<ProgressStream>(
        b_, stub_.get(), std::max(Millis(90000), ToMillis(b_.flags.job_seconds + 30)),
        [self, job](const grpc::Status& st, const pb::ReportProgressResponse& resp,
                    double close_ms) { self->StreamDone(job, st, resp, close_ms); });
  }

  pb::ReportProgressRequest Event(SimJob& job, pb::MetricEvent::Kind kind, int64_t step,
                                  int64_t tokens) {
    pb::ReportProgressRequest req;
    req.set_lease_id(job.lease_id);
    pb::MetricEvent* e = req.mutable_event();
    e->set_seq(++job.last_seq);
    e->set_job_id(job.job_id);
    e->set_attempt(job.attempt);
    e->set_run_id(job.job_id);
    e->set_kind(kind);
    e->set_step(step);
    e->set_tokens(tokens);
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(now).count();
    e->mutable_wall_time()->set_seconds(us / 1000000);
    e->mutable_wall_time()->set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
    e->set_hardware_kind(pb::HARDWARE_KIND_CPU);
    e->set_world_size(1);
    job.step = step;
    job.tokens = tokens;
    return req;
  }

  // Tick k of a job: 0 is INIT; 1..6 a TRAIN_STEP each, with EVAL and CHECKPOINT at the
  // milestones that fall at that step; 6 also FINISHED, then the stream closes.
  // The events are written under the worker's lock, so that two ticks of one job running on two
  // scheduler threads cannot interleave their writes out of seq order.
  void Tick(const std::shared_ptr<SimJob>& job, int k) {
    std::vector<pb::ReportProgressRequest> out;
    std::lock_guard<std::mutex> lock(mu_);
    if (job->lost || b_.stopping || !job->stream) return;
    {
      const int m = static_cast<int>(job->milestones.size());
      const int64_t last_tokens = m > 0 ? job->milestones.back().tokens : 0;
      const int64_t last_step = m > 0 ? job->milestones.back().step : kTrainSteps;
      if (k == 0) {
        pb::ReportProgressRequest r = Event(*job, pb::MetricEvent::KIND_INIT, 0, 0);
        pb::MetricEvent* e = r.mutable_event();
        e->set_init_param_checksum("bench:" + job->pair_group);
        e->set_data_digest("xxh3:00000000bench000");
        e->set_param_count(1000);
        e->set_flops_per_token(6000);
        out.push_back(std::move(r));
        job->started = true;
      } else {
        const int64_t step = last_step * k / kTrainSteps;
        const int64_t tokens = last_tokens * k / kTrainSteps;
        pb::ReportProgressRequest r = Event(*job, pb::MetricEvent::KIND_TRAIN_STEP, step, tokens);
        pb::MetricEvent* e = r.mutable_event();
        e->set_train_loss(5.0 - 0.1 * k);
        e->set_lr(0.003);
        e->set_grad_norm(1.0);
        e->set_tokens_per_second(4096);
        e->set_step_seconds(b_.flags.job_seconds / kTrainSteps);
        out.push_back(std::move(r));
        // Milestone i (1-based) falls at tick ceil(i * 6 / m).
        for (int i = 1; i <= m; ++i) {
          if ((i * kTrainSteps + m - 1) / m != k) continue;
          const rdattn::EvalMilestone& ms = job->milestones[i - 1];
          pb::ReportProgressRequest ev =
              Event(*job, pb::MetricEvent::KIND_EVAL, ms.step, ms.tokens);
          ev.mutable_event()->set_milestone_tokens(ms.tokens);
          ev.mutable_event()->set_val_nll(NllOf(job->job_id, ms.tokens));
          ev.mutable_event()->set_eval_tokens(2048);
          out.push_back(std::move(ev));
          pb::ReportProgressRequest ck =
              Event(*job, pb::MetricEvent::KIND_CHECKPOINT, ms.step, ms.tokens);
          ck.mutable_event()->set_checkpoint_path("/bench/" + job->job_id + "/step_" +
                                                  std::to_string(ms.step) + ".ckpt");
          out.push_back(std::move(ck));
        }
        if (k == kTrainSteps) {
          pb::ReportProgressRequest f =
              Event(*job, pb::MetricEvent::KIND_FINISHED, last_step, last_tokens);
          f.mutable_event()->set_test_nll(NllOf(job->job_id, -1));
          f.mutable_event()->set_eval_tokens(4096);
          out.push_back(std::move(f));
        }
      }
    }
    for (pb::ReportProgressRequest& r : out) {
      job->events.push_back(r);
      job->stream->Write(std::move(r));
    }
    if (k == kTrainSteps) {
      job->closed = true;
      job->stream->Close();  // never takes the worker's lock
    }
  }

  void StreamDone(const std::shared_ptr<SimJob>& job, const grpc::Status& st,
                  const pb::ReportProgressResponse& resp, double close_ms) {
    bool lost;
    {
      std::lock_guard<std::mutex> lock(mu_);
      lost = job->lost;
    }
    if (lost) return EndJob(job);  // the heartbeat said so; its problem is recorded
    if (!st.ok()) {
      if (b_.stopping && st.error_code() == grpc::StatusCode::CANCELLED) return EndJob(job);
      b_.stats.Error(kProgress, st, job->job_id);
      if (st.error_code() == grpc::StatusCode::ABORTED) {
        ++b_.stats.aborted;  // the lease is gone: stop, no CompleteJob (as rdattn-worker)
        return EndJob(job);
      }
      // Any other failure: a new stream resends every event (rdattn-worker's relay resends
      // what was not acknowledged; nothing is until a stream closes OK), at most 5 times.
      std::lock_guard<std::mutex> lock(mu_);
      if (b_.stopping || ++job->stream_failures > 5) {
        job->stream.reset();
      } else {
        ++b_.stats.stream_retries;
        job->stream = NewStream(job);
        for (const pb::ReportProgressRequest& r : job->events) job->stream->Write(r);
        if (job->closed) job->stream->Close();
        return;
      }
    }
    if (!st.ok()) return EndJob(job);
    if (close_ms >= 0) b_.stats.Add(kProgress, close_ms);
    b_.stats.events_stored += resp.events_stored();
    pb::CompleteJobRequest req;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job->completing = true;
      req.set_worker_id(id_);
      req.set_last_event_seq(job->last_seq);
    }
    req.set_lease_id(job->lease_id);
    req.set_job_id(job->job_id);
    req.set_outcome(pb::JOB_OUTCOME_SUCCEEDED);
    req.set_exit_code(0);
    req.set_message("rdattn-cluster-bench: simulated run");
    auto self = shared_from_this();
    CallAsync<pb::CompleteJobRequest, pb::CompleteJobResponse>(
        b_, b_.worker_token, ToMillis(b_.flags.rpc_timeout), std::move(req),
        [this](auto* ctx, auto* rq, auto* rs, auto cb) {
          stub_->async()->CompleteJob(ctx, rq, rs, std::move(cb));
        },
        [self, job](Call<pb::CompleteJobRequest, pb::CompleteJobResponse>& c,
                    const grpc::Status& st, double ms) {
          if (!st.ok()) {
            if (st.error_code() == grpc::StatusCode::ABORTED) ++self->b_.stats.aborted;
            self->b_.stats.Error(kComplete, st, job->job_id);
          } else {
            self->b_.stats.Add(kComplete, ms);
            if (c.resp.job_state() == pb::JOB_STATE_SUCCEEDED) {
              self->b_.Succeeded(job->job_id);
            } else {
              ++self->b_.stats.not_succeeded;
              self->b_.stats.Problem("CompleteJob(SUCCEEDED) of " + job->job_id + " left it " +
                                     pb::JobState_Name(c.resp.job_state()));
            }
          }
          self->EndJob(job);
        });
  }

  void EndJob(const std::shared_ptr<SimJob>& job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job->stream.reset();  // the stream's callback holds the job: break the cycle
      if (jobs_.erase(job->lease_id) == 0) return;
      ++free_slots_;
    }
    MaybePoll();
  }

  Bench& b_;
  const int index_;
  std::shared_ptr<pb::WorkerService::Stub> stub_;
  std::mt19937_64 rng_;  // scheduler threads only, one reaction at a time per worker
  std::mutex mu_;
  std::string id_;
  int free_slots_;
  bool polling_ = false;
  uint64_t poll_gen_ = 0;  // the poll cancel_poll_ may cancel
  std::function<void()> cancel_poll_;
  std::map<std::string, std::shared_ptr<SimJob>> jobs_;
};

// ------------------------------------------------------------------------------------------
// Sweeps, readers, the final check
// ------------------------------------------------------------------------------------------

// J/2 seeds x {block, rd} of the tiny preset: 24 steps of 512 tokens, milestones at 4096, 8192
// and 12288 tokens (the last is the stop step, so exactly 3), a test shard (FINISHED must carry
// a test NLL), max_attempts 3.
pb::SweepSpec BenchSweep(int jobs, const std::string& name, int64_t first_seed) {
  std::vector<uint64_t> seeds;
  seeds.reserve(static_cast<size_t>(jobs / 2));
  for (int i = 0; i < jobs / 2; ++i) seeds.push_back(static_cast<uint64_t>(first_seed + i));
  pb::SweepSpec s = rdattn::coordinator::testing::TinySweep(seeds, 3, {4096, 8192, 12288}, name);
  s.mutable_data()->add_test_shards("/data/test.bin");
  return s;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, bool big_replies) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // its own TCP connection
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  if (big_replies) args.SetMaxReceiveMessageSize(512 * 1024 * 1024);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// Reads a sweep with `view`; with the FULL view every page (when this proto pages).
grpc::Status ReadSweep(Bench& b, pb::SweepService::Stub* stub, const std::string& sweep_id,
                       pb::SweepView view, Millis timeout, pb::SweepStatus* out, int* pages) {
  *pages = 0;
  std::string token;
  out->Clear();
  while (true) {
    grpc::ClientContext ctx;
    b.Prepare(&ctx, b.token, timeout);
    pb::GetSweepRequest req;
    req.set_sweep_id(sweep_id);
    req.set_view(view);
    if (view == pb::SWEEP_VIEW_FULL) {
      SetIntField(&req, "page_size", kVerifyPageSize);
      if (!token.empty()) SetStringField(&req, "page_token", token);
    }
    pb::GetSweepResponse resp;
    grpc::Status st = stub->GetSweep(&ctx, req, &resp);
    if (!st.ok()) return st;
    ++*pages;
    if (*pages == 1) {
      *out = resp.sweep();
    } else {
      for (const pb::JobStatus& j : resp.sweep().jobs()) *out->add_jobs() = j;
    }
    token = GetStringField(resp, "next_page_token");
    if (token.empty() || view != pb::SWEEP_VIEW_FULL) return grpc::Status::OK;
  }
}

void ReaderLoop(Bench& b, const std::string& address, const std::string& sweep_id,
                const std::atomic<bool>& stop) {
  auto channel = MakeChannel(address, true);
  auto stub = pb::SweepService::NewStub(channel);
  const Millis timeout = ToMillis(b.flags.rpc_timeout);
  while (!stop) {
    {
      pb::SweepStatus s;
      int pages = 0;
      const Clock::time_point t0 = Clock::now();
      const grpc::Status st =
          ReadSweep(b, stub.get(), sweep_id, b.reader_view, timeout, &s, &pages);
      if (st.ok()) {
        b.stats.Add(kGetSweep, MsBetween(t0, Clock::now()));
      } else if (!stop) {
        b.stats.Error(kGetSweep, st);
      }
    }
    {
      grpc::ClientContext ctx;
      b.Prepare(&ctx, b.token, timeout);
      pb::ListSweepsRequest req;
      req.set_page_size(20);
      req.set_view(pb::SWEEP_VIEW_BASIC);
      pb::ListSweepsResponse resp;
      const Clock::time_point t0 = Clock::now();
      const grpc::Status st = stub->ListSweeps(&ctx, req, &resp);
      if (st.ok()) {
        b.stats.Add(kListSweeps, MsBetween(t0, Clock::now()));
      } else if (!stop) {
        b.stats.Error(kListSweeps, st);
      }
    }
    const Clock::time_point until = Clock::now() + ToMillis(b.flags.reader_interval_ms / 1000.0);
    while (!stop && Clock::now() < until) std::this_thread::sleep_for(Millis(20));
  }
}

struct Verify {
  int jobs = 0;
  int succeeded = 0;
  int own_nll = 0;  // SUCCEEDED with last_val_nll == its own last milestone's value
  int attempts_gt1 = 0;
  int pages = 0;
  std::vector<std::string> problems;
  std::string error;
};

Verify VerifySweep(Bench& b, pb::SweepService::Stub* stub, const std::string& sweep_id) {
  Verify v;
  pb::SweepStatus s;
  const grpc::Status st =
      ReadSweep(b, stub, sweep_id, pb::SWEEP_VIEW_FULL, Millis(300000), &s, &v.pages);
  if (!st.ok()) {
    v.error = "GetSweep (FULL) " + CodeName(st.error_code()) + ": " + st.error_message();
    return v;
  }
  std::set<std::string> seen;
  for (const pb::JobStatus& j : s.jobs()) {
    if (!seen.insert(j.job().job_id()).second) {
      if (v.problems.size() < 10) v.problems.push_back("job " + j.job().job_id() + " listed twice");
      continue;
    }
    ++v.jobs;
    if (j.attempts() > 1) ++v.attempts_gt1;
    if (j.state() != pb::JOB_STATE_SUCCEEDED) {
      if (v.problems.size() < 10)
        v.problems.push_back("job " + j.job().job_id() + " is " + pb::JobState_Name(j.state()) +
                             " after " + std::to_string(j.attempts()) +
                             " attempt(s): " + j.failure_reason());
      continue;
    }
    ++v.succeeded;
    const std::vector<rdattn::EvalMilestone> ms = b.Milestones(j.job().run());
    const double want = ms.empty() ? -1 : NllOf(j.job().job_id(), ms.back().tokens);
    if (j.last_val_nll() == want) {
      ++v.own_nll;
    } else if (v.problems.size() < 10) {
      v.problems.push_back("job " + j.job().job_id() + ": last_val_nll " +
                           std::to_string(j.last_val_nll()) + ", its own is " +
                           std::to_string(want));
    }
  }
  return v;
}

// ------------------------------------------------------------------------------------------
// --probe-jobs: per-call latency with one worker, no contention
// ------------------------------------------------------------------------------------------

struct ProbeRow {
  int jobs = 0;
  Row lease, progress, complete, get, get_full;
  // Coordinator CPU per job cycle: lease + 14 events + complete (the GetSweep calls' CPU, read
  // around each call, taken out), and per GetSweep call. /proc counts in 10 ms ticks: read them
  // as averages over the samples.
  double cpu_ms_per_job = -1;
  double cpu_ms_per_get = -1;
  int64_t errors = 0;
};

int RunProbe(Bench& b, const std::string& address, const std::vector<int>& sizes, int samples,
             ProcSampler& proc, nlohmann::json* out) {
  auto channel = MakeChannel(address, true);
  auto worker = pb::WorkerService::NewStub(channel);
  auto sweeps = pb::SweepService::NewStub(channel);
  const Millis timeout = ToMillis(b.flags.rpc_timeout);
  auto fail = [&](const char* what, const grpc::Status& st) {
    std::fprintf(stderr, "rdattn-cluster-bench: probe: %s: %s %s\n", what,
                 CodeName(st.error_code()).c_str(), st.error_message().c_str());
    return 1;
  };
  std::string worker_id;
  {
    grpc::ClientContext ctx;
    b.Prepare(&ctx, b.worker_token, timeout);
    pb::RegisterWorkerRequest req;
    req.set_hostname("bench-probe-" + std::to_string(getpid()));
    req.set_kind(pb::HARDWARE_KIND_CPU);
    req.set_slots(1);
    pb::RegisterWorkerResponse resp;
    const grpc::Status st = worker->RegisterWorker(&ctx, req, &resp);
    if (!st.ok()) return fail("RegisterWorker", st);
    worker_id = resp.worker_id();
  }
  std::vector<ProbeRow> rows;
  int64_t seed = 1;
  int rc = 0;
  for (int n : sizes) {
    ProbeRow row;
    row.jobs = n;
    pb::SubmitSweepRequest submit;
    submit.set_request_id("probe-" + std::to_string(getpid()) + "-" + std::to_string(n) + "-" +
                          std::to_string(seed));
    *submit.mutable_spec() = BenchSweep(n, "probe-" + std::to_string(n), seed);
    seed += n;
    pb::SubmitSweepResponse submitted;
    {
      grpc::ClientContext ctx;
      b.Prepare(&ctx, b.token, Millis(300000));
      const grpc::Status st = sweeps->SubmitSweep(&ctx, submit, &submitted);
      if (!st.ok()) return fail("SubmitSweep", st);
    }
    const std::string sweep_id = submitted.sweep().sweep_id();
    std::vector<double> lease_ms, progress_ms, complete_ms, get_ms, full_ms;
    const ProcSample cpu0 = proc.Now();
    double get_cpu_s = 0;
    int cycles = 0;
    for (int i = 0; i < samples && i < n; ++i) {
      pb::LeaseJobResponse lease;
      {
        grpc::ClientContext ctx;
        b.Prepare(&ctx, b.worker_token, timeout);
        pb::LeaseJobRequest req;
        req.set_worker_id(worker_id);
        req.set_free_slots(1);
        req.mutable_wait()->set_seconds(5);
        const Clock::time_point t0 = Clock::now();
        const grpc::Status st = worker->LeaseJob(&ctx, req, &lease);
        lease_ms.push_back(MsBetween(t0, Clock::now()));
        if (!st.ok()) return fail("LeaseJob", st);
        if (!lease.has_job()) {
          std::fprintf(
              stderr, "rdattn-cluster-bench: probe: LeaseJob gave no job with %d pending\n", n - i);
          return 1;
        }
      }
      auto job = std::make_shared<SimJob>();
      job->lease_id = lease.lease_id();
      job->job_id = lease.job().job_id();
      job->pair_group = lease.job().pair_group();
      job->attempt = lease.job().attempt();
      job->milestones = b.Milestones(lease.job().run());
      {
        grpc::ClientContext ctx;
        b.Prepare(&ctx, b.worker_token, timeout);
        pb::ReportProgressResponse resp;
        const Clock::time_point t0 = Clock::now();
        auto writer = worker->ReportProgress(&ctx, &resp);
        // The same 14 events as a run's job, unpaced.
        const int m = static_cast<int>(job->milestones.size());
        auto ev = [&](pb::MetricEvent::Kind kind, int64_t step, int64_t tokens) {
          pb::ReportProgressRequest r;
          r.set_lease_id(job->lease_id);
          pb::MetricEvent* e = r.mutable_event();
          e->set_seq(++job->last_seq);
          e->set_job_id(job->job_id);
          e->set_attempt(job->attempt);
          e->set_kind(kind);
          e->set_step(step);
          e->set_tokens(tokens);
          return r;
        };
        pb::ReportProgressRequest init = ev(pb::MetricEvent::KIND_INIT, 0, 0);
        init.mutable_event()->set_init_param_checksum("bench:" + job->pair_group);
        writer->Write(init);
        const int64_t last_step = m > 0 ? job->milestones.back().step : kTrainSteps;
        const int64_t last_tokens = m > 0 ? job->milestones.back().tokens : 0;
        for (int k = 1; k <= kTrainSteps; ++k) {
          writer->Write(ev(pb::MetricEvent::KIND_TRAIN_STEP, last_step * k / kTrainSteps,
                           last_tokens * k / kTrainSteps));
          for (int j = 1; j <= m; ++j) {
            if ((j * kTrainSteps + m - 1) / m != k) continue;
            const rdattn::EvalMilestone& ms = job->milestones[j - 1];
            pb::ReportProgressRequest e = ev(pb::MetricEvent::KIND_EVAL, ms.step, ms.tokens);
            e.mutable_event()->set_milestone_tokens(ms.tokens);
            e.mutable_event()->set_val_nll(NllOf(job->job_id, ms.tokens));
            e.mutable_event()->set_eval_tokens(2048);
            writer->Write(e);
            writer->Write(ev(pb::MetricEvent::KIND_CHECKPOINT, ms.step, ms.tokens));
          }
        }
        pb::ReportProgressRequest fin = ev(pb::MetricEvent::KIND_FINISHED, last_step, last_tokens);
        fin.mutable_event()->set_test_nll(NllOf(job->job_id, -1));
        fin.mutable_event()->set_eval_tokens(4096);
        writer->Write(fin);
        writer->WritesDone();
        const grpc::Status st = writer->Finish();
        progress_ms.push_back(MsBetween(t0, Clock::now()));
        if (!st.ok()) return fail("ReportProgress", st);
      }
      {
        grpc::ClientContext ctx;
        b.Prepare(&ctx, b.worker_token, timeout);
        pb::CompleteJobRequest req;
        req.set_worker_id(worker_id);
        req.set_lease_id(job->lease_id);
        req.set_job_id(job->job_id);
        req.set_outcome(pb::JOB_OUTCOME_SUCCEEDED);
        req.set_last_event_seq(job->last_seq);
        pb::CompleteJobResponse resp;
        const Clock::time_point t0 = Clock::now();
        const grpc::Status st = worker->CompleteJob(&ctx, req, &resp);
        complete_ms.push_back(MsBetween(t0, Clock::now()));
        if (!st.ok()) return fail("CompleteJob", st);
        if (resp.job_state() != pb::JOB_STATE_SUCCEEDED) {
          std::fprintf(stderr, "rdattn-cluster-bench: probe: job %s ended %s, not SUCCEEDED\n",
                       job->job_id.c_str(), pb::JobState_Name(resp.job_state()).c_str());
          rc = 1;
        }
      }
      {
        pb::SweepStatus s;
        int pages = 0;
        const ProcSample g0 = proc.Now();
        const Clock::time_point t0 = Clock::now();
        const grpc::Status st =
            ReadSweep(b, sweeps.get(), sweep_id, b.reader_view, timeout, &s, &pages);
        get_ms.push_back(MsBetween(t0, Clock::now()));
        const ProcSample g1 = proc.Now();
        get_cpu_s += g1.cpu_s - g0.cpu_s;
        if (!st.ok()) return fail("GetSweep", st);
      }
      ++cycles;
    }
    const ProcSample cpu1 = proc.Now();
    if (cpu0.cpu_s >= 0 && cpu1.cpu_s >= 0 && cycles > 0) {
      row.cpu_ms_per_job = (cpu1.cpu_s - cpu0.cpu_s - get_cpu_s) * 1000.0 / cycles;
      row.cpu_ms_per_get = get_cpu_s * 1000.0 / cycles;
    }
    for (int i = 0; i < 3; ++i) {
      pb::SweepStatus s;
      int pages = 0;
      const Clock::time_point t0 = Clock::now();
      const grpc::Status st =
          ReadSweep(b, sweeps.get(), sweep_id, pb::SWEEP_VIEW_FULL, Millis(300000), &s, &pages);
      full_ms.push_back(MsBetween(t0, Clock::now()));
      if (!st.ok()) return fail("GetSweep (FULL)", st);
    }
    {
      grpc::ClientContext ctx;
      b.Prepare(&ctx, b.token, Millis(300000));
      pb::CancelSweepRequest req;
      req.set_sweep_id(sweep_id);
      req.set_reason("probe done");
      pb::CancelSweepResponse resp;
      const grpc::Status st = sweeps->CancelSweep(&ctx, req, &resp);
      if (!st.ok()) return fail("CancelSweep", st);
    }
    row.lease = Summarize(lease_ms);
    row.progress = Summarize(progress_ms);
    row.complete = Summarize(complete_ms);
    row.get = Summarize(get_ms);
    row.get_full = Summarize(full_ms);
    rows.push_back(row);
  }
  std::printf(
      "\nprobe: one worker, no contention, %d jobs leased, run and completed one after another "
      "per size (ms; GetSweep %s view; GetSweep FULL: 3 calls)\n",
      samples, ViewName(b.reader_view).c_str());
  std::printf("%8s | %17s | %17s | %17s | %17s | %17s | %10s | %10s\n", "pending",
              "LeaseJob p50/p99", "Progress p50/p99", "Complete p50/p99", "GetSweep p50/p99",
              "GetSweep FULL p50", "CPU ms/job", "CPU ms/get");
  for (const ProbeRow& r : rows) {
    std::printf(
        "%8d | %8.2f %8.2f | %8.2f %8.2f | %8.2f %8.2f | %8.2f %8.2f | %17.1f | %10.2f | %10.2f\n",
        r.jobs, r.lease.p50, r.lease.p99, r.progress.p50, r.progress.p99, r.complete.p50,
        r.complete.p99, r.get.p50, r.get.p99, r.get_full.p50, r.cpu_ms_per_job, r.cpu_ms_per_get);
  }
  if (rows.size() >= 2) {
    const ProbeRow& a = rows.front();
    const ProbeRow& z = rows.back();
    auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
    std::printf(
        "growth %d -> %d jobs (p50 ratio; goal <= 2): LeaseJob %.2fx, CompleteJob %.2fx, "
        "ReportProgress %.2fx, GetSweep %.2fx\n",
        a.jobs, z.jobs, ratio(z.lease.p50, a.lease.p50), ratio(z.complete.p50, a.complete.p50),
        ratio(z.progress.p50, a.progress.p50), ratio(z.get.p50, a.get.p50));
  }
  auto row_json = [](const Row& r) {
    return nlohmann::json{
        {"count", r.count}, {"p50_ms", r.p50}, {"p99_ms", r.p99}, {"max_ms", r.max}};
  };
  nlohmann::json arr = nlohmann::json::array();
  for (const ProbeRow& r : rows) {
    arr.push_back({{"pending_jobs", r.jobs},
                   {"LeaseJob", row_json(r.lease)},
                   {"ReportProgress", row_json(r.progress)},
                   {"CompleteJob", row_json(r.complete)},
                   {"GetSweep", row_json(r.get)},
                   {"GetSweep (FULL)", row_json(r.get_full)},
                   {"coordinator_cpu_ms_per_job", r.cpu_ms_per_job},
                   {"coordinator_cpu_ms_per_get_sweep", r.cpu_ms_per_get}});
  }
  (*out)["probe"] = {
      {"samples", samples}, {"get_sweep_view", ViewName(b.reader_view)}, {"rows", arr}};
  return rc;
}

// ------------------------------------------------------------------------------------------
// The command line
// ------------------------------------------------------------------------------------------

void AddFlags(CLI::App& app, Flags& f) {
  const CLI::Validator positive =
      rdattn::cli::NumberWhere([](double v) { return v > 0; }, "must be > 0");
  rdattn::cli::ConnectionFlagsSpec connection;
  connection.ca_cert = false;  // the bench speaks plaintext
  rdattn::cli::AddConnectionFlags(&app, &f.connection, connection);
  app.add_option("--worker-token", f.worker_token,
                 "bearer token of the WorkerService calls; empty: --token");
  app.add_option("--workers", f.workers, "simulated workers W")
      ->check(rdattn::cli::PositiveInteger());
  app.add_option("--jobs", f.jobs, "jobs J of the one sweep (even: J/2 seeds x {block, rd})")
      ->check(rdattn::cli::PositiveInteger())
      ->check(rdattn::cli::NumberWhere([](double v) { return std::fmod(v, 2) == 0; },
                                       "must be even (J/2 seeds x the arms block and rd)"));
  app.add_option("--slots", f.slots, "rank slots of each worker")
      ->check(rdattn::cli::PositiveInteger());
  app.add_option("--heartbeat-seconds", f.heartbeat_seconds, "heartbeat interval of each worker")
      ->check(positive);
  app.add_option("--lease-wait-seconds", f.lease_wait_seconds,
                 "LeaseJob's wait (long poll); its deadline is 10 s longer")
      ->check(rdattn::cli::NonNegativeNumber());
  app.add_option("--job-seconds", f.job_seconds, "how long each simulated job runs (14 events)")
      ->check(positive);
  app.add_option("--idle-seconds", f.idle_seconds,
                 "idle phase: every worker registered and polling, no job yet; 0: none")
      ->check(rdattn::cli::NonNegativeNumber());
  app.add_option("--channels", f.channels,
                 "gRPC connections the workers share; 0: one per worker, as real workers have")
      ->check(rdattn::cli::NonNegativeInteger());
  app.add_option("--threads", f.threads,
                 "threads running the workers' reactions and paced events (besides gRPC's own)")
      ->check(rdattn::cli::PositiveInteger());
  app.add_option("--readers", f.readers, "reader clients calling GetSweep and ListSweeps")
      ->check(rdattn::cli::NonNegativeInteger());
  app.add_option("--reader-interval-ms", f.reader_interval_ms,
                 "pause of each reader between rounds (GetSweep + ListSweeps); 0: closed loop")
      ->check(rdattn::cli::NonNegativeNumber());
  app.add_option("--reader-view", f.reader_view,
                 "GetSweep view of the readers and the probe: auto (SUMMARY when the proto has "
                 "it, else FULL), basic, summary, full");
  app.add_option("--rpc-timeout", f.rpc_timeout,
                 "deadline of unary calls other than LeaseJob and Heartbeat, seconds")
      ->check(positive);
  app.add_option("--max-seconds", f.max_seconds,
                 "the run stops waiting for jobs this long after the submission")
      ->check(positive);
  app.add_option("--coordinator-pid", f.coordinator_pid,
                 "the coordinator's pid: CPU, RSS and threads from /proc every 0.5 s")
      ->check(rdattn::cli::NonNegativeInteger());
  app.add_option("--db", f.db, "the coordinator's SQLite file: store bytes per job and event");
  app.add_option("--metrics-url", f.metrics_url,
                 "the coordinator's /metrics URL: rdattn_lease_expiries_total over the run");
  app.add_option("--json", f.json, "also write the results to this JSON file");
  app.add_option(
      "--probe-jobs", f.probe_jobs,
      "probe mode instead of a run: comma-separated pending-job counts, e.g. 1000,10000");
  app.add_option("--probe-samples", f.probe_samples, "jobs leased, run and completed per size")
      ->check(rdattn::cli::PositiveInteger());
  app.add_option("--label", f.label, "free text copied into the JSON (e.g. the commit)");
  rdattn::cli::CheckAfterParse(&app, [&f]() -> std::string {
    if (f.channels > f.workers) return "--channels must be at most --workers";
    if (!ParseView(f.reader_view, &f.reader_view_value)) {
      return "--reader-view: '" + f.reader_view + "' is not auto, basic, summary or full" +
             (pb::SweepView_Parse("SWEEP_VIEW_SUMMARY", &f.reader_view_value)
                  ? ""
                  : " (this build's proto has no SUMMARY view)");
    }
    std::stringstream ss(f.probe_jobs);
    std::string part;
    while (!f.probe_jobs.empty() && std::getline(ss, part, ',')) {
      int n = 0;
      try {
        size_t used = 0;
        n = std::stoi(part, &used);
        if (used != part.size()) n = 0;
      } catch (const std::exception&) {
        n = 0;
      }
      if (n < 2 || n % 2 != 0) return "--probe-jobs: '" + part + "' is not an even number >= 2";
      f.probe_sizes.push_back(n);
    }
    return "";
  });
}

constexpr int kExitUsage = 2;

std::string Mb(int64_t kb) { return rdattn::strings::Fixed(static_cast<double>(kb) / 1024.0, 0); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "rdattn-cluster-bench --coordinator HOST:PORT [--token T] [--workers W] [--jobs J] ...\n"
      "Simulated workers over the WorkerService protocol against a running coordinator: per-RPC "
      "latency, time to all SUCCEEDED against ideal, the coordinator's CPU, memory and threads "
      "(tests/load/README.md).",
      "rdattn-cluster-bench");
  rdattn::cli::Setup(app);
  Bench b;
  Flags& f = b.flags;
  AddFlags(app, f);
  if (const int code = rdattn::cli::Parse(app, argc, argv, kExitUsage); code >= 0) return code;
  auto usage = [&app](const std::string& message) {
    return rdattn::cli::Usage(app, message, kExitUsage);
  };
  b.reader_view = f.reader_view_value;
  const std::vector<int>& probe_sizes = f.probe_sizes;
  rdattn::StatusOr<rdattn::cli::Connection> connection =
      rdattn::cli::ResolveConnection(f.connection);
  if (!connection.ok()) return usage(connection.status().message());
  b.token = connection->token;
  b.worker_token = f.worker_token.empty() ? b.token : f.worker_token;

  // One connection per worker needs a file descriptor each.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }

  b.sched = std::make_unique<Scheduler>(f.threads);
  ProcSampler proc(f.coordinator_pid);
  nlohmann::json j;
  j["tool"] = "rdattn-cluster-bench";
  j["label"] = f.label;
  j["coordinator"] = f.connection.coordinator;
  j["get_sweep_view"] = ViewName(b.reader_view);

  if (!probe_sizes.empty()) {
    const int rc = RunProbe(b, f.connection.coordinator, probe_sizes, f.probe_samples, proc, &j);
    proc.Stop();
    b.sched->Stop();
    if (!f.json.empty()) {
      std::ofstream out(f.json);
      out << j.dump(2) << "\n";
      if (!out) {
        std::fprintf(stderr, "rdattn-cluster-bench: cannot write %s\n", f.json.c_str());
        return 1;
      }
    }
    std::printf("%s\n", rc == 0 ? "PASS" : "FAIL");
    return rc;
  }

  const int channels = f.channels == 0 ? f.workers : f.channels;
  std::vector<std::shared_ptr<pb::WorkerService::Stub>> stubs;
  std::vector<std::shared_ptr<grpc::Channel>> pool;
  for (int i = 0; i < channels; ++i) {
    pool.push_back(MakeChannel(f.connection.coordinator, false));
    stubs.push_back(
        std::shared_ptr<pb::WorkerService::Stub>(pb::WorkerService::NewStub(pool.back())));
  }
  for (int i = 0; i < channels; ++i) {
    if (!pool[i]->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20))) {
      std::fprintf(stderr, "rdattn-cluster-bench: cannot connect to %s (channel %d) within 20 s\n",
                   f.connection.coordinator.c_str(), i);
      return 1;
    }
  }
  const double ideal_s =
      std::ceil(static_cast<double>(f.jobs) / (static_cast<double>(f.workers) * f.slots)) *
      f.job_seconds;
  std::printf(
      "rdattn-cluster-bench: %d workers x %d slots on %d connections to %s; %d jobs of %.1f s "
      "(ideal %.1f s); heartbeat %.1f s, lease wait %.1f s; %d readers (GetSweep %s)\n",
      f.workers, f.slots, channels, f.connection.coordinator.c_str(), f.jobs, f.job_seconds,
      ideal_s, f.heartbeat_seconds, f.lease_wait_seconds, f.readers,
      ViewName(b.reader_view).c_str());
  std::fflush(stdout);

  b.t0 = Clock::now();
  const Clock::time_point hard_stop = b.t0 + ToMillis(f.max_seconds + 120);
  std::vector<std::shared_ptr<SimWorker>> workers;
  workers.reserve(static_cast<size_t>(f.workers));
  std::mt19937_64 seeder(static_cast<uint64_t>(getpid()));
  for (int i = 0; i < f.workers; ++i)
    workers.push_back(std::make_shared<SimWorker>(b, i, stubs[i % channels], seeder()));
  for (auto& w : workers) w->Register();
  while (b.registered < f.workers && Clock::now() < hard_stop)
    std::this_thread::sleep_for(Millis(20));
  const double register_s = SecondsBetween(b.t0, Clock::now());
  std::printf("registered %d workers in %.2f s\n", b.registered.load(), register_s);
  std::fflush(stdout);

  // Idle phase: every worker long-polls with nothing to lease.
  std::this_thread::sleep_for(Millis(500));
  const ProcSample idle0 = proc.Now();
  const Clock::time_point idle_t0 = Clock::now();
  std::this_thread::sleep_for(ToMillis(f.idle_seconds));
  const ProcSample idle1 = proc.Now();
  const double idle_wall = SecondsBetween(idle_t0, Clock::now());
  const double idle_cpu_fraction = idle0.cpu_s >= 0 && idle1.cpu_s >= 0 && idle_wall > 0
                                       ? (idle1.cpu_s - idle0.cpu_s) / idle_wall
                                       : -1;
  if (f.idle_seconds > 0 && idle_cpu_fraction >= 0) {
    std::printf("idle: %d workers polling for %.1f s: coordinator CPU %.3f of a core\n", f.workers,
                idle_wall, idle_cpu_fraction);
    std::fflush(stdout);
  }

  std::string metrics_error;
  double expiries0 = -1;
  if (!f.metrics_url.empty()) {
    const std::string body = HttpGet(f.metrics_url, &metrics_error);
    expiries0 = PromValue(body, "rdattn_lease_expiries_total");
  }

  // The sweep.
  auto sweep_channel = MakeChannel(f.connection.coordinator, true);
  auto sweeps = pb::SweepService::NewStub(sweep_channel);
  const ProcSample submit_cpu = proc.Now();
  std::string sweep_id;
  {
    pb::SubmitSweepRequest req;
    req.set_request_id("cluster-bench-" + std::to_string(getpid()) + "-" +
                       std::to_string(seeder()));
    *req.mutable_spec() = BenchSweep(f.jobs, "cluster-bench", 1);
    grpc::ClientContext ctx;
    b.Prepare(&ctx, b.token, Millis(300000));
    pb::SubmitSweepResponse resp;
    b.submit_start = Clock::now();
    b.submitting = true;
    const grpc::Status st = sweeps->SubmitSweep(&ctx, req, &resp);
    if (!st.ok()) {
      b.stats.Error(kSubmit, st);
      std::fprintf(stderr, "rdattn-cluster-bench: SubmitSweep %s: %s\n",
                   CodeName(st.error_code()).c_str(), st.error_message().c_str());
    } else {
      b.stats.Add(kSubmit, MsBetween(b.submit_start, Clock::now()));
      sweep_id = resp.sweep().sweep_id();
    }
  }
  std::atomic<bool> readers_stop{false};
  std::vector<std::thread> readers;
  if (!sweep_id.empty()) {
    for (int i = 0; i < f.readers; ++i)
      readers.emplace_back([&b, &f, &sweep_id, &readers_stop] {
        ReaderLoop(b, f.connection.coordinator, sweep_id, readers_stop);
      });
  }

  // Wait for every job, or --max-seconds. Every 10 s the sweep's state: a sweep that ended
  // FAILED or CANCELLED ends the wait too.
  const Clock::time_point deadline = b.submit_start + ToMillis(f.max_seconds);
  Clock::time_point next_check = Clock::now() + Millis(10000);
  Clock::time_point next_print = Clock::now() + Millis(10000);
  bool timed_out = false;
  std::string sweep_end;
  Clock::time_point succeeded_seen;  // when GetSweep first said SUCCEEDED
  while (!sweep_id.empty() && b.succeeded() < f.jobs) {
    if (Clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    if (Clock::now() >= next_print) {
      next_print += Millis(10000);
      std::printf("  %.0f s: %d of %d jobs SUCCEEDED, %lld errors\n",
                  SecondsBetween(b.submit_start, Clock::now()), b.succeeded(), f.jobs,
                  static_cast<long long>(b.stats.errors()));
      std::fflush(stdout);
    }
    if (Clock::now() >= next_check) {
      next_check = Clock::now() + Millis(10000);
      grpc::ClientContext ctx;
      b.Prepare(&ctx, b.token, ToMillis(f.rpc_timeout));
      pb::GetSweepRequest req;
      req.set_sweep_id(sweep_id);
      req.set_view(pb::SWEEP_VIEW_BASIC);
      pb::GetSweepResponse resp;
      const bool ok = sweeps->GetSweep(&ctx, req, &resp).ok();
      const pb::SweepState state = resp.sweep().state();
      if (ok && (state == pb::SWEEP_STATE_FAILED || state == pb::SWEEP_STATE_CANCELLED)) {
        sweep_end = pb::SweepState_Name(state);
        break;
      }
      // SUCCEEDED while this tool counted fewer: the last CompleteJob answers are on their way
      // (the store committed them first). Past their deadline one was lost.
      if (ok && state == pb::SWEEP_STATE_SUCCEEDED) {
        if (succeeded_seen == Clock::time_point()) {
          succeeded_seen = Clock::now();
          next_check = Clock::now() + Millis(1000);
        } else if (Clock::now() > succeeded_seen + ToMillis(f.rpc_timeout + 10)) {
          sweep_end = "SUCCEEDED while " + std::to_string(b.succeeded()) +
                      " CompleteJob answers said SUCCEEDED";
          break;
        } else {
          next_check = Clock::now() + Millis(1000);
        }
      }
    }
    std::this_thread::sleep_for(Millis(50));
  }
  const Clock::time_point run_end = Clock::now();
  const ProcSample end_cpu = proc.Now();

  // Stop: no new polls or heartbeats; cancel the polls in flight; readers end.
  b.stopping = true;
  readers_stop = true;
  for (auto& w : workers) w->CancelPoll();
  for (std::thread& t : readers) t.join();
  const Clock::time_point drain_until = Clock::now() + ToMillis(std::max(60.0, f.job_seconds + 30));
  while (b.inflight > 0 && Clock::now() < drain_until) {
    for (auto& w : workers) w->CancelPoll();
    std::this_thread::sleep_for(Millis(100));
  }
  const int64_t left_inflight = b.inflight.load();

  Verify v;
  if (!sweep_id.empty()) v = VerifySweep(b, sweeps.get(), sweep_id);
  double expiries1 = -1;
  if (!f.metrics_url.empty()) {
    const std::string body = HttpGet(f.metrics_url, &metrics_error);
    expiries1 = PromValue(body, "rdattn_lease_expiries_total");
  }
  const double expiries = expiries0 >= 0 && expiries1 >= 0 ? expiries1 - expiries0 : -1;
  proc.Stop();
  const std::vector<ProcSample> series = proc.series();
  ProcSample peak;
  for (const ProcSample& s : series) {
    peak.hwm_kb = std::max(peak.hwm_kb, std::max(s.hwm_kb, s.rss_kb));
    peak.threads = std::max(peak.threads, s.threads);
  }
  const double run_cpu_s =
      submit_cpu.cpu_s >= 0 && end_cpu.cpu_s >= 0 ? end_cpu.cpu_s - submit_cpu.cpu_s : -1;
  const double run_wall_s = SecondsBetween(b.submit_start, run_end);
  const int64_t db_bytes = f.db.empty() ? -1 : FileSize(f.db) + FileSize(f.db + "-wal");
  const int64_t events = b.stats.events_stored.load();
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  const double tool_cpu_s =
      static_cast<double>(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
      static_cast<double>(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;

  Row rows[kRpcCount];
  for (int r = 0; r < kRpcCount; ++r) rows[r] = b.stats.Summary(static_cast<Rpc>(r));
  const int64_t errors = b.stats.errors();

  std::printf("\n%-26s %9s %10s %10s %10s\n", "rpc", "count", "p50 ms", "p99 ms", "max ms");
  for (int r = 0; r < kRpcCount; ++r) {
    std::printf("%-26s %9lld %10.2f %10.2f %10.2f\n", kRpcNames[r],
                static_cast<long long>(rows[r].count), rows[r].p50, rows[r].p99, rows[r].max);
  }
  const std::map<std::string, int64_t> codes = b.stats.codes();
  std::printf("errors %lld\n", static_cast<long long>(errors));
  for (const auto& [k, n] : codes)
    std::printf("  %s: %lld\n", k.c_str(), static_cast<long long>(n));
  for (const std::string& s : b.stats.samples()) std::printf("  e.g. %s\n", s.c_str());
  for (const std::string& s : b.stats.problems()) std::printf("  problem: %s\n", s.c_str());

  double all_leased_s, all_succeeded_s;
  {
    std::lock_guard<std::mutex> lock(b.jobs_mu);
    all_leased_s = b.all_leased_s;
    all_succeeded_s = b.all_succeeded_s;
  }
  // The table's lease column: LeaseJob calls made while jobs were pending (the wake-up of the
  // polls waiting at the submission is its own row: it includes the SubmitSweep call).
  const Rpc lease_row = rows[kLeaseJob].count > 0 ? kLeaseJob : kLeaseWake;
  const double lease_p50 = rows[lease_row].p50;
  const double lease_p99 = rows[lease_row].p99;
  std::printf(
      "\ntime to all leased %s s, to all SUCCEEDED %s s (ideal %.1f s, %s); %d of %d SUCCEEDED "
      "by CompleteJob\n",
      all_leased_s < 0 ? "-" : rdattn::strings::Fixed(all_leased_s, 1).c_str(),
      all_succeeded_s < 0 ? "-" : rdattn::strings::Fixed(all_succeeded_s, 1).c_str(), ideal_s,
      all_succeeded_s < 0
          ? "not reached"
          : (rdattn::strings::Fixed(all_succeeded_s / ideal_s, 2) + "x ideal").c_str(),
      b.succeeded(), f.jobs);
  if (proc.enabled()) {
    std::printf(
        "coordinator: CPU %.1f s over the %.1f s run (%.2f of a core), idle %.3f of a core; peak "
        "RSS %s MB; peak threads %lld\n",
        run_cpu_s, run_wall_s, run_wall_s > 0 ? run_cpu_s / run_wall_s : 0.0, idle_cpu_fraction,
        Mb(peak.hwm_kb).c_str(), static_cast<long long>(peak.threads));
  }
  if (db_bytes >= 0) {
    std::printf("store: %lld bytes (db + wal): %.0f per job, %.0f per event (%lld events stored)\n",
                static_cast<long long>(db_bytes), static_cast<double>(db_bytes) / f.jobs,
                events > 0 ? static_cast<double>(db_bytes) / static_cast<double>(events) : 0.0,
                static_cast<long long>(events));
  }
  std::printf(
      "spurious expiries: lease expiries (metric) %s, leases lost in heartbeats %lld (and %lld "
      "completed meanwhile), ABORTED %lld, jobs leased again %lld, jobs with attempts > 1: %d; "
      "progress streams opened again %lld\n",
      expiries < 0 ? "n/a" : std::to_string(static_cast<int64_t>(expiries)).c_str(),
      static_cast<long long>(b.stats.lost_leases.load()),
      static_cast<long long>(b.stats.lost_after_complete.load()),
      static_cast<long long>(b.stats.aborted.load()),
      static_cast<long long>(b.stats.repeat_leases.load()), v.attempts_gt1,
      static_cast<long long>(b.stats.stream_retries.load()));
  if (!metrics_error.empty()) std::printf("metrics: %s\n", metrics_error.c_str());
  std::printf(
      "verify: %d jobs read back (%d GetSweep pages): %d SUCCEEDED, %d with their own NLL\n",
      v.jobs, v.pages, v.succeeded, v.own_nll);
  if (!v.error.empty()) std::printf("  %s\n", v.error.c_str());
  for (const std::string& s : v.problems) std::printf("  %s\n", s.c_str());
  std::printf("tool: CPU %.1f s, %d scheduler threads\n", tool_cpu_s, f.threads);

  // The table row.
  const int64_t spurious = expiries >= 0 ? static_cast<int64_t>(expiries)
                                         : b.stats.lost_leases.load() + b.stats.aborted.load();
  std::printf(
      "\n| W | J | lease p50 / p99 | heartbeat p99 | all SUCCEEDED (ideal) | coordinator CPU | "
      "peak RSS | threads | errors | spurious lease expiries | attempts > 1 |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::printf(
      "| %d | %d | %.1f / %.1f ms | %.1f ms | %s (%.0f) | %.1f s | %s MB | %lld | %lld | "
      "%lld | %d |\n",
      f.workers, f.jobs, lease_p50, lease_p99, rows[kHeartbeat].p99,
      all_succeeded_s < 0 ? ("not reached: " + std::to_string(b.succeeded()) + " in " +
                             rdattn::strings::Fixed(run_wall_s, 0) + " s")
                                .c_str()
                          : (rdattn::strings::Fixed(all_succeeded_s, 1) + " s").c_str(),
      ideal_s, run_cpu_s, Mb(peak.hwm_kb).c_str(), static_cast<long long>(peak.threads),
      static_cast<long long>(errors), static_cast<long long>(spurious), v.attempts_gt1);

  const bool all_ok =
      v.error.empty() && v.jobs == f.jobs && v.succeeded == f.jobs && v.own_nll == f.jobs;
  const bool pass = all_ok && errors == 0 && !timed_out && sweep_end.empty();
  if (timed_out) std::printf("FAIL: --max-seconds %.0f passed\n", f.max_seconds);
  if (!sweep_end.empty()) std::printf("FAIL: the sweep ended %s\n", sweep_end.c_str());
  if (left_inflight > 0)
    std::printf("note: %lld calls still unanswered at exit\n",
                static_cast<long long>(left_inflight));
  std::printf("%s\n", pass ? "PASS" : "FAIL");

  if (!f.json.empty()) {
    auto row_json = [](const Row& r) {
      return nlohmann::json{
          {"count", r.count}, {"p50_ms", r.p50}, {"p99_ms", r.p99}, {"max_ms", r.max}};
    };
    j["workers"] = f.workers;
    j["jobs"] = f.jobs;
    j["slots"] = f.slots;
    j["channels"] = channels;
    j["heartbeat_seconds"] = f.heartbeat_seconds;
    j["lease_wait_seconds"] = f.lease_wait_seconds;
    j["job_seconds"] = f.job_seconds;
    j["readers"] = f.readers;
    j["reader_interval_ms"] = f.reader_interval_ms;
    j["sweep_id"] = sweep_id;
    for (int r = 0; r < kRpcCount; ++r) j["rpcs"][kRpcNames[r]] = row_json(rows[r]);
    j["lease_p50_ms"] = lease_p50;
    j["lease_p99_ms"] = lease_p99;
    j["heartbeat_p99_ms"] = rows[kHeartbeat].p99;
    j["errors"] = errors;
    j["error_codes"] = codes;
    j["error_samples"] = b.stats.samples();
    j["problems"] = b.stats.problems();
    j["register_seconds"] = register_s;
    j["ideal_seconds"] = ideal_s;
    j["all_leased_seconds"] = all_leased_s;
    j["all_succeeded_seconds"] = all_succeeded_s;
    j["run_seconds"] = run_wall_s;
    j["timed_out"] = timed_out;
    j["succeeded_by_complete"] = b.succeeded();
    j["events_sent"] = b.stats.events_sent.load();
    j["events_stored"] = events;
    j["leases"] = b.stats.leases.load();
    j["coordinator"] = {
        {"pid", f.coordinator_pid},
        {"cpu_seconds", run_cpu_s},
        {"cpu_fraction", run_wall_s > 0 && run_cpu_s >= 0 ? run_cpu_s / run_wall_s : -1},
        {"idle_seconds", f.idle_seconds},
        {"idle_cpu_fraction", idle_cpu_fraction},
        {"peak_rss_mb", static_cast<double>(peak.hwm_kb) / 1024.0},
        {"peak_threads", peak.threads},
        {"sampler_lost_process", proc.lost()}};
    nlohmann::json ser = nlohmann::json::array();
    for (const ProcSample& s : series) ser.push_back({s.t, s.cpu_s, s.rss_kb, s.threads});
    j["coordinator"]["samples"] = {{"columns", {"t_s", "cpu_s", "rss_kb", "threads"}},
                                   {"rows", ser}};
    j["store"] = {{"bytes", db_bytes},
                  {"bytes_per_job", db_bytes >= 0 ? static_cast<double>(db_bytes) / f.jobs : -1},
                  {"bytes_per_event", db_bytes >= 0 && events > 0 ? static_cast<double>(db_bytes) /
                                                                        static_cast<double>(events)
                                                                  : -1}};
    j["spurious"] = {{"lease_expiries_metric", expiries},
                     {"lost_leases", b.stats.lost_leases.load()},
                     {"lost_after_complete", b.stats.lost_after_complete.load()},
                     {"aborted", b.stats.aborted.load()},
                     {"stream_retries", b.stats.stream_retries.load()},
                     {"repeat_leases", b.stats.repeat_leases.load()},
                     {"cancel_orders", b.stats.cancel_orders.load()},
                     {"not_succeeded", b.stats.not_succeeded.load()},
                     {"attempts_gt1", v.attempts_gt1},
                     {"total", spurious}};
    j["verify"] = {{"jobs", v.jobs},        {"succeeded", v.succeeded},
                   {"own_nll", v.own_nll},  {"attempts_gt1", v.attempts_gt1},
                   {"pages", v.pages},      {"error", v.error},
                   {"problems", v.problems}};
    j["tool_cpu_seconds"] = tool_cpu_s;
    j["pass"] = pass;
    std::ofstream out(f.json);
    out << j.dump(2) << "\n";
    if (!out) std::fprintf(stderr, "rdattn-cluster-bench: cannot write %s\n", f.json.c_str());
  }
  std::fflush(stdout);
  if (left_inflight > 0) std::_Exit(pass ? 0 : 1);  // gRPC callbacks may still come: no teardown
  b.sched->Stop();
  return pass ? 0 : 1;
}
