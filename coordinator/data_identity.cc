#include "coordinator/data_identity.h"

#include <map>
#include <utility>

namespace rdattn::coordinator {

std::string DescribeDataDifference(const pb::MetricEvent& a, const std::string& a_label,
                                   const pb::MetricEvent& b, const std::string& b_label) {
  if (a.data_digest().empty() || b.data_digest().empty()) return "";
  if (a.data_digest() == b.data_digest()) return "";
  using Key = std::pair<std::string, std::string>;  // role, path
  std::map<Key, const pb::ShardDigest*> in_b;
  for (const pb::ShardDigest& d : b.shard_digests()) in_b[{d.role(), d.path()}] = &d;
  std::string out;
  auto add = [&out](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  for (const pb::ShardDigest& d : a.shard_digests()) {
    const auto it = in_b.find({d.role(), d.path()});
    if (it == in_b.end()) {
      add("shard " + d.path() + " (" + d.role() + ") only in " + a_label);
      continue;
    }
    const pb::ShardDigest& o = *it->second;
    if (o.digest() != d.digest() || o.bytes() != d.bytes()) {
      add("shard " + d.path() + " (" + d.role() + "): " + d.digest() + " (" +
          std::to_string(d.bytes()) + " bytes) in " + a_label + ", " + o.digest() + " (" +
          std::to_string(o.bytes()) + " bytes) in " + b_label);
    }
    in_b.erase(it);
  }
  for (const auto& [key, d] : in_b)
    add("shard " + d->path() + " (" + d->role() + ") only in " + b_label);
  if (out.empty()) {
    // Same shards and digests under other paths or in another order.
    out = "the shard lists differ in order or paths (data digest " + a.data_digest() + " in " +
          a_label + ", " + b.data_digest() + " in " + b_label + ")";
  }
  return out;
}

const pb::MetricEvent* FirstDigestedInit(const std::vector<EventRow>& events, int before_attempt) {
  for (const EventRow& row : events) {
    if (row.attempt >= before_attempt) continue;
    if (!row.event.has_metric_event()) continue;
    const pb::MetricEvent& e = row.event.metric_event();
    if (e.kind() == pb::MetricEvent::KIND_INIT && !e.data_digest().empty()) return &e;
  }
  return nullptr;
}

StatusOr<std::string> CheckInitDataIdentity(Store& store, const JobRow& job,
                                            const pb::MetricEvent& init) {
  if (init.data_digest().empty()) return std::string();
  const std::string here = "job " + job.id + " attempt " + std::to_string(job.attempts);
  // The job's own earlier attempts: a resumed job must read what its first attempt read.
  RDATTN_ASSIGN_OR_RETURN(const std::vector<EventRow> own,
                          store.ReadJobMetricEvents(job.id, pb::MetricEvent::KIND_INIT));
  if (const pb::MetricEvent* first = FirstDigestedInit(own, job.attempts)) {
    const std::string label = "job " + job.id + " attempt " + std::to_string(first->attempt());
    const std::string diff = DescribeDataDifference(*first, label, init, here);
    if (!diff.empty())
      return std::string(kDataIdentityReason) + "this attempt read other data than " + label +
             ": " + diff;
  }
  // The other arms of its pair: the same shards, byte for byte, or no pair.
  if (job.pair_group.empty()) return std::string();
  RDATTN_ASSIGN_OR_RETURN(const std::vector<JobRow> jobs, store.ListJobsOfGroup(job.pair_group));
  for (const JobRow& other : jobs) {
    if (other.id == job.id || other.sweep_id != job.sweep_id) continue;
    if (other.state == JobState::kFailed && other.failure_reason.rfind(kDataIdentityReason, 0) == 0)
      continue;  // its data were already refused; they are not the pair's
    RDATTN_ASSIGN_OR_RETURN(const std::vector<EventRow> theirs,
                            store.ReadJobMetricEvents(other.id, pb::MetricEvent::KIND_INIT));
    const pb::MetricEvent* first = FirstDigestedInit(theirs, INT32_MAX);
    if (first == nullptr) continue;
    const std::string label = "job " + other.id + " (arm " + other.spec.arm() + ") attempt " +
                              std::to_string(first->attempt());
    const std::string diff = DescribeDataDifference(*first, label, init, here);
    if (!diff.empty())
      return std::string(kDataIdentityReason) + "this job (arm " + job.spec.arm() +
             ") read other data than " + label + " of its pair group " + job.pair_group + ": " +
             diff;
  }
  return std::string();
}

}  // namespace rdattn::coordinator
