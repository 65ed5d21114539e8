// rdattn_model_bench: forward + backward tokens/s and peak memory per arm at one CPU preset.
// Peak memory is measured in a fresh child process per arm (one step). The arms alternate
// within one run (round-robin), so machine noise hits every arm alike, and
// the figures that matter are the ratios rd/block and block/standard printed at the end.
//
//   rdattn_model_bench [--preset cpu-bench] [--batch 4] [--rounds 3] [--steps 3] [--threads 1]
//                      [--arms standard,block,rd,...]
#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "model/gpt.h"

namespace {

using rdattn::model::Arm;

// Reads a "Vm…: N kB" line of /proc/self/status, in bytes (-1 if unavailable).
int64_t ProcStatusBytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') {
      return std::stoll(line.substr(n + 1)) * 1024;
    }
  }
  return -1;
}

// Memory probe, run in a fresh child process per arm (a process's peak RSS never goes down and
// freed memory is reused, so arms cannot be measured one after another in one process): builds
// the model and a batch, then prints the peak RSS of one forward + backward step minus the RSS
// before it, in bytes.
int MemoryProbe(const std::string& preset, rdattn::model::Arm arm, int64_t batch) {
  at::set_num_threads(1);
  const auto cfg = *rdattn::model::Preset(preset, arm);
  rdattn::model::Gpt m(cfg, 0);
  const at::Tensor tokens = torch::randint(cfg.vocab_size, {batch, cfg.context + 1}, torch::kLong);
  const int64_t before = ProcStatusBytes("VmRSS");
  rdattn::model::GptImpl::Loss(m->forward(tokens.narrow(1, 0, cfg.context)),
                               tokens.narrow(1, 1, cfg.context))
      .backward();
  std::printf("%lld\n", static_cast<long long>(ProcStatusBytes("VmHWM") - before));
  return 0;
}

// Runs this binary's memory probe for `arm` in a child process; -1 on failure.
int64_t ProbeInChild(const std::string& preset, rdattn::model::Arm arm, int64_t batch) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return -1;
  self[n] = '\0';
  const std::string cmd = std::string(self) + " --memory-probe " +
                          std::string(rdattn::model::ArmName(arm)) + " --preset " + preset +
                          " --batch " + std::to_string(batch);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  long long v = -1;
  if (std::fscanf(p, "%lld", &v) != 1) v = -1;
  return pclose(p) == 0 ? v : -1;
}

struct Stat {
  double seconds = 0;
  int64_t tokens = 0;
  int64_t peak_extra_bytes =
      -1;  // peak RSS of one training step minus the RSS before it (child process)
};

[[noreturn]] void Usage(const char* msg) {
  std::fprintf(stderr, "rdattn_model_bench: %s\n", msg);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "cpu-bench",
              arms_arg = "standard,block,rd,tied,average,average_asym,frozen_v", probe;
  int64_t batch = 4, rounds = 3, steps = 3, threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--preset")
      preset = next();
    else if (a == "--batch")
      batch = std::stoll(next());
    else if (a == "--rounds")
      rounds = std::stoll(next());
    else if (a == "--steps")
      steps = std::stoll(next());
    else if (a == "--threads")
      threads = std::stoll(next());
    else if (a == "--arms")
      arms_arg = next();
    else if (a == "--memory-probe")
      probe = next();
    else
      Usage(("unknown flag " + a).c_str());
  }
  if (batch < 1 || rounds < 1 || steps < 1 || threads < 1)
    Usage("batch, rounds, steps and threads must be ≥ 1");
  std::vector<Arm> arms;
  std::stringstream ss(arms_arg);
  for (std::string name; std::getline(ss, name, ',');) {
    auto arm = rdattn::model::ParseArm(name);
    if (!arm)
      Usage(
          ("--arms: unknown arm '" + name + "'; valid: " + rdattn::model::ValidArmNames()).c_str());
    arms.push_back(*arm);
  }
  if (!rdattn::model::Preset(preset, Arm::kBlock))
    Usage(("--preset: unknown preset '" + preset + "'").c_str());
  if (!probe.empty()) {
    auto arm = rdattn::model::ParseArm(probe);
    if (!arm) Usage(("--memory-probe: unknown arm '" + probe + "'").c_str());
    return MemoryProbe(preset, *arm, batch);
  }
  at::set_num_threads(static_cast<int>(threads));
  torch::manual_seed(0);

  const auto base = *rdattn::model::Preset(preset, Arm::kBlock);
  const int64_t T = base.context;
  std::printf(
      "preset=%s layers=%lld width=%lld heads=%lld context=%lld vocab=%lld batch=%lld "
      "threads=%lld rounds=%lld steps/round=%lld torch=%s\n",
      preset.c_str(), (long long)base.layers, (long long)base.width, (long long)base.heads,
      (long long)T, (long long)base.vocab_size, (long long)batch, (long long)threads,
      (long long)rounds, (long long)steps, TORCH_VERSION);

  std::map<Arm, rdattn::model::Gpt> models;
  for (Arm arm : arms)
    models.emplace(arm, rdattn::model::Gpt(*rdattn::model::Preset(preset, arm), 0));
  const at::Tensor tokens = torch::randint(base.vocab_size, {batch, T + 1}, torch::kLong);
  const at::Tensor x = tokens.narrow(1, 0, T), y = tokens.narrow(1, 1, T);
  auto step = [&](rdattn::model::Gpt& m) {
    m->zero_grad();
    rdattn::model::GptImpl::Loss(m->forward(x), y).backward();
  };
  for (Arm arm : arms) step(models.at(arm));  // warm-up: allocator and BLAS pools

  std::map<Arm, Stat> stats;
  for (int64_t r = 0; r < rounds; ++r) {
    for (Arm arm : arms) {
      auto& m = models.at(arm);
      m->zero_grad();
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t s = 0; s < steps; ++s) step(m);
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      Stat& st = stats[arm];
      st.seconds += dt;
      st.tokens += steps * batch * T;
      if (r == 0) st.peak_extra_bytes = ProbeInChild(preset, arm, batch);
    }
  }

  std::printf("%-13s %12s %12s %16s %14s\n", "arm", "tokens/s", "ms/step", "step_peak_MiB",
              "params");
  std::map<Arm, double> tps;
  for (Arm arm : arms) {
    const Stat& st = stats[arm];
    tps[arm] = static_cast<double>(st.tokens) / st.seconds;
    int64_t params = 0;
    for (const auto& p : models.at(arm)->parameters()) params += p.numel();
    std::printf(
        "%-13s %12.1f %12.1f %16.1f %14lld\n", std::string(rdattn::model::ArmName(arm)).c_str(),
        tps[arm], 1000.0 * st.seconds / static_cast<double>(rounds * steps),
        st.peak_extra_bytes < 0 ? -1.0 : static_cast<double>(st.peak_extra_bytes) / (1 << 20),
        (long long)params);
  }
  auto ratio = [&](Arm a, Arm b, const char* label) {
    if (tps.count(a) && tps.count(b)) {
      std::printf("%s throughput ratio: %.3f", label, tps[a] / tps[b]);
      const auto& sa = stats[a];
      const auto& sb = stats[b];
      if (sa.peak_extra_bytes > 0 && sb.peak_extra_bytes > 0)
        std::printf("   peak-memory ratio: %.3f",
                    static_cast<double>(sa.peak_extra_bytes) / sb.peak_extra_bytes);
      std::printf("\n");
    }
  };
  ratio(Arm::kRd, Arm::kBlock, "rd/block");
  ratio(Arm::kBlock, Arm::kStandard, "block/standard");
  return 0;
}
