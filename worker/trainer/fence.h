// Attempt fencing for rdattn-train (docs/operations.md, "Fencing").
//
// Fencing: every attempt of a job shares the job's checkpoint directory. An attempt N > 0
// claims it by creating the marker "attempt-<N>.fence" there; an attempt that sees a marker of
// a higher attempt is stale (its lease is gone and a newer attempt runs) and must write no
// checkpoint and no event. Markers only ever appear, so once the newer attempt has claimed the
// directory every later check of the older one fails; and once a check has failed, every later
// one fails without looking again (an attempt that saw the claim stays fenced). The window
// between a check and the checkpoint it guards is closed by the checkpoints themselves: they bear
// their attempt's name and are checked again after the rename (checkpoint.h). Events go through a
// gate that owns a share of the fence (FenceGate): none after the rank has seen the claim.
#pragma once

#include <functional>
#include <memory>
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
  // Whether a check has seen a newer claim.
  bool fenced() const { return seen_ > attempt_; }

 private:
  std::string dir_;
  int attempt_;
  mutable int seen_ = 0;  // the highest claim a check has seen
};

// An event gate that shares the fence: true while `fence` has seen no newer claim. It keeps the
// fence alive as long as the gate lives (an EventSink may outlive the training loop).
inline std::function<bool()> FenceGate(std::shared_ptr<const AttemptFence> fence) {
  return [fence = std::move(fence)] { return fence->Check().ok(); };
}

}  // namespace rdattn::trainer
