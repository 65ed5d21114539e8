#include "client/watch_table.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "client/format.h"
#include "client/watch_printer.h"

namespace rdattn::client {
namespace {

bool Active(pb::JobState s) { return s == pb::JOB_STATE_LEASED || s == pb::JOB_STATE_RUNNING; }

// Which rows stay on screen when not all fit: lower first.
int Priority(pb::JobState s, int attempts) {
  if (Active(s)) return 0;
  if (s == pb::JOB_STATE_FAILED) return 1;
  if (s == pb::JOB_STATE_PENDING && attempts > 0) return 2;  // waiting for a retry
  if (!IsTerminal(s)) return 3;                              // submitted
  return 4;                                                  // SUCCEEDED, CANCELLED
}

std::string Bar(int64_t tokens, int64_t target, bool full, int width) {
  std::string bar = "[";
  if (target <= 0 && !full) {
    bar += std::string(static_cast<size_t>(width), ' ');
  } else {
    const double fraction =
        full ? 1.0
             : std::clamp(static_cast<double>(tokens) / static_cast<double>(target), 0.0, 1.0);
    const int filled = static_cast<int>(std::floor(fraction * width + 1e-9));
    bar += std::string(static_cast<size_t>(filled), '#') +
           std::string(static_cast<size_t>(width - filled), '.');
  }
  return bar + "]";
}

int Utf8Length(const std::string& s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::string FitLine(const std::string& text, int columns) {
  std::string out;
  int n = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const bool continuation = (c & 0xC0) == 0x80;
    if (!continuation) {
      if (n == columns) break;
      ++n;
    }
    out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  }
  return out;
}

WatchTable::WatchTable(const pb::SweepStatus& sweep, double now_seconds)
    : sweep_id_(sweep.sweep_id()), name_(sweep.spec().name()) {
  OnSweep(sweep, now_seconds);
}

WatchTable::Row& WatchTable::RowOf(const std::string& job_id) {
  auto it = index_.find(job_id);
  if (it != index_.end()) return rows_[it->second];
  index_[job_id] = rows_.size();
  rows_.emplace_back();
  rows_.back().job_id = job_id;
  return rows_.back();
}

void WatchTable::OnSweep(const pb::SweepStatus& sweep, double now_seconds) {
  const uint64_t at = sweep.last_event_seq();
  snapshot_seq_ = std::max(snapshot_seq_, at);
  if (!sweep.spec().name().empty()) name_ = sweep.spec().name();
  if (at >= last_seq_ || IsTerminal(sweep.state())) state_ = sweep.state();
  if (IsTerminal(sweep.state())) ended_ = true;
  if (sweep.sequential().looks_size() > 0 && at >= last_seq_) {
    look_ = SeedLookLine(sweep.sequential().looks(sweep.sequential().looks_size() - 1));
  }
  for (const pb::JobStatus& j : sweep.jobs()) {
    Row& r = RowOf(j.job().job_id());
    r.target_tokens = TargetTokens(j.job());
    r.from_sweep = true;
    if (r.seq > at) continue;  // an event newer than the snapshot set the fields
    r.state = j.state();
    r.attempts = j.attempts();
    r.step = j.step();
    r.tokens = j.tokens();
    r.has_loss = j.step() > 0 || j.tokens() > 0;
    r.loss = j.last_train_loss();
    r.val_nll = j.last_val_nll();
    r.tokens_per_second = j.tokens_per_second();
    r.progress_time = now_seconds;
    r.worker = j.worker_id();
    r.seq = at;
  }
  needs_sweep_ =
      std::any_of(rows_.begin(), rows_.end(), [](const Row& r) { return !r.from_sweep; });
}

void WatchTable::OnEvent(const pb::WatchEvent& event, double now_seconds) {
  const uint64_t seq = event.seq();
  if (seq != 0 && seq <= last_seq_) return;  // replayed after a reconnect
  last_seq_ = std::max(last_seq_, seq);
  const bool stale = seq != 0 && seq <= snapshot_seq_;  // the snapshot holds it already
  switch (event.event_case()) {
    case pb::WatchEvent::kJobStateChange:
      if (!stale) OnJobStateChange(event.job_state_change(), seq);
      break;
    case pb::WatchEvent::kMetricEvent:
      if (!stale) OnMetric(event.metric_event(), seq, now_seconds);
      break;
    case pb::WatchEvent::kSweepStateChange: {
      const pb::SweepState to = event.sweep_state_change().to_state();
      if (!stale || IsTerminal(to)) state_ = to;
      if (IsTerminal(to)) ended_ = true;
      break;
    }
    case pb::WatchEvent::kSeedLook:
      if (!stale) look_ = SeedLookLine(event.seed_look());
      break;
    default:  // EVENT_NOT_SET, or a case added to the proto after this client was built
      break;
  }
}

void WatchTable::OnJobStateChange(const pb::JobStateChange& c, uint64_t seq) {
  Row& r = RowOf(c.job_id());
  if (!r.from_sweep) needs_sweep_ = true;
  r.state = c.to_state();
  r.attempts = std::max(r.attempts, c.attempt());
  if (!c.worker_id().empty()) r.worker = c.worker_id();
  r.seq = std::max(r.seq, seq);
}

void WatchTable::OnMetric(const pb::MetricEvent& e, uint64_t seq, double now_seconds) {
  Row& r = RowOf(e.job_id());
  if (!r.from_sweep) needs_sweep_ = true;
  r.seq = std::max(r.seq, seq);
  if (e.attempt() > 0) r.attempts = std::max(r.attempts, e.attempt());
  switch (e.kind()) {
    case pb::MetricEvent::KIND_TRAIN_STEP:
      r.step = e.step();
      r.tokens = e.tokens();
      r.has_loss = true;
      r.loss = e.train_loss();
      if (e.tokens_per_second() > 0) r.tokens_per_second = e.tokens_per_second();
      r.progress_time = now_seconds;
      break;
    case pb::MetricEvent::KIND_EVAL:
      r.val_nll = e.val_nll();
      break;
    case pb::MetricEvent::KIND_FINISHED:
      if (e.tokens() > 0) r.tokens = e.tokens();
      if (e.step() > 0) r.step = e.step();
      r.progress_time = now_seconds;
      break;
    default:
      break;
  }
}

double WatchTable::Remaining(const Row& r, double now_seconds) const {
  double left = static_cast<double>(std::max<int64_t>(r.target_tokens - r.tokens, 0));
  if (r.state == pb::JOB_STATE_RUNNING && r.tokens_per_second > 0) {
    left -= r.tokens_per_second * std::max(0.0, now_seconds - r.progress_time);
  }
  return std::max(0.0, left);
}

std::string WatchTable::SweepLine(double now_seconds) const {
  int done = 0, failed = 0, cancelled = 0, active = 0, waiting = 0;
  double remaining = 0, rate = 0;
  bool unknown = false;
  for (const Row& r : rows_) {
    if (IsTerminal(r.state)) {
      ++done;
      failed += r.state == pb::JOB_STATE_FAILED;
      cancelled += r.state == pb::JOB_STATE_CANCELLED;
      continue;
    }
    (Active(r.state) ? active : waiting) += 1;
    if (r.target_tokens <= 0) unknown = true;
    remaining += Remaining(r, now_seconds);
    if (r.state == pb::JOB_STATE_RUNNING) rate += r.tokens_per_second;
  }
  std::string line =
      "sweep " + sweep_id_ + (name_.empty() ? "" : " (" + name_ + ")") + "  " +
      (state_ == pb::SWEEP_STATE_UNSPECIFIED ? std::string("?") : SweepStateName(state_)) + "  " +
      std::to_string(done) + "/" + std::to_string(rows_.size()) + " jobs done";
  if (failed > 0) line += ", " + std::to_string(failed) + " failed";
  if (cancelled > 0) line += ", " + std::to_string(cancelled) + " cancelled";
  if (active > 0) line += ", " + std::to_string(active) + " running";
  if (waiting > 0) line += ", " + std::to_string(waiting) + " waiting";
  if (!ended_ && done < static_cast<int>(rows_.size())) {
    line +=
        "  ETA " + (unknown || !(rate > 0) ? std::string("?") : HumanDuration(remaining / rate));
  }
  return line;
}

std::vector<std::string> WatchTable::Cells(const Row& r, double now_seconds, int bar_width) const {
  const bool succeeded = r.state == pb::JOB_STATE_SUCCEEDED;
  const bool running = r.state == pb::JOB_STATE_RUNNING;
  const bool rate_shown = (running || IsTerminal(r.state)) && r.tokens_per_second > 0;
  std::string eta = "-";
  if (running) {
    eta = r.target_tokens > 0 && r.tokens_per_second > 0
              ? HumanDuration(Remaining(r, now_seconds) / r.tokens_per_second)
              : "?";
  }
  return {ShortJobId(r.job_id, sweep_id_),
          WatchJobStateName(r.state, r.attempts),
          std::to_string(r.attempts),
          Bar(r.tokens, r.target_tokens, succeeded, bar_width),
          HumanTokens(r.tokens) + "/" + (r.target_tokens > 0 ? HumanTokens(r.target_tokens) : "?"),
          r.has_loss ? Fixed(r.loss, 4) : "-",
          r.val_nll > 0 ? Fixed(r.val_nll, 4) : "-",
          rate_shown ? HumanRate(r.tokens_per_second) : "-",
          eta,
          r.worker.empty() ? "-" : r.worker};
}

std::vector<std::string> WatchTable::Render(double now_seconds, int width, int height) const {
  const int columns = std::max(1, width - 1);
  const int max_lines = std::max(1, height - 1);
  std::vector<std::string> head = {SweepLine(now_seconds)};
  if (!look_.empty()) head.push_back(look_);
  if (!note_.empty()) head.push_back(note_);

  // Which rows fit: all, or the most interesting ones and a line counting the others.
  const int room = max_lines - static_cast<int>(head.size()) - 1;  // - the column header
  std::vector<bool> shown(rows_.size(), true);
  std::string more;
  if (room < static_cast<int>(rows_.size())) {
    const int keep = std::max(0, room - 1);
    std::vector<size_t> order(rows_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return Priority(rows_[a].state, rows_[a].attempts) <
             Priority(rows_[b].state, rows_[b].attempts);
    });
    std::map<std::string, int> hidden;
    for (size_t k = 0; k < order.size(); ++k) {
      shown[order[k]] = static_cast<int>(k) < keep;
      if (!shown[order[k]]) {
        const Row& r = rows_[order[k]];
        ++hidden[WatchJobStateName(r.state, r.attempts)];
      }
    }
    more = "... " + std::to_string(rows_.size() - static_cast<size_t>(keep)) + " more jobs:";
    bool first = true;
    for (const auto& [state, n] : hidden) {
      more += (first ? " " : ", ") + std::to_string(n) + " " + state;
      first = false;
    }
  }

