// Data loading off the training loop's critical path: a background thread makes items 0, 1, …,
// count−1 in order, at most `depth` ahead of the consumer, while the consumer computes on the
// previous one. Next() hands them out in the same order, so the consumer sees exactly the
// sequence it would have made itself (the trainer's micro-batches: losses stay bitwise equal).
//
// Plain C++ (no LibTorch): the trainer instantiates it with at::Tensor.
//
// - End of data: Next() returns std::nullopt once `count` items have been handed out.
// - Errors: an exception thrown by `make(i)` is rethrown by the Next() that would have returned
//   item i; the thread makes nothing after it.
// - Shutdown: the destructor stops the thread and joins it, also when items are still queued or
//   `make` is running (it waits for that call to return, never for the consumer). No hang.
// - Threads: one consumer thread. `make` runs on the background thread only, so it must not
//   share unsynchronised state with the consumer (give it its own copies).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace rdattn::trainer {

template <typename T>
class Prefetcher {
 public:
  // Makes items [0, count) with `make`, keeping up to `depth` (≥ 1) made and not yet taken.
  Prefetcher(int64_t count, size_t depth, std::function<T(int64_t)> make)
      : count_(count), depth_(depth == 0 ? 1 : depth), make_(std::move(make)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    room_.notify_all();
    thread_.join();
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next item in order; std::nullopt after the last one. Rethrows `make`'s exception.
  std::optional<T> Next() {
    std::unique_lock<std::mutex> lock(mu_);
    if (taken_ >= count_) return std::nullopt;
    ready_.wait(lock, [this] { return !queue_.empty() || error_ != nullptr; });
    if (queue_.empty()) std::rethrow_exception(error_);  // items before the error came first
    T item = std::move(queue_.front());
    queue_.pop_front();
    ++taken_;
    lock.unlock();
    room_.notify_one();
    return item;
  }

  // Items handed out so far.
  int64_t taken() const {
    std::lock_guard<std::mutex> lock(mu_);
    return taken_;
  }

 private:
  void Run() {
    for (int64_t i = 0; i < count_; ++i) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        room_.wait(lock, [this] { return stop_ || queue_.size() < depth_; });
        if (stop_) return;
      }
      try {
        T item = make_(i);
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_back(std::move(item));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
        ready_.notify_one();
        return;
      }
      ready_.notify_one();
    }
  }

  const int64_t count_;
  const size_t depth_;
  const std::function<T(int64_t)> make_;
  mutable std::mutex mu_;
  std::condition_variable ready_;  // an item or an error arrived
  std::condition_variable room_;   // the queue has room, or stop
  std::deque<T> queue_;            // guarded by mu_
  std::exception_ptr error_;       // guarded by mu_
  int64_t taken_ = 0;              // guarded by mu_
  bool stop_ = false;              // guarded by mu_
  std::thread thread_;             // last: started once everything above exists
};

}  // namespace rdattn::trainer
