// The choice of OpenBLAS kernels (common/cpu_features.h): which core rdattn sets when OpenBLAS
// chose one. The re-execution itself is tested end to end by ctest trainer_cli_blas_core.
#include "common/cpu_features.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace rdattn::cpu {
namespace {

std::string ToSet(const char* detected, const char* best) {
  const char* r = BlasCoreToSet(detected, best);
  return r == nullptr ? "(none)" : r;
}

TEST(BlasCoreToSet, RaisesAWeakerCoreToTheCpusBest) {
  EXPECT_EQ(ToSet("Prescott", "SkylakeX"), "SkylakeX");  // bookworm's 0.3.21 on model 0xCF
  EXPECT_EQ(ToSet("Nehalem", "Haswell"), "Haswell");
  EXPECT_EQ(ToSet("Sandybridge", "SkylakeX"), "SkylakeX");
  EXPECT_EQ(ToSet("Haswell", "SkylakeX"), "SkylakeX");
  EXPECT_EQ(ToSet("Core2", "Sandybridge"), "Sandybridge");
  EXPECT_EQ(ToSet("prescott", "SkylakeX"), "SkylakeX");  // OpenBLAS compares names without case
}

TEST(BlasCoreToSet, LeavesAnEqualOrWiderCoreAlone) {
  EXPECT_EQ(ToSet("SkylakeX", "SkylakeX"), "(none)");
  EXPECT_EQ(ToSet("Cooperlake", "SkylakeX"), "(none)");
  EXPECT_EQ(ToSet("SapphireRapids", "SkylakeX"), "(none)");
  EXPECT_EQ(ToSet("Zen", "Haswell"), "(none)");
  EXPECT_EQ(ToSet("SkylakeX", "Haswell"), "(none)");  // never lowers OpenBLAS's own choice
}

TEST(BlasCoreToSet, DoesNothingWithANameItDoesNotKnow) {
  EXPECT_EQ(ToSet("Neoverse", "SkylakeX"), "(none)");  // another architecture's core
  EXPECT_EQ(ToSet("", "SkylakeX"), "(none)");
  EXPECT_EQ(ToSet(nullptr, "SkylakeX"), "(none)");
  EXPECT_EQ(ToSet("Prescott", nullptr), "(none)");  // a CPU without AVX
  EXPECT_EQ(ToSet("Prescott", "Itanium"), "(none)");
}

TEST(BestBlasCore, IsAKnownCoreOrNothing) {
  const char* best = BestBlasCore();
  if (best == nullptr) GTEST_SKIP() << "this CPU has no AVX";
  EXPECT_TRUE(std::strcmp(best, "SkylakeX") == 0 || std::strcmp(best, "Haswell") == 0 ||
              std::strcmp(best, "Sandybridge") == 0)
      << best;
  // AVX2 kernels imply the AVX2 build of rdattn's own kernels.
  if (std::strcmp(best, "Sandybridge") != 0) {
    EXPECT_TRUE(HasAvx2());
  }
}

}  // namespace
}  // namespace rdattn::cpu
