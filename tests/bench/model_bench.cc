// rdattn_model_bench: the benchmark suite (docs/benchmarks.md). In one run it
//   - measures the GEMM peak: FLOP/s of at::mm on square fp32 matrices (bf16 on CUDA), in this
//     process with the training's thread count, and of the model's largest matmul (LM head);
//   - for each preset, alternates the arms round-robin, the order rotated and reversed from round
//     to round (so machine noise and the place in the round hit each alike), over
//     full training steps (forward, backward, clipping, AdamW, as rdattn-train runs them)
//     and reports tokens/s; peak memory per arm from a fresh child process; model FLOPs per
//     token from model::CountFlops, cross-checked against the matmul FLOPs the dispatcher
//     records; achieved FLOP/s and its fraction of the GEMM peak;
//   - with --depth-read-ops, also times each depth arm with the op-by-op depth read (the CPU
//     kernel of model/depth_read_cpu.h off) in the same round-robin: the kernel's speed-up;
//   - with --attention-aten, also times each arm with the attention's batched products through
//     LibTorch's bmm (model/batched_gemm.h's direct BLAS path off), in the same round-robin;
//   - with --eager-pytorch, also times each arm in tests/bench/eager_peer.py (the same model in
//     eager PyTorch, same LibTorch, OpenBLAS core, weights and batch; bench_eager.h), next to
//     rdattn's own timing in the same round-robin, and prints rdattn ÷ eager PyTorch per arm;
//   - runs the 2-rank MPI step (`mpirun -np 2` of this binary with --mpi-step) and splits it into
//     data wait, compute, all-reduce and optimizer (medians);
//   - prints a table and, with --json FILE, writes every figure (top-level keys for the primary
//     preset, cpu-bench by default, and the same under "per_preset").
//
//   rdattn_model_bench [--presets cpu-small,cpu-bench] [--primary cpu-bench]
//                      [--arms standard,block,rd,frozen_v,average] [--batch 4] [--rounds 3]
//                      [--steps 3] [--warmup 1] [--threads 1] [--device cpu|cuda] [--precision
//                      auto|fp32|bf16]
//                      [--gemm-size N] [--gemm-seconds S] [--peak-flops F] [--no-memory]
//                      [--probe-jobs 2]
//                      [--flop-check|--no-flop-check] [--no-mpi] [--depth-read-ops]
//                      [--attention-aten]
//                      [--mpirun PATH] [--mpi-preset P]
//                      [--mpi-batch 4] [--mpi-steps 5] [--json FILE]
//                      [--eager-pytorch] [--eager-python PATH] [--eager-peer SCRIPT]
// Internal modes (child processes of this binary): --memory-probe ARM, --mpi-step (under
// mpirun), --gpu-checks [--check-preset P]; they take one preset (--preset P).
//
// The command line is CLI11's (common/cli.h): `--help` lists every flag with its default,
// --flag_name is also accepted, and a usage error is one line
// "rdattn_model_bench: MESSAGE (see --help)" with exit 2. Exit 3: --device/--precision cannot
// run here (e.g. cuda without a GPU); 1: any other failure.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/cli.h"
#include "common/cpu_features.h"
#include "model/batched_gemm.h"
#include "model/depth_read.h"
#include "model/gpt.h"
#include "tests/bench/bench_common.h"
#include "tests/bench/bench_eager.h"
#include "worker/trainer/runtime.h"

