// rdattn-load: load generator for a running rdattn-coordinator (tests/load/README.md). It starts
// nothing: it talks to --coordinator HOST:PORT with --clients concurrent clients for --seconds
// and then prints, per RPC, the count and the p50/p99/max latency, and the error count.
//
// Each client runs cycles of: SubmitSweep (a 2-job sweep of the tiny model; no worker is needed,
// the jobs stay PENDING) -> two live WatchSweep streams (one from seq 0, one resuming after the
// submission's last event) -> --gets GetSweep and --lists ListSweeps -> CancelSweep (which stores
// the jobs' and the sweep's CANCELLED state changes, ending the watches) -> a replay WatchSweep
// from seq 0 of the ended sweep -> a final GetSweep. Every live stream must equal the replay (or
// its suffix after the resume point) event for event: nothing missing, no duplicates, no
// reordering, the same bytes; the replay must be well formed (strictly increasing seq, opened by
// the sweep's PENDING change, closed by its CANCELLED change, every job PENDING then CANCELLED)
// and end at GetSweep's last_event_seq. Exit 0 only with no RPC error and no watch problem.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/cli.h"
#include "common/connection_flags.h"
#include "rdattn/v1/coordinator.grpc.pb.h"
#include "tests/coordinator/tiny_sweep.h"

namespace {

namespace pb = ::rdattn::v1;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0, Clock::time_point t1 = Clock::now()) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// The rows of the table, in print order.
enum Metric {
  kSubmit,
  kGet,
  kList,
  kCancel,
  kWatchReplay,    // a whole WatchSweep of an ended sweep, from seq 0
  kWatchFirst,     // WatchSweep call -> first event (live from 0, and replay)
  kWatchDelivery,  // CancelSweep call -> the terminal event on a live stream
  kMetricCount
};
const char* const kMetricNames[kMetricCount] = {
    "SubmitSweep",         "GetSweep",           "ListSweeps",        "CancelSweep",
    "WatchSweep (replay)", "watch: first event", "watch: cancel->end"};

struct Sample {
  std::vector<double> ms;
  int64_t errors = 0;
};

// What one client (and its watchers) measured; merged at the end.
struct Results {
  Sample metrics[kMetricCount];
  std::map<std::string, int64_t> error_codes;  // "GetSweep UNAVAILABLE" -> count
  std::vector<std::string> error_samples;      // the first few messages
  int64_t cycles = 0;
  int64_t streams_checked = 0;  // live streams compared with the replay
  int64_t events_checked = 0;   // events of those streams
  int64_t missing = 0, duplicates = 0, out_of_order = 0, mismatched = 0, unexpected = 0;
  int64_t malformed = 0;  // replay or final GetSweep not as the protocol says
  std::vector<std::string> watch_samples;

  void Error(Metric m, const grpc::Status& st) {
    ++metrics[m].errors;
    const std::string key = std::string(kMetricNames[m]) + " " + CodeName(st.error_code());
    ++error_codes[key];
    if (error_samples.size() < 10) error_samples.push_back(key + ": " + st.error_message());
  }
  void Watch(const std::string& what) {
    if (watch_samples.size() < 10) watch_samples.push_back(what);
  }
  void Merge(Results& o) {
    for (int m = 0; m < kMetricCount; ++m) {
      metrics[m].ms.insert(metrics[m].ms.end(), o.metrics[m].ms.begin(), o.metrics[m].ms.end());
      metrics[m].errors += o.metrics[m].errors;
    }
    for (auto& [k, v] : o.error_codes) error_codes[k] += v;
    for (auto& s : o.error_samples)
      if (error_samples.size() < 10) error_samples.push_back(s);
    for (auto& s : o.watch_samples)
      if (watch_samples.size() < 10) watch_samples.push_back(s);
    cycles += o.cycles;
    streams_checked += o.streams_checked;
    events_checked += o.events_checked;
    missing += o.missing;
    duplicates += o.duplicates;
    out_of_order += o.out_of_order;
    mismatched += o.mismatched;
    unexpected += o.unexpected;
    malformed += o.malformed;
  }
  int64_t errors() const {
    int64_t n = 0;
    for (const Sample& s : metrics) n += s.errors;
    return n;
  }
  int64_t watch_problems() const {
    return missing + duplicates + out_of_order + mismatched + unexpected + malformed;
  }

