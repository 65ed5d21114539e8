// Waiting in the daemon's threads: for a condition on an absl::CondVar with a steady-clock
// deadline (the daemon's timers are steady; abseil's are absl::Time).
#pragma once

#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace rdattn::worker {

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
