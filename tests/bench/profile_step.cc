// rdattn_profile_step: where the time of one full training step goes, per op, per arm
// (docs/benchmarks.md "Where rd's extra cost goes (profile)"). Not part of ctest or the bench
// suite: a tool to run by hand.
//
//   rdattn_profile_step [--preset cpu-bench] [--arms block,rd] [--batch 4] [--warmup 2]
//                       [--steps 3] [--rounds 6] [--round-steps 2] [--top 30] [--min-ms 0.05]
//                       [--callgrind ARM] [--read-bench REPS] [--json FILE]
//
// 1. Timing (no callbacks installed): `rounds` rounds, each running `round-steps` full steps
//    (bench::FullStep: forward, backward, clip, AdamW) of every arm in turn; tokens/s per arm and
//    each arm's ratio to the first, summed over the rounds (as rdattn_model_bench does).
// 2. Profile: `steps` full steps per arm, the arms alternating step by step, with a global
//    RecordFunction callback on every op (aten ops, autograd nodes, the optimizer's ops): per
//    name, calls, inclusive and self time (inclusive minus the time of the ops it called), per
//    step. Then the per-op difference of each arm from the first (calls and self time), largest
//    first. The callbacks cost about a microsecond per op, so the profiled step is slower than
//    the timed one; the per-op self times are what the table compares.
// 3. --callgrind ARM: only `warmup` steps then `steps` steps of that arm, with callgrind's
//    collection on during the measured steps alone (CALLGRIND_TOGGLE_COLLECT; run under
//    valgrind --tool=callgrind --collect-atstart=no). No timing, no profile.
// 4. --read-bench REPS: the attention-side read alone (ReadBench below). No steps.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <valgrind/callgrind.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/cpu_features.h"
#include "model/config.h"
#include "model/depth_read.h"
#include "model/gpt.h"
#include "tests/bench/bench_common.h"
#include "worker/trainer/runtime.h"

namespace {

using rdattn::model::Arm;
using Clock = std::chrono::steady_clock;

struct OpStat {
  int64_t calls = 0;
  double incl_ns = 0;
  double self_ns = 0;
};

// The profile of the current arm: per op name. One thread does the work (OMP_NUM_THREADS=1, CPU
// autograd runs on the caller's thread), but the map is locked anyway.
std::mutex g_mu;
std::map<std::string, OpStat> g_stats;

// Per thread: the open ops' time spent in children.
thread_local std::vector<double> t_child_ns;

struct Ctx : at::ObserverContext {
  Clock::time_point start;
};

std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction& /*fn*/) {
  auto ctx = std::make_unique<Ctx>();
  t_child_ns.push_back(0);
  ctx->start = Clock::now();
  return ctx;
}

void OnEnd(const at::RecordFunction& fn, at::ObserverContext* raw) {
  const auto end = Clock::now();
  auto* ctx = static_cast<Ctx*>(raw);
  if (ctx == nullptr || t_child_ns.empty()) return;
  const double incl = std::chrono::duration<double, std::nano>(end - ctx->start).count();
  const double child = t_child_ns.back();
  t_child_ns.pop_back();
  if (!t_child_ns.empty()) t_child_ns.back() += incl;
  std::lock_guard<std::mutex> lock(g_mu);
  OpStat& s = g_stats[fn.name()];
  ++s.calls;
  s.incl_ns += incl;
  s.self_ns += incl - child;
}

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "rdattn_profile_step: %s\nusage: rdattn_profile_step [--preset cpu-bench] "
               "[--arms block,rd] [--batch 4] [--warmup 2] [--steps 3] [--rounds 6] "
               "[--round-steps 2] [--top 30] [--min-ms 0.05] [--callgrind ARM] [--read-bench REPS] "
               "[--json FILE]\n",
               why.c_str());
  std::exit(2);
}

std::vector<Arm> ParseArms(const std::string& list) {
  std::vector<Arm> arms;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    const auto a = rdattn::model::ParseArm(name);
    if (!a) Usage("unknown arm '" + name + "'; valid: " + rdattn::model::ValidArmNames());
    arms.push_back(*a);
  }
  if (arms.empty()) Usage("--arms is empty");
  return arms;
}

std::string Name(Arm a) { return std::string(rdattn::model::ArmName(a)); }

