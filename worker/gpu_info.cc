// rdattn-gpu-info: reports what the CUDA runtime and NCCL see on this machine. It links the
// CUDA runtime and NCCL, so building it proves the GPU path compiles and links; running it
// on a machine without a GPU prints the driver status and exits 1.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>

int main() {
  int nccl_version = 0;
  ncclGetVersion(&nccl_version);
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  std::printf("cuda_runtime=%d cuda_driver=%d nccl=%d\n", runtime, driver, nccl_version);
  if (err != cudaSuccess) {
    std::printf("devices=0 (%s: %s)\n", cudaGetErrorName(err), cudaGetErrorString(err));
    return 1;
  }
  std::printf("devices=%d\n", count);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess)
      std::printf("device %d: %s, %.1f GiB, sm_%d%d\n", i, prop.name,
                  static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), prop.major,
                  prop.minor);
  }
  return count > 0 ? 0 : 1;
}