namespace {

using rdattn::model::Arm;
namespace bench = rdattn::bench;

constexpr int kExitUsage = 2, kExitDevice = 3;

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The arms of `list` (comma-separated) in *arms; else the usage error.
std::string ParseArms(const std::string& list, std::vector<Arm>* arms) {
  arms->clear();
  for (const std::string& name : Split(list)) {
    auto arm = rdattn::model::ParseArm(name);
    if (!arm) return "--arms: unknown arm '" + name + "'; valid: " + rdattn::model::ValidArmNames();
    arms->push_back(*arm);
  }
  if (arms->empty()) return "--arms: empty list";
  return "";
}

std::string Name(Arm a) { return std::string(rdattn::model::ArmName(a)); }

struct ArmResult {
  double seconds = 0;
  int64_t tokens = 0;
  int64_t steps = 0;
  int64_t peak_memory_bytes = -1;
  int64_t peak_rss_bytes = -1;
  int64_t params = 0;
  rdattn::model::FlopCounts flops;
  bench::MeasuredFlops measured;
  std::vector<double> round_seconds;                     // each round's timed steps
  rdattn::model::BatchedGemmCalls attention_gemm_calls;  // over the timed steps, per path
  double tokens_per_second() const { return seconds > 0 ? tokens / seconds : 0; }
};

// The attention's BatchedGemm calls per timed step, by the path they took: which path a
// timing measured, so that a comparison of the two paths cannot silently compare one with itself.
nlohmann::json GemmCallsPerStep(const ArmResult& r) {
  const double steps = static_cast<double>(std::max<int64_t>(1, r.steps));
  return {{"direct", static_cast<double>(r.attention_gemm_calls.direct) / steps},
          {"libtorch", static_cast<double>(r.attention_gemm_calls.libtorch) / steps}};
}

struct Options {
  std::vector<std::string> presets = {"cpu-small", "cpu-bench"};
  std::string primary;
  std::vector<Arm> arms;
  int64_t batch = 4, rounds = 3, steps = 3, threads = 1, warmup = 1;
  std::string device = "cpu", precision = "auto";
  int64_t gemm_size = 0;  // 0: 1024 on CPU, 8192 on CUDA
  double gemm_seconds = 1.0;
  double peak_flops = 0;  // documented peak for MFU (optional)
  bool memory = true, flop_check = true, mpi = true;
  bool flop_check_set = false;
  bool depth_read_ops = false;  // also time the depth arms with the op-by-op depth read
  bool attention_aten = false;  // also time every arm with LibTorch's bmm in the attention
  std::string mpirun, mpi_preset;
  int64_t mpi_batch = 4, mpi_steps = 5;
  int64_t probe_jobs = 2;  // memory probes at a time
  std::string json;
  // --eager-pytorch: the same arms in tests/bench/eager_peer.py, interleaved (bench_eager.h).
  bool eager = false;
  rdattn::bench::EagerPeerCommand eager_cmd = {
#if defined(RDATTN_BENCH_PYTHON)
      RDATTN_BENCH_PYTHON,
#else
      "python3",
#endif
#if defined(RDATTN_BENCH_EAGER_PEER)
      RDATTN_BENCH_EAGER_PEER,
#else
      "tests/bench/eager_peer.py",
#endif
  };
};

// The internal modes: this binary's child processes (bench_train.cc's memory probes, the MPI
// step under mpirun) and scripts/gpu_check.sh's device checks.
struct Internal {
  std::string probe;  // --memory-probe ARM
  bool mpi_step = false, gpu_checks = false;
  std::string check_preset = "cpu-small";
};

// One option per flag. The lists of names (--presets, --arms) and the presets of --primary,
// --mpi-preset and the internal modes are checked after parsing, in Run().
void AddFlags(CLI::App& app, Options& o, Internal& in, std::string& arms) {
  // --presets and --preset write the same list: the later one on the command line wins.
  app.add_option_function<std::string>(
         "--presets", [&o](const std::string& v) { o.presets = Split(v); },
         "presets to run, comma-separated (S, M, tiny, cpu-small, cpu-bench)")
      ->default_str("cpu-small,cpu-bench")
      ->trigger_on_parse();
  app.add_option_function<std::string>(
         "--preset", [&o](const std::string& v) { o.presets = {v}; },
         "one preset: --presets with a single name (what the internal modes take)")
      ->trigger_on_parse();
  app.add_option("--primary", o.primary,
                 "the preset of the top-level JSON keys (one of --presets; default: cpu-bench when "
                 "it runs, else the last of --presets)");
  app.add_option("--arms", arms, "arms, comma-separated (" + rdattn::model::ValidArmNames() + ")");
  app.add_option("--batch", o.batch, "sequences per step")->check(rdattn::cli::PositiveInteger());
  app.add_option("--rounds", o.rounds, "round-robin rounds over the arms")
      ->check(rdattn::cli::PositiveInteger());
  app.add_option("--steps", o.steps,
                 "full steps per arm and round (--mpi-step: timed steps per arm)")
      ->check(rdattn::cli::PositiveInteger());
  app.add_option("--warmup", o.warmup, "untimed full steps per arm before the rounds")
      ->check(rdattn::cli::NonNegativeInteger());
  app.add_option("--threads", o.threads, "LibTorch (OpenMP) threads")
      ->check(rdattn::cli::PositiveInteger());
  app.add_option("--device", o.device, "cpu or cuda (GPU 0)");
  app.add_option("--precision", o.precision,
                 "auto, fp32 or bf16 (autocast; cuda only); auto: bf16 on cuda, fp32 on cpu");
  app.add_option("--gemm-size", o.gemm_size,
                 "side of the square GEMM of the peak; 0: 1024 on cpu, 8192 on cuda")
      ->check(rdattn::cli::NonNegativeInteger());
  app.add_option("--gemm-seconds", o.gemm_seconds, "seconds to time the GEMM peak for")
      ->check(rdattn::cli::NonNegativeNumber());
  app.add_option("--peak-flops", o.peak_flops,
                 "a documented peak FLOP/s: adds MFU (achieved / F); 0: none")
      ->check(rdattn::cli::NonNegativeNumber());
  app.add_flag_callback(
      "--no-memory", [&o] { o.memory = false; }, "no peak-memory probes (child processes)");
  app.add_option("--probe-jobs", o.probe_jobs, "memory probes (child processes) at a time")
      ->check(rdattn::cli::PositiveInteger());
  // --flop-check and --no-flop-check: the later one on the command line wins.
  app.add_flag_callback(
         "--flop-check", [&o] { o.flop_check = o.flop_check_set = true; },
         "cross-check the FLOP count against the dispatcher's matmuls (default: on for cpu, off "
         "for cuda)")
      ->trigger_on_parse();
  app.add_flag_callback(
         "--no-flop-check",
         [&o] {
           o.flop_check = false;
           o.flop_check_set = true;
         },
         "no FLOP cross-check")
      ->trigger_on_parse();
  app.add_flag_callback(
      "--no-mpi", [&o] { o.mpi = false; }, "skip the 2-rank MPI step");
  app.add_flag(
      "--depth-read-ops", o.depth_read_ops,
      "also time each depth arm with the op-by-op depth read (the CPU kernel off), in the same "
      "round-robin, and print the kernel's speed-up per arm");
  app.add_flag("--attention-aten", o.attention_aten,
               "also time each arm with the attention's batched products through LibTorch's "
               "bmm/baddbmm_ instead of BLAS directly (SetBatchedGemmDirect(false)), in the same "
               "round-robin, and print the direct path's speed-up per arm");
  app.add_option("--mpirun", o.mpirun, "mpirun of the MPI step (default: the one CMake found)");
  app.add_option("--mpi-preset", o.mpi_preset, "preset of the MPI step (default: --primary)");
  app.add_option("--mpi-batch", o.mpi_batch,
                 "global batch of the MPI step in sequences (each rank takes its half)")
      ->check(rdattn::cli::PositiveInteger());
  app.add_option("--mpi-steps", o.mpi_steps, "timed steps per arm of the MPI step")
      ->check(rdattn::cli::PositiveInteger());
  app.add_option("--json", o.json, "write every figure to this JSON file");
  app.add_flag("--eager-pytorch", o.eager,
               "also time every arm in eager PyTorch (the --eager-peer script under "
               "--eager-python, a child process), interleaved with rdattn's timings, and print "
               "rdattn ÷ eager PyTorch per arm (CPU only)");
  app.add_option("--eager-python", o.eager_cmd.python,
                 "the python3 of --eager-pytorch (it must import Debian's python3-torch)")
      ->capture_default_str();
  app.add_option("--eager-peer", o.eager_cmd.script, "the peer script of --eager-pytorch")
      ->capture_default_str();

  const std::string internal = "Internal modes (child processes of this binary)";
  app.add_option("--memory-probe", in.probe,
                 "print the peak memory of two full steps of ARM on --preset, --batch")
      ->group(internal);
  app.add_flag("--mpi-step", in.mpi_step,
               "one rank of the MPI step (under mpirun): --preset, --arms, --mpi-batch, --steps")
      ->group(internal);
  app.add_flag("--gpu-checks", in.gpu_checks,
               "check the --device forward against the CPU's and T6, on --check-preset")
      ->group(internal);
  app.add_option("--check-preset", in.check_preset, "preset of --gpu-checks")->group(internal);
}

// Runs the 2-rank MPI step through mpirun; the parsed JSON of rank 0, or a {"error": …} object.
nlohmann::json RunMpiStep(const Options& o) {
#if defined(RDATTN_HAVE_MPI)
  std::string mpirun = o.mpirun;
#if defined(RDATTN_BENCH_MPIEXEC)
  if (mpirun.empty()) mpirun = RDATTN_BENCH_MPIEXEC;
#endif
  if (mpirun.empty()) mpirun = "mpirun";
  // The local-run environment of scripts/lib.sh (rdattn_env), where not already set.
  for (const auto& [k, v] : std::vector<std::pair<const char*, const char*>>{
           {"OMPI_ALLOW_RUN_AS_ROOT", "1"},
           {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
           {"OMPI_MCA_rmaps_base_oversubscribe", "1"},
           {"OMPI_MCA_btl", "self,vader"},
           {"OMPI_MCA_btl_vader_single_copy_mechanism", "none"},
           {"OMPI_MCA_plm", "isolated"}})
    setenv(k, v, 0);
  setenv("OMP_NUM_THREADS", "1", 1);
  std::string arms;
  for (Arm a : o.arms) arms += (arms.empty() ? "" : ",") + Name(a);
  const std::string cmd = mpirun + " -np 2 --oversubscribe " + bench::SelfPath() +
                          " --mpi-step --preset " + o.mpi_preset + " --arms " + arms +
                          " --mpi-batch " + std::to_string(o.mpi_batch) + " --steps " +
                          std::to_string(o.mpi_steps) + " --threads 1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {{"error", "cannot start: " + cmd}};
  std::string found, line;
  char buf[1 << 16];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) {
    line = buf;
    const std::string tag = "RDATTN_BENCH_MPI ";
    if (line.compare(0, tag.size(), tag) == 0) found = line.substr(tag.size());
  }
  const int rc = pclose(p);
  if (rc != 0 || found.empty())
    return {{"error", "'" + cmd + "' failed (status " + std::to_string(rc) + ")"}};
  return nlohmann::json::parse(found);
#else
  return {{"error", "this build has no MPI (RDATTN_WITH_MPI off or MPI not found)"}};
#endif
}

double Ratio(double a, double b) { return (a > 0 && b > 0) ? a / b : 0; }

// The median over rounds of a's tokens/s ÷ b's within the round (b's seconds ÷ a's): each
// ratio compares steps that ran seconds apart, so a slow spell of a shared machine that spans
// part of the run moves it less than the ratio of the totals.
double MedianRoundRatio(const ArmResult& a, const ArmResult& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.round_seconds.size() && i < b.round_seconds.size(); ++i)
    r.push_back(Ratio(b.round_seconds[i], a.round_seconds[i]));
  if (r.empty()) return 0;
  std::sort(r.begin(), r.end());
  const size_t n = r.size();
  return n % 2 == 1 ? r[n / 2] : 0.5 * (r[n / 2 - 1] + r[n / 2]);
}

