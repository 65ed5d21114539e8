#include "client/watch_printer.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "client/format.h"
#include "proto/contract/contract.h"

namespace rdattn::client {

std::string SeedLookLine(const pb::SeedLook& look) {
  return contract::DescribeSeedLook(look, /*with_comparisons=*/false);
}

std::string WatchJobStateName(pb::JobState state, int attempts) {
  if (state == pb::JOB_STATE_UNSPECIFIED || (state == pb::JOB_STATE_PENDING && attempts <= 0)) {
    return "submitted";
  }
  return JobStateName(state);
}

WatchPrinter::WatchPrinter(const pb::SweepStatus& sweep, WatchPrinterOptions options)
    : sweep_id_(sweep.sweep_id()), options_(options) {
  for (const pb::JobStatus& j : sweep.jobs()) {
    JobView& v = jobs_[j.job().job_id()];
    v.target_tokens = TargetTokens(j.job());
    v.from_sweep = true;
    v.state = j.state();
  }
}

void WatchPrinter::OnSweep(const pb::SweepStatus& sweep) {
  for (const pb::JobStatus& j : sweep.jobs()) {
    auto [it, added] = jobs_.try_emplace(j.job().job_id());
    JobView& v = it->second;
    v.target_tokens = TargetTokens(j.job());
    v.from_sweep = true;
    if (added) v.state = j.state();
  }
  needs_sweep_ = false;
  for (const auto& [id, v] : jobs_) needs_sweep_ = needs_sweep_ || !v.from_sweep;
}

WatchPrinter::JobView& WatchPrinter::View(const std::string& job_id) {
  JobView& v = jobs_[job_id];
  if (!v.from_sweep) needs_sweep_ = true;
  return v;
}

std::string WatchPrinter::Name(const std::string& job_id) const {
  return ShortJobId(job_id, sweep_id_);
}

std::string WatchPrinter::DoneSummary() const {
  int done = 0;
  for (const auto& [id, v] : jobs_) done += IsTerminal(v.state) ? 1 : 0;
  return std::to_string(done) + "/" + std::to_string(jobs_.size()) + " jobs ended";
}

std::vector<std::string> WatchPrinter::OnEvent(const pb::WatchEvent& event, double now_seconds) {
  if (event.seq() != 0 && event.seq() <= last_seq_) return {};  // replayed after a reconnect
  last_seq_ = std::max(last_seq_, event.seq());
  switch (event.event_case()) {
    case pb::WatchEvent::kJobStateChange:
      return OnJobStateChange(event.job_state_change());
    case pb::WatchEvent::kMetricEvent:
      return OnMetric(event.metric_event(), now_seconds);
    case pb::WatchEvent::kSweepStateChange: {
      const pb::SweepStateChange& c = event.sweep_state_change();
      const bool created = c.from_state() == pb::SWEEP_STATE_UNSPECIFIED;
      std::string line = "sweep " + sweep_id_ + ": ";
      if (created && c.to_state() == pb::SWEEP_STATE_PENDING) {
        line += "submitted";
      } else {
        line += (created ? std::string("submitted") : SweepStateName(c.from_state())) + " -> " +
                SweepStateName(c.to_state());
      }
      if (!c.reason().empty() && !(created && c.reason() == "submitted")) {
        line += " (" + c.reason() + ")";
      }
      if (IsTerminal(c.to_state())) {
        ended_ = true;
        final_state_ = c.to_state();
      }
      return {line};
    }
    case pb::WatchEvent::kSeedLook:
      return {SeedLookLine(event.seed_look())};
    default:  // EVENT_NOT_SET, or a case added to the proto after this client was built
      break;
  }
  return {};
}

std::vector<std::string> WatchPrinter::OnJobStateChange(const pb::JobStateChange& c) {
  JobView& v = View(c.job_id());
  v.state = c.to_state();
  std::string line = Name(c.job_id()) + "  ";
  const bool created = c.from_state() == pb::JOB_STATE_UNSPECIFIED;  // submitted, or added
  if (created && c.to_state() == pb::JOB_STATE_PENDING) {
    line += "submitted";
  } else {
    line +=
        (created ? std::string("submitted") : JobStateName(c.from_state())) + " -> " +
        (c.to_state() == pb::JOB_STATE_UNSPECIFIED ? std::string("?") : JobStateName(c.to_state()));
  }
  std::vector<std::string> details;
  if (c.attempt() > 0) details.push_back("attempt " + std::to_string(c.attempt()));
  if (!c.worker_id().empty()) details.push_back("worker " + c.worker_id());
  if (!c.reason().empty() && !(created && c.reason() == "submitted")) {
    details.push_back(c.reason());
  }
  if (!details.empty()) {
    line += "  (";
    for (size_t i = 0; i < details.size(); ++i) line += (i ? ", " : "") + details[i];
    line += ")";
  }
  if (IsTerminal(c.to_state())) line += "  [" + DoneSummary() + "]";
  return {line};
}

std::vector<std::string> WatchPrinter::OnMetric(const pb::MetricEvent& e, double now_seconds) {
  JobView& v = View(e.job_id());
  const std::string name = Name(e.job_id());
  std::ostringstream line;
  switch (e.kind()) {
    case pb::MetricEvent::KIND_TRAIN_STEP: {
      if (now_seconds - v.last_progress_print < options_.progress_interval_seconds) return {};
      v.last_progress_print = now_seconds;
      line << name << "  step " << e.step() << "  tokens " << HumanTokens(e.tokens());
      if (v.target_tokens > 0) {
        line << "/" << HumanTokens(v.target_tokens) << " ("
             << Fixed(
                    100.0 * static_cast<double>(e.tokens()) / static_cast<double>(v.target_tokens),
                    1)
             << "%)";
      }
      line << "  loss " << Fixed(e.train_loss(), 4);
      if (e.tokens_per_second() > 0) line << "  " << HumanRate(e.tokens_per_second()) << " tok/s";
      const auto eta = EtaSeconds(e.tokens(), v.target_tokens, e.tokens_per_second());
      line << "  ETA " << (eta ? HumanDuration(*eta) : "?");
      return {line.str()};
    }
    case pb::MetricEvent::KIND_EVAL:
      line << name << "  eval at "
           << HumanTokens(e.milestone_tokens() > 0 ? e.milestone_tokens() : e.tokens())
           << " tokens: val NLL " << Fixed(e.val_nll(), 4) << " (ppl "
           << Fixed(std::exp(e.val_nll()), 2) << ")";
      if (e.js_mean_nats() > 0) line << "  JS " << Fixed(e.js_mean_nats(), 4) << " nats";
      return {line.str()};
    case pb::MetricEvent::KIND_INIT:
      line << name << "  started (attempt " << e.attempt() << ", " << e.param_count()
           << " parameters, world size " << e.world_size();
      if (!e.device_name().empty()) line << ", " << e.device_name();
      line << ")";
      return {line.str()};
    case pb::MetricEvent::KIND_CHECKPOINT:
      line << name << "  checkpoint at step " << e.step();
      return {line.str()};
    case pb::MetricEvent::KIND_FINISHED:
      line << name << "  finished at " << HumanTokens(e.tokens()) << " tokens";
      if (e.test_nll() > 0) line << ": test NLL " << Fixed(e.test_nll(), 4);
      return {line.str()};
    case pb::MetricEvent::KIND_FAILED:
      line << name << "  failed: " << e.error();
      return {line.str()};
    default:
      return {};
  }
}

}  // namespace rdattn::client