  static std::string CodeName(grpc::StatusCode c) {
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
};

struct Options {
  std::string token;
  int gets = 4;
  int lists = 1;
  int page_size = 20;
  double think_ms = 0;
  std::chrono::milliseconds rpc_timeout{10000};
  std::chrono::milliseconds watch_timeout{60000};
};

// One received (or replayed) event: its seq and its serialized bytes.
struct Event {
  uint64_t seq = 0;
  std::string bytes;
};

struct WatchResult {
  std::vector<Event> events;
  std::vector<pb::WatchEvent> parsed;  // the replay keeps them, for the protocol checks
  grpc::Status status;
  double first_ms = -1;          // call -> first event
  Clock::time_point end_time{};  // when the terminal event arrived (or the stream ended)
  double total_ms = 0;
  bool terminal = false;  // the stream carried the sweep's terminal state change
};

bool IsTerminalSweepState(pb::SweepState s) {
  return s == pb::SWEEP_STATE_SUCCEEDED || s == pb::SWEEP_STATE_FAILED ||
         s == pb::SWEEP_STATE_CANCELLED;
}

class Client {
 public:
  Client(int index, const std::shared_ptr<grpc::Channel>& channel, const Options& options)
      : index_(index),
        stub_(pb::SweepService::NewStub(channel)),
        options_(options),
        rng_(std::random_device{}() ^ (static_cast<uint64_t>(index) << 32)) {}

  void Run(Clock::time_point stop) {
    while (Clock::now() < stop) Cycle();
  }
  Results& results() { return results_; }

 private:
  void Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) const {
    if (!options_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options_.token);
    ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  }

