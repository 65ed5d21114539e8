// Store rows -> stats::ReportInput and the stored seed policy -> stats::SequentialSection
// (report_input.h, docs/report.md "Using it").
#include "coordinator/report_input.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "coordinator/data_identity.h"
#include "coordinator/proto_convert.h"
#include "coordinator/stats/paired_stats.h"
#include "proto/contract/contract.h"

namespace rdattn::coordinator {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string HardwareKindLabel(HardwareKind kind) {
  switch (kind) {
    case HardwareKind::kCpu:
      return "CPU";
    case HardwareKind::kGpu:
      return "GPU";
    case HardwareKind::kAny:
      break;
  }
  return "";
}

// The one place a job's state becomes the report's: the statistics library has its own enum
// (it knows no coordinator type), with kUnknown for an input that does not say.
stats::RunState RunStateOf(JobState state) {
  switch (state) {
    case JobState::kPending:
      return stats::RunState::kPending;
    case JobState::kLeased:
      return stats::RunState::kLeased;
    case JobState::kRunning:
      return stats::RunState::kRunning;
    case JobState::kSucceeded:
      return stats::RunState::kSucceeded;
    case JobState::kFailed:
      return stats::RunState::kFailed;
    case JobState::kCancelled:
      return stats::RunState::kCancelled;
  }
  return stats::RunState::kUnknown;
}

// What the metric events of one job say, per attempt where it matters.
struct JobEvents {
  std::map<int64_t, stats::MilestoneResult> milestones;  // latest evaluation per milestone
  double test_nll = kNaN;
  // Per attempt: training tokens/s samples, largest peak memory, hardware kind (INIT).
  std::map<int, std::vector<double>> tokens_per_second;
  std::map<int, int64_t> peak_memory_bytes;
  std::map<int, HardwareKind> hardware_kind;
};

std::map<std::string, JobEvents> CollectEvents(const std::vector<EventRow>& events) {
  std::map<std::string, JobEvents> out;
  for (const EventRow& e : events) {
    if (!e.event.has_metric_event()) continue;
    const pb::MetricEvent& m = e.event.metric_event();
    const std::string& job_id = e.job_id.empty() ? m.job_id() : e.job_id;
    const int attempt = e.attempt != 0 ? e.attempt : m.attempt();
    JobEvents& j = out[job_id];
    auto note_memory = [&] {
      if (m.peak_memory_bytes() > 0) {
        int64_t& peak = j.peak_memory_bytes[attempt];
        peak = std::max(peak, m.peak_memory_bytes());
      }
    };
    switch (m.kind()) {
      case pb::MetricEvent::KIND_INIT: {
        const HardwareKind kind = HardwareKindFromProto(m.hardware_kind());
        if (kind != HardwareKind::kAny) j.hardware_kind[attempt] = kind;
        break;
      }
      case pb::MetricEvent::KIND_TRAIN_STEP:
        if (std::isfinite(m.tokens_per_second()) && m.tokens_per_second() > 0) {
          j.tokens_per_second[attempt].push_back(m.tokens_per_second());
        }
        note_memory();
        break;
      case pb::MetricEvent::KIND_EVAL: {
        // A resumed attempt that re-evaluates a milestone replaces the earlier value.
        const int64_t milestone = m.milestone_tokens() > 0 ? m.milestone_tokens() : m.tokens();
        stats::MilestoneResult r;
        r.val_nll = m.val_nll();
        r.js_nats.assign(m.js_nats().begin(), m.js_nats().end());
        r.js_bits.assign(m.js_bits().begin(), m.js_bits().end());
        r.js_sqrt.assign(m.js_sqrt().begin(), m.js_sqrt().end());
        r.route_entropy_qk_nats.assign(m.route_entropy_qk_nats().begin(),
                                       m.route_entropy_qk_nats().end());
        r.route_entropy_v_nats.assign(m.route_entropy_v_nats().begin(),
                                      m.route_entropy_v_nats().end());
        j.milestones[milestone] = std::move(r);
        break;
      }
      case pb::MetricEvent::KIND_FINISHED:
        // test_nll is there only when the run has test windows (eval_tokens > 0).
        if (m.eval_tokens() > 0 || m.test_nll() != 0) j.test_nll = m.test_nll();
        note_memory();
        break;
      default:
        break;
    }
  }
  return out;
}

// Data identity (docs/operations.md "Data identity"): within each pair group the reference
// arm's job (else the first job with digests) fixes the data; a job whose INIT events carry
// another data_digest, or whose attempts disagree among themselves, is excluded from every pair
// with the reason. Jobs without digests (older trainers) are unknown and kept.
void ExcludeDataMismatches(const ReportSource& source, const std::string& reference,
                           std::vector<stats::RunResult>& runs) {
  std::map<std::string, std::vector<EventRow>> inits;  // job id -> its INIT rows
  for (const EventRow& e : source.events) {
    if (!e.event.has_metric_event()) continue;
    if (e.event.metric_event().kind() != pb::MetricEvent::KIND_INIT) continue;
    inits[e.job_id.empty() ? e.event.metric_event().job_id() : e.job_id].push_back(e);
  }
  auto first_of = [&](const std::string& job_id) -> const pb::MetricEvent* {
    auto it = inits.find(job_id);
    return it == inits.end() ? nullptr : FirstDigestedInit(it->second, INT32_MAX);
  };
  auto label = [](const JobRow& j, const pb::MetricEvent& e) {
    return "job " + j.id + " (arm " + j.spec.arm() + ") attempt " + std::to_string(e.attempt());
  };
  std::map<std::string, std::vector<size_t>> groups;  // pair group -> indexes into jobs
  for (size_t i = 0; i < source.jobs.size() && i < runs.size(); ++i) {
    const JobRow& j = source.jobs[i];
    const std::string key =
        j.pair_group.empty() ? j.spec.scale() + "/" + std::to_string(j.spec.seed()) : j.pair_group;
    groups[key].push_back(i);
  }
  for (const auto& [group, members] : groups) {
    // The anchor: the reference arm's main job, else the first job with a digest (a job the
    // coordinator failed for data identity never is).
    const JobRow* anchor = nullptr;
    const pb::MetricEvent* anchor_init = nullptr;
    for (size_t i : members) {
      const JobRow& j = source.jobs[i];
      const pb::MetricEvent* e = first_of(j.id);
      if (e == nullptr) continue;
      if (j.state == JobState::kFailed && j.failure_reason.rfind(kDataIdentityReason, 0) == 0)
        continue;  // the coordinator refused its data: they are not the pair's
      const bool is_ref = j.spec.arm() == reference && j.spec.control_parent_arm().empty();
      if (anchor == nullptr || is_ref) {
        anchor = &j;
        anchor_init = e;
        if (is_ref) break;
      }
    }
    for (size_t i : members) {
      const JobRow& j = source.jobs[i];
      const pb::MetricEvent* first = first_of(j.id);
      if (first == nullptr) continue;
      std::string why;
      // Its own attempts first: a job whose data changed between attempts mixed two versions.
      for (const EventRow& row : inits[j.id]) {
        const pb::MetricEvent& e = row.event.metric_event();
        why = DescribeDataDifference(*first, label(j, *first), e, label(j, e));
        if (!why.empty()) break;
      }
      if (why.empty() && anchor != nullptr && anchor != &j) {
        why = DescribeDataDifference(*anchor_init, label(*anchor, *anchor_init), *first,
                                     label(j, *first));
        if (!why.empty()) why = "its data differ from those of its pair: " + why;
      } else if (!why.empty()) {
        why = "its attempts read different data: " + why;
      }
      if (why.empty()) continue;
      stats::RunResult& r = runs[i];
      r.excluded = std::string(kDataIdentityReason) + why;
      r.milestones.clear();
      r.test_nll = kNaN;
    }
  }
}

}  // namespace

