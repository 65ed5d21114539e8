// Metric events: one JSON object per line, from rank 0, in protobuf's JSON mapping of
// rdattn.v1.MetricEvent (snake_case names, kind as "KIND_EVAL", wall_time as RFC 3339), so the
// worker can parse a line straight into the proto. Schema: docs/events.md. The sink, and the
// builders of each kind's fields (pure; the sink stamps seq, wall_time and the identity). The
// depth-route fields of KIND_EVAL are built by DepthJson (evaluate.h): their struct is LibTorch's
// side of the model, and this file is plain C++.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace rdattn::trainer {

class EventSink {
 public:
  // "-" writes to stdout; anything else is a file opened for appending.
  static StatusOr<std::unique_ptr<EventSink>> Open(const std::string& path);
  // An in-memory sink (tests): every emitted line is kept in lines().
  static std::unique_ptr<EventSink> Memory();
  ~EventSink();

  // Stamps seq, wall_time, run_id, job_id and attempt, writes one line and flushes. A line that
  // cannot be written (ENOSPC, EIO, ...) makes status() an error naming the path and strerror;
  // nothing more is written after it.
  void Emit(const std::string& kind, nlohmann::json fields);
  // OK while every line got written; else UNAVAILABLE (the machine's failure: exit 74).
  const Status& status() const { return status_; }
  void SetIdentity(std::string run_id, std::string job_id, int attempt);
  // Events are written only while `gate` returns true (a fenced attempt writes none); the
  // others are counted in dropped().
  void SetGate(std::function<bool()> gate) { gate_ = std::move(gate); }
  int64_t dropped() const { return dropped_; }
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  EventSink() = default;
  std::FILE* file_ = nullptr;
  std::string path_;
  Status status_;
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

// --- The fields of each kind (docs/events.md) ---------------------------------------------------

// Where the run trains; on KIND_INIT, KIND_TRAIN_STEP and KIND_FINISHED.
struct Hardware {
  bool gpu = false;
  std::string device_name;
  int world_size = 1;
  std::string blas_core;  // rdattn::cpu::BlasCore(); "" on GPU runs and without OpenBLAS
};

struct InitFields {
  int64_t step = 0;  // where this process starts
  int64_t tokens = 0;
  int64_t param_count = 0;
  double flops_per_token = 0;        // training FLOPs per token
  double peak_flops_per_second = 0;  // per rank
  std::string init_param_checksum;   // hex
  std::string data_order_checksum;   // hex
};
nlohmann::json InitEvent(const Hardware& where, const InitFields& f);

struct TrainStepFields {
  int64_t step = 0;  // completed
  int64_t tokens = 0;
  double train_loss = 0;  // mean over the global batch
  double lr = 0;
  double grad_norm = 0;      // before clipping
  int64_t batch_tokens = 0;  // of one step, all ranks: tokens_per_second = batch_tokens / step
  double step_seconds = 0, data_seconds = 0, allreduce_seconds = 0;  // compute: the rest
  double flops_per_token = 0, peak_flops_per_second = 0;             // for mfu (per rank peak)
  int64_t peak_memory_bytes = -1;
};
nlohmann::json TrainStepEvent(const Hardware& where, const TrainStepFields& f);

struct EvalFields {
  int64_t step = 0;
  int64_t tokens = 0;
  int64_t milestone_tokens = 0;
  double val_nll = 0;
  int64_t eval_tokens = 0;
  nlohmann::json depth = nlohmann::json::object();  // DepthJson, or empty
};
nlohmann::json EvalEvent(const EvalFields& f);

nlohmann::json CheckpointEvent(int64_t step, int64_t tokens, const std::string& path);
nlohmann::json WarningEvent(int64_t step, const std::string& warning);
nlohmann::json FailedEvent(int64_t step, double train_loss, const std::string& error);

struct FinishedFields {
  int64_t step = 0;
  int64_t tokens = 0;
  int64_t peak_memory_bytes = -1;
  std::optional<double> test_nll;  // with test shards
  int64_t eval_tokens = 0;         // of the test NLL
};
nlohmann::json FinishedEvent(const Hardware& where, const FinishedFields& f);

// Peak resident set size of this process (VmHWM), bytes; -1 if unknown. peak_memory_bytes.
int64_t PeakRssBytes();
// A 64-bit checksum as 16 lowercase hex digits (init_param_checksum, data_order_checksum).
std::string Hex64(uint64_t v);

}  // namespace rdattn::trainer
