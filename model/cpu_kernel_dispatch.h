// Running an ISA-built CPU kernel (model/*_cpu_kernel.inc: a baseline and an AVX2 build of the
// same source, bitwise equal) over [0, n) in parallel tasks.
#pragma once

#include <ATen/Parallel.h>

#include <cstdint>

#include "common/cpu_features.h"

namespace rdattn::model {

// The AVX2 build on CPUs that have AVX2 unless `baseline_only` (the tests' switch that compares
// the two builds), else the baseline build; tasks of at least `grain` indices.
template <typename Args>
void RunIsaKernel(void (*avx2)(const Args&, int64_t, int64_t),
                  void (*base)(const Args&, int64_t, int64_t), const Args& args, int64_t n,
                  int64_t grain, bool baseline_only) {
  const auto kernel = ::rdattn::cpu::HasAvx2() && !baseline_only ? avx2 : base;
  at::parallel_for(0, n, grain, [&](int64_t b, int64_t e) { kernel(args, b, e); });
}

}  // namespace rdattn::model
