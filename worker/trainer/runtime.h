// Where one rank computes: the device, the parameter dtype and bf16 autocast, decided once from
// the run's parallel config and the communicator, and the two helpers that put work there
// (AutocastGuard, MakeBatch). Used by the training loop, evaluation and the eval/export CLI.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runspec/run_config.h"
#include "worker/comm/communicator.h"
#include "worker/trainer/sampler.h"

namespace rdattn::trainer {

struct Runtime {
  at::Device device = at::kCPU;
  at::ScalarType param_dtype = at::kFloat;
  bool autocast_bf16 = false;
  bool cuda = false;
  std::string device_name;  // the CUDA device ("cuda:0") or the CPU's model name, for events
};

// FAILED_PRECONDITION naming parallel.device when it asks for cuda and LibTorch sees no CUDA
// device; rdattn-train checks it before it makes the communicator (whose NCCL backend would
// otherwise fail first, less clearly).
Status CheckDeviceAvailable(const ParallelConfig& p);

// The device decided once: the communicator's for NCCL (it chose it from the launcher's
// environment), else launch::CudaDeviceForRank by the same rule. FAILED_PRECONDITION when CUDA
// or bf16 is asked for and there is no CUDA device.
StatusOr<Runtime> ResolveRuntime(const ParallelConfig& p, const comm::Communicator& comm);

// bf16 autocast for CUDA while alive (LibTorch 1.13 and 2.x spell it differently); nothing
// when `on` is false.
class AutocastGuard {
 public:
  explicit AutocastGuard(bool on);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool on_;
};

// glibc's malloc keeps freed host memory for reuse (no trimming of the heap, blocks under 32 MiB
// from the heap instead of their own mmap) instead of returning it to the kernel on every free:
// LibTorch's CPU allocator frees every activation each step, and fresh pages fault again on the
// next step (measured: about 4,800 faults per cpu-small step before, 16 after). Process-wide;
// nothing on other C libraries. Peak RSS is unchanged; RSS no longer falls after a peak.
void RetainFreedHostMemory();

// [end - begin, context+1] int64 token windows windows[begin, end) on `device`; `pinned`: in
// page-locked host memory (a CPU tensor to copy to CUDA without blocking; needs CUDA LibTorch).
at::Tensor MakeBatch(const WindowIndex& index, const std::vector<int64_t>& windows, size_t begin,
                     size_t end, at::Device device, bool pinned = false);

}  // namespace rdattn::trainer
