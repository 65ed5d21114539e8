// Metric events: one JSON object per line, from rank 0, in protobuf's JSON mapping of
// rdattn.v1.MetricEvent (snake_case names, kind as "KIND_EVAL", wall_time as RFC 3339), so the
// worker can parse a line straight into the proto. Schema: docs/events.md.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace rdattn::trainer {

class EventSink {
 public:
  // "-" writes to stdout; anything else is a file opened for appending.
  static StatusOr<std::unique_ptr<EventSink>> Open(const std::string& path);
  // An in-memory sink (tests): every emitted line is kept in lines().
  static std::unique_ptr<EventSink> Memory();
  ~EventSink();

  // Stamps seq, wall_time, run_id, job_id and attempt, writes one line and flushes.
  void Emit(const std::string& kind, nlohmann::json fields);
  void SetIdentity(std::string run_id, std::string job_id, int attempt);
  // Events are written only while `gate` returns true (a fenced attempt writes none); the
  // others are counted in dropped().
  void SetGate(std::function<bool()> gate) { gate_ = std::move(gate); }
  int64_t dropped() const { return dropped_; }
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  EventSink() = default;
  std::FILE* file_ = nullptr;
  bool owns_ = false;
  bool memory_ = false;
  std::vector<std::string> lines_;
  uint64_t seq_ = 0;
  std::string run_id_, job_id_;
  int attempt_ = 0;
  std::function<bool()> gate_;
  int64_t dropped_ = 0;
};

// A double for JSON: finite values as numbers, NaN/±Infinity as the strings protobuf expects.
nlohmann::json JsonDouble(double v);

}  // namespace rdattn::trainer
