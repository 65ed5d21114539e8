#include "client/watch.h"

#include <absl/base/thread_annotations.h>
#include <absl/synchronization/mutex.h>
#include <absl/time/time.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "client/format.h"
#include "client/watch_table.h"

namespace rdattn::client {
namespace {

// True for failures a reconnect may fix.
bool Retryable(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Where the events of FollowSweep go: the three --format outputs.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void OnEvent(const pb::WatchEvent& event) = 0;
  // The sweep's terminal state once an event (or a snapshot) showed it, else UNSPECIFIED.
  virtual pb::SweepState final_state() const = 0;
  // The stream broke (or ended early); a reconnect after `seq` follows.
  virtual void OnInterrupted(const std::string& why, uint64_t seq) = 0;
  // The stream ended without a terminal event, and GetSweep shows the sweep ended.
  virtual void OnEndedWithoutEvent(const pb::SweepStatus& sweep) = 0;
  // The watch is over (the sweep ended); not called on an error.
  virtual void Finish() {}
  // The coordinator's store was rolled back since the events seen so far (another store
  // epoch): the watch starts again from seq 0, and events already shown may come again.
  virtual void OnRestart(const std::string& why) = 0;
};

class JsonSink : public Sink {
 public:
  JsonSink(uint64_t after_seq, std::ostream& out, std::ostream& err)
      : seq_(after_seq), out_(out), err_(err) {}
  void OnEvent(const pb::WatchEvent& e) override {
    if (e.seq() == 0 || e.seq() > seq_) out_ << MessageJson(e, false) << std::endl;
    seq_ = std::max(seq_, e.seq());
    if (e.has_sweep_state_change() && IsTerminal(e.sweep_state_change().to_state())) {
      final_state_ = e.sweep_state_change().to_state();
    }
  }
  pb::SweepState final_state() const override { return final_state_; }
  void OnInterrupted(const std::string&, uint64_t) override {}
  void OnEndedWithoutEvent(const pb::SweepStatus& sweep) override { final_state_ = sweep.state(); }
  // Every event from 0 again: the numbers before the rollback name other events now.
  void OnRestart(const std::string& why) override {
    err_ << "rdattn: " << why << "; restarting the watch from seq 0 (events may repeat)"
         << std::endl;
    seq_ = 0;
  }

 private:
  uint64_t seq_;
  std::ostream& out_;
  std::ostream& err_;
  pb::SweepState final_state_ = pb::SWEEP_STATE_UNSPECIFIED;
};

class TextSink : public Sink {
 public:
  TextSink(CoordinatorClient& client, pb::GetSweepRequest get, const pb::SweepStatus& initial,
           const WatchOptions& options, std::ostream& out, std::ostream& err)
      : client_(client),
        get_(std::move(get)),
        printer_(initial, options.printer),
        out_(out),
        err_(err) {
    out_ << "watching sweep " << initial.sweep_id() << " (" << SweepStateName(initial.state())
         << ", " << initial.job_counts().total() << " jobs)" << std::endl;
  }
  void OnEvent(const pb::WatchEvent& e) override {
    for (const std::string& line : printer_.OnEvent(e, SteadySeconds())) out_ << line << std::endl;
    // A job added to the running sweep: its target tokens, for its progress lines.
    if (printer_.needs_sweep() && SteadySeconds() - last_refresh_ >= 1.0) {
      last_refresh_ = SteadySeconds();
      if (auto now = client_.GetSweepJobs(get_.sweep_id()); now.ok()) printer_.OnSweep(*now);
    }
    if (printer_.ended()) final_state_ = printer_.final_state();
  }
  pb::SweepState final_state() const override { return final_state_; }
  void OnInterrupted(const std::string& why, uint64_t seq) override {
    err_ << "rdattn: watch interrupted (" << why << "); reconnecting after seq " << seq
         << std::endl;
  }
  void OnEndedWithoutEvent(const pb::SweepStatus& sweep) override {
    final_state_ = sweep.state();
    out_ << "sweep " << sweep.sweep_id() << ": " << SweepStateName(final_state_) << std::endl;
  }
  void OnRestart(const std::string& why) override {
    err_ << "rdattn: " << why << "; restarting the watch from seq 0 (events may repeat)"
         << std::endl;
  }

