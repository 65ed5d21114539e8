#include "worker/trainer/events.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>

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

}  // namespace

nlohmann::json JsonDouble(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

StatusOr<std::unique_ptr<EventSink>> EventSink::Open(const std::string& path) {
  std::unique_ptr<EventSink> sink(new EventSink());
  if (path == "-") {
    sink->file_ = stdout;
    return sink;
  }
  sink->file_ = std::fopen(path.c_str(), "a");
  if (sink->file_ == nullptr)
    return InvalidArgumentError("--events " + path + ": cannot open for appending (" +
                                std::strerror(errno) + ")");
  sink->owns_ = true;
  return sink;
}

std::unique_ptr<EventSink> EventSink::Memory() {
  std::unique_ptr<EventSink> sink(new EventSink());
  sink->memory_ = true;
  return sink;
}

EventSink::~EventSink() {
  if (owns_ && file_ != nullptr) std::fclose(file_);
}

void EventSink::SetIdentity(std::string run_id, std::string job_id, int attempt) {
  run_id_ = std::move(run_id);
  job_id_ = std::move(job_id);
  attempt_ = attempt;
}

void EventSink::Emit(const std::string& kind, nlohmann::json fields) {
  if (gate_ && !gate_()) {
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
  std::fprintf(file_, "%s\n", line.c_str());
  std::fflush(file_);
}

}  // namespace rdattn::trainer
