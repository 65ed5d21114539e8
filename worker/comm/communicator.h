// The collective-communication interface the trainer sees, and the factories for its three
// backends: "local" (world size 1), "mpi" (CPU tensors; CUDA tensors are staged through host
// memory) and "nccl" (CUDA tensors, bootstrapped over MPI). docs/communicator.md has the details.
// No gradient bucketing here (buckets.h), and no launcher logic beyond reading the world size and
// local rank that MPI/Slurm put in the environment.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "runspec/run_config.h"

namespace rdattn::comm {

// One rank's handle on a fixed group of processes. Every collective is blocking: when it returns
// OK the result is in the tensor (for NCCL: the device work is complete). All ranks must call the
// same collectives in the same order with tensors of the same dtype and element count, or the
// group deadlocks; argument errors are detected locally and return before any communication, so
// with identical arguments every rank returns the same error.
//
// Not thread-safe: call from one thread (MPI is initialised with MPI_THREAD_FUNNELED).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;  // "local", "mpi", "nccl"
  // Where scratch tensors for collectives should live (checksums, flags): CPU for "local" and
  // "mpi", the communicator's CUDA device for "nccl".
  virtual at::Device device() const { return at::Device(at::kCPU); }

  // In-place sum over ranks of a defined, contiguous tensor. Dtypes: mpi — float32, float64,
  // int64, int32 (float16/bfloat16 are summed in float32 and rounded once); nccl — float32,
  // float64, bfloat16, float16, int64, int32, uint8 on the communicator's device.
  // INVALID_ARGUMENT for an unsupported tensor; INTERNAL/UNAVAILABLE for library failures.
  virtual Status AllReduceSum(at::Tensor& t) = 0;
  // In place: every rank ends with root's values. Any dtype (sent as bytes). `root` in
  // [0, world_size), else INVALID_ARGUMENT.
  virtual Status Broadcast(at::Tensor& t, int root) = 0;
  virtual Status Barrier() = 0;
  // In-place sum over ranks of `n` doubles in host memory, without waiting on any device stream
  // (nccl: over its MPI communicator), for small host-side votes. The default serves world size
  // 1 (nothing to do) and is UNIMPLEMENTED otherwise; mpi and nccl override it. n ≥ 0.
  virtual Status AllReduceSumHost(double* values, int64_t n);
};

// World size 1: collectives validate their arguments and return; data are untouched.
std::unique_ptr<Communicator> MakeLocalCommunicator();

// MPI backend over a duplicate of MPI_COMM_WORLD (errors are returned, never MPI_Abort).
// Initialises MPI (MPI_Init_thread, MPI_THREAD_FUNNELED) unless it already is, and then
// finalises it at process exit (registered once). Without mpirun it is a singleton (rank 0 of
// 1). UNIMPLEMENTED when the build has no MPI; FAILED_PRECONDITION if MPI was finalised.
StatusOr<std::unique_ptr<Communicator>> MakeMpiCommunicator();

// NCCL backend: rank and world from MPI (initialised as above); rank 0 creates the
// ncclUniqueId and broadcasts it over MPI; ncclCommInitRank on CUDA device `device_index`
// (-1: launch::CudaDeviceForRank of the launcher's environment, worker/launch_env.h, with the
// rank within the node from MPI as the fallback local rank; device() says which).
// All ranks agree on success before NCCL is touched, so a rank without a GPU makes every rank
// return an error instead of hanging. Collectives run on CUDA's legacy default stream (the
// stream LibTorch uses unless a stream guard says otherwise) and synchronise it before
// returning. FAILED_PRECONDITION without a usable GPU; UNIMPLEMENTED when the build has no NCCL.
StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(int device_index = -1);

// Picks the backend of parallel.backend for tensors on `tensors` (Device::kCpu or kCuda: the
// run's resolved device; kAuto is INVALID_ARGUMENT). kAuto → nccl for CUDA tensors when NCCL is
// built; else mpi if the launcher reports world > 1 or MPI is built; else local. Backends this
// build or run cannot provide (UNIMPLEMENTED / INVALID_ARGUMENT) give errors that name
// "parallel.backend". For CUDA tensors, use the communicator's device() for the model: the NCCL
// backend picks it from the launcher's environment (worker/launch_env.h).
StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(Backend backend, Device tensors);

// What this build provides.
bool MpiBuilt();
bool NcclBuilt();

}  // namespace rdattn::comm
