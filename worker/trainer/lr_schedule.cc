#include "worker/trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace rdattn::trainer {
namespace {

constexpr double kPi = 3.14159265358979323846;

}  // namespace

double LearningRate(const OptimConfig& optim, const ScheduleConfig& schedule, int64_t step) {
  const double peak = optim.peak_lr;
  const double min = peak * optim.min_lr_ratio;
  const int64_t w = optim.warmup_steps;
  if (step < 0) step = 0;
  if (w > 0 && step < w) return peak * static_cast<double>(step + 1) / static_cast<double>(w);
  if (optim.lr_decay == LrDecay::kConstant) return peak;
  const int64_t span = std::max<int64_t>(1, schedule.total_steps - 1 - w);
  const double p = std::clamp(static_cast<double>(step - w) / static_cast<double>(span), 0.0, 1.0);
  if (optim.lr_decay == LrDecay::kLinear) return peak - (peak - min) * p;
  return min + (peak - min) * 0.5 * (1.0 + std::cos(kPi * p));
}

}  // namespace rdattn::trainer
