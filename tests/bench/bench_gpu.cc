// --gpu-checks: what scripts/gpu_check.sh asks of a GPU before it times anything
// (bench_common.h). For every arm of one preset, with non-zero pseudo-queries so that the depth
// routes are not uniform:
//   1. the device's forward agrees with the CPU fp32 forward: relative L2 error of the logits
//      ≤ 1e-4 in fp32 and ≤ 5·2⁻⁸ ≈ 0.0195 under bf16 autocast (about five bf16 rounding steps);
//   2. T6 (MODEL.md §8) on the device: rd with q_v := q_attn is bitwise block and tied, in fp32
//      and under bf16 autocast, and differs from block before the copy.
// With --device cpu the same code runs on the CPU (the bf16 variant then uses LibTorch's CPU
// autocast to bf16; the trainer's autocast is CUDA-only); that is how it is tested without a GPU.
#include <torch/types.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "model/torch_compat.h"
#include "tests/bench/bench_common.h"

namespace rdattn::bench {
namespace {

using model::Arm;
using model::Gpt;

// bf16 autocast on the CPU while alive (the CPU stand-in for the CUDA autocast of the trainer).
class CpuAutocastGuard {
 public:
  explicit CpuAutocastGuard(bool on) : on_(on) {
    if (on_) torch_compat::SetAutocast(c10::DeviceType::CPU, true, at::kBFloat16);
  }
  ~CpuAutocastGuard() {
    if (on_) torch_compat::SetAutocast(c10::DeviceType::CPU, false);
  }
  CpuAutocastGuard(const CpuAutocastGuard&) = delete;
  CpuAutocastGuard& operator=(const CpuAutocastGuard&) = delete;

 private:
  bool on_;
};

// Pseudo-queries drawn from N(0, 1/D): against RMS-normalised keys the depth logits then have
// unit scale, routes far from uniform but not one-hot (as after training, not as at init).
void PerturbQueries(Gpt& m, uint64_t seed) {
  torch::NoGradGuard no_grad;
  const double scale = 1.0 / std::sqrt(static_cast<double>(m->config().width));
  at::Generator gen = at::detail::createCPUGenerator(seed);
  for (auto& item : m->named_parameters()) {
    const std::string& name = item.key();
    const auto dot = name.rfind('.');
    const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
    if (leaf.rfind("q_", 0) != 0) continue;
    item.value().copy_(at::randn(item.value().sizes(), gen) * scale);
  }
}

void CopyParameters(Gpt& from, Gpt& to) {
  torch::NoGradGuard no_grad;
  auto src = from->named_parameters();
  for (auto& item : to->named_parameters()) {
    const at::Tensor* s = src.find(item.key());
    TORCH_CHECK(s != nullptr, "no parameter ", item.key());
    item.value().copy_(*s);
  }
}

double RelL2(const at::Tensor& a, const at::Tensor& ref) {
  const at::Tensor r = ref.to(at::kDouble), d = a.to(at::kDouble).cpu() - r;
  return d.norm().item<double>() / std::max(r.norm().item<double>(), 1e-300);
}

// Logits on the device (fp32 or bf16) as CPU float.
at::Tensor DeviceLogits(Gpt& cpu_model, const model::ModelConfig& cfg, const at::Tensor& tokens,
                        const DeviceSpec& dev, bool bf16) {
  torch::NoGradGuard no_grad;
  Gpt m(cfg, 5);
  CopyParameters(cpu_model, m);
  if (dev.cuda()) {
    m->to(dev.device);
    AutocastGuard autocast(bf16);
    return m->forward(tokens.to(dev.device)).to(at::kFloat).cpu();
  }
  CpuAutocastGuard autocast(bf16);
  return m->forward(tokens).to(at::kFloat);
}

bool Check(bool ok, const std::string& what) {
  std::printf("%-4s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  return ok;
}

}  // namespace

int DeviceChecksMain(const std::string& preset, const DeviceSpec& dev) {
  constexpr double kFp32Tol = 1e-4;
  const double bf16_tol = 5.0 * std::ldexp(1.0, -8);
  const std::string where = dev.cuda() ? "cuda" : "cpu";
  std::printf("device checks on %s, preset %s (fp32 tolerance %.0e, bf16 tolerance %.4f)\n",
              where.c_str(), preset.c_str(), kFp32Tol, bf16_tol);
  bool all = true;
  for (Arm arm : model::AllArms()) {
    const auto cfg = *model::Preset(preset, arm);
    Gpt ref(cfg, 5);
    PerturbQueries(ref, 6);
    at::Generator gen = at::detail::createCPUGenerator(8);
    const at::Tensor tokens =
        at::randint(cfg.vocab_size, {2, cfg.context}, gen, at::TensorOptions().dtype(at::kLong));
    at::Tensor want;
    {
      torch::NoGradGuard no_grad;
      want = ref->forward(tokens);
    }
    const double e32 = RelL2(DeviceLogits(ref, cfg, tokens, dev, false), want);
    const double e16 = RelL2(DeviceLogits(ref, cfg, tokens, dev, true), want);
    const std::string name(model::ArmName(arm));
    char buf[200];
    std::snprintf(buf, sizeof(buf), "%s: %s fp32 forward vs CPU fp32, rel L2 %.2e", name.c_str(),
                  where.c_str(), e32);
    all &= Check(std::isfinite(e32) && e32 <= kFp32Tol, buf);
    std::snprintf(buf, sizeof(buf), "%s: %s bf16 forward vs CPU fp32, rel L2 %.2e", name.c_str(),
                  where.c_str(), e16);
    all &= Check(std::isfinite(e16) && e16 <= bf16_tol, buf);
  }

  // T6 on the device.
  for (bool bf16 : {false, true}) {
    if (bf16 && !dev.cuda()) continue;  // autocast is the CUDA path; CPU bf16 weights differ
    model::ModelConfig c = *model::Preset(preset, Arm::kRd);
    Gpt rd(c, 21);
    PerturbQueries(rd, 22);
    c.arm = Arm::kBlock;
    Gpt block(c, 99);
    c.arm = Arm::kTied;
    Gpt tied(c, 98);
    CopyParameters(rd, block);
    CopyParameters(rd, tied);
    rd->to(dev.device);
    block->to(dev.device);
    tied->to(dev.device);
    at::Generator gen = at::detail::createCPUGenerator(23);
    const at::Tensor tokens =
        at::randint(c.vocab_size, {2, c.context}, gen, at::TensorOptions().dtype(at::kLong))
            .to(dev.device);
    torch::NoGradGuard no_grad;
    AutocastGuard autocast(bf16);
    const bool differs_before = !torch::equal(rd->forward(tokens), block->forward(tokens));
    for (auto& layer : rd->layers()) layer->q_v.copy_(layer->q_attn);
    const at::Tensor y = rd->forward(tokens);
    const std::string mode = bf16 ? "bf16 autocast" : "fp32";
    all &= Check(differs_before,
                 "T6 on " + where + " (" + mode + "): rd differs from block before q_v := q_attn");
    all &= Check(torch::equal(y, block->forward(tokens)),
                 "T6 on " + where + " (" + mode + "): rd with q_v := q_attn is bitwise block");
    all &= Check(torch::equal(y, tied->forward(tokens)),
                 "T6 on " + where + " (" + mode + "): rd with q_v := q_attn is bitwise tied");
  }
  std::printf("device checks: %s\n", all ? "all passed" : "FAILED");
  return all ? 0 : 1;
}

}  // namespace rdattn::bench