// --read-bench: the attention-side depth read alone, forward + backward, at the preset's shape
// [batch, context, width] over K = 1, 2, 3 sources: block's (1 route, norm, then the V GEMM
// outside) against rd's (2 routes, norm, the V GEMM folded in). Per K, the best of `reps`
// alternated timings, in ms. Under callgrind, each timing is dumped on its own (its label says
// K and the arm): instruction counts, repeatable on a busy machine.
void ReadBench(const rdattn::model::ModelConfig& cfg, int64_t batch, int64_t reps) {
  namespace m = rdattn::model;
  const int64_t D = cfg.width;
  const auto f = at::TensorOptions().dtype(at::kFloat);
  at::manual_seed(5);
  std::printf(
      "read-bench: [%lld,%lld,%lld], best of %lld, fwd+bwd ms; ops: the op-by-op path, kernel: "
      "the CPU kernel\n  K  block/ops   rd/ops  block/kernel  rd/kernel   rd-block ops  "
      "rd-block kernel\n",
      (long long)batch, (long long)cfg.context, (long long)D, (long long)reps);
  const bool kernel_was = m::DepthReadCpuKernel();
  for (int64_t K = 1; K <= 3; ++K) {
    std::vector<at::Tensor> xs;
    for (int64_t k = 0; k < K; ++k)
      xs.push_back(at::randn({batch, cfg.context, D}, f).requires_grad_(true));
    auto param = [&](std::vector<int64_t> shape) {
      return (0.1 * at::randn(shape, f)).requires_grad_(true);
    };
    const at::Tensor q = param({D}), qv = param({D}), kg = param({D}), n = param({D}),
                     W = param({D, D});
    const at::Tensor g0 = at::randn({batch, cfg.context, D}, f),
                     g1 = at::randn({batch, cfg.context, D}, f);
    double best[4] = {1e30, 1e30, 1e30, 1e30};  // block/ops, rd/ops, block/kernel, rd/kernel
    for (int64_t r = 0; r < reps; ++r)
      for (int variant = 0; variant < 4; ++variant) {
        const int arm = variant % 2;
        m::SetDepthReadCpuKernel(variant >= 2);
        const auto t0 = Clock::now();
        std::vector<m::DepthSource> src;
        for (const auto& x : xs) src.push_back(m::MakeDepthSource(x, cfg.key_norm_eps));
        at::Tensor y, v;
        if (arm == 0) {
          const auto res =
              m::FusedDepthRead(src, {q}, kg, m::ReadNorm{n, cfg.norm_eps, false, at::Tensor()});
          y = res.outputs[0];
          v = at::linear(y, W);
        } else {
          const auto res =
              m::FusedDepthRead(src, {q, qv}, kg, m::ReadNorm{n, cfg.norm_eps, false, W});
          y = res.outputs[0];
          v = res.outputs[1];
        }
        torch::autograd::backward({y, v}, {g0, g1});
        best[variant] = std::min(
            best[variant], std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        // Under callgrind: one dump per timing (valgrind --tool=callgrind --dump-before=none;
        // each dump holds the instructions since the previous one).
        const std::string label = "K" + std::to_string(K) + (arm == 0 ? "-block" : "-rd") +
                                  (variant >= 2 ? "-kernel" : "-ops");
        CALLGRIND_DUMP_STATS_AT(label.c_str());
        for (const auto& x : xs) x.mutable_grad() = at::Tensor();
        for (const auto* p : {&q, &qv, &kg, &n, &W}) p->mutable_grad() = at::Tensor();
      }
    std::printf("  %lld %9.3f %8.3f %13.3f %10.3f %+14.3f %+16.3f\n", (long long)K, best[0],
                best[1], best[2], best[3], best[1] - best[0], best[3] - best[2]);
  }
  m::SetDepthReadCpuKernel(kernel_was);
}

}  // namespace

