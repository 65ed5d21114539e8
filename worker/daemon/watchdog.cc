// The progress watchdog's bookkeeping (see watchdog.h).
#include "worker/daemon/watchdog.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace rdattn::worker {
namespace {

using std::chrono::milliseconds;

std::string SecondsText(milliseconds d, const char* format) {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, static_cast<double>(d.count()) / 1000.0);
  return buf;
}

milliseconds Scaled(milliseconds d, double factor) {
  return milliseconds(static_cast<int64_t>(std::ceil(static_cast<double>(d.count()) * factor)));
}

}  // namespace

std::string_view Watchdog::KindName(Kind kind) {
  switch (kind) {
    case Kind::kInit:
      return "INIT";
    case Kind::kTrainStep:
      return "TRAIN_STEP";
    case Kind::kEval:
      return "EVAL";
    case Kind::kCheckpoint:
      return "CHECKPOINT";
    case Kind::kFinished:
      return "FINISHED";
    case Kind::kFailed:
      return "FAILED";
    case Kind::kWarning:
      return "WARNING";
    case Kind::kOther:
      break;
  }
  return "OTHER";
}

void Watchdog::Start(Clock::time_point at) { Activity(at); }

void Watchdog::Event(Kind kind, int64_t step, Clock::time_point at) {
  if (last_event_at_.has_value() && at >= *last_event_at_) {
    const auto interval = std::chrono::duration_cast<milliseconds>(at - *last_event_at_);
    if (kind == Kind::kTrainStep && seen_step_) {
      intervals_.push_back(interval);
      while (static_cast<int>(intervals_.size()) > std::max(1, options_.window)) {
        intervals_.pop_front();
      }
    } else if (kind == Kind::kEval || kind == Kind::kCheckpoint || kind == Kind::kFinished) {
      slowest_phase_ = std::max(slowest_phase_, interval);
    }
  }
  if (kind == Kind::kTrainStep) seen_step_ = true;
  seen_event_ = true;
  last_event_at_ = at;
  last_kind_ = kind;
  last_step_ = step;
  Activity(at);
}

void Watchdog::Activity(Clock::time_point at) {
  if (!started_ || at > last_progress_) last_progress_ = at;
  started_ = true;
}

milliseconds Watchdog::StepTime() const {
  milliseconds slowest{0};
  for (milliseconds d : intervals_) slowest = std::max(slowest, d);
  return slowest;
}

milliseconds Watchdog::Bound() const {
  if (!enabled()) return milliseconds(0);
  if (!seen_step_) return std::max(options_.floor, options_.startup);
  return std::max({options_.floor, Scaled(StepTime(), options_.factor),
                   Scaled(slowest_phase_, options_.factor)});
}

std::optional<std::string> Watchdog::Check(Clock::time_point now) const {
  if (!enabled() || !started_ || now <= last_progress_) return std::nullopt;
  const auto silent = std::chrono::duration_cast<milliseconds>(now - last_progress_);
  const milliseconds bound = Bound();
  if (silent <= bound) return std::nullopt;
  std::string why = "stalled: no progress for " + SecondsText(silent, "%.1f") + " s (last event: ";
  if (seen_event_) {
    why += std::string(KindName(last_kind_)) + " at step " + std::to_string(last_step_);
  } else {
    why += "none";
  }
  why += "; bound " + SecondsText(bound, "%.1f") + " s";
  if (!seen_step_) {
    why += ", the startup allowance before the first step";
  } else {
    why += " from step time " + SecondsText(StepTime(), "%.3f") + " s";
    char factor[32];
    std::snprintf(factor, sizeof factor, "%g", options_.factor);
    why += " (x" + std::string(factor) + ", floor " + SecondsText(options_.floor, "%.1f") + " s";
    if (slowest_phase_.count() > 0) {
      why += ", slowest eval/checkpoint " + SecondsText(slowest_phase_, "%.3f") + " s";
    }
    why += ")";
  }
  why += ")";
  return why;
}

}  // namespace rdattn::worker
