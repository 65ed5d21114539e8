// Which errors are the machine's, not the job's (rdattn-train exits 74 for them; the worker reports
// JOB_OUTCOME_MACHINE_FAILED and the job is retried elsewhere): the disk is full, over quota,
// read-only or failing. Such failures are UNAVAILABLE statuses in the trainer (docs/trainer.md).
#pragma once

#include <cerrno>

namespace rdattn::trainer {

inline bool IsMachineErrno(int err) {
  return err == ENOSPC || err == EIO || err == EDQUOT || err == EROFS;
}

}  // namespace rdattn::trainer
