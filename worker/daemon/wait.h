// Waiting in the daemon's threads: between the tries of a failed call (Backoff), and for a
// condition on an absl::CondVar with a steady-clock deadline (the daemon's timers are steady;
// abseil's are absl::Time).
#pragma once

#include <algorithm>
#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace rdattn::worker {

// Exponential backoff: the first delay is `initial`, each later one twice the one before, at
// most `max`; Reset() after a success starts again at `initial`. Not thread-safe (one loop's).
class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max)
      : initial_(initial), max_(max), next_(initial) {}

  // The delay to wait now; the next one doubles.
  std::chrono::milliseconds Next() {
    const std::chrono::milliseconds now = next_;
    next_ = std::min(next_ * 2, max_);
    return now;
  }
  // The delay Next() will return, without taking it.
  std::chrono::milliseconds Peek() const { return next_; }
  void Reset() { next_ = initial_; }

 private:
  const std::chrono::milliseconds initial_;
  const std::chrono::milliseconds max_;
  std::chrono::milliseconds next_;
};

// Waits on `cv` (`mu` held) until it is signalled or `deadline` passes; false once the deadline
// has passed. A wait for a condition is a loop that tests the condition first, as
// std::condition_variable::wait_until with a predicate does:
//   while (!done_ && WaitUntil(cv_, mu_, deadline)) {}
inline bool WaitUntil(absl::CondVar& cv, absl::Mutex& mu,
                      std::chrono::steady_clock::time_point deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return false;
  cv.WaitWithTimeout(&mu, absl::FromChrono(left));
  return std::chrono::steady_clock::now() < deadline;
}

}  // namespace rdattn::worker
