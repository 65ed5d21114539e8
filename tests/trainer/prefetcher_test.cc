// Prefetcher (worker/trainer/prefetcher.h): order, end of data, the depth bound, errors, and
// shutdown in every state without a hang. No timing assertions: the sleeps only make the
// interleavings likely, every assertion holds under any scheduling.
#include "worker/trainer/prefetcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rdattn::trainer {
namespace {

TEST(PrefetcherTest, HandsOutEveryItemInOrderThenEnds) {
  Prefetcher<std::string> p(50, 3, [](int64_t i) { return "item" + std::to_string(i); });
  for (int64_t i = 0; i < 50; ++i) {
    std::optional<std::string> item = p.Next();
    ASSERT_TRUE(item.has_value()) << i;
    EXPECT_EQ(*item, "item" + std::to_string(i));
  }
  EXPECT_FALSE(p.Next().has_value());
  EXPECT_FALSE(p.Next().has_value());  // stays at the end
  EXPECT_EQ(p.taken(), 50);
}

TEST(PrefetcherTest, NoItems) {
  std::atomic<int> calls{0};
  Prefetcher<int> p(0, 2, [&calls](int64_t) { return ++calls; });
  EXPECT_FALSE(p.Next().has_value());
  EXPECT_EQ(calls.load(), 0);
}

TEST(PrefetcherTest, MakesEachItemOnceAndNeverMoreThanDepthAhead) {
  constexpr size_t kDepth = 2;
  std::atomic<int64_t> taken{0};
  std::atomic<int64_t> max_ahead{0};
  std::vector<int> made(20, 0);  // written by the producer only, read after it is joined
  {
    Prefetcher<int64_t> p(20, kDepth, [&](int64_t i) {
      // Items i - taken - 1 are queued when make(i) starts: at most depth - 1.
      const int64_t ahead = i - taken.load();
      int64_t seen = max_ahead.load();
      while (ahead > seen && !max_ahead.compare_exchange_weak(seen, ahead)) {
      }
      ++made[static_cast<size_t>(i)];
      return i * i;
    });
    for (int64_t i = 0; i < 20; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // a slow consumer
      std::optional<int64_t> v = p.Next();
      ASSERT_TRUE(v.has_value());
      EXPECT_EQ(*v, i * i);
      taken.store(i + 1);
    }
  }
  for (int n : made) EXPECT_EQ(n, 1);
  // make(i) runs only when fewer than `depth` items wait: i - taken ≤ depth. The consumer
  // updates `taken` just after Next(), so one more may be observed.
  EXPECT_LE(max_ahead.load(), static_cast<int64_t>(kDepth) + 1);
}

TEST(PrefetcherTest, ErrorArrivesAfterTheItemsBeforeIt) {
  Prefetcher<int> p(10, 4, [](int64_t i) {
    if (i == 3) throw std::runtime_error("shard read failed at 3");
    return static_cast<int>(i);
  });
  for (int i = 0; i < 3; ++i) {
    std::optional<int> v = p.Next();
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(*v, i);
  }
  try {
    p.Next();
    FAIL() << "expected the producer's exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "shard read failed at 3");
  }
  EXPECT_THROW(p.Next(), std::runtime_error);  // and again: nothing after the error
}

TEST(PrefetcherTest, ErrorOnTheFirstItem) {
  Prefetcher<int> p(5, 1, [](int64_t) -> int { throw std::logic_error("bad"); });
  EXPECT_THROW(p.Next(), std::logic_error);
}

TEST(PrefetcherTest, ShutdownWithAFullQueue) {
  std::atomic<int64_t> made{0};
  {
    Prefetcher<int> p(1000, 4, [&made](int64_t i) {
      ++made;
      return static_cast<int>(i);
    });
    ASSERT_EQ(p.Next().value_or(-1), 0);
    while (made.load() < 5) std::this_thread::yield();  // the producer fills the queue, then waits
  }                           // the destructor wakes the waiting producer and joins it
  EXPECT_LE(made.load(), 5);  // 1 taken + 4 queued: it never ran ahead of the bound
}

TEST(PrefetcherTest, ShutdownWithoutTakingAnything) {
  {
    Prefetcher<std::vector<int>> p(
        100, 2, [](int64_t i) { return std::vector<int>(10, static_cast<int>(i)); });
  }
  SUCCEED();
}

TEST(PrefetcherTest, ShutdownWhileMakeIsRunning) {
  std::atomic<bool> started{false};
  {
    Prefetcher<int> p(3, 1, [&started](int64_t i) {
      started = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return static_cast<int>(i);
    });
    while (!started.load()) std::this_thread::yield();
  }  // waits for the running make() to return, then stops
  SUCCEED();
}

TEST(PrefetcherTest, MoveOnlyItems) {
  Prefetcher<std::unique_ptr<int>> p(
      3, 2, [](int64_t i) { return std::make_unique<int>(static_cast<int>(i) + 7); });
  for (int i = 0; i < 3; ++i) EXPECT_EQ(**p.Next(), i + 7);
  EXPECT_FALSE(p.Next().has_value());
}

}  // namespace
}  // namespace rdattn::trainer
