// GetSweep's summary view and job pages (see sweep_summary.h).
#include "coordinator/sweep_summary.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "common/field_error.h"
#include "common/strings.h"
#include "coordinator/proto_convert.h"
#include "coordinator/report.h"

namespace rdattn::coordinator {
namespace {

constexpr char kPageTokenVersion[] = "p1";

// 32 bits that bind a page token to its sweep and position.
uint32_t TokenCheck(const std::string& sweep_id, int64_t seq) {
  strings::Fnv1a64 h;
  h.Mix(sweep_id);
  h.Mix(":");
  h.MixLittleEndian(static_cast<uint64_t>(seq));
  return static_cast<uint32_t>(h.value() ^ (h.value() >> 32));
}

bool ParseHex(const std::string& text, uint64_t* out) {
  if (text.empty() || text.size() > 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    int d = 0;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace

pb::SweepSummary MakeSweepSummary(const SweepSummaryFacts& f,
                                  const std::map<int64_t, int>& stored_milestones) {
  pb::SweepSummary out;
  pb::PairGroupCounts* g = out.mutable_pair_groups();
  g->set_total(f.groups);
  g->set_complete(f.groups_complete);
  g->set_failed(f.groups_failed);
  g->set_running(f.groups_running);
  g->set_waiting(f.groups_waiting);

  // milestone -> {expected, stored}
  std::map<int64_t, std::pair<int, int>> milestones;
  for (const SweepSummaryFacts::ArmGroup& a : f.arm_groups) {
    if (a.spec.run().data().val_shards_size() == 0) continue;  // no validation: no milestone
    for (int64_t m : ExpectedMilestones(a.spec.run())) milestones[m].first += a.jobs;
  }
  for (const auto& [m, jobs] : stored_milestones) milestones[m].second = jobs;
  for (const auto& [m, n] : milestones) {
    const auto [expected, stored] = n;
    if (stored > 0) out.set_furthest_milestone_tokens(m);
    if (expected > 0 && stored >= expected) out.set_last_common_milestone_tokens(m);
    if (out.milestones_size() == kMaxSummaryMilestones) {
      out.set_milestones_truncated(true);
      continue;
    }
    pb::MilestoneCount* c = out.add_milestones();
    c->set_milestone_tokens(m);
    c->set_jobs_expected(expected);
    c->set_jobs_stored(stored);
  }

  out.set_jobs_retried(f.jobs_retried);
  out.set_machine_failures(f.machine_failures);
  out.set_jobs_backing_off(f.jobs_backing_off);
  out.set_tokens_per_second(f.tokens_per_second);
  out.set_jobs_with_problems(f.jobs_with_problems);
  for (const SweepSummaryFacts::Problem& p : f.recent_problems) {
    if (out.recent_problems_size() == kMaxSummaryProblems) break;
    pb::JobProblem* q = out.add_recent_problems();
    q->set_job_id(p.job_id);
    q->set_state(ToProto(p.state));
    q->set_attempts(p.attempts);
    q->set_reason(p.reason.substr(0, 200));
    if (p.update_us != 0) SetTimestamp(p.update_us, q->mutable_update_time());
  }
  return out;
}

StatusOr<pb::SweepSummary> ReadSweepSummary(Store& store, const std::string& sweep_id,
                                            int64_t now_us) {
  RDATTN_ASSIGN_OR_RETURN(SweepSummaryFacts facts,
                          store.GetSweepSummaryFacts(sweep_id, now_us, kMaxSummaryProblems));
  RDATTN_ASSIGN_OR_RETURN(auto stored, store.CountStoredEvalMilestones(sweep_id));
  return MakeSweepSummary(facts, stored);
}

pb::JobStatus MakeJobStatus(const JobRow& j, int64_t now_us) {
  pb::JobStatus s;
  *s.mutable_job() = j.spec;
  s.mutable_job()->set_attempt(j.attempts);
  s.set_state(ToProto(j.state));
  s.set_attempts(j.attempts);
  s.set_worker_id(j.worker_id);
  s.set_lease_id(j.lease_id);
  s.set_step(j.step);
  s.set_tokens(j.tokens);
  s.set_last_train_loss(j.last_train_loss);
  s.set_last_val_nll(j.last_val_nll);
  s.set_tokens_per_second(j.tokens_per_second);
  s.set_init_param_checksum(j.init_checksum);
  s.set_last_checkpoint_path(j.last_checkpoint);
  s.set_failure_reason(j.failure_reason);
  SetTimestamp(j.create_us, s.mutable_create_time());
  if (j.start_us != 0) SetTimestamp(j.start_us, s.mutable_start_time());
  if (j.end_us != 0) SetTimestamp(j.end_us, s.mutable_end_time());
  SetTimestamp(j.update_us, s.mutable_update_time());
  s.set_hardware_kind(ToProto(j.worker_kind));
  if (j.state == JobState::kPending && j.not_before_us > now_us)
    SetTimestamp(j.not_before_us, s.mutable_not_before());
  s.set_machine_failures(j.machine_failures);
  return s;
}

std::string JobPageToken(const std::string& sweep_id, int64_t after_seq) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%016llx%08x", kPageTokenVersion,
                static_cast<unsigned long long>(after_seq), TokenCheck(sweep_id, after_seq));
  return buf;
}

StatusOr<int64_t> ParseJobPageToken(const std::string& sweep_id, const std::string& token) {
  if (token.empty()) return int64_t{0};
  const std::string version = kPageTokenVersion;
  uint64_t seq = 0, check = 0;
  const bool ok = token.size() == version.size() + 24 && token.compare(0, 2, version) == 0 &&
                  ParseHex(token.substr(2, 16), &seq) && ParseHex(token.substr(18, 8), &check) &&
                  seq > 0 && seq <= static_cast<uint64_t>(INT64_MAX) &&
                  check == TokenCheck(sweep_id, static_cast<int64_t>(seq));
  if (!ok) {
    return FieldErrorStatus("page_token",
                            "not a page token of sweep " + sweep_id +
                                " (pass GetSweepResponse.next_page_token unchanged, with the "
                                "same sweep_id)");
  }
  return static_cast<int64_t>(seq);
}

}  // namespace rdattn::coordinator
