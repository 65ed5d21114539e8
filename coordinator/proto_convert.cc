// Domain <-> rdattn.v1 enum and time conversions; stored rows -> status messages.
#include "coordinator/proto_convert.h"

#include <string>

#include "coordinator/store.h"

namespace rdattn::coordinator {

pb::JobState ToProto(JobState state) {
  switch (state) {
    case JobState::kPending:
      return pb::JOB_STATE_PENDING;
    case JobState::kLeased:
      return pb::JOB_STATE_LEASED;
    case JobState::kRunning:
      return pb::JOB_STATE_RUNNING;
    case JobState::kSucceeded:
      return pb::JOB_STATE_SUCCEEDED;
    case JobState::kFailed:
      return pb::JOB_STATE_FAILED;
    case JobState::kCancelled:
      return pb::JOB_STATE_CANCELLED;
  }
  return pb::JOB_STATE_UNSPECIFIED;
}

StatusOr<JobState> JobStateFromProto(int state) {
  switch (state) {
    case pb::JOB_STATE_PENDING:
      return JobState::kPending;
    case pb::JOB_STATE_LEASED:
      return JobState::kLeased;
    case pb::JOB_STATE_RUNNING:
      return JobState::kRunning;
    case pb::JOB_STATE_SUCCEEDED:
      return JobState::kSucceeded;
    case pb::JOB_STATE_FAILED:
      return JobState::kFailed;
    case pb::JOB_STATE_CANCELLED:
      return JobState::kCancelled;
    default:
      break;
  }
  return InvalidArgumentError("unknown job state " + std::to_string(state));
}

pb::SweepState ToProto(SweepState state) {
  switch (state) {
    case SweepState::kPending:
      return pb::SWEEP_STATE_PENDING;
    case SweepState::kRunning:
      return pb::SWEEP_STATE_RUNNING;
    case SweepState::kSucceeded:
      return pb::SWEEP_STATE_SUCCEEDED;
    case SweepState::kFailed:
      return pb::SWEEP_STATE_FAILED;
    case SweepState::kCancelled:
      return pb::SWEEP_STATE_CANCELLED;
  }
  return pb::SWEEP_STATE_UNSPECIFIED;
}

StatusOr<SweepState> SweepStateFromProto(int state) {
  switch (state) {
    case pb::SWEEP_STATE_PENDING:
      return SweepState::kPending;
    case pb::SWEEP_STATE_RUNNING:
      return SweepState::kRunning;
    case pb::SWEEP_STATE_SUCCEEDED:
      return SweepState::kSucceeded;
    case pb::SWEEP_STATE_FAILED:
      return SweepState::kFailed;
    case pb::SWEEP_STATE_CANCELLED:
      return SweepState::kCancelled;
    default:
      break;
  }
  return InvalidArgumentError("unknown sweep state " + std::to_string(state));
}

pb::HardwareKind ToProto(HardwareKind kind) {
  switch (kind) {
    case HardwareKind::kAny:
      return pb::HARDWARE_KIND_UNSPECIFIED;
    case HardwareKind::kCpu:
      return pb::HARDWARE_KIND_CPU;
    case HardwareKind::kGpu:
      return pb::HARDWARE_KIND_GPU;
  }
  return pb::HARDWARE_KIND_UNSPECIFIED;
}

HardwareKind HardwareKindFromProto(int kind) {
  switch (kind) {
    case pb::HARDWARE_KIND_CPU:
      return HardwareKind::kCpu;
    case pb::HARDWARE_KIND_GPU:
      return HardwareKind::kGpu;
    default:
      return HardwareKind::kAny;
  }
}

void SetTimestamp(int64_t unix_us, google::protobuf::Timestamp* ts) {
  ts->Clear();
  if (unix_us == 0) return;
  int64_t secs = unix_us / 1'000'000;
  int64_t rem = unix_us % 1'000'000;
  if (rem < 0) {
    rem += 1'000'000;
    --secs;
  }
  ts->set_seconds(secs);
  ts->set_nanos(static_cast<int32_t>(rem * 1000));
}

void SetDuration(absl::Duration d, google::protobuf::Duration* out) {
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  out->set_seconds(ns / 1'000'000'000);
  out->set_nanos(static_cast<int32_t>(ns % 1'000'000'000));
}

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

pb::JobCounts ToProto(const SweepFacts& facts) {
  pb::JobCounts c;
  c.set_total(facts.total);
  c.set_pending(facts.pending);
  c.set_leased(facts.leased);
  c.set_running(facts.running);
  c.set_succeeded(facts.succeeded);
  c.set_failed(facts.failed);
  c.set_cancelled(facts.cancelled);
  return c;
}

pb::SweepStatus ToProto(const SweepRow& row, const SweepFacts& facts, int64_t last_event_seq) {
  pb::SweepStatus out;
  out.set_sweep_id(row.id);
  *out.mutable_spec() = row.spec;
  out.set_state(ToProto(row.state));
  out.set_message(row.message);
  SetTimestamp(row.create_us, out.mutable_create_time());
  SetTimestamp(row.update_us, out.mutable_update_time());
  if (row.end_us != 0) SetTimestamp(row.end_us, out.mutable_end_time());
  *out.mutable_job_counts() = ToProto(facts);
  out.set_last_event_seq(static_cast<uint64_t>(last_event_seq));
  return out;
}

}  // namespace rdattn::coordinator