 private:
  CoordinatorClient& client_;
  pb::GetSweepRequest get_;
  WatchPrinter printer_;
  std::ostream& out_;
  std::ostream& err_;
  double last_refresh_ = -1e300;
  pb::SweepState final_state_ = pb::SWEEP_STATE_UNSPECIFIED;
};

// The live table: the stream's thread feeds events in; a drawing thread redraws the frame (at
// most 4 times a second when something changed, else once a second so the ETAs count down) and
// takes the GetSweep snapshots, so that a quiet stream still refreshes.
class TableSink : public Sink {
 public:
  TableSink(CoordinatorClient& client, pb::GetSweepRequest get, const pb::SweepStatus& initial,
            const WatchOptions& options, std::ostream& out)
      : client_(client),
        get_(std::move(get)),
        options_(options),
        out_(out),
        table_(initial, SteadySeconds()),
        last_refresh_(SteadySeconds()) {
    {
      absl::MutexLock lock(&mu_);
      DrawLocked(SteadySeconds());
    }
    drawer_ = std::thread([this] { DrawLoop(); });
  }
  ~TableSink() override { Stop(); }

  void OnEvent(const pb::WatchEvent& e) override {
    absl::MutexLock lock(&mu_);
    table_.OnEvent(e, SteadySeconds());
    if (interrupted_) {
      table_.set_note("");
      interrupted_ = false;
    }
    dirty_ = true;
  }
  pb::SweepState final_state() const override {
    absl::MutexLock lock(&mu_);
    return table_.final_state();
  }
  void OnInterrupted(const std::string& why, uint64_t seq) override {
    absl::MutexLock lock(&mu_);
    table_.set_note("watch interrupted (" + why + "); reconnecting after seq " +
                    std::to_string(seq));
    interrupted_ = true;
    dirty_ = true;
  }
  void OnRestart(const std::string& why) override {
    absl::MutexLock lock(&mu_);
    table_.set_note(why + "; watching again from seq 0");
    interrupted_ = true;
    dirty_ = true;
  }
  void OnEndedWithoutEvent(const pb::SweepStatus& sweep) override {
    absl::MutexLock lock(&mu_);
    table_.OnSweep(sweep, SteadySeconds());
  }
  // The last frame from a last snapshot, so every row shows its final state.
  void Finish() override {
    Stop();
    auto last = client_.GetSweepJobs(get_.sweep_id());
    absl::MutexLock lock(&mu_);
    if (last.ok()) table_.OnSweep(*last, SteadySeconds());
    table_.set_note("");
    DrawLocked(SteadySeconds());
  }

 private:
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;  // wakes DrawLoop's Await
    }
    if (drawer_.joinable()) drawer_.join();
  }

  void DrawLoop() {
    mu_.Lock();
    while (!stop_) {
      mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(250));
      if (stop_) break;
      const double now = SteadySeconds();
      const double since = now - last_refresh_;
      if (since >= options_.refresh_seconds || (table_.needs_sweep() && since >= 1.0)) {
        last_refresh_ = now;
        mu_.Unlock();
        // Every job, in pages; failures: the stream's reconnect tells.
        auto snapshot = client_.GetSweepJobs(get_.sweep_id());
        mu_.Lock();
        if (stop_) break;
        if (snapshot.ok()) {
          table_.OnSweep(*snapshot, SteadySeconds());
          dirty_ = true;
        }
      }
      if (dirty_ || now - last_draw_ >= 1.0) DrawLocked(now);
    }
    mu_.Unlock();
  }

  void DrawLocked(double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto [width, height] = TerminalSize(options_.terminal_fd);
    out_ << frame_.Redraw(table_.Render(now, width, height), width) << std::flush;
    dirty_ = false;
    last_draw_ = now;
  }

  CoordinatorClient& client_;
  const pb::GetSweepRequest get_;
  const WatchOptions options_;
  std::ostream& out_;
  mutable absl::Mutex mu_;
  WatchTable table_ ABSL_GUARDED_BY(mu_);
  TerminalFrame frame_ ABSL_GUARDED_BY(mu_);
  double last_refresh_ ABSL_GUARDED_BY(mu_);
  double last_draw_ ABSL_GUARDED_BY(mu_) = 0;
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread drawer_;
};

}  // namespace

