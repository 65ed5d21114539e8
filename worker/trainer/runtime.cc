#include "worker/trainer/runtime.h"

#include <torch/cuda.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <climits>
#include <fstream>

#include "model/torch_compat.h"
#include "worker/launch_env.h"

namespace rdattn::trainer {
namespace {

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "cpu";
}

}  // namespace

Status CheckDeviceAvailable(const ParallelConfig& p) {
  if (p.device == Device::kCuda && !torch::cuda::is_available())
    return FailedPreconditionError(
        "parallel.device: cuda was requested but LibTorch sees no CUDA device (a CPU-only "
        "LibTorch, or no GPU or driver on this machine)");
  return Status::Ok();
}

StatusOr<Runtime> ResolveRuntime(const ParallelConfig& p, const comm::Communicator& comm) {
  Runtime rt;
  RDATTN_RETURN_IF_ERROR(CheckDeviceAvailable(p));
  const bool have_cuda = torch::cuda::is_available();
  rt.cuda = p.device == Device::kCuda || (p.device == Device::kAuto && have_cuda);
  if (rt.cuda && comm.device().is_cuda()) {
    rt.device = comm.device();
  } else if (rt.cuda) {
    const int n = static_cast<int>(torch::cuda::device_count());
    const int d = launch::CudaDeviceForRank(launch::ReadLaunchEnv(), n, /*fallback=*/0);
    rt.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(std::max(d, 0)));
  }
  const Precision prec = p.precision == Precision::kAuto
                             ? (rt.cuda ? Precision::kBf16 : Precision::kFp32)
                             : p.precision;
  if (prec == Precision::kBf16 && !rt.cuda)
    return FailedPreconditionError("parallel.precision: bf16 autocast needs a CUDA device");
  rt.param_dtype = prec == Precision::kFp64 ? at::kDouble : at::kFloat;
  rt.autocast_bf16 = prec == Precision::kBf16;
  rt.device_name = rt.cuda ? rt.device.str() : CpuModelName();
  return rt;
}

AutocastGuard::AutocastGuard(bool on) : on_(on) {
  if (on_) torch_compat::SetAutocast(c10::DeviceType::CUDA, true, at::kBFloat16);
}

AutocastGuard::~AutocastGuard() {
  if (on_) torch_compat::SetAutocast(c10::DeviceType::CUDA, false);
}

void RetainFreedHostMemory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest; a fixed value ends its adaptation
  mallopt(M_TRIM_THRESHOLD, INT_MAX);   // never give the top of the heap back
  mallopt(M_TOP_PAD, 64 << 20);         // grow the heap in large steps
#endif
}

at::Tensor MakeBatch(const WindowIndex& index, const std::vector<int64_t>& windows, size_t begin,
                     size_t end, at::Device device, bool pinned) {
  const int64_t n = static_cast<int64_t>(end - begin), w = index.context() + 1;
  at::Tensor batch = at::empty({n, w}, at::TensorOptions().dtype(at::kLong).pinned_memory(pinned));
  int64_t* out = batch.data_ptr<int64_t>();
  for (size_t i = begin; i < end; ++i)
    index.Copy(windows[i], out + static_cast<int64_t>(i - begin) * w);
  return device.is_cpu() ? batch : batch.to(device, /*non_blocking=*/false);
}

}  // namespace rdattn::trainer
