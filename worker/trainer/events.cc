#include "worker/trainer/events.h"

#include "worker/trainer/machine_failure.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>

namespace rdattn::trainer {
namespace {

std::string Rfc3339Now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

nlohmann::json HardwareJson(const Hardware& h) {
  nlohmann::json j = {{"hardware_kind", h.gpu ? "HARDWARE_KIND_GPU" : "HARDWARE_KIND_CPU"},
                      {"device_name", h.device_name},
                      {"world_size", h.world_size}};
  if (!h.blas_core.empty()) j["blas_core"] = h.blas_core;
  return j;
}

}  // namespace

nlohmann::json JsonDouble(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

StatusOr<std::unique_ptr<EventSink>> EventSink::Open(const std::string& path) {
  std::unique_ptr<EventSink> sink(new EventSink());
  sink->path_ = path == "-" ? "stdout" : path;
  if (path == "-") {
    sink->file_ = stdout;
    return sink;
  }
  sink->file_ = std::fopen(path.c_str(), "a");
  if (sink->file_ == nullptr) {
    const int err = errno;
    const std::string why =
        "--events " + path + ": cannot open for appending (" + std::strerror(err) + ")";
    // A full or failing disk is the machine's failure; anything else a bad path.
    if (IsMachineErrno(err)) return UnavailableError(why);
    return InvalidArgumentError(why);
  }
  sink->owns_ = true;
  return sink;
}

std::unique_ptr<EventSink> EventSink::Memory() {
  std::unique_ptr<EventSink> sink(new EventSink());
  sink->memory_ = true;
  return sink;
}

EventSink::~EventSink() {
  if (owns_ && file_ != nullptr) std::fclose(file_);  // every line was flushed already
}

void EventSink::SetIdentity(std::string run_id, std::string job_id, int attempt) {
  run_id_ = std::move(run_id);
  job_id_ = std::move(job_id);
  attempt_ = attempt;
}

void EventSink::Emit(const std::string& kind, nlohmann::json fields) {
  if (!status_.ok() || (gate_ && !gate_())) {
    ++dropped_;
    return;
  }
  nlohmann::json e = nlohmann::json::object();
  e["seq"] = ++seq_;
  e["kind"] = "KIND_" + kind;
  e["wall_time"] = Rfc3339Now();
  if (!run_id_.empty()) e["run_id"] = run_id_;
  if (!job_id_.empty()) e["job_id"] = job_id_;
  if (attempt_ > 0) e["attempt"] = attempt_;
  for (auto it = fields.begin(); it != fields.end(); ++it) e[it.key()] = it.value();
  const std::string line = e.dump();
  if (memory_) {
    lines_.push_back(line);
    return;
  }
  errno = 0;
  const bool written = std::fprintf(file_, "%s\n", line.c_str()) >= 0;
  if (std::fflush(file_) != 0 || !written) {
    const int err = errno != 0 ? errno : EIO;
    status_ = UnavailableError("--events " + path_ + ": writing a KIND_" + kind +
                               " event failed: " + std::strerror(err));
  }
}

nlohmann::json InitEvent(const Hardware& where, const InitFields& f) {
  nlohmann::json e = HardwareJson(where);
  e.update({{"step", f.step},
            {"tokens", f.tokens},
            {"param_count", f.param_count},
            {"flops_per_token", f.flops_per_token},
            {"peak_flops_per_second", f.peak_flops_per_second},
            {"init_param_checksum", f.init_param_checksum},
            {"data_order_checksum", f.data_order_checksum}});
  return e;
}

nlohmann::json TrainStepEvent(const Hardware& where, const TrainStepFields& f) {
  const double tps = static_cast<double>(f.batch_tokens) / f.step_seconds;
  nlohmann::json e = HardwareJson(where);
  e.update({{"step", f.step},
            {"tokens", f.tokens},
            {"train_loss", JsonDouble(f.train_loss)},
            {"lr", f.lr},
            {"grad_norm", JsonDouble(f.grad_norm)},
            {"tokens_per_second", tps},
            {"mfu", f.flops_per_token * tps / (f.peak_flops_per_second * where.world_size)},
            {"step_seconds", f.step_seconds},
            {"compute_seconds", f.step_seconds - f.data_seconds - f.allreduce_seconds},
            {"allreduce_seconds", f.allreduce_seconds},
            {"data_seconds", f.data_seconds},
            {"peak_memory_bytes", f.peak_memory_bytes}});
  return e;
}

nlohmann::json EvalEvent(const EvalFields& f) {
  nlohmann::json e = f.depth;
  e.update({{"step", f.step},
            {"tokens", f.tokens},
            {"milestone_tokens", f.milestone_tokens},
            {"val_nll", JsonDouble(f.val_nll)},
            {"eval_tokens", f.eval_tokens}});
  return e;
}

nlohmann::json CheckpointEvent(int64_t step, int64_t tokens, const std::string& path) {
  return {{"step", step}, {"tokens", tokens}, {"checkpoint_path", path}};
}

nlohmann::json WarningEvent(int64_t step, const std::string& warning) {
  return {{"step", step}, {"warning", warning}};
}

nlohmann::json FailedEvent(int64_t step, double train_loss, const std::string& error) {
  return {{"step", step}, {"train_loss", JsonDouble(train_loss)}, {"error", error}};
}

nlohmann::json FinishedEvent(const Hardware& where, const FinishedFields& f) {
  nlohmann::json e = HardwareJson(where);
  e.update({{"step", f.step}, {"tokens", f.tokens}, {"peak_memory_bytes", f.peak_memory_bytes}});
  if (f.test_nll.has_value()) {
    e["test_nll"] = JsonDouble(*f.test_nll);
    e["eval_tokens"] = f.eval_tokens;
  }
  return e;
}

int64_t PeakRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace rdattn::trainer
