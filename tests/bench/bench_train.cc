// The full training step, memory probes, GEMM peak and measured FLOP count of
// rdattn_model_bench (bench_common.h).
//
// First: LibTorch headers below do not all include what they use.
#include <torch/types.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#if defined(RDATTN_BENCH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "model/torch_compat.h"
#include "tests/bench/bench_common.h"
#include "worker/trainer/optimizer.h"
#include "worker/trainer/train_step.h"

namespace rdattn::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

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

// Resets VmHWM to the current RSS (Linux ≥ 4.0: "5" > /proc/self/clear_refs).
bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

// Matmul FLOP counter, fed by a global RecordFunction callback (a plain function pointer, so
// the counters are globals).
std::atomic<int64_t> g_matmul_flops{0};
std::atomic<int64_t> g_matmul_calls{0};

int64_t Dim(const c10::IValue& v, int64_t d) {
  if (!v.isTensor()) return -1;
  const at::Tensor& t = v.toTensor();
  if (!t.defined() || t.dim() <= d) return -1;
  return t.size(d);
}

std::unique_ptr<at::ObserverContext> CountMatmul(const at::RecordFunction& fn) {
  const std::string name = fn.name();
  const auto inputs = fn.inputs();
  int64_t flops = -1;
  if (name == "aten::mm" && inputs.size() >= 2) {
    flops = 2 * Dim(inputs[0], 0) * Dim(inputs[0], 1) * Dim(inputs[1], 1);
  } else if (name == "aten::addmm" && inputs.size() >= 3) {
    flops = 2 * Dim(inputs[1], 0) * Dim(inputs[1], 1) * Dim(inputs[2], 1);
  } else if (name == "aten::bmm" && inputs.size() >= 2) {
    flops = 2 * Dim(inputs[0], 0) * Dim(inputs[0], 1) * Dim(inputs[0], 2) * Dim(inputs[1], 2);
  } else if ((name == "aten::baddbmm" || name == "aten::baddbmm_") && inputs.size() >= 3) {
    // The in-place form is the causal attention's backward (model/attention.cc). Its nested
    // per-batch aten::addmm_ is not counted (addmm_ is not in this list), so nothing twice.
    flops = 2 * Dim(inputs[1], 0) * Dim(inputs[1], 1) * Dim(inputs[1], 2) * Dim(inputs[2], 2);
  }
  if (flops > 0) {
    g_matmul_flops += flops;
    ++g_matmul_calls;
  }
  return nullptr;
}

}  // namespace

std::string ResolveDevice(const std::string& name, const std::string& precision, DeviceSpec* out) {
  if (precision != "auto" && precision != "fp32" && precision != "bf16")
    return "--precision: expected auto, fp32 or bf16, got '" + precision + "'";
  if (name == "cpu") {
    if (precision == "bf16") return "--precision bf16 needs --device cuda (as in the trainer)";
    *out = DeviceSpec{};
    return "";
  }
  if (name == "cuda") {
    if (!torch::cuda::is_available())
      return "--device cuda: this LibTorch (" + rdattn::torch_compat::TorchVersion() +
             ") has no CUDA or sees no GPU (torch::cuda::is_available() is false)";
    out->device = at::Device(at::kCUDA, 0);
    out->bf16 = precision != "fp32";
    return "";
  }
  return "--device: expected cpu or cuda, got '" + name + "'";
}

void Sync(const DeviceSpec& dev) {
  if (dev.cuda()) torch::cuda::synchronize();
}

std::unique_ptr<trainer::AdamW> MakeAdamW(model::Gpt& m, double lr) {
  // The trainer's groups with the default OptimConfig; the trainer sets the LR each step, the
  // bench once.
  auto opt = std::make_unique<trainer::AdamW>(trainer::MakeAdamW(m, OptimConfig{}));
  opt->SetLearningRate(lr);
  return opt;
}

at::Tensor ForwardBackward(model::Gpt& m, const at::Tensor& batch, const DeviceSpec& dev) {
  const int64_t T = batch.size(1) - 1;
  at::Tensor loss;
  {
    AutocastGuard autocast(dev.bf16);
    loss = model::GptImpl::Loss(m->forward(batch.narrow(1, 0, T)), batch.narrow(1, 1, T));
  }
  loss.backward();
  return loss;
}

