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
      timed_eval_ |= kind == Kind::kEval;
      timed_checkpoint_ |= kind == Kind::kCheckpoint;
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

std::string_view Watchdog::UntimedPhaseDue() const {
  if (!seen_event_) return {};
  // Due: at a step after the last event's and up to the next TRAIN_STEP event, or at the last
  // event's own step when that event came before the phase (TRAIN_STEP, then EVAL, then
  // CHECKPOINT; at the stop step FINISHED after them).
  const int64_t s = last_step_;
  const int64_t next = s + std::max<int64_t>(1, schedule_.event_every_steps);
  auto due = [&](int64_t p, bool same_step) {
    return (p > s && p <= next) || (p == s && same_step);
  };
  const bool at_step = last_kind_ == Kind::kTrainStep;
  const bool before_checkpoint = at_step || last_kind_ == Kind::kEval;
  bool eval = false, checkpoint = false;
  for (int64_t p : schedule_.eval_steps) {
    eval |= due(p, at_step);
    checkpoint |= due(p, before_checkpoint);
  }
  if (schedule_.stop_step > 0) {
    eval |= due(schedule_.stop_step, at_step);
    checkpoint |= due(schedule_.stop_step, before_checkpoint);
  }
  if (const int64_t every = schedule_.checkpoint_every_steps; every > 0) {
    const int64_t first = s - s % every;  // the multiples of `every` from s on
    for (int64_t p = first; p <= next; p += every) checkpoint |= p > 0 && due(p, before_checkpoint);
  }
  if (eval && !timed_eval_) return "evaluation";
  if (checkpoint && !timed_checkpoint_) return "checkpoint";
  if (schedule_.stop_step > 0 && due(schedule_.stop_step, last_kind_ != Kind::kFinished)) {
    return "test evaluation";
  }
  return {};
}

milliseconds Watchdog::Bound() const {
  if (!enabled()) return milliseconds(0);
  if (!seen_step_) return std::max(options_.floor, options_.startup);
  milliseconds bound = std::max({options_.floor, Scaled(StepTime(), options_.factor),
                                 Scaled(slowest_phase_, options_.factor)});
  if (!UntimedPhaseDue().empty()) bound = std::max(bound, options_.startup);
  return bound;
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
  } else if (const std::string_view phase = UntimedPhaseDue();
             !phase.empty() && bound == options_.startup) {
    why += ", the startup allowance before a " + std::string(phase) + " not yet timed";
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