// --eager-pytorch (bench_eager.h). The losses of rdattn and of the peer on the same steps from
// the same weights and batch: the init loss (a forward before any step) and each warm-up step's.
struct EagerLosses {
  std::vector<std::pair<double, double>> pairs;  // (rdattn, peer)
  void Add(double rdattn, double peer) { pairs.emplace_back(rdattn, peer); }
  double MaxRelDiff() const {
    double m = 0;
    for (const auto& [a, b] : pairs)
      m = std::max(m,
                   std::isfinite(a) && std::isfinite(b) ? std::abs(a - b) / std::abs(a) : HUGE_VAL);
    return m;
  }
};
// Float32 rounding and op order alone moved the two losses apart by at most 3e-7 relative over
// the first 8 steps at tiny and cpu-small, and 2.5e-6 at cpu-bench (1.7e-7 over 4); peers that
// differ in one thing moved them by 3e-4 (the depth keys without their RMSNorm, the block
// boundary one layer late) or, after 8 steps, 5e-5 (rd's V route reading with q_attn,
// cpu-small). Only the first kEagerLossSteps warm-up steps are compared: float32 chaos grows
// step by step (about 15x from step 3 to step 8 at cpu-bench) and would pass the tolerance later.
constexpr double kEagerLossTolerance = 2e-5;
constexpr int64_t kEagerLossSteps = 8;

double InitLoss(rdattn::model::Gpt& m, const at::Tensor& batch) {
  c10::NoGradGuard no_grad;
  const int64_t T = batch.size(1) - 1;
  return rdattn::model::GptImpl::Loss(m->forward(batch.narrow(1, 0, T)), batch.narrow(1, 1, T))
      .item<double>();
}

// The first word of a BlasCore() text ("SkylakeX (set by rdattn: …)" → "SkylakeX").
std::string CoreName(const std::string& text) { return text.substr(0, text.find(' ')); }

// The peer runs the same OpenBLAS core with the same threads, and each arm has rdattn's
// parameter count. Returns "" or what differs.
std::string CheckEagerPeer(const nlohmann::json& info, const std::string& blas_core,
                           int64_t threads, const std::map<Arm, ArmResult>& res) {
  const std::string peer_core = info.value("blas_core", "");
  if (CoreName(peer_core) != CoreName(blas_core))
    return "the peer runs OpenBLAS core '" + peer_core + "', rdattn '" + blas_core + "'";
  if (info.value("threads", int64_t{-1}) != threads)
    return "the peer runs " + info.value("threads", nlohmann::json()).dump() + " threads, rdattn " +
           std::to_string(threads);
  for (const auto& [arm, r] : res) {
    const auto& a = info["arms"];
    if (!a.contains(Name(arm)) || a[Name(arm)].value("params", int64_t{-1}) != r.params)
      return "arm " + Name(arm) + " has " +
             (a.contains(Name(arm)) ? a[Name(arm)]["params"].dump() : std::string("no")) +
             " parameters in the peer, " + std::to_string(r.params) + " in rdattn";
  }
  return "";
}

