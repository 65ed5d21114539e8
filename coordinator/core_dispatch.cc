// Core: the dispatch thread. It applies the WorkerService's queued operations in group
// commits, expires leases, and matches waiting LeaseJob polls with pending jobs
// (docs/coordinator.md "Scheduling data structures").
#include <algorithm>
#include <optional>
#include <utility>

#include "common/log.h"
#include "coordinator/core.h"

namespace rdattn::coordinator {
namespace {

// Operations applied in one transaction at most: bounds a round's latency and its memory.
constexpr size_t kMaxOpsPerRound = 2048;

}  // namespace

void Core::Enqueue(Op op) {
  {
    absl::MutexLock lock(&mu_);
    if (!shutting_down_) {
      ops_.push_back(std::move(op));
      dispatch_cv_.Signal();
      return;
    }
  }
  op.finish(UnavailableError("the coordinator is shutting down"));
}

void Core::DispatchLoop() {
  mu_.Lock();
  while (!shutting_down_) {
    // Sleep until there is something to do: queued operations, new work for the waiting
    // polls, a cancelled poll, the earliest end of a poll's wait or of a job's backoff, or the
    // reaper's time. Nothing here is proportional to the number of waiting polls.
    const bool matching_due = !waiters_.empty() && work_gen_ != matched_gen_;
    if (ops_.empty() && !matching_due && left_pending_ == 0) {
      absl::Time wake = earliest_wait_end_;
      if (reaping_) wake = std::min(wake, next_reap_);
      if (!waiters_.empty() && memory_valid_) {
        const int64_t backoff_end = queue_.NextBackoffEnd(NowMicros());
        if (backoff_end > 0) {
          // In the injected clock's time: look again then, and at least every wait_slice
          // (a test's clock moves by steps).
          const absl::Duration until = absl::Microseconds(backoff_end - NowMicros());
          wake = std::min(
              wake, absl::Now() + std::clamp(until, absl::Milliseconds(1), options_.wait_slice));
        }
      }
      // A caller that may leave without telling (the synchronous API's `cancelled`) is asked
      // every wait_slice.
      if (sync_waiters_ > 0) wake = std::min(wake, absl::Now() + options_.wait_slice);
      if (wake > absl::Now()) dispatch_cv_.WaitWithDeadline(&mu_, wake);
      if (shutting_down_) break;
    }
    std::vector<std::function<void()>> answers = DispatchRound();
    mu_.Unlock();
    for (auto& a : answers) a();
    mu_.Lock();
  }
  mu_.Unlock();
}

std::vector<std::function<void()>> Core::DispatchRound() {
  std::vector<std::function<void()>> answers;
  std::vector<Op> ops;
  while (!ops_.empty() && ops.size() < kMaxOpsPerRound) {
    ops.push_back(std::move(ops_.front()));
    ops_.pop_front();
  }
  std::vector<Status> results(ops.size(), Status::Ok());
  const absl::Time now = absl::Now();
  const bool reap = reaping_ && now >= next_reap_;
  if (reap) next_reap_ = now + options_.reap_interval;
  admitted_.clear();
  // Polls taken off waiters_ in this round with their answer; sent once the round committed.
  std::vector<std::pair<std::shared_ptr<LeaseWait>, pb::LeaseJobResponse>> leased;
  int expired = 0;
  int retried = 0;
  Status st = EnsureMemoryState();
  if (st.ok()) {
    st = Tx([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
      // 1. The operations, in arrival order, each in its savepoint.
      for (size_t i = 0; i < ops.size(); ++i) results[i] = InSavepoint(ops[i].apply);
      // 2. Lease expiry, after the heartbeats that arrived before it.
      if (reap) {
        Status r = InSavepoint([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return ExpireLeasesInTx(&expired, &retried);
        });
        if (!r.ok()) RDATTN_LOG(kError) << "lease reaper: " << r.ToString();
      }
      // 3. Matching: each waiting poll, oldest first, is offered the job the scheduler picks
      // for it, once per work generation (a job became PENDING or left its backoff), until
      // the queue has none left. Polls that ended or whose caller left are answered with no
      // job. A pass over the waiters happens only when one of these is due.
      if (queue_.ReleaseDue(NowMicros()) > 0) NotifyWork();
      const absl::Time t = absl::Now();
      const bool sync_check = sync_waiters_ > 0 && t >= next_sync_check_;
      if (sync_check) next_sync_check_ = t + options_.wait_slice;
      const bool pass = work_gen_ != matched_gen_ || !admitted_.empty() || left_pending_ > 0 ||
                        t >= earliest_wait_end_ || sync_check || shutting_down_;
      matched_gen_ = work_gen_;
      if (!pass || waiters_.empty()) return Status::Ok();
      left_pending_ = 0;
      std::optional<ClusterView> cluster;  // read once per round, when a poll is offered a job
      absl::Time earliest = absl::InfiniteFuture();
      using WaiterIt = std::list<std::shared_ptr<LeaseWait>>::iterator;
      auto remove = [&](WaiterIt it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if ((*it)->caller_left) --sync_waiters_;
        return waiters_.erase(it);
      };
      auto take = [&](WaiterIt it, pb::LeaseJobResponse resp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        leased.emplace_back(*it, std::move(resp));
        return remove(it);
      };
      for (auto it = waiters_.begin(); it != waiters_.end();) {
        const std::shared_ptr<LeaseWait> w = *it;
        auto gone = [w] {
          return w->left.load() || absl::Now() >= w->call_deadline ||
                 (w->caller_left && w->caller_left());
        };
        if (shutting_down_ || gone()) {
          it = take(it, pb::LeaseJobResponse());
          continue;
        }
        if (queue_.size() > 0 && w->tried_gen != work_gen_) {
          w->tried_gen = work_gen_;
          if (!cluster) {
            cluster.emplace();
            cluster->now_us = NowMicros();
            const int64_t live_since =
                cluster->now_us - absl::ToInt64Microseconds(WorkerLiveness());
            for (const auto& [id, lw] : workers_) {
              if (lw.last_seen_us < live_since) continue;
              cluster->live_workers[lw.kind] += 1;
              cluster->live.push_back(OtherWorker{id, lw.kind, lw.free_slots});
            }
          }
          StatusOr<std::optional<pb::LeaseJobResponse>> r =
              TryLeaseInTx(w->worker, w->req.free_slots(), *cluster, gone);
          if (!r.ok()) {
            // This poll's error (e.g. DATA_LOSS of the store) is its answer.
            const Status err = r.status();
            w->answered = true;
            answers.push_back([w, err] { w->done(err); });
            it = remove(it);
            continue;
          }
          if (r->has_value()) {
            it = take(it, std::move(**r));
            continue;
          }
          if (gone()) {
            it = take(it, pb::LeaseJobResponse());
            continue;
          }
        }
        // A poll is offered a job at least once (wait 0 included) before its wait ends.
        if (absl::Now() >= w->wait_end) {
          it = take(it, pb::LeaseJobResponse());
          continue;
        }
        earliest = std::min({earliest, w->wait_end, w->call_deadline});
        ++it;
      }
      earliest_wait_end_ = earliest;
      return Status::Ok();
    });
  }
  if (!st.ok()) {
    // Nothing of the round was committed: the operations get the error (a poll admitted in
    // it too, through its operation); polls that waited before go back to waiting (their
    // leases were undone) and are offered a job again.
    RDATTN_LOG(kError) << "dispatch round of " << ops.size()
                       << " operations failed: " << st.ToString();
    for (const std::shared_ptr<LeaseWait>& a : admitted_) {
      auto it = std::find(waiters_.begin(), waiters_.end(), a);
      if (it != waiters_.end()) waiters_.erase(it);
    }
    for (auto& [w, resp] : leased) {
      if (std::find(admitted_.begin(), admitted_.end(), w) != admitted_.end()) continue;
      waiters_.push_back(w);
    }
    sync_waiters_ = 0;
    earliest_wait_end_ = absl::Now();  // the next round makes a pass
    for (const std::shared_ptr<LeaseWait>& w : waiters_) {
      w->tried_gen = ~uint64_t{0};
      if (w->caller_left) ++sync_waiters_;
    }
    admitted_.clear();
    for (Op& op : ops) {
      answers.push_back([f = std::move(op.finish), st] { f(st); });
    }
    return answers;
  }
  admitted_.clear();
  if (counters_ != nullptr) {
    if (expired > 0) counters_->LeasesExpired(expired);
    if (retried > 0) counters_->JobsRetried(retried);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    answers.push_back([f = std::move(ops[i].finish), s = results[i]] { f(s); });
  }
  for (auto& [w, resp] : leased) {
    if (w->answered) continue;
    w->answered = true;
    answers.push_back([w = w, resp = std::move(resp)]() mutable { w->done(std::move(resp)); });
  }
  return answers;
}

}  // namespace rdattn::coordinator