uint64_t ReportBootstrapSeed(const std::string& sweep_id) {
  strings::Fnv1a64 h;
  h.Mix(sweep_id);
  return h.value();
}

std::vector<int64_t> ExpectedMilestones(const pb::RunSpec& run) {
  StatusOr<RunConfig> cfg = contract::ParseRunSpec(run);
  if (!cfg.ok()) return {};
  std::set<int64_t> out;
  for (const EvalMilestone& m : EvalMilestones(cfg->schedule)) out.insert(m.tokens);
  return {out.begin(), out.end()};
}

stats::ReportInput MakeStatsInput(const ReportSource& source, const std::string& reference_arm) {
  const pb::SweepSpec& spec = source.sweep.spec;
  stats::ReportInput in;
  in.sweep_id = source.sweep.id;
  in.sweep_name = spec.name();
  in.reference_arm = reference_arm.empty() ? contract::ReferenceArm(spec) : reference_arm;
  for (const pb::ScaleSpec& s : spec.scales()) in.scales.push_back(contract::ScaleName(s));
  in.arms.assign(spec.arms().begin(), spec.arms().end());
  if (spec.has_seed_policy()) {
    // The seeds run so far (the initial ones, then those each look added), in that order.
    std::set<uint64_t> seen;
    for (const JobRow& job : source.jobs) {
      if (seen.insert(job.spec.seed()).second) in.seeds.push_back(job.spec.seed());
    }
  } else {
    in.seeds.assign(spec.seeds().begin(), spec.seeds().end());
  }
  std::map<std::string, int64_t> control_stop;
  for (const pb::ControlSpec& c : spec.controls()) {
    in.controls.push_back({c.arm(), c.parent_arm(), c.stop_at_tokens()});
    control_stop[c.arm()] = c.stop_at_tokens();
  }

  // The validation milestones: where the main jobs evaluate (controls stop on this schedule).
  std::set<int64_t> milestones;
  for (const JobRow& job : source.jobs) {
    if (!job.spec.control_parent_arm().empty()) continue;
    for (int64_t m : ExpectedMilestones(job.spec.run())) milestones.insert(m);
  }
  in.milestones.assign(milestones.begin(), milestones.end());

  std::map<std::string, JobEvents> events = CollectEvents(source.events);
  for (const JobRow& job : source.jobs) {
    stats::RunResult r;
    r.job_id = job.id;
    r.scale = job.spec.scale();
    r.arm = job.spec.arm();
    r.seed = job.spec.seed();
    r.state = RunStateOf(job.state);
    r.failure_reason = job.failure_reason;
    r.control_parent_arm = job.spec.control_parent_arm();
    if (!r.control_parent_arm.empty()) {
      auto it = control_stop.find(r.arm);
      r.control_stop_tokens =
          it != control_stop.end() ? it->second : job.spec.run().schedule().stop_at_tokens();
    }
    r.hardware_kind = HardwareKindLabel(job.worker_kind);
    auto e = events.find(job.id);
    if (e != events.end()) {
      JobEvents& j = e->second;
      r.milestones = std::move(j.milestones);
      r.test_nll = j.test_nll;
      // Cost from the latest attempt that trained: its median tokens/s, its largest peak
      // memory and its hardware kind (from its INIT event; else the job's last worker's).
      int attempt = -1;
      if (!j.tokens_per_second.empty()) attempt = j.tokens_per_second.rbegin()->first;
      if (attempt < 0 && !j.peak_memory_bytes.empty())
        attempt = j.peak_memory_bytes.rbegin()->first;
      if (attempt >= 0) {
        auto tps = j.tokens_per_second.find(attempt);
        if (tps != j.tokens_per_second.end()) r.tokens_per_second = stats::Median(tps->second);
        auto mem = j.peak_memory_bytes.find(attempt);
        if (mem != j.peak_memory_bytes.end()) r.peak_memory_bytes = mem->second;
        auto kind = j.hardware_kind.find(attempt);
        if (kind != j.hardware_kind.end()) r.hardware_kind = HardwareKindLabel(kind->second);
      }
    }
    in.runs.push_back(std::move(r));
  }
  ExcludeDataMismatches(source, in.reference_arm, in.runs);
  return in;
}