  // The widest progress bar that lets the table fit the width.
  std::vector<std::string> table_lines;
  for (int bar_width : {20, 12, 6}) {
    Table table({"JOB", "STATE", ">ATT", "PROGRESS", ">TOKENS", ">LOSS", ">VAL NLL", ">TOK/S",
                 ">ETA", "WORKER"});
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (shown[i]) table.AddRow(Cells(rows_[i], now_seconds, bar_width));
    }
    const std::string text = table.Render();
    table_lines.clear();
    size_t start = 0;
    while (start < text.size()) {
      const size_t end = text.find('\n', start);
      table_lines.push_back(text.substr(start, end - start));
      start = end == std::string::npos ? text.size() : end + 1;
    }
    if (Utf8Length(table_lines.front()) <= columns) break;
  }

  std::vector<std::string> lines = head;
  if (room >= 0) lines.insert(lines.end(), table_lines.begin(), table_lines.end());
  if (!more.empty() && static_cast<int>(lines.size()) < max_lines) lines.push_back(more);
  if (static_cast<int>(lines.size()) > max_lines) lines.resize(static_cast<size_t>(max_lines));
  for (std::string& line : lines) line = FitLine(line, columns);
  return lines;
}

std::string TerminalFrame::Redraw(const std::vector<std::string>& lines, int width) {
  std::string out;
  if (drawn_ > 0 && width != width_) {
    out += "\x1b[H\x1b[2J";  // home and clear: the old lines may have wrapped
  } else if (drawn_ > 0) {
    out += "\r\x1b[" + std::to_string(drawn_) + "A";
  }
  for (const std::string& line : lines) out += line + "\x1b[K\n";
  out += "\x1b[J";
  drawn_ = lines.size();
  width_ = width;
  return out;
}

std::pair<int, int> TerminalSize(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
    return {ws.ws_col, ws.ws_row};
  }
  auto env_int = [](const char* name, int fallback) {
    const char* v = std::getenv(name);
    const int n = v != nullptr ? std::atoi(v) : 0;
    return n > 0 ? n : fallback;
  };
  return {env_int("COLUMNS", 80), env_int("LINES", 24)};
}

}  // namespace rdattn::client
