// The model's acceptance tests: T3–T10 of MODEL.md §8 on the full model, matched-seed init,
// causality, and the Tied-vs-Block trajectory.
#include "model/gpt.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>

#include "tests/model/test_util.h"

namespace rdattn::model {
namespace {

using testing::MaxRelDiff;
using testing::Perturb;
using testing::RandomTokens;
using testing::Small;

std::vector<int64_t> KsOf(const ForwardOutput& out, RouteSite site) {
  std::vector<int64_t> ks;
  for (const auto& r : out.routes)
    if (r.site == site) ks.push_back(r.alpha.size(0));
  return ks;
}

// Copies every parameter that `to` has from `from` (by name).
void CopyShared(Gpt& from, Gpt& to) {
  torch::NoGradGuard no_grad;
  auto src = from->named_parameters();
  for (auto& item : to->named_parameters()) {
    const at::Tensor* s = src.find(item.key());
    ASSERT_NE(s, nullptr) << item.key();
    item.value().copy_(*s);
  }
}

TEST(GptTest, T3SourceWalkOfSAndMShapes) {
  for (const char* preset : {"S", "M"}) {
    ModelConfig c = *Preset(preset, Arm::kRd);
    c.width = 16;  // the topology at a small width
    c.heads = 2;
    c.ffn_hidden = 16;
    c.vocab_size = 32;
    c.context = 4;
    Gpt model(c, 1);
    const ForwardOutput out = model->Forward(RandomTokens(c, 1, 4, 2), {.capture_routes = true});
    const SourceCounts expect = CountSources(c);
    EXPECT_EQ(KsOf(out, RouteSite::kAttnQK), expect.attention) << preset;
    EXPECT_EQ(KsOf(out, RouteSite::kAttnV), expect.attention) << preset;
    EXPECT_EQ(KsOf(out, RouteSite::kMlp), expect.mlp) << preset;
    EXPECT_EQ(KsOf(out, RouteSite::kFinal), std::vector<int64_t>{9}) << preset;
  }
}

TEST(GptTest, T3EmbeddingIsNeverSummedIntoABlock) {
  // With W_O and W_down zero every sublayer output is zero: b_1 … b_N must then be exactly
  // zero, and b_0 exactly the embedding.
  ModelConfig c = Small(Arm::kBlock, 4, 2);
  Gpt model(c, 3);
  {
    torch::NoGradGuard no_grad;
    for (auto& layer : model->layers()) {
      layer->wo.zero_();
      layer->wdown.zero_();
    }
  }
  const at::Tensor tokens = RandomTokens(c, 2, 8, 4);
  const ForwardOutput out = model->Forward(tokens, {.capture_final_sources = true});
  ASSERT_EQ(out.final_sources.size(), 3u);
  EXPECT_TRUE(torch::equal(out.final_sources[0], at::embedding(model->emb, tokens)));
  for (size_t n = 1; n < out.final_sources.size(); ++n)
    EXPECT_EQ(out.final_sources[n].abs().max().item<double>(), 0.0) << "b_" << n;
}

TEST(GptTest, T4DegenerateEnds) {
  for (int64_t blocks : {1, 4}) {
    ModelConfig c = Small(Arm::kBlock, 4, blocks);
    Gpt model(c, 5);
    const ForwardOutput out = model->Forward(
        RandomTokens(c, 1, 5, 6), {.capture_routes = true, .capture_final_sources = true});
    const SourceCounts expect = CountSources(c);
    EXPECT_EQ(KsOf(out, RouteSite::kAttnQK), expect.attention);
    EXPECT_EQ(KsOf(out, RouteSite::kMlp), expect.mlp);
    EXPECT_EQ(static_cast<int64_t>(out.final_sources.size()), expect.final_read);
  }
  // N = 1: the final read sees [e, Σ all f].
  ModelConfig c = Small(Arm::kBlock, 4, 1);
  Gpt model(c, 5);
  const ForwardOutput out =
      model->Forward(RandomTokens(c, 1, 5, 6), {.capture_final_sources = true});
  EXPECT_EQ(out.final_sources.size(), 2u);
}

TEST(GptTest, T5EveryArmEqualsStandardAtInit) {
  // With pseudo-queries at zero and ε → 0, every read is the mean of its sources, whose sum
  // is the standard residual stream; RMSNorm removes the 1/K. float64, ε = 1e-30.
  for (Arm arm : AllArms()) {
    if (arm == Arm::kStandard) continue;
    ModelConfig c = Small(arm);
    c.norm_eps = c.key_norm_eps = 1e-30;
    ModelConfig cs = c;
    cs.arm = Arm::kStandard;
    Gpt model(c, 11), standard(cs, 11);
    model->to(torch::kDouble);
    standard->to(torch::kDouble);
    if (arm == Arm::kAverageAsym) {
      torch::NoGradGuard no_grad;
      for (auto& layer : model->layers()) layer->q_b.zero_();
    }
    const at::Tensor tokens = RandomTokens(c, 2, 12, 12);
    const double rel = MaxRelDiff(model->forward(tokens), standard->forward(tokens));
    EXPECT_LT(rel, 1e-9) << ArmName(arm);
  }
}

TEST(GptTest, T6RdWithVQueryCopiedIsBitwiseBlockAndTied) {
  ModelConfig c = Small(Arm::kRd);
  Gpt rd(c, 21);
  Perturb(rd, 22);
  c.arm = Arm::kBlock;
  Gpt block(c, 99);
  c.arm = Arm::kTied;
  Gpt tied(c, 98);
  CopyShared(rd, block);
  CopyShared(rd, tied);
  const at::Tensor tokens = RandomTokens(c, 2, 16, 23);
  // Before the copy RD differs from Block (q_v ≠ q_attn after Perturb) …
  EXPECT_FALSE(torch::equal(rd->forward(tokens), block->forward(tokens)));
  {
    torch::NoGradGuard no_grad;
    for (auto& layer : rd->layers()) layer->q_v.copy_(layer->q_attn);
  }
  // … and after it the function is bitwise the parent's.
  const at::Tensor y = rd->forward(tokens);
  EXPECT_TRUE(torch::equal(y, block->forward(tokens)));
  EXPECT_TRUE(torch::equal(y, tied->forward(tokens)));
}

TEST(GptTest, T7FrozenVStaysZeroUntrainedAndUniform) {
  ModelConfig c = Small(Arm::kFrozenV);
  Gpt model(c, 31);
  for (const auto& p : model->named_parameters())
    EXPECT_EQ(p.key().find("q_v"), std::string::npos) << "q_v must not be a parameter";
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
  for (int step = 0; step < 4; ++step) {
    const at::Tensor tokens = RandomTokens(c, 2, 16, 100 + step);
    opt.zero_grad();
    const at::Tensor logits = model->forward(tokens.narrow(1, 0, 15));
    GptImpl::Loss(logits, tokens.narrow(1, 1, 15)).backward();
    opt.step();
  }
  bool queries_moved = false;
  for (auto& layer : model->layers()) {
    EXPECT_EQ(layer->q_v.abs().max().item<double>(), 0.0);
    EXPECT_FALSE(layer->q_v.grad().defined());
    EXPECT_FALSE(layer->q_v.requires_grad());
    queries_moved |= layer->q_attn.abs().max().item<double>() > 0;
  }
  EXPECT_TRUE(queries_moved) << "training must move the trained queries";
  const ForwardOutput out = model->Forward(RandomTokens(c, 2, 8, 7), {.capture_routes = true});
  for (const auto& r : out.routes) {
    if (r.site != RouteSite::kAttnV) continue;
    const double k = static_cast<double>(r.alpha.size(0));
    EXPECT_LT((r.alpha - 1.0 / k).abs().max().item<double>(), 1e-7) << "layer " << r.layer;
  }
}

TEST(GptTest, T8JsBoundsZeroAtInitAndForTied) {
  auto diagnostics = [](Arm arm, bool perturb) {
    ModelConfig c = Small(arm);
    Gpt model(c, 41);
    if (perturb) Perturb(model, 42);
    DepthStatsAccumulator acc(c.layers);
    acc.Add(model->Forward(RandomTokens(c, 2, 16, 43), {.capture_routes = true}).routes);
    return acc.Finalize();
  };
  const DepthDiagnostics init = diagnostics(Arm::kRd, false);
  ASSERT_EQ(init.js_nats.size(), 4u);
  for (double js : init.js_nats) EXPECT_EQ(js, 0.0);
  const DepthDiagnostics tied = diagnostics(Arm::kTied, true);
  for (double js : tied.js_nats) EXPECT_EQ(js, 0.0);
  const DepthDiagnostics rd = diagnostics(Arm::kRd, true);
  EXPECT_EQ(rd.second_route, "v");
  EXPECT_EQ(rd.js_nats[0], 0.0);  // layer 0 has a single source
  for (size_t l = 0; l < rd.js_nats.size(); ++l) {
    EXPECT_GE(rd.js_nats[l], 0.0);
    EXPECT_LE(rd.js_nats[l], std::log(2.0));
    EXPECT_DOUBLE_EQ(rd.js_bits[l], rd.js_nats[l] / std::log(2.0));
    EXPECT_LE(rd.js_of_mean_nats[l], rd.js_nats[l] + 1e-12);
  }
  EXPECT_GT(rd.mean_js_nats, 0.0);
  EXPECT_GT(rd.mean_js_nats_multi, rd.mean_js_nats);  // layer 0 (K = 1) is excluded
  EXPECT_TRUE(diagnostics(Arm::kBlock, true).js_nats.empty());
}

TEST(GptTest, T9ModelAllocatesTheCountedParameters) {
  for (const char* preset : {"S", "M"}) {
    for (Arm arm : {Arm::kBlock, Arm::kRd}) {
      Gpt model(*Preset(preset, arm), 0);
      int64_t n = 0;
      for (const auto& p : model->parameters()) n += p.numel();
      EXPECT_EQ(n, CountParams(model->config()).total()) << preset << " " << ArmName(arm);
    }
  }
  for (Arm arm : AllArms()) {
    Gpt model(Small(arm), 0);
    int64_t n = 0;
    for (const auto& p : model->parameters()) n += p.numel();
    EXPECT_EQ(n, CountParams(model->config()).total()) << ArmName(arm);
  }
}

TEST(GptTest, T10AverageQueriesStayEqualAndAsymDoesNot) {
  for (Arm arm : {Arm::kAverage, Arm::kAverageAsym}) {
    ModelConfig c = Small(arm);
    Gpt model(c, 51);
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
    for (int step = 0; step < 5; ++step) {
      const at::Tensor tokens = RandomTokens(c, 2, 16, 200 + step);
      opt.zero_grad();
      GptImpl::Loss(model->forward(tokens.narrow(1, 0, 15)), tokens.narrow(1, 1, 15)).backward();
      opt.step();
    }
    for (auto& layer : model->layers()) {
      if (arm == Arm::kAverage) {
        EXPECT_TRUE(torch::equal(layer->q_attn, layer->q_b));
      } else {
        EXPECT_FALSE(torch::equal(layer->q_attn, layer->q_b));
      }
    }
    // Training moved the queries off zero (except layer 0's, which reads a single source).
    EXPECT_GT(model->layers().back()->q_attn.abs().max().item<double>(), 0.0);
  }
}

TEST(GptTest, SharedParametersAreBitwiseEqualAcrossAllArms) {
  std::vector<Gpt> models;
  for (Arm arm : AllArms()) models.emplace_back(Small(arm), 1234);
  const auto reference = models[1]->named_parameters();  // block
  for (size_t i = 0; i < models.size(); ++i) {
    int64_t compared = 0;
    for (const auto& item : models[i]->named_parameters()) {
      const at::Tensor* r = reference.find(item.key());
      if (r == nullptr) continue;  // arm-specific (q_v, q_b)
      EXPECT_TRUE(torch::equal(item.value(), *r)) << ArmName(AllArms()[i]) << " " << item.key();
      ++compared;
    }
    EXPECT_GT(compared, 0);
    if (AllArms()[i] != Arm::kStandard) {
      EXPECT_EQ(ParameterChecksum(models[i]->SharedParameters()),
                ParameterChecksum(models[1]->SharedParameters()))
          << ArmName(AllArms()[i]);
    }
  }
  // A different seed gives different weights and a different checksum.
  Gpt other(Small(Arm::kBlock), 1235);
  EXPECT_FALSE(torch::equal(other->emb, models[1]->emb));
  EXPECT_NE(ParameterChecksum(other->SharedParameters()),
            ParameterChecksum(models[1]->SharedParameters()));
  // Pseudo-queries start at zero in every arm except average_asym's q_b.
  for (auto& m : models)
    for (auto& layer : m->layers()) {
      if (layer->q_attn.defined()) {
        EXPECT_EQ(layer->q_attn.abs().max().item<double>(), 0.0);
      }
      if (layer->q_v.defined()) {
        EXPECT_EQ(layer->q_v.abs().max().item<double>(), 0.0);
      }
    }
}

TEST(GptTest, CausalForEveryArm) {
  for (Arm arm : AllArms()) {
    ModelConfig c = Small(arm);
    Gpt model(c, 61);
    Perturb(model, 62);
    model->to(torch::kDouble);
    const at::Tensor tokens = RandomTokens(c, 2, 16, 63);
    const at::Tensor base = model->forward(tokens);
    for (int64_t t : {0, 6, 14}) {
      at::Tensor changed = tokens.clone();
      changed.select(1, t + 1).add_(1).remainder_(c.vocab_size);
      const at::Tensor y = model->forward(changed);
      const double past =
          (y.narrow(1, 0, t + 1) - base.narrow(1, 0, t + 1)).abs().max().item<double>();
      const double at_change =
          (y.select(1, t + 1) - base.select(1, t + 1)).abs().max().item<double>();
      EXPECT_LE(past, 1e-12) << ArmName(arm) << " t=" << t;
      EXPECT_GT(at_change, 1e-6) << ArmName(arm) << " t=" << t << ": the change must be visible";
    }
  }
}

TEST(GptTest, TiedTracksBlockOverTenStepsInFloat64) {
  // Tied computes Block's function with the gradient of the shared query summed over two
  // routes in another order: trajectories agree to rounding, not bitwise (MODEL.md §4).
  std::map<Arm, std::vector<double>> losses;
  for (Arm arm : {Arm::kBlock, Arm::kTied}) {
    ModelConfig c = Small(arm);
    Gpt model(c, 71);
    model->to(torch::kDouble);
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));
    for (int step = 0; step < 10; ++step) {
      const at::Tensor tokens = RandomTokens(c, 2, 16, 300 + step);
      opt.zero_grad();
      at::Tensor loss =
          GptImpl::Loss(model->forward(tokens.narrow(1, 0, 15)), tokens.narrow(1, 1, 15));
      loss.backward();
      opt.step();
      losses[arm].push_back(loss.item<double>());
    }
  }
  for (size_t i = 0; i < 10; ++i)
    EXPECT_NEAR(losses[Arm::kTied][i], losses[Arm::kBlock][i],
                1e-9 * std::abs(losses[Arm::kBlock][i]))
        << "step " << i;
  EXPECT_LT(losses[Arm::kBlock].back(), losses[Arm::kBlock].front());
}

TEST(GptTest, InvalidConfigIsRejectedWithTheField) {
  ModelConfig c = Small(Arm::kRd);
  c.width = 30;
  c.heads = 4;
  try {
    Gpt model(c, 0);
    FAIL() << "expected an exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("width"), std::string::npos) << e.what();
  }
}

TEST(GptTest, DecayGroupsSplitMatricesFromVectors) {
  Gpt model(Small(Arm::kRd), 0);
  const auto decay = model->DecayParameters();
  const auto no_decay = model->NoDecayParameters();
  EXPECT_EQ(decay.size(), 1u + 7u * 4u);          // emb + 7 matrices per layer
  EXPECT_EQ(no_decay.size(), 2u + 1u + 7u * 4u);  // final norm, final read (2), 7 per layer
  for (const auto& p : decay) EXPECT_GE(p.dim(), 2);
  for (const auto& p : no_decay) EXPECT_EQ(p.dim(), 1);
}

}  // namespace
}  // namespace rdattn::model
