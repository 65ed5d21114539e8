// Tailing events.jsonl into ReportProgress streams (see event_relay.h).
#include "worker/daemon/event_relay.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <vector>

#include "common/log.h"

namespace rdattn::worker {

StatusOr<pb::MetricEvent> ParseEventLine(std::string_view line) {
  pb::MetricEvent event;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(line.data(), line.size()), &event, options);
  if (!status.ok()) return InvalidArgumentError("metric event: " + std::string(status.message()));
  return event;
}

EventRelay::EventRelay(Options options, CoordinatorClient* client)
    : options_(std::move(options)),
      client_(client),
      tailer_(options_.events_path),
      backoff_(options_.poll_interval, options_.max_backoff) {}

EventRelay::~EventRelay() {
  Abandon();
  if (thread_.joinable()) thread_.join();
}

void EventRelay::Start() {
  thread_ = std::thread([this] { Loop(); });
}

Status EventRelay::Drain(std::chrono::steady_clock::time_point deadline) {
  mu_.Lock();
  if (mode_ == Mode::kAbandoned && drain_result_.ok()) {
    drain_result_ = AbortedError("the relay was abandoned");
  }
  if (mode_ == Mode::kRunning) {
    mode_ = Mode::kDraining;
    drain_deadline_ = deadline;
    wake_ = true;
    cv_.SignalAll();
  }
  // A Write blocked on a hung coordinator ends at the stream deadline; do not wait for that.
  const auto wait_end = deadline + std::chrono::seconds(2);
  while (!done_ && WaitUntil(cv_, mu_, wait_end)) {
  }
  if (!done_) {
    mode_ = Mode::kAbandoned;
    wake_ = true;
    if (active_stream_ != nullptr) active_stream_->Cancel();
    cv_.SignalAll();
    drain_result_ = Status(StatusCode::kDeadlineExceeded, "events not all delivered in time");
  }
  mu_.Unlock();
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  return drain_result_;
}

void EventRelay::Abandon() {
  absl::MutexLock lock(&mu_);
  if (mode_ == Mode::kAbandoned) return;
  mode_ = Mode::kAbandoned;
  wake_ = true;
  if (active_stream_ != nullptr) active_stream_->Cancel();
  cv_.SignalAll();
}

void EventRelay::Acknowledge(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  progress_.acked_seq = std::max(progress_.acked_seq, seq);
  while (!pending_.empty() && pending_.front().seq() <= seq) pending_.pop_front();
}

RelayProgress EventRelay::progress() const {
  absl::MutexLock lock(&mu_);
  return progress_;
}

bool EventRelay::AllAcknowledged() const {
  absl::MutexLock lock(&mu_);
  return pending_.empty();
}

void EventRelay::Loop() {
  while (true) {
    Mode mode;
    Clock::time_point deadline;
    {
      absl::MutexLock lock(&mu_);
      const auto wait_end = Clock::now() + options_.poll_interval;
      while (!wake_ && WaitUntil(cv_, mu_, wait_end)) {
      }
      wake_ = false;
      mode = mode_;
      deadline = drain_deadline_;
    }
    if (mode == Mode::kAbandoned) break;
    const bool draining = mode == Mode::kDraining;
    ReadEvents(draining);
    const bool accepted = Deliver(draining);
    if (!draining) continue;
    Status result;
    if (!accepted) {
      result = AbortedError("the coordinator refused this lease's events");
    } else if (AllAcknowledged()) {
      result = Status::Ok();
    } else if (Clock::now() >= deadline) {
      result = Status(StatusCode::kDeadlineExceeded, "events not all delivered in time");
    } else {
      continue;
    }
    absl::MutexLock lock(&mu_);
    drain_result_ = result;
    break;
  }
  if (stream_ != nullptr) {
    {
      absl::MutexLock lock(&mu_);
      active_stream_ = nullptr;
    }
    stream_->Cancel();
    stream_.reset();
  }
  absl::MutexLock lock(&mu_);
  done_ = true;
  cv_.SignalAll();
}

