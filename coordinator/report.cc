// BuildReport: the paired per-seed table (see report.h).
#include "coordinator/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "coordinator/proto_convert.h"
#include "proto/contract/contract.h"

namespace rdattn::coordinator {
namespace {

// Latest val_nll per (job id, milestone tokens). A resumed attempt that re-evaluates a
// milestone replaces the earlier value (events arrive in seq order).
using NllTable = std::map<std::string, std::map<int64_t, double>>;

NllTable CollectNll(const std::vector<EventRow>& events) {
  NllTable out;
  for (const EventRow& e : events) {
    if (!e.event.has_metric_event()) continue;
    const pb::MetricEvent& m = e.event.metric_event();
    if (m.kind() != pb::MetricEvent::KIND_EVAL) continue;
    const int64_t milestone = m.milestone_tokens() > 0 ? m.milestone_tokens() : m.tokens();
    out[e.job_id][milestone] = m.val_nll();
  }
  return out;
}

std::string MissingReason(const JobRow& job) {
  switch (job.state) {
    case JobState::kFailed: return "job FAILED: " + job.failure_reason;
    case JobState::kCancelled: return "job CANCELLED";
    case JobState::kSucceeded: return "job SUCCEEDED without an evaluation at this milestone";
    default: return "not reached yet";
  }
}

struct ArmKey {
  std::string arm;
  std::string parent;  // reference arm, or the control's parent
  bool is_control = false;
};

}  // namespace

std::vector<int64_t> ExpectedMilestones(const pb::RunSpec& run) {
  StatusOr<RunConfig> cfg = contract::ParseRunSpec(run);
  if (!cfg.ok()) return {};
  const ScheduleConfig& s = cfg->schedule;
  std::set<int64_t> out;
  bool last_is_milestone = false;
  for (size_t i = 0; i < s.milestones_tokens.size() && i < s.milestone_steps.size(); ++i) {
    if (s.milestone_steps[i] <= s.stop_step) out.insert(s.milestones_tokens[i]);
    if (s.milestone_steps[i] == s.stop_step) last_is_milestone = true;
  }
  if (!last_is_milestone && s.stop_step > 0) out.insert(s.stop_step * s.global_batch_tokens);
  return {out.begin(), out.end()};
}

pb::Report BuildReport(const ReportInput& in) {
  pb::Report report;
  const pb::SweepSpec& spec = in.sweep.spec;
  const std::string reference =
      in.reference_arm.empty() ? contract::ReferenceArm(spec) : in.reference_arm;
  report.set_sweep_id(in.sweep.id);
  report.set_sweep_name(spec.name());
  report.set_reference_arm(reference);
  report.set_confidence_level(in.confidence_level);
  report.set_bootstrap_resamples(in.bootstrap_resamples);
  SetTimestamp(in.now_us, report.mutable_generate_time());

  bool complete = !in.jobs.empty();
  std::vector<std::string> scales;                                   // first-appearance order
  std::map<std::tuple<std::string, uint64_t, std::string>, const JobRow*> by_cell;  // scale, seed, arm
  std::map<std::string, std::set<uint64_t>> seeds_of_scale;
  std::vector<ArmKey> arms;  // compared arms, in expansion order
  for (const JobRow& j : in.jobs) {
    if (!IsTerminal(j.state)) complete = false;
    const pb::JobSpec& js = j.spec;
    if (std::find(scales.begin(), scales.end(), js.scale()) == scales.end()) scales.push_back(js.scale());
    by_cell[{js.scale(), js.seed(), js.arm()}] = &j;
    seeds_of_scale[js.scale()].insert(js.seed());
    const bool is_control = !js.control_parent_arm().empty();
    if (!is_control && js.arm() == reference) continue;
    ArmKey key{js.arm(), is_control ? js.control_parent_arm() : reference, is_control};
    if (std::none_of(arms.begin(), arms.end(), [&](const ArmKey& k) { return k.arm == key.arm; })) {
      arms.push_back(key);
    }
  }
  report.set_complete(complete);

  const NllTable nll = CollectNll(in.eval_events);
  std::set<std::tuple<std::string, uint64_t, std::string, int64_t>> missing_seen;
  auto add_missing = [&](const std::string& scale, uint64_t seed, const std::string& arm,
                         int64_t milestone, const JobRow* job) {
    if (!missing_seen.insert({scale, seed, arm, job == nullptr ? 0 : milestone}).second) return;
    pb::MissingEntry* m = report.add_missing();
    m->set_scale(scale);
    m->set_seed(seed);
    m->set_arm(arm);
    if (job == nullptr) {
      m->set_milestone_tokens(0);
      m->set_reason("no such job in the sweep");
      return;
    }
    m->set_milestone_tokens(milestone);
    m->set_job_id(job->id);
    m->set_job_state(ToProto(job->state));
    m->set_reason(MissingReason(*job));
  };
  auto lookup = [&](const JobRow* job, int64_t milestone, double* out) {
    if (job == nullptr) return false;
    auto j = nll.find(job->id);
    if (j == nll.end()) return false;
    auto v = j->second.find(milestone);
    if (v == j->second.end()) return false;
    *out = v->second;
    return true;
  };

  for (const std::string& scale : scales) {
    const std::set<uint64_t>& seeds = seeds_of_scale[scale];
    // (milestone, arm) cells: where each compared arm's jobs evaluate (expected or seen).
    std::vector<std::pair<int64_t, size_t>> cells;
    for (size_t ai = 0; ai < arms.size(); ++ai) {
      std::set<int64_t> milestones;
      for (uint64_t seed : seeds) {
        auto it = by_cell.find({scale, seed, arms[ai].arm});
        if (it == by_cell.end()) continue;
        for (int64_t m : ExpectedMilestones(it->second->spec.run())) milestones.insert(m);
        auto seen = nll.find(it->second->id);
        if (seen != nll.end()) {
          for (const auto& [m, v] : seen->second) milestones.insert(m);
        }
      }
      for (int64_t m : milestones) cells.emplace_back(m, ai);
    }
    std::sort(cells.begin(), cells.end());
    for (const auto& [milestone, ai] : cells) {
      const ArmKey& arm = arms[ai];
      pb::PairedRow* row = report.add_rows();
      row->set_scale(scale);
      row->set_milestone_tokens(milestone);
      row->set_arm(arm.arm);
      row->set_reference_arm(arm.parent);
      row->set_is_control(arm.is_control);
      double sum_ref = 0, sum_arm = 0, sum_delta = 0, sum_ppl = 0;
      std::vector<double> deltas;
      for (uint64_t seed : seeds) {
        auto a_it = by_cell.find({scale, seed, arm.arm});
        auto r_it = by_cell.find({scale, seed, arm.parent});
        const JobRow* a = a_it == by_cell.end() ? nullptr : a_it->second;
        const JobRow* r = r_it == by_cell.end() ? nullptr : r_it->second;
        double va = 0, vr = 0;
        const bool has_a = lookup(a, milestone, &va);
        const bool has_r = lookup(r, milestone, &vr);
        if (!has_a) add_missing(scale, seed, arm.arm, milestone, a);
        if (!has_r) add_missing(scale, seed, arm.parent, milestone, r);
        if (!has_a || !has_r) continue;
        pb::SeedDelta* d = row->add_pairs();
        d->set_seed(seed);
        d->set_reference_nll(vr);
        d->set_arm_nll(va);
        d->set_delta_nll(va - vr);
        d->set_ppl_change(std::expm1(va - vr));
        d->set_reference_job_id(r->id);
        d->set_arm_job_id(a->id);
        sum_ref += vr;
        sum_arm += va;
        sum_delta += va - vr;
        sum_ppl += std::expm1(va - vr);
        deltas.push_back(va - vr);
        if (va - vr < 0) row->set_wins(row->wins() + 1);
        if (va - vr == 0) row->set_ties(row->ties() + 1);
      }
      const int n = static_cast<int>(deltas.size());
      row->set_n(n);
      if (n == 0) continue;
      const double mean_delta = sum_delta / n;
      row->set_mean_reference_nll(sum_ref / n);
      row->set_mean_arm_nll(sum_arm / n);
      row->set_mean_delta_nll(mean_delta);
      row->set_ppl_change_of_mean_delta(std::expm1(mean_delta));
      row->set_mean_ppl_change(sum_ppl / n);
      if (n >= 2) {
        double ss = 0;
        for (double d : deltas) ss += (d - mean_delta) * (d - mean_delta);
        row->set_sd_delta_nll(std::sqrt(ss / (n - 1)));
      }
    }
  }
  return report;
}

}  // namespace rdattn::coordinator
