// The progress watchdog of one running attempt (docs/operations.md, "Progress watchdog"): fed
// with the attempt's metric events as the relay reads them, it says when the attempt has made
// no progress for longer than its bound, a bound derived from the attempt's own measured step
// time. Pure logic: no clock reads, no I/O, no threads; the caller passes the times (the job
// runner its steady clock, tests a fake one). Not thread-safe: the job runner guards it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rdattn::worker {

struct WatchdogOptions {
  // The least bound, whatever the step time; it must cover the longest evaluation, checkpoint
  // write and test evaluation not yet measured in the attempt. Zero: the watchdog is off.
  std::chrono::milliseconds floor{std::chrono::minutes(10)};
  // After the first step: the bound is at least factor x the slowest recent step interval (and
  // factor x the slowest evaluation or checkpoint of the attempt). Zero: the floor alone.
  double factor = 20;
  // Before the attempt's first TRAIN_STEP event (process start, data checks, model build,
  // checkpoint load, milestones evaluated again, the first step), and while an evaluation, a
  // checkpoint write or the test evaluation is due that the attempt has not timed yet (see
  // WatchdogSchedule): the bound is at least this.
  std::chrono::milliseconds startup{std::chrono::minutes(30)};
  // How many of the latest step intervals "recent" means.
  int window = 32;
};

// Where the job's slow phases fall (from its resolved schedule; ParseRunConfig's figures). Empty:
// unknown, and only the floor covers a phase not yet timed.
struct WatchdogSchedule {
  std::vector<int64_t> eval_steps;     // milestone steps (an evaluation, then a checkpoint)
  int64_t checkpoint_every_steps = 0;  // 0: checkpoints at milestones and at the end only
  int64_t stop_step = 0;               // evaluation, checkpoint, test evaluation; 0: unknown
  int64_t event_every_steps = 1;       // a TRAIN_STEP event every this many steps
};

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // What the attempt's events say; kinds as in rdattn.v1.MetricEvent.Kind.
  enum class Kind { kOther, kInit, kTrainStep, kEval, kCheckpoint, kFinished, kFailed, kWarning };
  static std::string_view KindName(Kind kind);  // "INIT", "TRAIN_STEP", ...

  explicit Watchdog(WatchdogOptions options) : options_(options) {}

  void SetSchedule(WatchdogSchedule schedule) { schedule_ = std::move(schedule); }

  bool enabled() const { return options_.floor.count() > 0; }

  // The ranks started at `at`: silence is counted from then until the first event.
  void Start(Clock::time_point at);
  // An event of the attempt was read at `at`. Every event is progress; intervals ending in a
  // TRAIN_STEP event measure the step time (from the attempt's second TRAIN_STEP on), those
  // ending in EVAL, CHECKPOINT or FINISHED the evaluations and checkpoint writes (timed: from
  // then on that kind of phase is covered by factor x its time, not by the startup allowance).
  void Event(Kind kind, int64_t step, Clock::time_point at);
  // Something was written (the event file grew) that has not been read as an event yet: it is
  // progress, but measures nothing.
  void Activity(Clock::time_point at);

  // The current bound on silence (zero when disabled).
  std::chrono::milliseconds Bound() const;
  // When the attempt has been silent for longer than Bound() at `now`: the reason,
  // "stalled: no progress for N s (last event: KIND at step S; bound B s from step time T s,
  // ...)". Otherwise nullopt (always when disabled or not started).
  std::optional<std::string> Check(Clock::time_point now) const;

  // The slowest of the recent step intervals (zero before two steps were seen).
  std::chrono::milliseconds StepTime() const;

 private:
  // Which phase not yet timed is due before the next event: "evaluation", "checkpoint",
  // "test evaluation", or empty.
  std::string_view UntimedPhaseDue() const;

  const WatchdogOptions options_;
  WatchdogSchedule schedule_;
  bool timed_eval_ = false;
  bool timed_checkpoint_ = false;
  bool started_ = false;
  Clock::time_point last_progress_{};
  std::optional<Clock::time_point> last_event_at_;
  Kind last_kind_ = Kind::kOther;
  int64_t last_step_ = 0;
  bool seen_event_ = false;
  bool seen_step_ = false;                           // a TRAIN_STEP event was read
  std::deque<std::chrono::milliseconds> intervals_;  // recent step intervals, newest last
  std::chrono::milliseconds slowest_phase_{0};       // evaluation or checkpoint, the attempt's
};

}  // namespace rdattn::worker
