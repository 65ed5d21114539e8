// The learning-rate schedule of the trainer: linear warmup, then cosine, linear or constant
// (docs/run-config.md "Learning rate"). Plain C++17 on the resolved config; no LibTorch.
#pragma once

#include <cstdint>

#include "runspec/run_config.h"

namespace rdattn::trainer {

// Learning rate at optimizer step `step` (0-based): linear warmup from peak/warmup to peak over
// warmup_steps, then cosine/linear decay to peak × min_lr_ratio at total_steps − 1, or constant.
//   w = warmup_steps, T = total_steps, min = peak_lr × min_lr_ratio, step < 0 is read as 0;
//   step < w (w > 0):  peak_lr × (step + 1) / w
//   otherwise:         p = clamp((step − w) / max(1, T − 1 − w), 0, 1)
//                      cosine:   min + (peak_lr − min) × ½ (1 + cos(π p))
//                      linear:   peak_lr − (peak_lr − min) × p
//                      constant: peak_lr
// Steps at or after T − 1 get the final LR (min for cosine and linear).
double LearningRate(const OptimConfig& optim, const ScheduleConfig& schedule, int64_t step);

}  // namespace rdattn::trainer
