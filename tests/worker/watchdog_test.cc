// The progress watchdog with an injected clock: the bound before the first step, from the
// measured step time, from an evaluation or checkpoint, the floor, disabled, and the reason.
#include "worker/daemon/watchdog.h"

#include <gtest/gtest.h>

namespace rdattn::worker {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Kind = Watchdog::Kind;

constexpr Watchdog::Clock::time_point kT0{seconds(1000)};

WatchdogOptions Options() {
  return {.floor = seconds(5), .factor = 10, .startup = seconds(60), .window = 4};
}

TEST(WatchdogTest, StartupAllowanceBeforeTheFirstStep) {
  Watchdog w(Options());
  w.Start(kT0);
  EXPECT_EQ(w.Bound(), seconds(60));
  EXPECT_FALSE(w.Check(kT0 + seconds(59)).has_value());
  w.Event(Kind::kInit, 15, kT0 + seconds(50));
  // INIT is progress; the first step still has the startup allowance.
  EXPECT_FALSE(w.Check(kT0 + seconds(109)).has_value());
  const auto why = w.Check(kT0 + seconds(111));
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why,
            "stalled: no progress for 61.0 s (last event: INIT at step 15; bound 60.0 s, the "
            "startup allowance before the first step)");
}

TEST(WatchdogTest, NothingAtAllIsAStallToo) {
  Watchdog w(Options());
  w.Start(kT0);
  const auto why = w.Check(kT0 + seconds(61));
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->rfind("stalled: no progress for 61.0 s (last event: none; bound 60.0 s", 0), 0u)
      << *why;
}

TEST(WatchdogTest, BoundFromTheSlowestRecentStepWithTheFloorBelow) {
  Watchdog w(Options());
  w.Start(kT0);
  w.Event(Kind::kInit, 0, kT0 + seconds(2));
  w.Event(Kind::kTrainStep, 1, kT0 + seconds(30));  // the first step: not measured
  EXPECT_EQ(w.StepTime(), milliseconds(0));
  EXPECT_EQ(w.Bound(), seconds(5));  // the floor
  w.Event(Kind::kTrainStep, 2, kT0 + seconds(30) + milliseconds(100));
  w.Event(Kind::kTrainStep, 3, kT0 + seconds(30) + milliseconds(300));  // 200 ms
  EXPECT_EQ(w.StepTime(), milliseconds(200));
  EXPECT_EQ(w.Bound(), seconds(5));  // 10 x 200 ms < the floor
  // Slow steps raise the bound above the floor.
  auto t = kT0 + seconds(30) + milliseconds(300);
  t += milliseconds(800);
  w.Event(Kind::kTrainStep, 4, t);
  EXPECT_EQ(w.StepTime(), milliseconds(800));
  EXPECT_EQ(w.Bound(), seconds(8));
  EXPECT_FALSE(w.Check(t + milliseconds(8000)).has_value());
  const auto why = w.Check(t + milliseconds(8100));
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why,
            "stalled: no progress for 8.1 s (last event: TRAIN_STEP at step 4; bound 8.0 s from "
            "step time 0.800 s (x10, floor 5.0 s))");
  // "Recent": after `window` fast steps the slow one no longer counts.
  for (int i = 0; i < 4; ++i) {
    t += milliseconds(100);
    w.Event(Kind::kTrainStep, 5 + i, t);
  }
  EXPECT_EQ(w.StepTime(), milliseconds(100));
  EXPECT_EQ(w.Bound(), seconds(5));
}

TEST(WatchdogTest, EvaluationsAndCheckpointsAreMeasuredAndNotStepTime) {
  Watchdog w(Options());
  auto t = kT0;
  w.Start(t);
  w.Event(Kind::kTrainStep, 1, t += seconds(1));
  w.Event(Kind::kTrainStep, 2, t += milliseconds(100));
  // The step at a milestone, then a 700 ms evaluation, then a 300 ms checkpoint.
  w.Event(Kind::kTrainStep, 3, t += milliseconds(100));
  w.Event(Kind::kEval, 3, t += milliseconds(700));
  w.Event(Kind::kCheckpoint, 3, t += milliseconds(300));
  w.Event(Kind::kTrainStep, 4, t += milliseconds(100));
  EXPECT_EQ(w.StepTime(), milliseconds(100));
  EXPECT_EQ(w.Bound(), seconds(7));  // 10 x the 700 ms evaluation > the floor
  // Warnings and not-yet-parsed writes are progress.
  w.Event(Kind::kWarning, 4, t += seconds(6));
  EXPECT_FALSE(w.Check(t + seconds(6)).has_value());
  w.Activity(t += seconds(6));
  EXPECT_FALSE(w.Check(t + seconds(6)).has_value());
  const auto why = w.Check(t + milliseconds(7001));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("(last event: WARNING at step 4; bound 7.0 s from step time"),
            std::string::npos)
      << *why;
  EXPECT_NE(why->find("slowest eval/checkpoint 0.700 s"), std::string::npos) << *why;
}