  // The pause between two calls of this client (--think-ms).
  void Think() {
    if (options_.think_ms <= 0) return;
    std::uniform_real_distribution<double> u(0.5 * options_.think_ms, 1.5 * options_.think_ms);
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(u(rng_) * 1000)));
  }

  // One timed unary call, after the think pause; `started` (if set) gets the call's start.
  template <typename Req, typename Resp, typename Fn>
  bool Unary(Metric m, const Req& req, Resp* resp, Fn fn, Clock::time_point* started = nullptr) {
    Think();
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.rpc_timeout);
    const Clock::time_point t0 = Clock::now();
    if (started != nullptr) *started = t0;
    const grpc::Status st = (stub_.get()->*fn)(&ctx, req, resp);
    const double ms = MsSince(t0);
    if (!st.ok()) {
      results_.Error(m, st);
      return false;
    }
    results_.metrics[m].ms.push_back(ms);
    return true;
  }

  // Reads a whole WatchSweep stream. Thread-safe with respect to the client (uses only stub_).
  WatchResult Watch(const std::string& sweep_id, uint64_t after_seq, bool keep_parsed) {
    WatchResult r;
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.watch_timeout);
    pb::WatchSweepRequest req;
    req.set_sweep_id(sweep_id);
    req.set_after_seq(after_seq);
    const Clock::time_point t0 = Clock::now();
    std::unique_ptr<grpc::ClientReader<pb::WatchSweepResponse>> reader =
        stub_->WatchSweep(&ctx, req);
    pb::WatchSweepResponse msg;
    while (reader->Read(&msg)) {
      if (r.first_ms < 0) r.first_ms = MsSince(t0);
      Event e;
      e.seq = msg.event().seq();
      msg.event().SerializeToString(&e.bytes);
      r.events.push_back(std::move(e));
      if (keep_parsed) r.parsed.push_back(msg.event());
      if (msg.event().has_sweep_state_change() &&
          IsTerminalSweepState(msg.event().sweep_state_change().to_state())) {
        r.terminal = true;
        r.end_time = Clock::now();
      }
    }
    r.status = reader->Finish();
    if (!r.terminal) r.end_time = Clock::now();
    r.total_ms = MsSince(t0);
    return r;
  }

  // Compares a live stream with what it should have carried: `expected` (the replay's events
  // with seq > after_seq).
  void Compare(const char* name, const std::string& sweep_id, const WatchResult& got,
               const std::vector<Event>& expected) {
    ++results_.streams_checked;
    results_.events_checked += static_cast<int64_t>(got.events.size());
    std::map<uint64_t, const std::string*> want;
    for (const Event& e : expected) want[e.seq] = &e.bytes;
    std::set<uint64_t> seen;
    int64_t dup = 0, order = 0, mism = 0, unexp = 0;
    for (size_t i = 0; i < got.events.size(); ++i) {
      const Event& e = got.events[i];
      if (i > 0 && e.seq <= got.events[i - 1].seq) ++order;
      if (!seen.insert(e.seq).second) {
        ++dup;
        continue;
      }
      auto it = want.find(e.seq);
      if (it == want.end()) {
        ++unexp;
      } else if (*it->second != e.bytes) {
        ++mism;
      }
    }
    int64_t miss = 0;
    for (const Event& e : expected) miss += seen.count(e.seq) ? 0 : 1;
    if (dup + order + mism + unexp + miss > 0) {
      results_.Watch(
          std::string(name) + " watch of " + sweep_id + ": " + std::to_string(miss) + " missing, " +
          std::to_string(dup) + " duplicated, " + std::to_string(order) + " out of order, " +
          std::to_string(mism) + " different, " + std::to_string(unexp) + " unexpected (got " +
          std::to_string(got.events.size()) + ", want " + std::to_string(expected.size()) + ")");
    }
    results_.missing += miss;
    results_.duplicates += dup;
    results_.out_of_order += order;
    results_.mismatched += mism;
    results_.unexpected += unexp;
  }

  void Malformed(const std::string& what) {
    ++results_.malformed;
    results_.Watch(what);
  }

  // The replay must be the protocol's story of a submitted-then-cancelled sweep.
  void CheckReplay(const std::string& sweep_id, const WatchResult& replay,
                   const pb::SweepStatus& final_status, int jobs) {
    const std::vector<pb::WatchEvent>& ev = replay.parsed;
    if (ev.empty()) return Malformed("replay of " + sweep_id + ": no events");
    for (size_t i = 1; i < ev.size(); ++i) {
      if (ev[i].seq() <= ev[i - 1].seq())
        return Malformed("replay of " + sweep_id + ": seq not increasing");
    }
    for (const pb::WatchEvent& e : ev) {
      if (e.sweep_id() != sweep_id)
        return Malformed("replay of " + sweep_id + ": event of sweep " + e.sweep_id());
    }
    if (!ev.front().has_sweep_state_change() ||
        ev.front().sweep_state_change().to_state() != pb::SWEEP_STATE_PENDING) {
      return Malformed("replay of " + sweep_id + ": does not open with the sweep's PENDING change");
    }
    if (!ev.back().has_sweep_state_change() ||
        ev.back().sweep_state_change().to_state() != pb::SWEEP_STATE_CANCELLED) {
      return Malformed("replay of " + sweep_id +
                       ": does not end with the sweep's CANCELLED change");
    }
    std::map<std::string, std::vector<pb::JobState>> by_job;
    for (const pb::WatchEvent& e : ev) {
      if (e.has_job_state_change())
        by_job[e.job_state_change().job_id()].push_back(e.job_state_change().to_state());
    }
    if (static_cast<int>(by_job.size()) != jobs) {
      return Malformed("replay of " + sweep_id + ": state changes of " +
                       std::to_string(by_job.size()) + " jobs, want " + std::to_string(jobs));
    }
    for (const auto& [job, states] : by_job) {
      if (states != std::vector<pb::JobState>{pb::JOB_STATE_PENDING, pb::JOB_STATE_CANCELLED}) {
        return Malformed("replay of " + sweep_id + ": job " + job +
                         " is not PENDING then CANCELLED");
      }
    }
    if (final_status.last_event_seq() != ev.back().seq()) {
      return Malformed("sweep " + sweep_id + ": GetSweep last_event_seq " +
                       std::to_string(final_status.last_event_seq()) + " but the replay ends at " +
                       std::to_string(ev.back().seq()));
    }
    if (final_status.state() != pb::SWEEP_STATE_CANCELLED ||
        final_status.job_counts().total() != jobs ||
        final_status.job_counts().cancelled() != jobs) {
      return Malformed("sweep " + sweep_id + ": GetSweep does not show " + std::to_string(jobs) +
                       " cancelled jobs of a CANCELLED sweep");
    }
  }

  void Cycle() {
    ++results_.cycles;
    ++cycle_;
    pb::SubmitSweepRequest submit;
    submit.set_request_id("load-" + std::to_string(getpid()) + "-" + std::to_string(index_) + "-" +
                          std::to_string(cycle_) + "-" + std::to_string(rng_()));
    *submit.mutable_spec() = rdattn::coordinator::testing::TinySweep(
        {static_cast<uint64_t>(cycle_)}, 1, {12288}, "load-c" + std::to_string(index_));
    const int jobs = 2;  // 1 seed x {block, rd}
    pb::SubmitSweepResponse submitted;
    if (!Unary(kSubmit, submit, &submitted, &pb::SweepService::Stub::SubmitSweep)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // do not spin on a down server
      return;
    }
    const std::string sweep_id = submitted.sweep().sweep_id();
    const uint64_t resume_after = submitted.sweep().last_event_seq();

    WatchResult from_start, resumed;
    std::thread w1([&] { from_start = Watch(sweep_id, 0, false); });
    std::thread w2([&] { resumed = Watch(sweep_id, resume_after, false); });

    for (int i = 0; i < options_.gets; ++i) {
      pb::GetSweepRequest req;
      req.set_sweep_id(sweep_id);
      req.set_view(pb::SWEEP_VIEW_FULL);
      pb::GetSweepResponse resp;
      if (Unary(kGet, req, &resp, &pb::SweepService::Stub::GetSweep) &&
          (resp.sweep().sweep_id() != sweep_id || resp.sweep().jobs_size() != jobs)) {
        Malformed("GetSweep " + sweep_id + ": wrong sweep or " +
                  std::to_string(resp.sweep().jobs_size()) + " jobs");
      }
    }
    for (int i = 0; i < options_.lists; ++i) {
      pb::ListSweepsRequest req;
      req.set_page_size(options_.page_size);
      req.set_view(pb::SWEEP_VIEW_BASIC);
      pb::ListSweepsResponse resp;
      Unary(kList, req, &resp, &pb::SweepService::Stub::ListSweeps);
    }

    pb::CancelSweepRequest cancel;
    cancel.set_sweep_id(sweep_id);
    cancel.set_reason("rdattn-load");
    pb::CancelSweepResponse cancelled;
    Clock::time_point cancel_t0;
    const bool cancel_ok =
        Unary(kCancel, cancel, &cancelled, &pb::SweepService::Stub::CancelSweep, &cancel_t0);
    // Without the cancel the watches end at their deadline (DEADLINE_EXCEEDED, counted below).
    w1.join();
    w2.join();

    auto record_live = [&](const WatchResult& r, bool first) -> bool {
      if (!r.status.ok()) {
        results_.Error(kWatchDelivery, r.status);
        return false;
      }
      if (first && r.first_ms >= 0) results_.metrics[kWatchFirst].ms.push_back(r.first_ms);
      if (r.terminal && cancel_ok)
        results_.metrics[kWatchDelivery].ms.push_back(MsSince(cancel_t0, r.end_time));
      return true;
    };
    const bool live1 = record_live(from_start, true);
    const bool live2 = record_live(resumed, false);

    Think();
    WatchResult replay = Watch(sweep_id, 0, true);
    if (!replay.status.ok()) {
      results_.Error(kWatchReplay, replay.status);
      return;
    }
    results_.metrics[kWatchReplay].ms.push_back(replay.total_ms);
    if (replay.first_ms >= 0) results_.metrics[kWatchFirst].ms.push_back(replay.first_ms);

    pb::GetSweepRequest final_req;
    final_req.set_sweep_id(sweep_id);
    final_req.set_view(pb::SWEEP_VIEW_BASIC);
    pb::GetSweepResponse final_resp;
    if (!Unary(kGet, final_req, &final_resp, &pb::SweepService::Stub::GetSweep)) return;
    if (!cancel_ok) return;
    CheckReplay(sweep_id, replay, final_resp.sweep(), jobs);

    if (live1) Compare("live (from 0)", sweep_id, from_start, replay.events);
    if (live2) {
      std::vector<Event> suffix;
      for (const Event& e : replay.events) {
        if (e.seq > resume_after) suffix.push_back(e);
      }
      Compare("live (resumed)", sweep_id, resumed, suffix);
    }
  }

  const int index_;
  std::unique_ptr<pb::SweepService::Stub> stub_;
  const Options& options_;
  std::mt19937_64 rng_;
  int64_t cycle_ = 0;
  Results results_;
};