// Each round's rdattn tokens/s ÷ the peer's (the spread behind the round median).
std::vector<double> RoundRatios(const ArmResult& a, const ArmResult& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.round_seconds.size() && i < b.round_seconds.size(); ++i)
    r.push_back(Ratio(b.round_seconds[i], a.round_seconds[i]));
  return r;
}

nlohmann::json EagerJson(const nlohmann::json& info, const std::vector<Arm>& arms,
                         const std::map<Arm, ArmResult>& res, const std::map<Arm, ArmResult>& eager,
                         const std::map<Arm, EagerLosses>& losses) {
  nlohmann::json j = {{"torch", info.value("torch", "")},
                      {"blas_core", info.value("blas_core", "")},
                      {"threads", info.value("threads", int64_t{0})},
                      {"retain_freed_memory", info.value("retain_freed_memory", false)},
                      {"loss_tolerance", kEagerLossTolerance},
                      {"arms", nlohmann::json::object()},
                      {"ratios", nlohmann::json::object()}};
  for (Arm arm : arms) {
    const ArmResult& r = res.at(arm);
    const ArmResult& e = eager.at(arm);
    const EagerLosses& l = losses.at(arm);
    const double ratio = Ratio(r.tokens_per_second(), e.tokens_per_second());
    const double median = MedianRoundRatio(r, e);
    j["arms"][Name(arm)] = {
        {"tokens_per_second", e.tokens_per_second()},
        {"ms_per_step", 1000.0 * e.seconds / static_cast<double>(std::max<int64_t>(1, e.steps))},
        {"timed_steps", e.steps},
        {"params", e.params},
        {"init_loss", l.pairs.front().second},
        {"rdattn_init_loss", l.pairs.front().first},
        {"compared_losses", l.pairs.size()},
        {"loss_max_rel_diff", l.MaxRelDiff()},
        {"rdattn_over_eager_pytorch_round_ratios", RoundRatios(r, e)}};
    j["ratios"][Name(arm) + "_over_eager_pytorch_tokens_per_second"] = ratio;
    j["ratios"][Name(arm) + "_over_eager_pytorch_tokens_per_second_round_median"] = median;
  }
  return j;
}

void PrintEager(const nlohmann::json& j, const std::vector<Arm>& arms) {
  std::printf(
      "eager PyTorch peer (torch %s, OpenBLAS %s, %lld thread(s), same weights and batch):\n",
      j["torch"].get<std::string>().c_str(), j["blas_core"].get<std::string>().c_str(),
      (long long)j["threads"].get<int64_t>());
  std::printf("%-9s %10s %9s %10s %12s %11s %16s %14s\n", "arm", "tokens/s", "ms/step", "params",
              "init_loss", "loss_diff", "rdattn/eager", "rounds_min-max");
  for (Arm arm : arms) {
    const auto& a = j["arms"][Name(arm)];
    const auto& r = j["ratios"];
    const auto rounds = a["rdattn_over_eager_pytorch_round_ratios"].get<std::vector<double>>();
    const auto [lo, hi] = std::minmax_element(rounds.begin(), rounds.end());
    std::printf("%-9s %10.1f %9.1f %10lld %12.6f %11.2e %8.3f (%.3f) %7.3f-%.3f\n",
                Name(arm).c_str(), a["tokens_per_second"].get<double>(),
                a["ms_per_step"].get<double>(), (long long)a["params"].get<int64_t>(),
                a["init_loss"].get<double>(), a["loss_max_rel_diff"].get<double>(),
                r[Name(arm) + "_over_eager_pytorch_tokens_per_second"].get<double>(),
                r[Name(arm) + "_over_eager_pytorch_tokens_per_second_round_median"].get<double>(),
                rounds.empty() ? 0.0 : *lo, rounds.empty() ? 0.0 : *hi);
  }
}

void PrintEagerSummary(const nlohmann::json& summary, const std::vector<std::string>& presets,
                       const std::vector<Arm>& arms) {
  std::printf(
      "\nrdattn ÷ eager PyTorch, tokens/s (ratio of totals, median of the rounds' ratios):\n");
  std::printf("%-10s", "preset");
  for (Arm arm : arms) std::printf(" %17s", Name(arm).c_str());
  std::printf("\n");
  for (const std::string& p : presets) {
    std::printf("%-10s", p.c_str());
    for (Arm arm : arms)
      std::printf("     %.3f (%.3f)",
                  summary[p][Name(arm) + "_over_eager_pytorch_tokens_per_second"].get<double>(),
                  summary[p][Name(arm) + "_over_eager_pytorch_tokens_per_second_round_median"]
                      .get<double>());
    std::printf("\n");
  }
}

}  // namespace

