// Shared pieces of rdattn_model_bench (tests/bench/): the full training step as the trainer runs
// it (forward, backward, gradient clipping, AdamW), memory probes, the GEMM peak, the measured
// FLOP count, and the device helpers. docs/benchmarks.md describes every figure.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "worker/trainer/optimizer.h"
#include "worker/trainer/runtime.h"

namespace rdattn::bench {

// What the bench runs on: CPU fp32, or CUDA (fp32 weights, bf16 autocast when `bf16`).
struct DeviceSpec {
  at::Device device = at::Device(at::kCPU);
  bool bf16 = false;  // bf16 autocast (CUDA only; the trainer's parallel.precision = bf16)
  bool cuda() const { return device.is_cuda(); }
};

// Parses "cpu" or "cuda"; on "cuda" checks at run time that this LibTorch has CUDA and a GPU.
// Returns an empty string on success, else the reason.
std::string ResolveDevice(const std::string& name, const std::string& precision, DeviceSpec* out);

// Waits for the device's queued work (no-op on CPU).
void Sync(const DeviceSpec& dev);

// bf16 autocast for CUDA while alive: the trainer's own switch (worker/trainer/runtime.h).
using trainer::AutocastGuard;

// AdamW with the trainer's groups and defaults (RunConfig's OptimConfig): weight decay 0.1 on
// matrices, none on gains and pseudo-queries, betas (0.9, 0.95), eps 1e-8.
std::unique_ptr<trainer::AdamW> MakeAdamW(model::Gpt& m, double lr = 1e-3);

// One full training step on `batch` ([B, T+1] int64 on the model's device): the gradients cleared
// (trainer::ClearGradients), forward (under autocast when dev.bf16), loss, backward,
// clip_grad_norm_(1.0), AdamW step. Returns the loss tensor (not synchronised).
at::Tensor FullStep(model::Gpt& m, trainer::AdamW& opt, const at::Tensor& batch,
                    const DeviceSpec& dev);

// Forward + backward only (what the MPI mode times as "compute"); gradients are left in place.
at::Tensor ForwardBackward(model::Gpt& m, const at::Tensor& batch, const DeviceSpec& dev);

// Random tokens [batch, context+1] on the device, from `seed`.
at::Tensor RandomBatch(const model::ModelConfig& cfg, int64_t batch, uint64_t seed,
                       const DeviceSpec& dev);

// Peak memory of two full training steps (the second one holds AdamW's moments) per arm, each
// measured in a fresh child process (this binary with --memory-probe; up to `jobs` at a time:
// the figures are per process), in bytes, -1 where unavailable:
//   peak_bytes  CPU: the peak of live tensor bytes from LibTorch's CPU allocator (its
//               memory-profiling hook), from just before the model is built — weights,
//               gradients, optimizer state, activations and temporaries. CUDA: the caching
//               allocator's peak allocated bytes minus what was allocated before the model.
//   rss_bytes   CPU only: peak RSS (VmHWM, reset through /proc/self/clear_refs) minus the RSS
//               before the model was built; coarser (malloc arenas, page reuse).
struct MemoryFigures {
  int64_t peak_bytes = -1;
  int64_t rss_bytes = -1;
};
std::vector<MemoryFigures> ProbeMemoryInChildren(const std::string& preset,
                                                 const std::vector<model::Arm>& arms, int64_t batch,
                                                 const std::string& device,
                                                 const std::string& precision, int64_t threads,
                                                 int64_t jobs);
// The child's side: prints the figure on stdout and returns the exit status.
int MemoryProbeMain(const std::string& preset, model::Arm arm, int64_t batch, const DeviceSpec& dev,
                    int64_t threads);

// GEMM peak: FLOP/s of at::mm on n×n matrices (fp32 on CPU, bf16 on CUDA when dev.bf16, else
// fp32) with the current thread count; the best of repeated timings over about `seconds`.
double MeasureGemmFlops(int64_t n, double seconds, const DeviceSpec& dev);
// The same for the model's largest matmul, [rows, k] × [k, n] (the LM head: B·T × D × V).
double MeasureGemmShapeFlops(int64_t rows, int64_t k, int64_t n, double seconds,
                             const DeviceSpec& dev);

// Measured matmul FLOPs of one forward and one backward (CPU, fp32), counted from the shapes of
// every aten::mm / addmm / bmm / baddbmm call the dispatcher records, per token. Work done
// elementwise (norms, softmax, and whatever part of the depth reads is not a matmul) is not in
// this count.
struct MeasuredFlops {
  double forward_per_token = 0;
  double backward_per_token = 0;
  int64_t calls = 0;
  bool ok() const { return calls > 0; }
};
MeasuredFlops CountMatmulFlops(const model::ModelConfig& cfg, int64_t batch);

// The path of the running binary (/proc/self/exe).
std::string SelfPath();

double Median(std::vector<double> v);

// --mpi-step mode (bench_mpi.cc): run under `mpirun -np 2`; rank 0 prints one line
// "RDATTN_BENCH_MPI {json}".
struct MpiOptions {
  std::string preset = "cpu-bench";
  std::vector<model::Arm> arms;
  int64_t global_batch = 4;  // sequences per step over all ranks
  int64_t steps = 5;         // timed steps per arm (after `warmup`)
  int64_t warmup = 1;
  int64_t threads = 1;  // per rank
};
int MpiStepMain(const MpiOptions& opts);

// --gpu-checks mode (bench_gpu.cc): CPU vs device forward agreement (fp32 and bf16) and T6
// (rd with q_v := q_attn is bitwise block and tied) on the device. 0 when every check passes.
int DeviceChecksMain(const std::string& preset, const DeviceSpec& dev);

}  // namespace rdattn::bench