// From the job's schedule: a checkpoint, an evaluation or the test evaluation that the attempt
// has not timed yet gets the startup allowance; once timed, factor x its time.
TEST(WatchdogTest, UntimedPhasesOfTheScheduleGetTheStartupAllowance) {
  Watchdog w(Options());
  w.SetSchedule({.eval_steps = {4}, .checkpoint_every_steps = 2, .stop_step = 6});
  auto t = kT0;
  w.Start(t);
  w.Event(Kind::kTrainStep, 1, t += seconds(1));
  EXPECT_EQ(w.Bound(), seconds(60));  // the checkpoint at step 2 is due before the next event
  w.Event(Kind::kTrainStep, 2, t += milliseconds(100));
  EXPECT_EQ(w.Bound(), seconds(60));
  const auto why = w.Check(t + seconds(61));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("(last event: TRAIN_STEP at step 2; bound 60.0 s, the startup allowance "
                      "before a checkpoint not yet timed)"),
            std::string::npos)
      << *why;
  w.Event(Kind::kCheckpoint, 2, t += milliseconds(200));
  EXPECT_EQ(w.Bound(), seconds(5));  // timed; nothing due before step 3
  w.Event(Kind::kTrainStep, 3, t += milliseconds(100));
  EXPECT_EQ(w.Bound(), seconds(60));  // the first evaluation, at step 4
  w.Event(Kind::kTrainStep, 4, t += milliseconds(100));
  EXPECT_EQ(w.Bound(), seconds(60));
  w.Event(Kind::kEval, 4, t += milliseconds(600));
  EXPECT_EQ(w.Bound(), seconds(6));  // 10 x the 600 ms evaluation; the checkpoint is timed
  w.Event(Kind::kCheckpoint, 4, t += milliseconds(100));
  EXPECT_EQ(w.Bound(), seconds(6));
  w.Event(Kind::kTrainStep, 5, t += milliseconds(100));
  EXPECT_EQ(w.Bound(), seconds(60));  // the test evaluation after step 6 is never timed
  w.Event(Kind::kTrainStep, 6, t += milliseconds(100));
  w.Event(Kind::kEval, 6, t += milliseconds(600));
  w.Event(Kind::kCheckpoint, 6, t += milliseconds(100));
  EXPECT_EQ(w.Bound(), seconds(60));
  w.Event(Kind::kFinished, 6, t += seconds(2));
  EXPECT_EQ(w.Bound(), seconds(20));  // 10 x the 2 s test evaluation
}

// One TRAIN_STEP event every 10 steps: a checkpoint due within the next 10 steps counts.
TEST(WatchdogTest, PhasesDueBeforeTheNextEventAtASparseEventCadence) {
  Watchdog w(Options());
  w.SetSchedule({.eval_steps = {100},
                 .checkpoint_every_steps = 25,
                 .stop_step = 200,
                 .event_every_steps = 10});
  auto t = kT0;
  w.Start(t);
  w.Event(Kind::kTrainStep, 10, t += seconds(1));
  EXPECT_EQ(w.Bound(), seconds(5));
  w.Event(Kind::kTrainStep, 20, t += seconds(1));
  EXPECT_EQ(w.Bound(), seconds(60));  // the checkpoint at 25
}

TEST(WatchdogTest, OffWithAZeroFloorAndQuietBeforeStart) {
  WatchdogOptions o = Options();
  o.floor = milliseconds(0);
  Watchdog off(o);
  off.Start(kT0);
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.Bound(), milliseconds(0));
  EXPECT_FALSE(off.Check(kT0 + std::chrono::hours(24)).has_value());

  Watchdog unstarted(Options());
  EXPECT_FALSE(unstarted.Check(kT0 + std::chrono::hours(24)).has_value());
}

TEST(WatchdogTest, ZeroFactorIsTheFloorAlone) {
  WatchdogOptions o = Options();
  o.factor = 0;
  Watchdog w(o);
  auto t = kT0;
  w.Start(t);
  w.Event(Kind::kTrainStep, 1, t += seconds(1));
  w.Event(Kind::kTrainStep, 2, t += seconds(4));
  EXPECT_EQ(w.StepTime(), seconds(4));
  EXPECT_EQ(w.Bound(), seconds(5));
}

}  // namespace
}  // namespace rdattn::worker