at::Tensor FullStep(model::Gpt& m, trainer::AdamW& opt, const at::Tensor& batch,
                    const DeviceSpec& dev) {
  trainer::ClearGradients(opt);  // as rdattn-train does at one rank (trainer::ZeroGradients)
  at::Tensor loss = ForwardBackward(m, batch, dev);
  trainer::ClipGradients(m->parameters(), 1.0);  // as rdattn-train clips and steps
  opt.Step();
  return loss;
}

at::Tensor RandomBatch(const model::ModelConfig& cfg, int64_t batch, uint64_t seed,
                       const DeviceSpec& dev) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const at::Tensor t = at::randint(cfg.vocab_size, {batch, cfg.context + 1}, gen,
                                   at::TensorOptions().dtype(at::kLong));
  return dev.cuda() ? t.to(dev.device) : t;
}

std::string SelfPath() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  self[n] = '\0';
  return self;
}

namespace {

// Bytes of live CPU tensors and their peak, from LibTorch's CPU allocator: while installed as the
// thread's PROFILER_STATE debug info, the allocator reports every allocation (+size) and free
// (-size) to it (c10::reportMemoryUsageToProfiler). 1.13 passes the totals as int64_t, 2.x as
// size_t; both overloads are here, and whichever the base class declares is the override.
class TensorPeakReporter : public c10::MemoryReportingInfoBase {
 public:
  void reportMemoryUsage(void* /*ptr*/, int64_t alloc_size, int64_t /*total_allocated*/,
                         int64_t /*total_reserved*/, c10::Device device) {
    Add(alloc_size, device);
  }
  void reportMemoryUsage(void* /*ptr*/, int64_t alloc_size, size_t /*total_allocated*/,
                         size_t /*total_reserved*/, c10::Device device) {
    Add(alloc_size, device);
  }
  bool memoryProfilingEnabled() const override { return true; }
  int64_t peak() const { return peak_.load(); }

 private:
  void Add(int64_t bytes, c10::Device device) {
    if (!device.is_cpu()) return;
    const int64_t now = current_ += bytes;
    int64_t p = peak_.load();
    while (now > p && !peak_.compare_exchange_weak(p, now)) {
    }
  }
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
};

}  // namespace

int MemoryProbeMain(const std::string& preset, model::Arm arm, int64_t batch, const DeviceSpec& dev,
                    int64_t threads) {
  at::set_num_threads(static_cast<int>(threads));
  const auto cfg = *model::Preset(preset, arm);
  const at::Tensor tokens = RandomBatch(cfg, batch, 1, dev);
  auto reporter = std::make_shared<TensorPeakReporter>();
  [[maybe_unused]] int64_t before = 0;
  int64_t rss_before = -1;
  if (dev.cuda()) {
#if defined(RDATTN_BENCH_CUDA)
    Sync(dev);
    c10::cuda::CUDACachingAllocator::resetPeakStats(dev.device.index());
    before =
        static_cast<int64_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(dev.device.index())
                                 .allocated_bytes[0]
                                 .current);
#else
    std::fprintf(stderr, "memory probe: this build has no CUDA allocator statistics\n");
    return 1;
#endif
  } else {
    rss_before = ProcStatusBytes("VmRSS");
    if (!ResetPeakRss()) std::fprintf(stderr, "memory probe: cannot reset VmHWM\n");
  }
  int64_t peak = -1, rss_peak = -1;
  {
    std::unique_ptr<c10::DebugInfoGuard> guard;
    if (!dev.cuda())
      guard = std::make_unique<c10::DebugInfoGuard>(c10::DebugInfoKind::PROFILER_STATE, reporter);
    model::Gpt m(cfg, 0);
    m->to(dev.device);
    auto opt = MakeAdamW(m);
    for (int s = 0; s < 2; ++s) FullStep(m, *opt, tokens, dev);
    Sync(dev);
    if (dev.cuda()) {
#if defined(RDATTN_BENCH_CUDA)
      peak =
          static_cast<int64_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(dev.device.index())
                                   .allocated_bytes[0]
                                   .peak) -
          before;
#endif
    } else {
      peak = reporter->peak() > 0 ? reporter->peak() : -1;
      rss_peak = ProcStatusBytes("VmHWM") - rss_before;
    }
  }
  std::printf("%lld %lld\n", static_cast<long long>(peak), static_cast<long long>(rss_peak));
  return 0;
}