Status FollowSweep(CoordinatorClient& client, const std::string& sweep_id, uint64_t after_seq,
                   const WatchOptions& options, std::ostream& out, std::ostream& err,
                   pb::SweepState* final_state_out) {
  // The state checks need only the summary view (a few KB); the table and the text lines need
  // every job (their targets), read in pages (docs/client.md "watch ID").
  pb::GetSweepRequest get;
  get.set_sweep_id(sweep_id);
  get.set_view(pb::SWEEP_VIEW_SUMMARY);
  std::unique_ptr<Sink> sink;
  if (options.format == WatchFormat::kJson) {
    RDATTN_RETURN_IF_ERROR(client.GetSweep(get).status());  // the sweep exists, may be read
    sink = std::make_unique<JsonSink>(after_seq, out, err);
  } else {
    RDATTN_ASSIGN_OR_RETURN(pb::SweepStatus initial, client.GetSweepJobs(sweep_id));
    if (options.format == WatchFormat::kTable) {
      sink = std::make_unique<TableSink>(client, get, initial, options, out);
    } else {
      sink = std::make_unique<TextSink>(client, get, initial, options, out, err);
    }
  }

  uint64_t seq = after_seq;
  std::string epoch;  // the store epoch of `seq` (WatchEvent.store_epoch); "" before any event
  auto backoff = std::chrono::milliseconds(500);
  auto last_message = std::chrono::steady_clock::now();
  constexpr auto kGiveUpAfter = std::chrono::minutes(5);
  while (true) {
    bool received = false;
    pb::WatchSweepRequest request;
    request.set_sweep_id(sweep_id);
    request.set_after_seq(seq);
    request.set_store_epoch(epoch);
    Status status = client.WatchSweep(request, [&](const pb::WatchSweepResponse& m) {
      received = true;
      sink->OnEvent(m.event());
      seq = std::max(seq, m.event().seq());
      if (!m.event().store_epoch().empty()) epoch = m.event().store_epoch();
      return sink->final_state() == pb::SWEEP_STATE_UNSPECIFIED;
    });
    if (sink->final_state() != pb::SWEEP_STATE_UNSPECIFIED) break;
    if (status.code() == StatusCode::kFailedPrecondition && !epoch.empty() &&
        status.message().find("store_epoch") != std::string::npos) {
      // The store was rolled back since `seq`: the numbers after it were handed out again.
      sink->OnRestart("the coordinator's store changed epoch (" + status.message() + ")");
      seq = 0;
      epoch.clear();
      continue;
    }
    if (!status.ok() && !Retryable(status)) return status;
    if (received) {
      backoff = std::chrono::milliseconds(500);
      last_message = std::chrono::steady_clock::now();
    }
    if (status.ok()) {
      // The stream ended without a terminal event: the sweep may have ended before `seq`.
      RDATTN_ASSIGN_OR_RETURN(pb::GetSweepResponse now, client.GetSweep(get));
      if (IsTerminal(now.sweep().state())) {
        sink->OnEndedWithoutEvent(now.sweep());
        break;
      }
    }
    if (std::chrono::steady_clock::now() - last_message > kGiveUpAfter) {
      return UnavailableError("lost the watch of sweep " + sweep_id +
                              " for 5 minutes: " + status.message());
    }
    sink->OnInterrupted(status.ok() ? "stream ended" : status.ToString(), seq);
    std::this_thread::sleep_for(backoff);
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(10));
  }
  sink->Finish();
  *final_state_out = sink->final_state();
  return Status::Ok();
}

}  // namespace rdattn::client
