// Domain enums (job_state_machine.h, scheduler.h) <-> their rdattn.v1 counterparts, the time
// conversions the store and the services share, and stored rows -> their rdattn.v1 status
// messages. The store persists the proto numbers.
#pragma once

#include <absl/time/time.h>

#include <cstdint>

#include "coordinator/job_state_machine.h"
#include "coordinator/scheduler.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "rdattn/v1/run_spec.pb.h"
#include "rdattn/v1/sweep.pb.h"

namespace rdattn::coordinator {

namespace pb = ::rdattn::v1;

struct SweepRow;  // store.h

pb::JobState ToProto(JobState state);
// JOB_STATE_UNSPECIFIED and unknown numbers: INVALID_ARGUMENT.
StatusOr<JobState> JobStateFromProto(int state);

pb::SweepState ToProto(SweepState state);
StatusOr<SweepState> SweepStateFromProto(int state);

pb::HardwareKind ToProto(HardwareKind kind);
HardwareKind HardwareKindFromProto(int kind);  // unknown numbers: kAny

// A sweep's job counts.
pb::JobCounts ToProto(const SweepFacts& facts);
// A stored sweep as SweepStatus: id, spec, state, message, times, job counts and the number of
// its last event (without its seed policy state and jobs, which the caller reads and adds).
pb::SweepStatus ToProto(const SweepRow& row, const SweepFacts& facts, int64_t last_event_seq);

// Unix microseconds, 0 = unset (the store's time columns).
// Fills `ts` from unix microseconds; 0 leaves it unset (cleared).
void SetTimestamp(int64_t unix_us, google::protobuf::Timestamp* ts);
void SetDuration(absl::Duration d, google::protobuf::Duration* out);
absl::Duration FromProto(const google::protobuf::Duration& d);

}  // namespace rdattn::coordinator