stats::SequentialSection SequentialSectionOf(const pb::SequentialState& state) {
  const pb::SequentialDesign& d = state.design();
  stats::SequentialSection out;
  out.boundary = d.boundary();
  out.alpha = d.alpha();
  out.look_seeds.assign(d.look_seeds().begin(), d.look_seeds().end());
  out.information.assign(d.information().begin(), d.information().end());
  out.alpha_spent.assign(d.alpha_spent().begin(), d.alpha_spent().end());
  out.efficacy_t.assign(d.efficacy_t().begin(), d.efficacy_t().end());
  out.futility_t.assign(d.futility_t().begin(), d.futility_t().end());
  out.futility_effect_sd = d.futility_effect_sd();
  out.futility_power = d.futility_power();
  out.simulations = d.simulations();
  out.simulation_seed = d.simulation_seed();
  out.simulated_alpha = d.simulated_alpha();
  out.expected_seeds_null = d.expected_seeds_null();
  out.expected_seeds_futility_effect = d.expected_seeds_futility_effect();
  out.expected_seeds_two_sd = d.expected_seeds_two_sd();
  out.power_two_sd = d.power_two_sd();
  for (const pb::SeedLook& l : state.looks()) {
    stats::LookRow look;
    look.look = l.look();
    look.n_seeds = l.n_seeds();
    look.n_planned = l.n_planned();
    look.decision = l.decision();
    look.added_seeds.assign(l.added_seeds().begin(), l.added_seeds().end());
    look.reason = l.reason();
    look.description = contract::DescribeSeedLook(l);
    for (const pb::LookComparison& c : l.comparisons()) {
      look.comparisons.push_back({c.scale(), c.arm(), c.reference_arm(), c.milestone_tokens(),
                                  c.n(), c.mean_delta_nll(), c.sd_delta_nll(), c.t_statistic(),
                                  c.efficacy_t(), c.futility_t(), c.outcome(), c.decided_at_look(),
                                  c.adjusted_p(), c.rci_low(), c.rci_high()});
    }
    out.looks.push_back(std::move(look));
  }
  out.stopped = state.stopped();
  out.stopped_at_look = state.stopped_at_look();
  out.method = state.method();
  return out;
}

}  // namespace rdattn::coordinator
