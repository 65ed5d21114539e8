// Config, parameter counts (T9), source-count walk (T3, T4 in the config form) and FLOPs.
// No LibTorch: this test builds in seconds.
#include "model/config.h"

#include <gtest/gtest.h>

namespace rdattn::model {
namespace {

bool HasErrorFor(const std::vector<FieldError>& errors, const std::string& field) {
  for (const auto& e : errors)
    if (e.path == field) return true;
  return false;
}

TEST(ConfigTest, ParamCountsOfPaperPresets) {
  // T9: the project's presets (GPT-2 vocabulary padded to 50304, SwiGLU 2560 / 3904).
  EXPECT_EQ(CountParams(*Preset("S", Arm::kBlock)).total(), 121044672);
  EXPECT_EQ(CountParams(*Preset("S", Arm::kRd)).total(), 121053888);
  EXPECT_EQ(CountParams(*Preset("M", Arm::kBlock)).total(), 342293952);
  EXPECT_EQ(CountParams(*Preset("M", Arm::kRd)).total(), 342313920);
  // RD adds exactly L_b * D; the controls add D * L (average) or nothing (tied, frozen_v).
  EXPECT_EQ(CountParams(*Preset("S", Arm::kTied)).total(), 121044672);
  EXPECT_EQ(CountParams(*Preset("S", Arm::kFrozenV)).total(), 121044672);
  EXPECT_EQ(CountParams(*Preset("S", Arm::kAverage)).total(), 121053888);
  const ParamCounts s = CountParams(*Preset("S", Arm::kBlock));
  EXPECT_EQ(s.embedding, 50304 * 576);
  EXPECT_EQ(s.attention, 16 * 4 * 576 * 576);
  EXPECT_EQ(s.mlp, 16 * 3 * 576 * 2560);
  EXPECT_EQ(s.norms + s.depth_queries + s.depth_key_norms, 16 * 6 * 576 + 3 * 576);
  const ParamCounts st = CountParams(*Preset("S", Arm::kStandard));
  EXPECT_EQ(st.depth_queries + st.depth_key_norms, 0);
}

TEST(ConfigTest, SourceCountsMatchModelMdForS) {
  // T3 (config form): MODEL.md §2.4.
  const SourceCounts s = CountSources(*Preset("S", Arm::kBlock));
  EXPECT_EQ(s.attention, (std::vector<int64_t>{1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9}));
  EXPECT_EQ(s.mlp, (std::vector<int64_t>{2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9}));
  EXPECT_EQ(s.final_read, 9);
}

TEST(ConfigTest, SourceCountsMatchModelMdForM) {
  const SourceCounts m = CountSources(*Preset("M", Arm::kRd));
  EXPECT_EQ(m.attention, (std::vector<int64_t>{1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5,
                                               5, 6, 6, 6, 7, 7, 7, 8, 8, 8, 9, 9}));
  std::vector<int64_t> mlp;
  for (int64_t k = 2; k <= 9; ++k)
    for (int i = 0; i < 3; ++i) mlp.push_back(k);
  EXPECT_EQ(m.mlp, mlp);
  EXPECT_EQ(m.final_read, 9);
}

TEST(ConfigTest, DegenerateBlockCounts) {
  // T4: N = 1 sees [e, partial] everywhere after layer 0; P = 1 grows by one per layer.
  ModelConfig c = *Preset("tiny", Arm::kBlock);
  c.layers = 4;
  c.blocks = 1;
  SourceCounts s = CountSources(c);
  EXPECT_EQ(s.attention, (std::vector<int64_t>{1, 2, 2, 2}));
  EXPECT_EQ(s.mlp, (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(s.final_read, 2);
  c.blocks = 4;
  s = CountSources(c);
  EXPECT_EQ(s.attention, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(s.mlp, (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(s.final_read, 5);
}

TEST(ConfigTest, ValidationNamesEachField) {
  ModelConfig c = *Preset("tiny", Arm::kBlock);
  EXPECT_TRUE(c.Validate().empty());
  c.width = 63;  // not divisible by 2 heads
  c.layers = 3;  // not divisible by 2 blocks
  c.norm_eps = 0;
  c.context = 0;
  c.vocab_size = 1;
  const auto errors = c.Validate();
  EXPECT_TRUE(HasErrorFor(errors, "width")) << errors.size();
  EXPECT_TRUE(HasErrorFor(errors, "blocks"));
  EXPECT_TRUE(HasErrorFor(errors, "norm_eps"));
  EXPECT_TRUE(HasErrorFor(errors, "context"));
  EXPECT_TRUE(HasErrorFor(errors, "vocab_size"));
  EXPECT_EQ(errors.size(), 5u);
  // The divisibility error names both fields.
  for (const auto& e : errors) {
    if (e.path == "blocks") {
      EXPECT_NE(e.reason.find("layers"), std::string::npos) << e.Text();
    }
  }
  c = *Preset("tiny", Arm::kBlock);
  c.heads = 64;  // head width 1: odd, RoPE rotate-half needs an even head width
  EXPECT_TRUE(HasErrorFor(c.Validate(), "heads"));
}

TEST(ConfigTest, ArmNamesRoundTrip) {
  EXPECT_EQ(AllArms().size(), 7u);
  for (Arm a : AllArms()) EXPECT_EQ(ParseArm(ArmName(a)), a);
  EXPECT_FALSE(ParseArm("Block").has_value());
  EXPECT_FALSE(ParseArm("").has_value());
  EXPECT_NE(ValidArmNames().find("frozen_v"), std::string::npos);
  EXPECT_FALSE(Preset("XL", Arm::kBlock).has_value());
  for (const auto& name : PresetNames()) {
    auto p = Preset(name, Arm::kRd);
    ASSERT_TRUE(p.has_value()) << name;
    EXPECT_TRUE(p->Validate().empty()) << name;
  }
}

TEST(ConfigTest, FlopsFollowTheDocumentedFormula) {
  const ModelConfig s = *Preset("S", Arm::kBlock);
  const FlopCounts f = CountFlops(s);
  const double matrices = 16.0 * (4 * 576.0 * 576 + 3 * 576.0 * 2560) + 50304.0 * 576;
  EXPECT_DOUBLE_EQ(f.matmul_forward, 2 * matrices);
  EXPECT_DOUBLE_EQ(f.attention_forward, 4 * 16.0 * 1024 * 576);
  // Σ K over attention reads (80), MLP reads (88) and the final read (9).
  EXPECT_DOUBLE_EQ(f.depth_read_forward, 4 * (80.0 + 88 + 9) * 576);
  EXPECT_DOUBLE_EQ(f.training(), 3 * f.forward());
  // RD computes a second attention-side route: + 4 * 80 * 576 per token.
  const FlopCounts r = CountFlops(*Preset("S", Arm::kRd));
  EXPECT_DOUBLE_EQ(r.depth_read_forward - f.depth_read_forward, 4 * 80.0 * 576);
  EXPECT_EQ(CountFlops(*Preset("S", Arm::kStandard)).depth_read_forward, 0.0);
}

}  // namespace
}  // namespace rdattn::model
