// The daemon's waiting helpers: Backoff's delays (first, doubled, capped, after Reset) and
// WaitUntil's deadline (false once it has passed; a signal ends the wait early).
#include "worker/daemon/wait.h"

#include <gtest/gtest.h>

#include <thread>

namespace rdattn::worker {
namespace {

using std::chrono::milliseconds;

TEST(BackoffTest, DoublesFromTheFirstDelayUpToTheCap) {
  Backoff backoff(milliseconds(500), milliseconds(3000));
  EXPECT_EQ(backoff.Peek(), milliseconds(500));
  EXPECT_EQ(backoff.Next(), milliseconds(500));
  EXPECT_EQ(backoff.Next(), milliseconds(1000));
  EXPECT_EQ(backoff.Next(), milliseconds(2000));
  EXPECT_EQ(backoff.Peek(), milliseconds(3000));
  EXPECT_EQ(backoff.Next(), milliseconds(3000));
  EXPECT_EQ(backoff.Next(), milliseconds(3000));
  backoff.Reset();
  EXPECT_EQ(backoff.Next(), milliseconds(500));
  EXPECT_EQ(backoff.Next(), milliseconds(1000));
}

TEST(BackoffTest, AFirstDelayAboveTheCapIsWaitedOnceThenTheCap) {
  Backoff backoff(milliseconds(500), milliseconds(200));
  EXPECT_EQ(backoff.Next(), milliseconds(500));
  EXPECT_EQ(backoff.Next(), milliseconds(200));
}

TEST(WaitUntilTest, FalseOnceTheDeadlineHasPassed) {
  absl::Mutex mu;
  absl::CondVar cv;
  absl::MutexLock lock(&mu);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + milliseconds(50);
  while (WaitUntil(cv, mu, deadline)) {
  }
  EXPECT_GE(std::chrono::steady_clock::now(), deadline);
  EXPECT_FALSE(WaitUntil(cv, mu, deadline));
  EXPECT_FALSE(WaitUntil(cv, mu, start));
}

TEST(WaitUntilTest, ASignalEndsTheWaitBeforeTheDeadline) {
  absl::Mutex mu;
  absl::CondVar cv;
  bool done = false;
  std::thread signaller([&] {
    absl::MutexLock lock(&mu);
    done = true;
    cv.Signal();
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  {
    absl::MutexLock lock(&mu);
    while (!done && WaitUntil(cv, mu, deadline)) {
    }
    EXPECT_TRUE(done);
  }
  EXPECT_LT(std::chrono::steady_clock::now(), deadline);
  signaller.join();
}

}  // namespace
}  // namespace rdattn::worker
