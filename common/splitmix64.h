// SplitMix64 (Steele, Lea & Flood 2014; the reference code of Vigna's xoshiro seeding), the one
// copy of the generator rdattn draws reproducible numbers from: the model's derived init seeds
// (model/gpt.cc), the data order (worker/trainer/sampler.cc), the report's bootstrap and the
// sequential design's simulations (coordinator/stats). Header-only, plain C++17.
//   state += 0x9E3779B97F4A7C15;
//   z = state; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//   return z ^ (z >> 31);
// The first state is the seed itself.
#pragma once

#include <cstdint>

namespace rdattn {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ULL;
    return Mix(state_);
  }

  // The output function alone (Next() is Mix(state += 0x9E3779B97F4A7C15)): a 64-bit hash that
  // derives independent seeds.
  static constexpr uint64_t Mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

}  // namespace rdattn