void EventRelay::ReadEvents(bool flush) {
  std::vector<std::string> lines;
  const Status read = flush ? tailer_.Flush(&lines) : tailer_.Poll(&lines);
  if (!read.ok()) RDATTN_LOG(kWarning).Job(options_.job_id) << "events: " << read.ToString();
  for (const std::string& line : lines) {
    StatusOr<pb::MetricEvent> parsed = ParseEventLine(line);
    if (!parsed.ok()) {
      {
        absl::MutexLock lock(&mu_);
        ++progress_.bad_lines;
      }
      RDATTN_LOG(kWarning).Job(options_.job_id)
          << "skipping an event line (" << parsed.status().message()
          << "): " << line.substr(0, 200);
      if (options_.on_parse_error) options_.on_parse_error();
      continue;
    }
    pb::MetricEvent& event = *parsed;
    {
      absl::MutexLock lock(&mu_);
      if (event.job_id().empty()) event.set_job_id(options_.job_id);
      if (event.run_id().empty()) event.set_run_id(options_.run_id);
      if (event.attempt() == 0) event.set_attempt(options_.attempt);
      if (event.seq() == 0) event.set_seq(progress_.last_seq + 1);
      if (event.seq() <= progress_.last_seq) {
        RDATTN_LOG(kWarning).Job(options_.job_id)
            << "skipping event seq " << event.seq() << " (not above " << progress_.last_seq << ")";
        continue;
      }
      progress_.last_seq = event.seq();
      progress_.step = std::max(progress_.step, event.step());
      progress_.tokens = std::max(progress_.tokens, event.tokens());
      if (event.kind() == pb::MetricEvent::KIND_CHECKPOINT && !event.checkpoint_path().empty()) {
        progress_.checkpoint_path = event.checkpoint_path();
      }
      if (event.kind() == pb::MetricEvent::KIND_FINISHED) progress_.finished = true;
      pending_.push_back(event);
    }
    if (options_.on_event) options_.on_event(event);
  }
}

bool EventRelay::Deliver(bool draining) {
  if (refused_) return false;
  const auto now = Clock::now();
  std::vector<pb::ReportProgressRequest> unsent;
  {
    absl::MutexLock lock(&mu_);
    for (const pb::MetricEvent& event : pending_) {
      if (event.seq() <= sent_seq_) continue;
      pb::ReportProgressRequest& request = unsent.emplace_back();
      request.set_lease_id(options_.lease_id);
      *request.mutable_event() = event;
    }
  }
  if (!unsent.empty() && now >= next_open_) {
    if (stream_ == nullptr) {
      stream_ = client_->OpenProgress(options_.stream_max_age + options_.stream_slack);
      absl::MutexLock lock(&mu_);
      active_stream_ = stream_.get();
      stream_opened_ = now;
    }
    for (const pb::ReportProgressRequest& request : unsent) {
      if (!stream_->Write(request)) {
        CloseStream();
        return !refused_;
      }
      sent_seq_ = request.event().seq();
      last_write_ = Clock::now();
    }
  }
  if (stream_ != nullptr && (draining || now - last_write_ >= options_.stream_idle_close ||
                             now - stream_opened_ >= options_.stream_max_age)) {
    CloseStream();
  }
  return !refused_;
}

void EventRelay::CloseStream() {
  StatusOr<pb::ReportProgressResponse> result = stream_->Finish();
  {
    absl::MutexLock lock(&mu_);
    active_stream_ = nullptr;
  }
  stream_.reset();
  const auto now = Clock::now();
  if (result.ok()) {
    // OK: the coordinator read and stored (or already had) every event written on it.
    Acknowledge(std::max<uint64_t>(result->last_seq(), sent_seq_));
    if (failures_ > 0) RDATTN_LOG(kInfo).Job(options_.job_id) << "event stream recovered";
    failures_ = 0;
    backoff_.Reset();
    next_open_ = now;
    return;
  }
  if (result.status().code() == StatusCode::kAborted) {
    refused_ = true;
    RDATTN_LOG(kWarning).Job(options_.job_id)
        << "the coordinator refused the events of lease " << options_.lease_id << ": "
        << result.status().ToString();
    return;
  }
  // Resend everything not acknowledged on the next stream.
  {
    absl::MutexLock lock(&mu_);
    sent_seq_ = progress_.acked_seq;
  }
  if (failures_++ % 10 == 0) {
    RDATTN_LOG(kWarning).Job(options_.job_id)
        << "event stream failed (will resend from seq " << sent_seq_ + 1
        << "): " << result.status().ToString();
  }
  next_open_ = now + backoff_.Next();
}

}  // namespace rdattn::worker
