// The live table of `rdattn watch` on a terminal (docs/client.md "watch ID"): a sweep line (state,
// jobs done/total, overall ETA), the latest seed-policy look, then one row per job (state,
// attempt, progress bar with tokens done/total, loss, last val NLL, tokens/s, ETA, worker).
//
// WatchTable is the model and the text of one frame: it merges GetSweep snapshots (full view)
// and stream events, with no I/O and no clock (the caller passes the time), so it is
// unit-tested. TerminalFrame turns successive frames into the ANSI cursor movements that redraw
// the previous frame in place.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rdattn/v1/coordinator.pb.h"
#include "rdattn/v1/sweep.pb.h"

namespace rdattn::client {

namespace pb = ::rdattn::v1;

class WatchTable {
 public:
  // `sweep`: GetSweep (full view) at `now_seconds` (any monotonic clock reading).
  WatchTable(const pb::SweepStatus& sweep, double now_seconds);

  // A newer GetSweep (full view): adds the jobs the table does not have yet (a seed policy adds
  // pair groups to a running sweep), after the others, and takes every job's fields from it
  // unless an event newer than the snapshot (seq > last_event_seq) has set them.
  void OnSweep(const pb::SweepStatus& sweep, double now_seconds);

  // One stream event. A repeated seq (a replay after a reconnect) and an event case this client
  // does not know are ignored; an event the last snapshot already holds (seq <=
  // last_event_seq) changes no field, but a terminal sweep state still ends the table.
  void OnEvent(const pb::WatchEvent& event, double now_seconds);

  // An event named a job that no snapshot has shown (its target tokens are unknown): the caller
  // should call GetSweep again.
  bool needs_sweep() const { return needs_sweep_; }

  // A line shown under the sweep line until cleared with "" (e.g. "reconnecting ...").
  void set_note(std::string note) { note_ = std::move(note); }

  // The frame at `now_seconds`: at most `height` - 1 lines (the cursor keeps the last line of
  // the terminal, so a redraw can move up over the whole frame) of at most `width` - 1
  // columns (longer lines are cut; control characters are replaced by '?'). When the jobs do not
  // fit, the running and failed ones are shown first and a last line counts the others.
  std::vector<std::string> Render(double now_seconds, int width, int height) const;

  // A terminal sweep state has been seen (event or snapshot).
  bool ended() const { return ended_; }
  pb::SweepState final_state() const { return ended_ ? state_ : pb::SWEEP_STATE_UNSPECIFIED; }
  uint64_t last_seq() const { return last_seq_; }

 private:
  struct Row {
    std::string job_id;
    int64_t target_tokens = 0;
    bool from_sweep = false;  // seen in a snapshot: target_tokens is known
    pb::JobState state = pb::JOB_STATE_UNSPECIFIED;
    int attempts = 0;
    int64_t step = 0;
    int64_t tokens = 0;
    bool has_loss = false;
    double loss = 0;
    double val_nll = 0;  // 0: none yet
    double tokens_per_second = 0;
    double progress_time = 0;  // when tokens and tokens_per_second were learnt
    std::string worker;
    uint64_t seq = 0;  // seq of the last event or the snapshot that set the fields
  };

  Row& RowOf(const std::string& job_id);
  void OnJobStateChange(const pb::JobStateChange& c, uint64_t seq);
  void OnMetric(const pb::MetricEvent& e, uint64_t seq, double now_seconds);
  // Tokens left of a running row at `now` (its rate carried on since progress_time).
  double Remaining(const Row& r, double now_seconds) const;
  std::string SweepLine(double now_seconds) const;
  std::vector<std::string> Cells(const Row& r, double now_seconds, int bar_width) const;

  std::string sweep_id_;
  std::string name_;
  pb::SweepState state_ = pb::SWEEP_STATE_UNSPECIFIED;
  std::vector<Row> rows_;  // in the order the snapshots listed them
  std::map<std::string, size_t> index_;
  uint64_t last_seq_ = 0;      // highest event seq seen
  uint64_t snapshot_seq_ = 0;  // highest last_event_seq of a snapshot taken
  bool needs_sweep_ = false;
  bool ended_ = false;
  std::string look_;  // the latest SeedLook line
  std::string note_;
};

// Draws successive frames over each other on an ANSI terminal: the first frame is written where
// the cursor is; each next one moves the cursor up over the previous frame, rewrites its lines
// (clearing each to its end) and clears what is left below. A change of width clears the
// screen first (the old lines may have wrapped).
class TerminalFrame {
 public:
  std::string Redraw(const std::vector<std::string>& lines, int width);

 private:
  size_t drawn_ = 0;  // lines of the previous frame
  int width_ = 0;
};

// Columns and rows of the terminal on `fd`, else from $COLUMNS and $LINES, else 80 x 24.
std::pair<int, int> TerminalSize(int fd);

// `text` cut to at most `columns` code points, control characters replaced by '?'.
std::string FitLine(const std::string& text, int columns);

}  // namespace rdattn::client
