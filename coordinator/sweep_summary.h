// GetSweep for big sweeps (docs/coordinator.md "Reading big sweeps"): the summary view, whose
// size depends on the sweep's scales, arms and milestones but never on its number of jobs, and
// the full view's pages of jobs with their opaque, validated page tokens. No locking here: the
// caller (Core) holds the store.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "coordinator/store.h"
#include "rdattn/v1/sweep.pb.h"

namespace rdattn::coordinator {

// Jobs per page of GetSweep's full view: a larger page_size is served as this many.
inline constexpr int kMaxJobsPerPage = 1000;
// page_size 0 (clients older than paging): every job in one reply, up to this many (about
// 2.5 MB, under gRPC's 4 MiB default receive limit); a bigger sweep is INVALID_ARGUMENT.
inline constexpr int kMaxJobsUnpaged = 5000;
// SweepSummary.milestones holds at most this many; SweepSummary.recent_problems at most this.
inline constexpr int kMaxSummaryMilestones = 64;
inline constexpr int kMaxSummaryProblems = 5;

// The summary from the store's facts and the jobs per stored milestone
// (Store::CountStoredEvalMilestones). Pure: no I/O. A job expects the milestones of its
// schedule (ExpectedMilestones) when its run has val shards.
pb::SweepSummary MakeSweepSummary(const SweepSummaryFacts& facts,
                                  const std::map<int64_t, int>& stored_milestones);

// Reads the facts and the stored milestones and makes the summary.
StatusOr<pb::SweepSummary> ReadSweepSummary(Store& store, const std::string& sweep_id,
                                            int64_t now_us);

// A job as GetSweep serves it. `now_us` tells a backoff (not_before) that has not ended.
pb::JobStatus MakeJobStatus(const JobRow& job, int64_t now_us);

// The token of the page after the job with seq `after_seq` of sweep `sweep_id`: opaque text
// bound to the sweep (a token of another sweep does not parse).
std::string JobPageToken(const std::string& sweep_id, int64_t after_seq);
// The job seq a token names; "" is 0 (the first page). A token that is not one of
// JobPageToken(sweep_id, ...) is INVALID_ARGUMENT naming page_token.
StatusOr<int64_t> ParseJobPageToken(const std::string& sweep_id, const std::string& token);

}  // namespace rdattn::coordinator