int Run(int argc, char** argv) {
  CLI::App app(
      "The benchmark suite (docs/benchmarks.md): GEMM peak; per preset and arm, tokens/s, peak\n"
      "memory and FLOPs of full training steps; the 2-rank MPI step. Exit codes: 0 done; 2 bad\n"
      "usage; 3 --device/--precision cannot run here; 1 any other failure.",
      "rdattn_model_bench");
  rdattn::cli::Setup(app);
  Options o;
  Internal in;
  std::string arms_arg = "standard,block,rd,frozen_v,average";
  AddFlags(app, o, in, arms_arg);
  if (const int code = rdattn::cli::Parse(app, argc, argv, kExitUsage); code >= 0) return code;
  auto usage = [&](const std::string& message) {
    return rdattn::cli::Usage(app, message, kExitUsage);
  };
  if (const std::string err = ParseArms(arms_arg, &o.arms); !err.empty()) return usage(err);
  if (o.presets.empty()) return usage("--presets: empty list");
  for (const std::string& p : o.presets)
    if (!rdattn::model::Preset(p, Arm::kBlock))
      return usage("--presets: unknown preset '" + p +
                   "'; valid: S, M, tiny, cpu-small, cpu-bench");
  bench::DeviceSpec dev;
  if (const std::string err = bench::ResolveDevice(o.device, o.precision, &dev); !err.empty()) {
    std::fprintf(stderr, "rdattn_model_bench: %s\n", err.c_str());
    return kExitDevice;
  }

  // Internal modes.
  if (!in.probe.empty()) {
    auto arm = rdattn::model::ParseArm(in.probe);
    if (!arm) return usage("--memory-probe: unknown arm '" + in.probe + "'");
    return bench::MemoryProbeMain(o.presets.front(), *arm, o.batch, dev, o.threads);
  }
  if (in.mpi_step) {
    bench::MpiOptions m;
    m.preset = o.presets.front();
    m.arms = o.arms;
    m.global_batch = o.mpi_batch;
    m.steps = o.mpi_steps;
    m.threads = o.threads;
    return bench::MpiStepMain(m);
  }
  if (in.gpu_checks) {
    if (!rdattn::model::Preset(in.check_preset, Arm::kBlock))
      return usage("--check-preset: unknown preset '" + in.check_preset + "'");
    at::set_num_threads(static_cast<int>(o.threads));
    return bench::DeviceChecksMain(in.check_preset, dev);
  }

  // The suite.
  if (o.primary.empty())
    o.primary = std::find(o.presets.begin(), o.presets.end(), "cpu-bench") != o.presets.end()
                    ? "cpu-bench"
                    : o.presets.back();
  if (std::find(o.presets.begin(), o.presets.end(), o.primary) == o.presets.end())
    return usage("--primary " + o.primary + " is not one of --presets");
  if (o.mpi_preset.empty()) o.mpi_preset = o.primary;
  if (!rdattn::model::Preset(o.mpi_preset, Arm::kBlock))
    return usage("--mpi-preset: unknown preset '" + o.mpi_preset + "'");
  if (dev.cuda()) o.mpi = false;  // the MPI step is the CPU data-parallel path
  if (dev.cuda() && o.eager)
    return usage("--eager-pytorch: the eager peer runs on the CPU only (--device cpu)");
  if (dev.cuda() && !o.flop_check_set) o.flop_check = false;  // a CPU count; slow at S scale
  if (o.gemm_size <= 0) o.gemm_size = dev.cuda() ? 8192 : 1024;
  at::set_num_threads(static_cast<int>(o.threads));
  torch::manual_seed(0);
  // As rdattn-train does (and the MPI step): glibc keeps what LibTorch frees, so the timed steps
  // do not fault their activations' pages in anew every step. Not in the memory probes, which
  // are child processes of their own.
  rdattn::trainer::RetainFreedHostMemory();

  const std::string precision = dev.cuda() ? (dev.bf16 ? "bf16" : "fp32") : "fp32";
  std::printf(
      "rdattn_model_bench: torch %s, device %s (%s), threads %lld, batch %lld, rounds %lld, "
      "steps/round %lld\n",
      TORCH_VERSION, o.device.c_str(), precision.c_str(), (long long)o.threads, (long long)o.batch,
      (long long)o.rounds, (long long)o.steps);
  const double gemm_peak = bench::MeasureGemmFlops(o.gemm_size, o.gemm_seconds, dev);
  const std::string gemm_dtype = dev.cuda() && dev.bf16 ? "bfloat16" : "float32";
  const std::string blas_core = dev.cuda() ? std::string() : rdattn::cpu::BlasCore();
  std::printf("GEMM peak: at::mm %lldx%lld %s, %lld thread(s): %.2f GFLOP/s%s%s\n",
              (long long)o.gemm_size, (long long)o.gemm_size, gemm_dtype.c_str(),
              (long long)o.threads, gemm_peak / 1e9, blas_core.empty() ? "" : "; OpenBLAS core ",
              blas_core.c_str());

  nlohmann::json out = {{"schema", "rdattn.bench.v1"},
                        {"torch", TORCH_VERSION},
                        {"device", o.device},
                        {"precision", precision},
                        {"blas_core", blas_core},
                        {"threads", o.threads},
                        {"batch_sequences", o.batch},
                        {"rounds", o.rounds},
                        {"steps_per_round", o.steps},
                        {"warmup_steps", o.warmup},
                        {"primary_preset", o.primary},
                        {"gemm",
                         {{"size", o.gemm_size},
                          {"dtype", gemm_dtype},
                          {"threads", o.threads},
                          {"flops_per_second", gemm_peak}}},
                        {"per_preset", nlohmann::json::object()}};
  if (o.peak_flops > 0) out["documented_peak_flops_per_second"] = o.peak_flops;

  nlohmann::json eager_summary = nlohmann::json::object();  // per preset: the ratios
  for (const std::string& preset : o.presets) {
    const auto base = *rdattn::model::Preset(preset, Arm::kBlock);
    const int64_t T = base.context;
    const double head_gemm = bench::MeasureGemmShapeFlops(o.batch * T, base.width, base.vocab_size,
                                                          o.gemm_seconds / 2, dev);
    std::map<Arm, rdattn::model::Gpt> models;
    std::map<Arm, std::unique_ptr<rdattn::trainer::AdamW>> opts;
    std::map<Arm, ArmResult> res;
    std::map<Arm, ArmResult> ops_res;   // --depth-read-ops: the same arms, op-by-op depth read
    std::map<Arm, ArmResult> aten_res;  // --attention-aten: the same arms, LibTorch's bmm
    for (Arm arm : o.arms) {
      const auto cfg = *rdattn::model::Preset(preset, arm);
      auto it = models.emplace(arm, rdattn::model::Gpt(cfg, 0)).first;
      it->second->to(dev.device);
      opts[arm] = bench::MakeAdamW(it->second);
      ArmResult& r = res[arm];
      for (const auto& p : it->second->parameters()) r.params += p.numel();
      r.flops = rdattn::model::CountFlops(cfg);
      if (o.flop_check) r.measured = bench::CountMatmulFlops(cfg, 1);
    }
    const at::Tensor batch = bench::RandomBatch(base, o.batch, 1, dev);
    // --eager-pytorch: the peer builds the same arms from the same seed on the same batch.
    bench::EagerPeer peer;
    std::map<Arm, ArmResult> eager_res;
    std::map<Arm, EagerLosses> eager_losses;
    if (o.eager) {
      if (const std::string err = peer.Start(o.eager_cmd, preset, base, o.arms, o.batch, o.threads);
          !err.empty())
        throw std::runtime_error("--eager-pytorch: " + err);
      if (const std::string err = CheckEagerPeer(peer.info(), blas_core, o.threads, res);
          !err.empty())
        throw std::runtime_error("--eager-pytorch, preset " + preset + ": " + err);
      for (Arm arm : o.arms) {
        eager_res[arm].params = peer.info()["arms"][Name(arm)]["params"].get<int64_t>();
        eager_losses[arm].Add(InitLoss(models.at(arm), batch),
                              peer.info()["arms"][Name(arm)]["init_loss"].get<double>());
      }
    }
    // Warm-up: allocator, BLAS pools, cuBLAS heuristics. With the peer, each step's loss is
    // compared with the peer's (same weights, same batch: equal up to float32 rounding).
    for (int64_t w = 0; w < o.warmup; ++w)
      for (Arm arm : o.arms) {
        const at::Tensor loss = bench::FullStep(models.at(arm), *opts.at(arm), batch, dev);
        if (!o.eager) continue;
        double seconds = 0;
        std::vector<double> losses;
        if (const std::string err = peer.Step(arm, 1, &seconds, &losses); !err.empty())
          throw std::runtime_error("--eager-pytorch: " + err);
        if (w < kEagerLossSteps) eager_losses[arm].Add(loss.item<double>(), losses.at(0));
      }
    bench::Sync(dev);
    for (const auto& [arm, l] : eager_losses)
      if (!(l.MaxRelDiff() <= kEagerLossTolerance))
        throw std::runtime_error("--eager-pytorch, preset " + preset + ", arm " + Name(arm) +
                                 ": the peer's losses differ from rdattn's by " +
                                 std::to_string(l.MaxRelDiff()) + " (relative; tolerance " +
                                 std::to_string(kEagerLossTolerance) +
                                 "): it does not compute the same model");
    const size_t n_arms = o.arms.size();
    for (int64_t round = 0; round < o.rounds; ++round) {
      // Round 2j runs the arms from the j-th on, round 2j+1 the same order backwards: over
      // 2·(number of arms) rounds every arm takes every place in the round equally often and
      // follows each other arm as often as it precedes it, so neither the order nor a machine
      // that speeds up or slows down within a round favours one arm (the fixed order read
      // rd/block 0.976 and, reversed, 1.002 in two runs a minute apart).
      for (size_t i = 0; i < n_arms; ++i) {
        const size_t place = round % 2 == 0 ? i : n_arms - 1 - i;
        const Arm arm = o.arms[(place + static_cast<size_t>(round / 2)) % n_arms];
        auto& m = models.at(arm);
        auto& opt = *opts.at(arm);
        // The round's steps of this arm, timed into `r`.
        auto timed = [&](ArmResult& r) {
          const rdattn::model::BatchedGemmCalls calls0 = rdattn::model::BatchedGemmCallCounts();
          const auto t0 = std::chrono::steady_clock::now();
          for (int64_t s = 0; s < o.steps; ++s) bench::FullStep(m, opt, batch, dev);
          bench::Sync(dev);
          const double dt =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          r.seconds += dt;
          r.round_seconds.push_back(dt);
          r.attention_gemm_calls += rdattn::model::BatchedGemmCallCounts() - calls0;
          r.tokens += o.steps * o.batch * T;
          r.steps += o.steps;
        };
        // The arm's own timing and its comparison timings (the op-by-op depth read, LibTorch's
        // bmm) run back to back; on odd rounds the comparisons come first, for the same reason.
        auto comparisons = [&] {
          if (o.eager) {
            double seconds = 0;
            std::vector<double> losses;
            if (const std::string err = peer.Step(arm, o.steps, &seconds, &losses); !err.empty())
              throw std::runtime_error("--eager-pytorch: " + err);
            ArmResult& e = eager_res[arm];
            e.seconds += seconds;
            e.round_seconds.push_back(seconds);
            e.tokens += o.steps * o.batch * T;
            e.steps += o.steps;
          }
          if (o.depth_read_ops && rdattn::model::HasDepthRead(arm)) {
            rdattn::model::SetDepthReadCpuKernel(false);
            timed(ops_res[arm]);
            rdattn::model::SetDepthReadCpuKernel(true);
          }
          if (o.attention_aten) {
            rdattn::model::SetBatchedGemmDirect(false);
            timed(aten_res[arm]);
            rdattn::model::SetBatchedGemmDirect(true);
          }
        };
        if (round % 2 == 1) comparisons();
        timed(res[arm]);
        if (round % 2 == 0) comparisons();
      }
    }
    peer.Stop();  // before the memory probes: its process holds its models
    // After the timings, so that the probes' processes do not slow the timed steps.
    if (o.memory) {
      const std::vector<bench::MemoryFigures> mem = bench::ProbeMemoryInChildren(
          preset, o.arms, o.batch, o.device, o.precision, o.threads, o.probe_jobs);
      for (size_t i = 0; i < o.arms.size(); ++i) {
        res[o.arms[i]].peak_memory_bytes = mem[i].peak_bytes;
        res[o.arms[i]].peak_rss_bytes = mem[i].rss_bytes;
      }
    }

    std::printf(
        "\npreset %s: layers %lld, width %lld, heads %lld, ffn %lld, blocks %lld, "
        "context %lld, vocab %lld; LM-head GEMM %lldx%lldx%lld: %.2f GFLOP/s\n",
        preset.c_str(), (long long)base.layers, (long long)base.width, (long long)base.heads,
        (long long)base.ffn_hidden, (long long)base.blocks, (long long)T,
        (long long)base.vocab_size, (long long)(o.batch * T), (long long)base.width,
        (long long)base.vocab_size, head_gemm / 1e9);
    std::printf("%-9s %10s %9s %9s %8s %10s %10s %10s %10s %7s %7s", "arm", "tokens/s", "ms/step",
                "peak_MiB", "rss_MiB", "params", "fwd_MF/tk", "train_MF/tk", "GFLOP/s", "of_gemm",
                "meas/an");
    if (o.peak_flops > 0) std::printf(" %7s", "MFU");
    std::printf("\n");
    nlohmann::json arms_json = nlohmann::json::object();
    for (Arm arm : o.arms) {
      const ArmResult& r = res[arm];
      const double tps = r.tokens_per_second();
      const double achieved = r.flops.training() * tps;
      // The same with attention counted causally (half of the T×T products, the work a causal
      // kernel must do at least): the model's CPU attention skips the masked key blocks
      // (model/attention.h), so the PaLM count above credits it with work it does not do.
      const double causal = (r.flops.training() - 1.5 * r.flops.attention_forward) * tps;
      // The measured count sees only the matmuls (mm, addmm, bmm, baddbmm): equal to the
      // analytic count for `standard`; for the depth arms it differs by at most the depth-read
      // term, whichever of its parts the model computes as matmuls (docs/benchmarks.md).
      const double analytic_mm = r.flops.training();
      const double measured_mm = r.measured.forward_per_token + r.measured.backward_per_token;
      std::printf(
          "%-9s %10.1f %9.1f %9.1f %8.1f %10lld %10.3f %10.3f %10.3f %7.3f", Name(arm).c_str(), tps,
          1000.0 * r.seconds / static_cast<double>(r.steps),
          r.peak_memory_bytes < 0 ? -1.0 : static_cast<double>(r.peak_memory_bytes) / (1 << 20),
          r.peak_rss_bytes < 0 ? -1.0 : static_cast<double>(r.peak_rss_bytes) / (1 << 20),
          (long long)r.params, r.flops.forward() / 1e6, r.flops.training() / 1e6, achieved / 1e9,
          achieved / gemm_peak);
      if (r.measured.ok())
        std::printf(" %7.4f", measured_mm / analytic_mm);
      else
        std::printf(" %7s", "-");
      if (o.peak_flops > 0) std::printf(" %7.4f", achieved / o.peak_flops);
      std::printf("\n");
      nlohmann::json a = {{"tokens_per_second", tps},
                          {"ms_per_step", 1000.0 * r.seconds / static_cast<double>(r.steps)},
                          {"timed_steps", r.steps},
                          {"peak_memory_bytes", r.peak_memory_bytes},
                          {"peak_rss_bytes", r.peak_rss_bytes},
                          {"params", r.params},
                          {"flops_per_token_forward", r.flops.forward()},
                          {"flops_per_token_training", r.flops.training()},
                          {"flops_per_token_matmul_forward", r.flops.matmul_forward},
                          {"flops_per_token_attention_forward", r.flops.attention_forward},
                          {"flops_per_token_depth_read_forward", r.flops.depth_read_forward},
                          {"achieved_flops_per_second", achieved},
                          {"flops_over_peak", achieved / gemm_peak},
                          {"flops_over_peak_causal_attention", causal / gemm_peak}};
      if (r.measured.ok()) {
        a["measured_matmul_flops_per_token_forward"] = r.measured.forward_per_token;
        a["measured_matmul_flops_per_token_backward"] = r.measured.backward_per_token;
        a["measured_matmul_over_analytic_flops"] = measured_mm / analytic_mm;
      }
      if (o.peak_flops > 0) a["mfu"] = achieved / o.peak_flops;
      a["attention_gemm_calls_per_step"] = GemmCallsPerStep(r);
      arms_json[Name(arm)] = a;
    }
    nlohmann::json pj = {{"config",
                          {{"layers", base.layers},
                           {"width", base.width},
                           {"heads", base.heads},
                           {"ffn_hidden", base.ffn_hidden},
                           {"blocks", base.blocks},
                           {"context", T},
                           {"vocab_size", base.vocab_size}}},
                         {"lm_head_gemm_flops_per_second", head_gemm},
                         {"arms", arms_json}};
    auto has = [&](Arm a) { return res.count(a) > 0; };
    auto mem_ratio = [&](Arm a, Arm b) {
      return Ratio(static_cast<double>(res[a].peak_memory_bytes),
                   static_cast<double>(res[b].peak_memory_bytes));
    };
    if (has(Arm::kRd) && has(Arm::kBlock)) {
      pj["rd_over_block_tokens_per_second"] =
          Ratio(res[Arm::kRd].tokens_per_second(), res[Arm::kBlock].tokens_per_second());
      pj["rd_over_block_peak_memory"] = mem_ratio(Arm::kRd, Arm::kBlock);
      pj["rd_over_block_tokens_per_second_round_median"] =
          MedianRoundRatio(res[Arm::kRd], res[Arm::kBlock]);
      std::printf("rd/block: tokens/s %.3f (median of the rounds' ratios %.3f), peak memory %.3f\n",
                  pj["rd_over_block_tokens_per_second"].get<double>(),
                  pj["rd_over_block_tokens_per_second_round_median"].get<double>(),
                  pj["rd_over_block_peak_memory"].get<double>());
    }
    if (has(Arm::kBlock) && has(Arm::kStandard)) {
      pj["block_over_standard_tokens_per_second"] =
          Ratio(res[Arm::kBlock].tokens_per_second(), res[Arm::kStandard].tokens_per_second());
      pj["block_over_standard_peak_memory"] = mem_ratio(Arm::kBlock, Arm::kStandard);
      pj["block_over_standard_tokens_per_second_round_median"] =
          MedianRoundRatio(res[Arm::kBlock], res[Arm::kStandard]);
      std::printf(
          "block/standard: tokens/s %.3f (median of the rounds' ratios %.3f), peak memory %.3f\n",
          pj["block_over_standard_tokens_per_second"].get<double>(),
          pj["block_over_standard_tokens_per_second_round_median"].get<double>(),
          pj["block_over_standard_peak_memory"].get<double>());
    }
    std::printf("of_gemm with attention counted causally (half of T×T):");
    for (Arm arm : o.arms)
      std::printf(" %s %.3f", Name(arm).c_str(),
                  arms_json[Name(arm)]["flops_over_peak_causal_attention"].get<double>());
    std::printf("\n");
    for (Arm arm : {Arm::kStandard, Arm::kBlock, Arm::kRd})
      if (has(arm)) pj[Name(arm) + "_flops_over_peak"] = arms_json[Name(arm)]["flops_over_peak"];
    if (!ops_res.empty()) {
      std::printf("depth read, CPU kernel ÷ op by op (tokens/s, same round-robin):");
      nlohmann::json speedup = nlohmann::json::object();
      for (const auto& [arm, q] : ops_res) {
        const double ratio = Ratio(res[arm].tokens_per_second(), q.tokens_per_second());
        speedup[Name(arm)] = {{"op_by_op_tokens_per_second", q.tokens_per_second()},
                              {"kernel_over_op_by_op_tokens_per_second", ratio}};
        std::printf(" %s %.3f", Name(arm).c_str(), ratio);
      }
      std::printf("\n");
      if (has(Arm::kRd) && has(Arm::kBlock) && ops_res.count(Arm::kRd) &&
          ops_res.count(Arm::kBlock))
        std::printf(
            "rd/block with the op-by-op depth read: tokens/s %.3f\n",
            Ratio(ops_res[Arm::kRd].tokens_per_second(), ops_res[Arm::kBlock].tokens_per_second()));
      pj["depth_read_op_by_op"] = speedup;
    }
    if (!aten_res.empty()) {
      std::printf(
          "attention products, BLAS direct ÷ LibTorch bmm (tokens/s, same round-robin; median of "
          "the rounds' ratios):");
      nlohmann::json speedup = nlohmann::json::object();
      for (const auto& [arm, q] : aten_res) {
        const double ratio = Ratio(res[arm].tokens_per_second(), q.tokens_per_second());
        const double median = MedianRoundRatio(res[arm], q);
        speedup[Name(arm)] = {{"aten_bmm_tokens_per_second", q.tokens_per_second()},
                              {"direct_over_aten_bmm_tokens_per_second", ratio},
                              {"direct_over_aten_bmm_round_median", median},
                              {"attention_gemm_calls_per_step", GemmCallsPerStep(q)}};
        std::printf(" %s %.3f (%.3f)", Name(arm).c_str(), ratio, median);
      }
      std::printf("\n");
      pj["attention_aten_bmm"] = speedup;
    }
    if (o.eager) {
      pj["eager_pytorch"] = EagerJson(peer.info(), o.arms, res, eager_res, eager_losses);
      for (const auto& [key, value] : pj["eager_pytorch"]["ratios"].items()) pj[key] = value;
      eager_summary[preset] = pj["eager_pytorch"]["ratios"];
      PrintEager(pj["eager_pytorch"], o.arms);
    }
    out["per_preset"][preset] = pj;
  }

  // Top level: the primary preset's ratios.
  if (o.eager) {
    PrintEagerSummary(eager_summary, o.presets, o.arms);
    for (const auto& [key, value] : eager_summary[o.primary].items()) out[key] = value;
    out["rdattn_over_eager_pytorch"] = eager_summary;
  }
  for (const char* key :
       {"rd_over_block_tokens_per_second", "rd_over_block_peak_memory",
        "block_over_standard_tokens_per_second", "block_over_standard_peak_memory",
        "standard_flops_over_peak", "block_flops_over_peak", "rd_flops_over_peak"}) {
    const auto& pj = out["per_preset"][o.primary];
    if (pj.contains(key)) out[key] = pj[key];
  }

  if (o.mpi) {
    nlohmann::json mpi = RunMpiStep(o);
    if (mpi.contains("error")) {
      std::printf("\nMPI step: %s\n", mpi["error"].get<std::string>().c_str());
    } else {
      std::printf(
          "\nMPI step: %d ranks (%s), preset %s, global batch %lld sequences, 1 thread "
          "per rank; medians of %lld steps (rank 0)\n",
          mpi["world_size"].get<int>(), mpi["backend"].get<std::string>().c_str(),
          o.mpi_preset.c_str(), (long long)o.mpi_batch, (long long)o.mpi_steps);
      std::printf("%-9s %10s %9s %9s %11s %12s %12s\n", "arm", "tokens/s", "step_ms", "data_ms",
                  "compute_ms", "allreduce_ms", "optimizer_ms");
      for (Arm arm : o.arms) {
        const auto& a = mpi["arms"][Name(arm)];
        std::printf("%-9s %10.1f %9.2f %9.3f %11.2f %12.3f %12.3f\n", Name(arm).c_str(),
                    a["tokens_per_second"].get<double>(), 1e3 * a["step_seconds"].get<double>(),
                    1e3 * a["data_seconds"].get<double>(), 1e3 * a["compute_seconds"].get<double>(),
                    1e3 * a["allreduce_seconds"].get<double>(),
                    1e3 * a["optimizer_seconds"].get<double>());
      }
      const auto& arms = mpi["arms"];
      if (arms.contains("rd") && arms.contains("block"))
        mpi["rd_over_block_tokens_per_second"] =
            Ratio(arms["rd"]["tokens_per_second"].get<double>(),
                  arms["block"]["tokens_per_second"].get<double>());
    }
    out["mpi"] = mpi;
  }

  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << out.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "rdattn_model_bench: cannot write %s\n", o.json.c_str());
      return 1;
    }
    std::printf("\nwrote %s\n", o.json.c_str());
  }
  return 0;
}

// LibTorch reports errors by exception: print the message without the C++ backtrace.
int main(int argc, char** argv) {
  rdattn::cpu::UseBestBlasKernels(argv);  // may execute this program again (common/cpu_features.h)
  try {
    return Run(argc, argv);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "rdattn_model_bench: %s\n", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdattn_model_bench: %s\n", e.what());
  }
  return 1;
}