std::vector<MemoryFigures> ProbeMemoryInChildren(const std::string& preset,
                                                 const std::vector<model::Arm>& arms, int64_t batch,
                                                 const std::string& device,
                                                 const std::string& precision, int64_t threads,
                                                 int64_t jobs) {
  std::vector<MemoryFigures> out(arms.size());
  const std::string self = SelfPath();
  if (self.empty()) return out;
  const size_t step = static_cast<size_t>(std::max<int64_t>(jobs, 1));
  for (size_t first = 0; first < arms.size(); first += step) {
    const size_t last = std::min(arms.size(), first + step);
    std::vector<FILE*> pipes;
    for (size_t i = first; i < last; ++i) {
      const std::string cmd = self + " --memory-probe " + std::string(model::ArmName(arms[i])) +
                              " --preset " + preset + " --batch " + std::to_string(batch) +
                              " --device " + device + " --precision " + precision + " --threads " +
                              std::to_string(threads);
      pipes.push_back(popen(cmd.c_str(), "r"));
    }
    for (size_t i = first; i < last; ++i) {
      FILE* p = pipes[i - first];
      if (p == nullptr) continue;
      long long peak = -1, rss = -1;
      if (std::fscanf(p, "%lld %lld", &peak, &rss) != 2) peak = rss = -1;
      if (pclose(p) == 0) out[i] = MemoryFigures{peak, rss};
    }
  }
  return out;
}

double MeasureGemmShapeFlops(int64_t rows, int64_t k, int64_t n, double seconds,
                             const DeviceSpec& dev) {
  const auto opts = at::TensorOptions()
                        .dtype(dev.cuda() && dev.bf16 ? at::kBFloat16 : at::kFloat)
                        .device(dev.device);
  at::Generator gen = at::detail::createCPUGenerator(7);
  const at::Tensor a = at::randn({rows, k}, gen).to(opts), b = at::randn({k, n}, gen).to(opts);
  at::Tensor c = at::empty({rows, n}, opts);
  for (int i = 0; i < 2; ++i) at::mm_out(c, a, b);  // warm-up: BLAS pools, cuBLAS handles
  Sync(dev);
  double best = std::numeric_limits<double>::infinity(), total = 0;
  int64_t reps = 1, timings = 0;
  const auto start = Clock::now();
  while (timings < 3 || total < seconds) {
    const auto t0 = Clock::now();
    for (int64_t r = 0; r < reps; ++r) at::mm_out(c, a, b);
    Sync(dev);
    const double dt = Seconds(t0, Clock::now());
    best = std::min(best, dt / static_cast<double>(reps));
    ++timings;
    if (dt < 0.02 && reps < (int64_t{1} << 20)) reps *= 2;  // each timing ≥ ~20 ms
    total = Seconds(start, Clock::now());
    if (timings > 10000) break;
  }
  return 2.0 * static_cast<double>(rows) * static_cast<double>(k) * static_cast<double>(n) / best;
}

double MeasureGemmFlops(int64_t n, double seconds, const DeviceSpec& dev) {
  return MeasureGemmShapeFlops(n, n, n, seconds, dev);
}

MeasuredFlops CountMatmulFlops(const model::ModelConfig& cfg, int64_t batch) {
  MeasuredFlops out;
  model::Gpt m(cfg, 0);
  const DeviceSpec cpu;
  const at::Tensor tokens = RandomBatch(cfg, batch, 3, cpu);
  const int64_t T = cfg.context;
  const double n_tokens = static_cast<double>(batch * T);
  g_matmul_flops = 0;
  g_matmul_calls = 0;
  const at::CallbackHandle handle = at::addGlobalCallback(at::RecordFunctionCallback(&CountMatmul)
                                                              .needsInputs(true)
                                                              .scopes({at::RecordScope::FUNCTION}));
  const at::Tensor loss =
      model::GptImpl::Loss(m->forward(tokens.narrow(1, 0, T)), tokens.narrow(1, 1, T));
  const int64_t fwd = g_matmul_flops.load();
  loss.backward();
  const int64_t all = g_matmul_flops.load();
  at::removeCallback(handle);
  out.calls = g_matmul_calls.load();
  out.forward_per_token = static_cast<double>(fwd) / n_tokens;
  out.backward_per_token = static_cast<double>(all - fwd) / n_tokens;
  return out;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace rdattn::bench
