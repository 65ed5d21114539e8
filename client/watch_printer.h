// Turns a WatchSweep stream into lines (`rdattn watch --format text`): job state changes,
// evaluations, failures and seed-policy looks as they come, and per-job progress (step, tokens,
// loss, tokens/s, ETA) at most once per job every `progress_interval_seconds`. No I/O and no
// clock: the caller passes the time, so the throttling and the ETA are unit-tested.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rdattn/v1/coordinator.pb.h"
#include "rdattn/v1/sweep.pb.h"

namespace rdattn::client {

namespace pb = ::rdattn::v1;

struct WatchPrinterOptions {
  // Minimum seconds between two progress lines of one job; 0 prints every TRAIN_STEP event.
  double progress_interval_seconds = 10.0;
};

// "look 1 at n = 3: continue, adding seeds 4, 5" or "look 2 at n = 5: stop (every comparison
// crossed a boundary)": one line for a seed policy's look (text lines and the live table).
std::string SeedLookLine(const pb::SeedLook& look);

// A job's state for people: "submitted" for a job no worker has had yet (PENDING with no
// attempt, or a state not known yet), else the state's name ("RUNNING").
std::string WatchJobStateName(pb::JobState state, int attempts);

class WatchPrinter {
 public:
  // `sweep` (GetSweep, full view) gives each job's target tokens and current state.
  WatchPrinter(const pb::SweepStatus& sweep, WatchPrinterOptions options);

  // The lines to print for one event (none for a throttled TRAIN_STEP, a repeated seq or an
  // event case this client does not know). `now_seconds` is any monotonic clock reading.
  std::vector<std::string> OnEvent(const pb::WatchEvent& event, double now_seconds);

  // A newer GetSweep (full view): the target tokens of jobs added to a running sweep (a seed
  // policy adds pair groups after a look). States are left as the events set them.
  void OnSweep(const pb::SweepStatus& sweep);
  // An event named a job that no GetSweep has shown yet (its target tokens are unknown).
  bool needs_sweep() const { return needs_sweep_; }

  // A terminal SweepStateChange has been seen: the stream is over.
  bool ended() const { return ended_; }
  pb::SweepState final_state() const { return final_state_; }
  // The highest seq seen (the resume point of a reconnect).
  uint64_t last_seq() const { return last_seq_; }

 private:
  struct JobView {
    int64_t target_tokens = 0;
    bool from_sweep = false;  // seen in a GetSweep (target_tokens is known)
    pb::JobState state = pb::JOB_STATE_UNSPECIFIED;
    double last_progress_print = -1e300;
  };

  JobView& View(const std::string& job_id);
  std::string Name(const std::string& job_id) const;
  std::string DoneSummary() const;
  std::vector<std::string> OnJobStateChange(const pb::JobStateChange& change);
  std::vector<std::string> OnMetric(const pb::MetricEvent& e, double now_seconds);

  std::string sweep_id_;
  WatchPrinterOptions options_;
  std::map<std::string, JobView> jobs_;
  uint64_t last_seq_ = 0;
  bool ended_ = false;
  bool needs_sweep_ = false;
  pb::SweepState final_state_ = pb::SWEEP_STATE_UNSPECIFIED;
};

}  // namespace rdattn::client