int main(int argc, char** argv) {
  rdattn::cpu::UseBestBlasKernels(argv);  // may execute this program again (common/cpu_features.h)
  namespace bench = rdattn::bench;
  std::string preset = "cpu-bench", arms_arg = "block,rd", json_path, callgrind_arm;
  int64_t batch = 4, warmup = 2, steps = 3, rounds = 6, round_steps = 2, top = 30;
  int64_t read_bench = 0;
  double min_ms = 0.05;
  CLI::App app(
      "Per-op profile of full training steps per arm (docs/benchmarks.md \"Where rd's extra cost "
      "goes (profile)\"). Exit codes: 0 done; 2 bad usage.",
      "rdattn_profile_step");
  rdattn::cli::Setup(app);
  app.add_option("--preset", preset, "model preset (e.g. cpu-small, cpu-bench)");
  app.add_option("--arms", arms_arg, "arms, comma-separated; ratios are to the first");
  app.add_option("--batch", batch, "sequences per step (the preset's context)")
      ->check(rdattn::cli::PositiveInteger());
  app.add_option("--warmup", warmup, "untimed steps per arm first")
      ->check(rdattn::cli::NonNegativeInteger());
  app.add_option("--steps", steps, "profiled steps per arm")->check(rdattn::cli::PositiveInteger());
  app.add_option("--rounds", rounds, "timing rounds (no callbacks); 0: no timing")
      ->check(rdattn::cli::NonNegativeInteger());
  app.add_option("--round-steps", round_steps, "full steps of each arm per timing round")
      ->check(rdattn::cli::PositiveInteger());
  app.add_option("--top", top, "rows of each per-op table")
      ->check(rdattn::cli::NonNegativeInteger());
  app.add_option("--min-ms", min_ms, "per-op differences smaller than this are not listed")
      ->check(rdattn::cli::NonNegativeNumber());
  app.add_option("--callgrind", callgrind_arm,
                 "only this arm's steps, with callgrind's collection on during the measured ones");
  app.add_option("--read-bench", read_bench,
                 "time the attention-side read alone this many times; no steps")
      ->check(rdattn::cli::NonNegativeInteger());
  app.add_option("--json", json_path, "also write the figures as JSON to this file");
  if (const int code = rdattn::cli::Parse(app, argc, argv, 2); code >= 0) return code;
  if (batch < 1 || steps < 1 || warmup < 0 || rounds < 0 || round_steps < 1)
    Usage("batch, steps, round-steps >= 1; warmup, rounds >= 0");
  const std::vector<Arm> arms =
      callgrind_arm.empty() ? ParseArms(arms_arg) : ParseArms(callgrind_arm);
  for (Arm a : arms)
    if (!rdattn::model::Preset(preset, a)) Usage("unknown preset '" + preset + "'");
  at::set_num_threads(1);
  rdattn::trainer::RetainFreedHostMemory();  // as rdattn-train does: no page faults per step
  if (read_bench > 0) {
    ReadBench(*rdattn::model::Preset(preset, arms.front()), batch, read_bench);
    return 0;
  }

  const bench::DeviceSpec cpu;
  std::vector<rdattn::model::Gpt> models;
  std::vector<std::unique_ptr<rdattn::trainer::AdamW>> opts;
  for (Arm a : arms) {
    models.emplace_back(*rdattn::model::Preset(preset, a), 0);
    opts.push_back(bench::MakeAdamW(models.back()));
  }
  const auto cfg = *rdattn::model::Preset(preset, arms.front());
  const at::Tensor tokens = bench::RandomBatch(cfg, batch, 1, cpu);
  const double step_tokens = static_cast<double>(batch * cfg.context);
  for (int64_t w = 0; w < warmup; ++w)
    for (size_t i = 0; i < arms.size(); ++i) bench::FullStep(models[i], *opts[i], tokens, cpu);

  if (!callgrind_arm.empty()) {
    CALLGRIND_ZERO_STATS;
    CALLGRIND_TOGGLE_COLLECT;
    for (int64_t s = 0; s < steps; ++s) bench::FullStep(models[0], *opts[0], tokens, cpu);
    CALLGRIND_TOGGLE_COLLECT;
    std::printf("callgrind: %lld steps of %s, preset %s, batch %lld\n", (long long)steps,
                callgrind_arm.c_str(), preset.c_str(), (long long)batch);
    return 0;
  }

  nlohmann::json out = {{"preset", preset}, {"batch", batch}, {"threads", at::get_num_threads()}};
  // 1. Timing, no callbacks.
  std::vector<double> seconds(arms.size(), 0);
  for (int64_t r = 0; r < rounds; ++r)
    for (size_t i = 0; i < arms.size(); ++i) {
      const auto t0 = Clock::now();
      for (int64_t s = 0; s < round_steps; ++s) bench::FullStep(models[i], *opts[i], tokens, cpu);
      seconds[i] += std::chrono::duration<double>(Clock::now() - t0).count();
    }
  if (rounds > 0) {
    std::printf("timing: preset %s, batch %lld, %lld rounds x %lld steps per arm, 1 thread\n",
                preset.c_str(), (long long)batch, (long long)rounds, (long long)round_steps);
    for (size_t i = 0; i < arms.size(); ++i) {
      const double tps = step_tokens * static_cast<double>(rounds * round_steps) / seconds[i];
      const double ratio = seconds[0] / seconds[i];
      std::printf("  %-10s %9.1f tokens/s  %7.2f ms/step  ratio to %s %.4f\n",
                  Name(arms[i]).c_str(), tps,
                  1e3 * seconds[i] / static_cast<double>(rounds * round_steps),
                  Name(arms[0]).c_str(), ratio);
      out["timing"][Name(arms[i])] = {{"tokens_per_s", tps}, {"ratio", ratio}};
    }
  }

  // 2. Profile.
  std::vector<std::map<std::string, OpStat>> prof(arms.size());
  std::vector<double> wall_ms(arms.size(), 0);
  const at::CallbackHandle handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&OnStart, &OnEnd)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                   at::RecordScope::USER_SCOPE}));
  // The arms alternate step by step, so that a slow spell of the machine falls on all of them.
  for (int64_t s = 0; s < steps; ++s)
    for (size_t i = 0; i < arms.size(); ++i) {
      {
        std::lock_guard<std::mutex> lock(g_mu);
        g_stats.swap(prof[i]);
      }
      const auto t0 = Clock::now();
      bench::FullStep(models[i], *opts[i], tokens, cpu);
      wall_ms[i] += std::chrono::duration<double, std::milli>(Clock::now() - t0).count() /
                    static_cast<double>(steps);
      std::lock_guard<std::mutex> lock(g_mu);
      g_stats.swap(prof[i]);
    }
  at::removeCallback(handle);

  const double per = 1.0 / static_cast<double>(steps);
  auto total = [&](size_t i, int64_t* calls) {
    double self = 0;
    *calls = 0;
    for (const auto& [name, s] : prof[i]) {
      self += s.self_ns;
      *calls += s.calls;
    }
    return self * per * 1e-6;
  };
  std::printf("\nprofile: %lld steps per arm, per step (self = inclusive minus callees)\n",
              (long long)steps);
  for (size_t i = 0; i < arms.size(); ++i) {
    int64_t calls = 0;
    const double self = total(i, &calls);
    std::printf("  %-10s wall %8.2f ms  ops %7.0f  sum of self %8.2f ms (outside ops %.2f ms)\n",
                Name(arms[i]).c_str(), wall_ms[i], static_cast<double>(calls) * per, self,
                wall_ms[i] - self);
    out["profile"][Name(arms[i])]["wall_ms"] = wall_ms[i];
    out["profile"][Name(arms[i])]["ops"] = static_cast<double>(calls) * per;
    for (const auto& [name, s] : prof[i])
      out["profile"][Name(arms[i])]["ops_by_name"][name] = {
          {"calls", static_cast<double>(s.calls) * per},
          {"self_ms", s.self_ns * per * 1e-6},
          {"incl_ms", s.incl_ns * per * 1e-6}};
  }
  for (size_t i = 0; i < arms.size(); ++i) {
    std::vector<std::pair<std::string, OpStat>> v(prof[i].begin(), prof[i].end());
    std::sort(v.begin(), v.end(),
              [](const auto& a, const auto& b) { return a.second.self_ns > b.second.self_ns; });
    std::printf("\n%s: top %lld ops by self time, per step\n  %-58s %8s %10s %10s\n",
                Name(arms[i]).c_str(), (long long)top, "op", "calls", "self ms", "incl ms");
    for (size_t j = 0; j < v.size() && static_cast<int64_t>(j) < top; ++j)
      std::printf("  %-58.58s %8.1f %10.3f %10.3f\n", v[j].first.c_str(),
                  static_cast<double>(v[j].second.calls) * per, v[j].second.self_ns * per * 1e-6,
                  v[j].second.incl_ns * per * 1e-6);
  }
  // Differences from the first arm.
  for (size_t i = 1; i < arms.size(); ++i) {
    struct Row {
      std::string name;
      double dcalls, dself, dincl, self0, self1;
    };
    std::vector<Row> rows;
    std::map<std::string, bool> names;
    for (const auto& [n, s] : prof[0]) names[n] = true;
    for (const auto& [n, s] : prof[i]) names[n] = true;
    for (const auto& [n, unused] : names) {
      const OpStat a = prof[0].count(n) ? prof[0].at(n) : OpStat{};
      const OpStat b = prof[i].count(n) ? prof[i].at(n) : OpStat{};
      rows.push_back({n, static_cast<double>(b.calls - a.calls) * per,
                      (b.self_ns - a.self_ns) * per * 1e-6, (b.incl_ns - a.incl_ns) * per * 1e-6,
                      a.self_ns * per * 1e-6, b.self_ns * per * 1e-6});
    }
    std::sort(rows.begin(), rows.end(),
              [](const Row& a, const Row& b) { return std::fabs(a.dself) > std::fabs(b.dself); });
    int64_t c0 = 0, c1 = 0;
    const double s0 = total(0, &c0), s1 = total(i, &c1);
    std::printf("\n%s - %s, per step: ops %+.0f, sum of self %+.2f ms (%+.2f%%), wall %+.2f ms\n",
                Name(arms[i]).c_str(), Name(arms[0]).c_str(), static_cast<double>(c1 - c0) * per,
                s1 - s0, 100 * (s1 - s0) / s0, wall_ms[i] - wall_ms[0]);
    std::printf("  %-58s %8s %10s %10s %10s %10s\n", "op (|d self| >= min-ms or calls differ)",
                "d calls", "d self ms", "self A", "self B", "d incl ms");
    for (const Row& r : rows) {
      if (std::fabs(r.dself) < min_ms && r.dcalls == 0) continue;
      std::printf("  %-58.58s %+8.1f %+10.3f %10.3f %10.3f %+10.3f\n", r.name.c_str(), r.dcalls,
                  r.dself, r.self0, r.self1, r.dincl);
    }
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << out.dump(1) << "\n";
  }
  return 0;
}
