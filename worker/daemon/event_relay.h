// Relays one attempt's metric events from the trainer's events.jsonl to the coordinator: a
// thread tails the file (EventTailer), parses each line into rdattn.v1.MetricEvent and writes
// it on a ReportProgress client stream.
//
// Delivery: events are kept until acknowledged (a stream closed with OK, or a heartbeat's
// last_stored_event_seq). A broken stream is closed and reopened with backoff, and resends
// everything above the acknowledged seq; the coordinator stores by (job_id, attempt, seq), so
// nothing is lost and nothing is stored twice. Within a stream each seq is written once. A
// stream is closed when idle, and rotated when old, so that its deadline stays bounded.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "rdattn/v1/run_spec.pb.h"
#include "worker/daemon/coordinator_client.h"
#include "worker/daemon/event_tailer.h"
#include "worker/daemon/wait.h"

namespace rdattn::worker {

// One events.jsonl line -> MetricEvent (protobuf's JSON mapping; unknown fields ignored, so an
// older worker relays a newer trainer's events). INVALID_ARGUMENT says why a line is bad.
StatusOr<pb::MetricEvent> ParseEventLine(std::string_view line);

// What the relay has seen so far (for heartbeats and CompleteJob).
struct RelayProgress {
  int64_t step = 0;             // highest step of any event
  int64_t tokens = 0;           // highest tokens of any event
  uint64_t last_seq = 0;        // highest seq read from the file
  uint64_t acked_seq = 0;       // highest seq the coordinator confirmed stored
  std::string checkpoint_path;  // of the newest KIND_CHECKPOINT event
  int64_t bad_lines = 0;        // lines that did not parse (skipped)
  bool finished = false;        // a KIND_FINISHED event was read
};

class EventRelay {
 public:
  struct Options {
    std::string events_path;
    std::string lease_id;
    // Filled into events that lack them.
    std::string job_id;
    std::string run_id;
    int attempt = 0;
    std::chrono::milliseconds poll_interval{200};
    std::chrono::milliseconds stream_idle_close{2000};  // close a stream idle this long
    std::chrono::milliseconds stream_max_age{60000};    // rotate a stream this old
    std::chrono::milliseconds stream_slack{30000};      // stream deadline = max age + slack
    std::chrono::milliseconds max_backoff{5000};        // between reopen attempts
    // Optional, called on the relay thread without the relay's lock: each event read from the
    // file (ids filled in, duplicates skipped), and each line that did not parse.
    std::function<void(const pb::MetricEvent&)> on_event;
    std::function<void()> on_parse_error;
  };

  // `client` is never null and outlives the relay.
  EventRelay(Options options, CoordinatorClient* client);
  // Abandons (if still running) and joins.
  ~EventRelay();
  EventRelay(const EventRelay&) = delete;
  EventRelay& operator=(const EventRelay&) = delete;

  // Starts the relay thread. Call once.
  void Start();

  // The writer has exited: reads the rest of the file (a partial last line included), delivers
  // it and stops. Returns OK when every event was acknowledged, ABORTED when the coordinator
  // refused the lease, DEADLINE_EXCEEDED when `deadline` passed first. Call once, after Start.
  Status Drain(std::chrono::steady_clock::time_point deadline);

  // Stops without delivering more (the lease is gone). Thread-safe; idempotent.
  void Abandon();

  // The coordinator has stored every event up to `seq` (heartbeat renewal). Thread-safe.
  void Acknowledge(uint64_t seq);

  RelayProgress progress() const;

 private:
  enum class Mode { kRunning, kDraining, kAbandoned };
  using Clock = std::chrono::steady_clock;

  void Loop();
  // Reads new lines into pending_. `flush`: also a partial last line.
  void ReadEvents(bool flush);
  // Writes what is unsent, closes the stream when due. Returns false once the lease is refused.
  bool Deliver(bool draining);
  // Closes the current stream (WritesDone + Finish) and settles what it acknowledged.
  void CloseStream();
  bool AllAcknowledged() const;

  const Options options_;
  CoordinatorClient* const client_;
  EventTailer tailer_;  // loop thread only

  // Loop thread only.
  std::unique_ptr<ProgressStream> stream_;
  Clock::time_point stream_opened_{};
  Clock::time_point last_write_{};
  Clock::time_point next_open_{};
  Backoff backoff_;        // between a failed stream and the next open
  uint64_t sent_seq_ = 0;  // highest seq written on the current stream (or acknowledged)
  bool refused_ = false;   // ABORTED: the coordinator does not accept this lease's events
  int64_t failures_ = 0;   // consecutive failed streams (for logging)

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  Mode mode_ ABSL_GUARDED_BY(mu_) = Mode::kRunning;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;  // the mode changed: run the loop now
  Clock::time_point drain_deadline_ ABSL_GUARDED_BY(mu_){};
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  Status drain_result_ ABSL_GUARDED_BY(mu_);
  std::deque<pb::MetricEvent> pending_ ABSL_GUARDED_BY(mu_);  // read, not yet acknowledged
  RelayProgress progress_ ABSL_GUARDED_BY(mu_);
  ProgressStream* active_stream_ ABSL_GUARDED_BY(mu_) = nullptr;  // for Abandon()

  std::thread thread_;
};

}  // namespace rdattn::worker
