// Where a job's files live on a worker. Pure string functions, no I/O.
//
//   <workdir>/<sanitized job id>/attempt-<n>/{job.json, events.jsonl, stderr.log, stdout.log}
//   <checkpoint root>/<sanitized job id>/        (the same for every attempt: resume)
#pragma once

#include <string>
#include <string_view>

namespace rdattn::worker {

// A job id as one path component: '/' becomes '_', and so does every character outside
// [A-Za-z0-9._-]; "", "." and ".." become "_", "_.", "_.." so the result never climbs.
// "sw1/S/s1/rd" -> "sw1_S_s1_rd".
std::string SanitizeJobId(std::string_view job_id);

struct JobPaths {
  std::string dir;         // <workdir>/<job>/attempt-<n>
  std::string job_json;    // the RunSpec the ranks read
  std::string events;      // rank 0's JSON-lines metric events (relayed)
  std::string stderr_log;  // every rank's stderr
  std::string stdout_log;  // every rank's stdout
};

// attempt < 1 is written as attempt-0 (a standalone or unnumbered attempt).
JobPaths MakeJobPaths(std::string_view workdir, std::string_view job_id, int attempt);

// <root>/<sanitized job id>: a job's checkpoint directory, shared by all its attempts.
std::string CheckpointDirFor(std::string_view root, std::string_view job_id);

// a + "/" + b, without doubling a trailing '/' of a.
std::string JoinPath(std::string_view a, std::string_view b);

}  // namespace rdattn::worker
