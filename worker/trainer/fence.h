// Attempt fencing for rdattn-train (docs/operations.md, "Fencing").
//
// Fencing: every attempt of a job shares the job's checkpoint directory. An attempt N > 0
// claims it by creating the marker "attempt-<N>.fence" there; an attempt that sees a marker of
// a higher attempt is stale (its lease is gone and a newer attempt runs) and must write no
// checkpoint and no event. Markers only ever appear, so the check is race-free: once the newer
// attempt has claimed the directory, every later check of the older one fails.
#pragma once

#include <string>

#include "common/status.h"

namespace rdattn::trainer {

class AttemptFence {
 public:
  // attempt 0 (standalone) or an empty dir: never fenced.
  AttemptFence(std::string dir, int attempt);

  // Creates this attempt's marker (and the directory). Then Check().
  Status Claim() const;
  // OK while no marker of a higher attempt exists; else ABORTED naming it.
  Status Check() const;
  // The highest attempt with a marker in dir (0 if none).
  int HighestClaim() const;

  int attempt() const { return attempt_; }

 private:
  std::string dir_;
  int attempt_;
};

}  // namespace rdattn::trainer
