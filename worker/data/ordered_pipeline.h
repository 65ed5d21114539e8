// An ordered parallel pipeline: one reader thread makes tasks in order, `workers` threads turn
// tasks into results, and the calling thread consumes the results strictly in task order. So the
// consumer sees exactly what a single thread doing read, work, consume in a loop would see,
// whatever the number of workers. At most `window` tasks exist at a time (made and not yet
// consumed: queued, being worked on, or finished and waiting for an earlier one), which bounds the
// memory to `window` tasks and results. No OpenMP, no thread pool library: std::thread only.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"

namespace rdattn::data {

// read(Task*): fills the next task and returns true, false at the end, or an error. Runs on one
//   reader thread, called in order.
// work(Task&&) -> Result: runs on the worker threads, concurrently; must be thread-safe. Errors
//   travel inside Result.
// consume(Result&&) -> Status: runs on the calling thread, in task order. An error stops the
//   pipeline: no further task is read or consumed, and that error is returned.
// Returns OK when every task was read and consumed; a read error is returned after every task
// read before it was consumed (so errors come in the order a single thread would meet them).
// Preconditions: workers >= 1, window >= 1.
template <typename Task, typename Result>
Status RunOrderedPipeline(int workers, int window, const std::function<StatusOr<bool>(Task*)>& read,
                          const std::function<Result(Task&&)>& work,
                          const std::function<Status(Result&&)>& consume) {
  std::mutex mu;
  std::condition_variable reader_cv, worker_cv, consumer_cv;
  // All guarded by mu.
  int64_t made = 0;      // tasks read so far (the next task's sequence number)
  int64_t consumed = 0;  // results consumed so far
  bool read_done = false;
  bool stop = false;
  Status read_status = Status::Ok();
  std::deque<std::pair<int64_t, Task>> queue;  // read, not yet taken by a worker
  std::map<int64_t, Result> finished;          // worked, not yet consumed

  std::thread reader([&] {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu);
        reader_cv.wait(lock, [&] { return stop || made - consumed < window; });
        if (stop) return;
      }
      Task task;
      StatusOr<bool> more = read(&task);
      std::lock_guard<std::mutex> lock(mu);
      if (!more.ok() || !*more) {
        if (!more.ok()) read_status = more.status();
        read_done = true;
        worker_cv.notify_all();
        consumer_cv.notify_all();
        return;
      }
      queue.emplace_back(made++, std::move(task));
      worker_cv.notify_one();
    }
  });
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers));
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      while (true) {
        std::pair<int64_t, Task> item;
        {
          std::unique_lock<std::mutex> lock(mu);
          worker_cv.wait(lock, [&] { return stop || !queue.empty() || read_done; });
          if (stop || queue.empty()) return;  // stopped, or read_done with nothing left
          item = std::move(queue.front());
          queue.pop_front();
        }
        Result r = work(std::move(item.second));
        std::lock_guard<std::mutex> lock(mu);
        finished.emplace(item.first, std::move(r));
        if (item.first == consumed) consumer_cv.notify_one();
      }
    });
  }

  Status status = Status::Ok();
  while (true) {
    Result r;
    {
      std::unique_lock<std::mutex> lock(mu);
      consumer_cv.wait(
          lock, [&] { return finished.count(consumed) != 0 || (read_done && consumed == made); });
      const auto it = finished.find(consumed);
      if (it == finished.end()) {  // every task read was consumed
        status = read_status;
        break;
      }
      r = std::move(it->second);
      finished.erase(it);
    }
    status = consume(std::move(r));
    std::lock_guard<std::mutex> lock(mu);
    ++consumed;
    reader_cv.notify_one();
    if (!status.ok()) break;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  reader_cv.notify_all();
  worker_cv.notify_all();
  reader.join();
  for (std::thread& t : pool) t.join();
  return status;
}

}  // namespace rdattn::data
