// Data identity on the coordinator's side (docs/operations.md "Data identity"). Every attempt's
// KIND_INIT event carries the content digests of the shards it opened (MetricEvent.shard_digests)
// and one digest over them (data_digest). The core compares a new INIT event with the job's first
// digested attempt and with the other jobs of its pair group: different data is a failure of the
// job's input (FAILED at once, no retry), and the report never pairs arms whose data differ.
// Events without a data_digest (written by a trainer older than digests) are unknown: no check.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "coordinator/store.h"
#include "rdattn/v1/run_spec.pb.h"

namespace rdattn::coordinator {

// Every failure_reason of a data-identity failure starts with this.
inline constexpr std::string_view kDataIdentityReason = "data changed: ";

// Why two INIT events saw different data, naming each shard whose digest differs (by role and
// path), e.g. "shard d/x_train_000000.bin (train): xxh3:1111111111111111 in job j-1 attempt 1,
// xxh3:2222222222222222 in job j-2 attempt 1". "" when the data digests are equal or either
// event has none (unknown).
std::string DescribeDataDifference(const pb::MetricEvent& a, const std::string& a_label,
                                   const pb::MetricEvent& b, const std::string& b_label);

// The first KIND_INIT event with a data_digest among `events` (metric event rows in storage
// order) whose attempt is below `before_attempt`; null when none.
const pb::MetricEvent* FirstDigestedInit(const std::vector<EventRow>& events, int before_attempt);

// The core's check at ingest of `init` (a KIND_INIT event of `job`'s current attempt): its data
// against the job's first digested attempt, then against each other job of the pair group (of
// the same sweep) that has a digested INIT and did not itself fail for data identity. Returns the
// failure reason (starting with kDataIdentityReason) or "" when nothing differs or nothing is
// known.
StatusOr<std::string> CheckInitDataIdentity(Store& store, const JobRow& job,
                                            const pb::MetricEvent& init);

}  // namespace rdattn::coordinator
