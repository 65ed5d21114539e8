#include "worker/trainer/resume.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

namespace rdattn::trainer {
namespace {

bool IsReadableFile(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

}  // namespace

StatusOr<ResumePlan> PlanResume(const RunConfig& cfg, const CheckpointMeta& self,
                                const std::vector<EvalMilestone>& milestones,
                                std::vector<std::string>* warnings) {
  auto check_fingerprint = [&](const std::string& path, const CheckpointMeta& saved) -> Status {
    const auto diff = FingerprintDifferences(saved.fingerprint, self.fingerprint);
    if (diff.empty()) return Status::Ok();
    std::string fields;
    for (const auto& d : diff) fields += (fields.empty() ? "" : ", ") + d;
    return FailedPreconditionError(
        path + ": the checkpoint was written by a run whose config differs in: " + fields);
  };
  auto missing_at = [&](int64_t step, const CheckpointMeta& saved) {
    const std::vector<int64_t>& stored = cfg.checkpoint.stored_evals_known
                                             ? cfg.checkpoint.stored_eval_milestones
                                             : saved.evaluated_milestones;
    std::vector<EvalMilestone> out;
    if (cfg.data.val_shards.empty()) return out;
    if (!cfg.checkpoint.stored_evals_known && !saved.evaluated_milestones_known) return out;
    for (const EvalMilestone& m : milestones)
      if (m.step <= step && std::find(stored.begin(), stored.end(), m.tokens) == stored.end())
        out.push_back(m);
    return out;
  };
  ResumePlan plan;
  if (!cfg.checkpoint.resume_from.empty()) {
    RDATTN_ASSIGN_OR_RETURN(const CheckpointMeta saved,
                            ReadCheckpointMeta(cfg.checkpoint.resume_from));
    RDATTN_RETURN_IF_ERROR(check_fingerprint(cfg.checkpoint.resume_from, saved));
    plan.path = cfg.checkpoint.resume_from;
    for (const EvalMilestone& m : missing_at(saved.step, saved)) {
      if (m.step == saved.step) {
        plan.missing.push_back(m);
      } else {
        warnings->push_back("milestone " + std::to_string(m.tokens) + " was not evaluated before " +
                            plan.path + " and cannot be re-evaluated from an explicit resume_from");
      }
    }
    return plan;
  }
  std::vector<std::pair<int64_t, std::string>> candidates;
  if (!cfg.checkpoint.dir.empty()) candidates = ListCheckpoints(cfg.checkpoint.dir);
  const std::string& theirs = cfg.checkpoint.coordinator_checkpoint;
  if (!theirs.empty()) {
    // A checkpoint of this run's own directory is listed already, or was pruned for a newer one.
    const bool own = !cfg.checkpoint.dir.empty() &&
                     std::filesystem::path(theirs).parent_path().lexically_normal() ==
                         std::filesystem::path(cfg.checkpoint.dir).lexically_normal();
    const bool listed = own || std::any_of(candidates.begin(), candidates.end(),
                                           [&](const auto& c) { return c.second == theirs; });
    if (!listed && IsReadableFile(theirs)) {
      auto saved = ReadCheckpointMeta(theirs);
      if (saved.ok()) {
        candidates.emplace_back(saved->step, theirs);
      } else {
        warnings->push_back("the coordinator's checkpoint " + theirs + " does not read (" +
                            saved.status().message() + "); not resuming from it");
      }
    } else if (!listed) {
      std::string where = candidates.empty() ? "from scratch" : "from " + candidates.front().second;
      warnings->push_back("the coordinator's checkpoint " + theirs + " is not readable here (" +
                          std::strerror(errno) + "); resuming " + where);
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
  }
  int64_t limit = std::numeric_limits<int64_t>::max();
  for (const auto& [step, path] : candidates) {
    if (step > limit) continue;
    auto saved = ReadCheckpointMeta(path);
    if (!saved.ok()) {
      warnings->push_back(path + " does not read (" + saved.status().message() +
                          "); trying an older checkpoint");
      continue;
    }
    RDATTN_RETURN_IF_ERROR(check_fingerprint(path, *saved));
    const std::vector<EvalMilestone> missing = missing_at(saved->step, *saved);
    bool ok = true;
    for (const EvalMilestone& m : missing) {
      if (m.step == saved->step) continue;
      if (ReadableCheckpointOfStep(cfg.checkpoint.dir, m.step).empty()) {
        warnings->push_back(
            "milestone " + std::to_string(m.tokens) + " (step " + std::to_string(m.step) +
            ") has no stored evaluation and no readable checkpoint; resuming from step " +
            std::to_string(m.step) + " or earlier to evaluate it again");
        limit = m.step;
        ok = false;
        break;
      }
    }
    if (!ok) continue;
    plan.path = path;
    plan.missing = missing;
    return plan;
  }
  if (!candidates.empty() && plan.path.empty())
    warnings->push_back("no usable checkpoint among " + std::to_string(candidates.size()) +
                        "; starting from step 0");
  return plan;
}

}  // namespace rdattn::trainer
