// Job directory naming (see job_paths.h).
#include "worker/daemon/job_paths.h"

namespace rdattn::worker {

std::string SanitizeJobId(std::string_view job_id) {
  std::string out;
  out.reserve(job_id.size());
  for (char c : job_id) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-';
    out += safe ? c : '_';
  }
  if (out.empty() || out == "." || out == "..") out.insert(out.begin(), '_');
  return out;
}

std::string JoinPath(std::string_view a, std::string_view b) {
  std::string out(a);
  if (!out.empty() && out.back() != '/') out += '/';
  out.append(b.data(), b.size());
  return out;
}

JobPaths MakeJobPaths(std::string_view workdir, std::string_view job_id, int attempt) {
  JobPaths p;
  p.dir = JoinPath(JoinPath(workdir, SanitizeJobId(job_id)),
                   "attempt-" + std::to_string(attempt < 1 ? 0 : attempt));
  p.job_json = JoinPath(p.dir, "job.json");
  p.events = JoinPath(p.dir, "events.jsonl");
  p.stderr_log = JoinPath(p.dir, "stderr.log");
  p.stdout_log = JoinPath(p.dir, "stdout.log");
  return p;
}

std::string CheckpointDirFor(std::string_view root, std::string_view job_id) {
  return JoinPath(root, SanitizeJobId(job_id));
}

}  // namespace rdattn::worker
