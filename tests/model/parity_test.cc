// Parity with an independent float64 implementation of MODEL.md (tests/fixtures/parity, a copy
// of the design's shared fixture): weights, tokens and logits for every arm, in the style of
// llm.c's test_gpt2.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/gpt.h"
#include "worker/io/safetensors.h"

#ifndef RDATTN_PARITY_DIR
#error "RDATTN_PARITY_DIR must be defined by the build"
#endif

namespace rdattn::model {
namespace {

const std::string kDir = RDATTN_PARITY_DIR;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

class ParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ParityTest, LogitsRoutesAndJsMatchTheReference) {
  const std::string arm_name = GetParam();
  const nlohmann::json index = ReadJson(kDir + "/index.json");
  const auto& cfg_json = index["config"];
  ASSERT_EQ(cfg_json["rope"], "half");
  const auto arm = ParseArm(arm_name);
  ASSERT_TRUE(arm.has_value());
  ModelConfig c;
  c.arm = *arm;
  c.layers = cfg_json["layers"];
  c.width = cfg_json["width"];
  c.heads = cfg_json["heads"];
  c.ffn_hidden = cfg_json["hidden"];
  c.vocab_size = cfg_json["vocab"];
  c.blocks = cfg_json["blocks"];
  c.norm_eps = c.key_norm_eps = cfg_json["norm_eps"];
  c.rope_theta = cfg_json["rope_theta"];
  const auto tokens_vec = index["tokens"].get<std::vector<std::vector<int64_t>>>();
  c.context = static_cast<int64_t>(tokens_vec[0].size());

  const auto& entry = index["arms"][arm_name];
  io::SafetensorsFile weights;
  std::string error;
  ASSERT_TRUE(
      io::ReadSafetensors(kDir + "/" + entry["weights"].get<std::string>(), &weights, &error))
      << error;
  EXPECT_EQ(weights.metadata["arm"], arm_name);

  Gpt model(c, 0);
  model->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    size_t loaded = 0;
    for (auto& item : model->named_parameters()) {
      auto it = weights.tensors.find(item.key());
      ASSERT_NE(it, weights.tensors.end()) << "fixture lacks " << item.key();
      ASSERT_EQ(it->second.sizes(), item.value().sizes()) << item.key();
      item.value().copy_(it->second);
      ++loaded;
    }
    EXPECT_EQ(loaded, weights.tensors.size()) << "every fixture tensor must be a model parameter";
  }

  std::vector<int64_t> flat;
  for (const auto& row : tokens_vec) flat.insert(flat.end(), row.begin(), row.end());
  const at::Tensor tokens =
      torch::tensor(flat, torch::TensorOptions().dtype(torch::kLong)).view({2, c.context});
  const ForwardOutput out = model->Forward(tokens, {.capture_routes = true});

  const nlohmann::json ref = ReadJson(kDir + "/" + entry["logits"].get<std::string>());
  const auto shape = ref["shape"].get<std::vector<int64_t>>();
  const at::Tensor expect = torch::tensor(ref["values"].get<std::vector<double>>(),
                                          torch::TensorOptions().dtype(torch::kDouble))
                                .view(shape);
  ASSERT_EQ(out.logits.sizes(), expect.sizes());
  const double scale = expect.abs().max().item<double>();
  const double rel = (out.logits - expect).abs().max().item<double>() / scale;
  EXPECT_LT(rel, 1e-10) << arm_name << ": max relative logit difference " << rel;
  const double sum = entry["logits_sum"], sq = entry["logits_sq_sum"];
  EXPECT_NEAR(out.logits.sum().item<double>(), sum, 1e-9 * std::max(1.0, std::abs(sum)));
  EXPECT_NEAR(out.logits.pow(2).sum().item<double>(), sq, 1e-9 * sq);

  if (entry.contains("js_nats_per_layer")) {
    DepthStatsAccumulator acc(c.layers);
    acc.Add(out.routes);
    const DepthDiagnostics d = acc.Finalize();
    const auto js = entry["js_nats_per_layer"].get<std::vector<double>>();
    ASSERT_EQ(d.js_nats.size(), js.size());
    for (size_t l = 0; l < js.size(); ++l) EXPECT_NEAR(d.js_nats[l], js[l], 1e-10) << "layer " << l;
    auto alpha_at = [&](RouteSite site) {
      for (const auto& r : out.routes)
        if (r.layer == 1 && r.site == site) return r.alpha.select(1, 0).select(1, 0);  // [K]
      return at::Tensor();
    };
    const auto qk = entry["alpha_qk_layer1_token0"].get<std::vector<double>>();
    const auto v = entry["alpha_v_layer1_token0"].get<std::vector<double>>();
    const at::Tensor aqk = alpha_at(RouteSite::kAttnQK), av = alpha_at(RouteSite::kAttnV);
    ASSERT_TRUE(aqk.defined() && av.defined());
    ASSERT_EQ(aqk.numel(), static_cast<int64_t>(qk.size()));
    for (size_t k = 0; k < qk.size(); ++k) {
      EXPECT_NEAR(aqk[k].item<double>(), qk[k], 1e-12);
      EXPECT_NEAR(av[k].item<double>(), v[k], 1e-12);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllArms, ParityTest,
                         ::testing::Values("standard", "block", "rd", "tied", "average",
                                           "average_asym", "frozen_v"));

TEST(SafetensorsTest, RoundTripAndErrorsNameTheFile) {
  const std::string path = ::testing::TempDir() + "/rt.safetensors";
  const at::Tensor a = torch::randn({3, 4}, torch::TensorOptions().dtype(torch::kDouble));
  const at::Tensor b = torch::arange(5, torch::TensorOptions().dtype(torch::kLong));
  std::string error;
  ASSERT_TRUE(io::WriteSafetensors(path, {{"a", a}, {"b", b}}, {{"arm", "rd"}}, &error)) << error;
  io::SafetensorsFile f;
  ASSERT_TRUE(io::ReadSafetensors(path, &f, &error)) << error;
  EXPECT_TRUE(torch::equal(f.tensors.at("a"), a));
  EXPECT_TRUE(torch::equal(f.tensors.at("b"), b));
  EXPECT_EQ(f.metadata.at("arm"), "rd");
  // Truncate: the error names the file.
  {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 9));
  }
  EXPECT_FALSE(io::ReadSafetensors(path, &f, &error));
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_FALSE(io::ReadSafetensors(path + ".missing", &f, &error));
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
}

}  // namespace
}  // namespace rdattn::model