struct Row {
  int64_t count = 0;
  double p50 = 0, p99 = 0, max = 0;
  int64_t errors = 0;
};

// Nearest-rank percentiles of `ms` (sorted in place).
Row Summarize(Sample& s) {
  Row r;
  r.count = static_cast<int64_t>(s.ms.size());
  r.errors = s.errors;
  if (s.ms.empty()) return r;
  std::sort(s.ms.begin(), s.ms.end());
  auto rank = [&](double p) {
    const size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(s.ms.size())));
    return s.ms[std::min(s.ms.size() - 1, k == 0 ? 0 : k - 1)];
  };
  r.p50 = rank(0.50);
  r.p99 = rank(0.99);
  r.max = s.ms.back();
  return r;
}

constexpr int kExitUsage = 2;

// The command line, with its defaults.
struct Flags {
  rdattn::cli::ConnectionFlags connection;
  int clients = 10;
  int channels = 0;
  double seconds = 10;
  int gets = 4;
  int lists = 1;
  int page_size = 20;
  double think_ms = 0;
  double rpc_timeout = 10;
  double watch_timeout = 60;
  std::string json;
};

void AddFlags(CLI::App& app, Flags& f) {
  using rdattn::cli::NumberWhere;
  const CLI::Validator positive = NumberWhere([](double v) { return v > 0; }, "must be > 0");
  const CLI::Validator non_negative = NumberWhere([](double v) { return v >= 0; }, "must be >= 0");
  rdattn::cli::AddConnectionFlags(&app, &f.connection, {});
  app.add_option("--clients", f.clients,
                 "concurrent clients (threads, each with two watcher threads per cycle)")
      ->check(NumberWhere([](double v) { return v >= 1; }, "must be at least 1"));
  app.add_option("--channels", f.channels,
                 "gRPC channels (each its own TCP connection) the clients share; 0: one per "
                 "client")
      ->check(non_negative);
  app.add_option("--seconds", f.seconds,
                 "how long clients start new cycles; cycles in flight then finish")
      ->check(positive);
  app.add_option("--gets", f.gets, "GetSweep (full view) calls per cycle")->check(non_negative);
  app.add_option("--lists", f.lists, "ListSweeps calls per cycle")->check(non_negative);
  app.add_option("--page-size", f.page_size, "ListSweeps page size")
      ->check(NumberWhere([](double v) { return v >= 1; }, "must be >= 1"));
  app.add_option("--think-ms", f.think_ms,
                 "pause between a client's consecutive calls, uniform in [0.5, 1.5] x this (not "
                 "timed); 0: closed loop, every call right after the previous one")
      ->check(non_negative);
  app.add_option("--rpc-timeout", f.rpc_timeout, "deadline of each unary call, seconds")
      ->check(positive);
  app.add_option("--watch-timeout", f.watch_timeout, "deadline of each WatchSweep stream, seconds")
      ->check(positive);
  app.add_option("--json", f.json, "also write the results to this JSON file");
  rdattn::cli::CheckAfterParse(&app, [&f]() -> std::string {
    return f.channels <= f.clients ? "" : "--channels must be in [0, --clients]";
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "rdattn-load --coordinator HOST:PORT [--token T] [--clients N] [--seconds T] [--json FILE]\n"
      "Drives a running rdattn-coordinator with N clients and checks every watch stream.",
      "rdattn-load");
  rdattn::cli::Setup(app);
  Flags flags;
  AddFlags(app, flags);
  if (const int code = rdattn::cli::Parse(app, argc, argv, kExitUsage); code >= 0) return code;
  auto usage = [&app](const std::string& message) {
    return rdattn::cli::Usage(app, message, kExitUsage);
  };

  const std::string address = flags.connection.coordinator;
  const int clients = flags.clients;
  const int channels = flags.channels == 0 ? clients : flags.channels;
  const double seconds = flags.seconds;
  Options options;
  options.gets = flags.gets;
  options.lists = flags.lists;
  options.page_size = flags.page_size;
  options.think_ms = flags.think_ms;
  options.rpc_timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.rpc_timeout * 1000));
  options.watch_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(flags.watch_timeout * 1000));
  rdattn::StatusOr<rdattn::cli::Connection> connection =
      rdattn::cli::ResolveConnection(flags.connection);
  if (!connection.ok()) return usage(connection.status().message());
  options.token = connection->token;
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (connection->tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = connection->ca_cert_pem;
    creds = grpc::SslCredentials(ssl);
  }

  // Separate connections: a local subchannel pool per channel (else equal channels share one).
  std::vector<std::shared_ptr<grpc::Channel>> pool;
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    pool.push_back(grpc::CreateCustomChannel(address, creds, args));
  }
  for (int i = 0; i < channels; ++i) {
    if (!pool[i]->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      std::fprintf(stderr, "rdattn-load: cannot connect to %s (channel %d) within 10 s\n",
                   address.c_str(), i);
      return 1;
    }
  }

  std::vector<std::unique_ptr<Client>> workers;
  workers.reserve(clients);
  for (int i = 0; i < clients; ++i)
    workers.push_back(std::make_unique<Client>(i, pool[i % channels], options));
  std::printf(
      "rdattn-load: %d clients on %d connections to %s for %.1f s (%d GetSweep + %d ListSweeps per "
      "cycle, "
      "think %.1f ms)\n",
      clients, channels, address.c_str(), seconds, options.gets, options.lists, options.think_ms);
  std::fflush(stdout);
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point stop =
      t0 + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  std::vector<std::thread> threads;
  threads.reserve(workers.size());
  for (auto& w : workers) threads.emplace_back([&w, stop] { w->Run(stop); });
  for (auto& t : threads) t.join();
  const double wall_s = MsSince(t0) / 1000.0;

  Results all;
  for (auto& w : workers) all.Merge(w->results());
  Row rows[kMetricCount];
  for (int m = 0; m < kMetricCount; ++m) rows[m] = Summarize(all.metrics[m]);

  std::printf("\n%-22s %9s %9s %9s %9s %7s\n", "rpc", "count", "p50 ms", "p99 ms", "max ms",
              "errors");
  for (int m = 0; m < kMetricCount; ++m) {
    std::printf("%-22s %9lld %9.2f %9.2f %9.2f %7lld\n", kMetricNames[m],
                static_cast<long long>(rows[m].count), rows[m].p50, rows[m].p99, rows[m].max,
                static_cast<long long>(rows[m].errors));
  }
  // Calls: the unary RPCs and the WatchSweep streams (two live ones per replay).
  int64_t calls = 0;
  for (int m : {kSubmit, kGet, kList, kCancel}) calls += rows[m].count + rows[m].errors;
  calls += 3 * (rows[kWatchReplay].count + rows[kWatchReplay].errors);
  std::printf("\ncycles %lld in %.1f s (%.0f calls/s); errors %lld\n",
              static_cast<long long>(all.cycles), wall_s, static_cast<double>(calls) / wall_s,
              static_cast<long long>(all.errors()));
  for (const auto& [k, v] : all.error_codes)
    std::printf("  %s: %lld\n", k.c_str(), static_cast<long long>(v));
  for (const std::string& s : all.error_samples) std::printf("  e.g. %s\n", s.c_str());
  std::printf(
      "watch: %lld live streams checked against the replay, %lld events; missing %lld, duplicated "
      "%lld, "
      "out of order %lld, different %lld, unexpected %lld; malformed replays/final states %lld\n",
      static_cast<long long>(all.streams_checked), static_cast<long long>(all.events_checked),
      static_cast<long long>(all.missing), static_cast<long long>(all.duplicates),
      static_cast<long long>(all.out_of_order), static_cast<long long>(all.mismatched),
      static_cast<long long>(all.unexpected), static_cast<long long>(all.malformed));
  for (const std::string& s : all.watch_samples) std::printf("  %s\n", s.c_str());

  const bool pass = all.errors() == 0 && all.watch_problems() == 0 && all.streams_checked > 0;
  std::printf("%s\n", pass ? "PASS" : "FAIL");

  const std::string json_path = flags.json;
  if (!json_path.empty()) {
    nlohmann::json j;
    j["coordinator"] = address;
    j["clients"] = clients;
    j["channels"] = channels;
    j["seconds"] = seconds;
    j["wall_seconds"] = wall_s;
    j["gets_per_cycle"] = options.gets;
    j["lists_per_cycle"] = options.lists;
    j["think_ms"] = options.think_ms;
    j["cycles"] = all.cycles;
    j["calls_per_second"] = static_cast<double>(calls) / wall_s;
    for (int m = 0; m < kMetricCount; ++m) {
      j["rpcs"][kMetricNames[m]] = {{"count", rows[m].count},
                                    {"p50_ms", rows[m].p50},
                                    {"p99_ms", rows[m].p99},
                                    {"max_ms", rows[m].max},
                                    {"errors", rows[m].errors}};
    }
    j["errors"] = all.errors();
    j["error_codes"] = all.error_codes;
    j["error_samples"] = all.error_samples;
    j["watch"] = {{"streams_checked", all.streams_checked},
                  {"events_checked", all.events_checked},
                  {"missing", all.missing},
                  {"duplicates", all.duplicates},
                  {"out_of_order", all.out_of_order},
                  {"mismatched", all.mismatched},
                  {"unexpected", all.unexpected},
                  {"malformed", all.malformed},
                  {"samples", all.watch_samples}};
    j["pass"] = pass;
    std::ofstream out(json_path);
    out << j.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "rdattn-load: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return pass ? 0 : 1;
}
