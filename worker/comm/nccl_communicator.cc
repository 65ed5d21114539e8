// The NCCL backend: rank and world from MPI, the ncclUniqueId broadcast from rank 0 over MPI,
// then ncclAllReduce / ncclBroadcast on CUDA tensors. Built only with NCCL and MPI.
//
// Stream choice: Debian's LibTorch is CPU-only (it ships c10/cuda headers but no libc10_cuda), so
// this file does not use LibTorch's current-stream API. Collectives are enqueued on CUDA's legacy
// default stream (cudaStream_t 0), which is LibTorch's default stream on every device, so they
// are ordered after the kernels that produced the tensor. Each call then waits for its stream
// (polling the NCCL async error so a dead peer gives an error, not a hang): on return the
// result is complete, as with the MPI backend. Callers that switch LibTorch to a side stream
// must synchronise it before calling.
#include <ATen/core/Tensor.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "worker/comm/communicator.h"
#include "worker/comm/mpi_util.h"
#include "worker/launch_env.h"

namespace rdattn::comm {
namespace {

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

std::string Where(const char* call, const char* file, int line) {
  return std::string(call) + " failed at " + Basename(file) + ":" + std::to_string(line) + ": ";
}

Status CudaError(cudaError_t e, const char* call, const char* file, int line) {
  const std::string msg =
      Where(call, file, line) + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
  (void)cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
  switch (e) {
    case cudaErrorMemoryAllocation:
      return ResourceExhaustedError(msg);
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
      return FailedPreconditionError(msg);
    default:
      return InternalError(msg);
  }
}

Status NcclError(ncclResult_t r, ncclComm_t comm, const char* call, const char* file, int line) {
  std::string msg = Where(call, file, line) + ncclGetErrorString(r);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') msg += std::string(" (") + last + ")";
#else
  (void)comm;
#endif
  switch (r) {
    case ncclSystemError:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
    case ncclRemoteError:
#endif
      return UnavailableError(msg);  // a peer or the network
    default:
      return InternalError(msg);
  }
}

}  // namespace
}  // namespace rdattn::comm

// llm.c's cudaCheck / ncclCheck, returning a Status instead of exiting.
#define RDATTN_CUDA_CHECK(call)                                                     \
  do {                                                                              \
    const cudaError_t rdattn_cuda_rc_ = (call);                                     \
    if (rdattn_cuda_rc_ != cudaSuccess) {                                           \
      return ::rdattn::comm::CudaError(rdattn_cuda_rc_, #call, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)
#define RDATTN_NCCL_CHECK(nccl_comm, call)                                                       \
  do {                                                                                           \
    const ncclResult_t rdattn_nccl_rc_ = (call);                                                 \
    if (rdattn_nccl_rc_ != ncclSuccess) {                                                        \
      return ::rdattn::comm::NcclError(rdattn_nccl_rc_, (nccl_comm), #call, __FILE__, __LINE__); \
    }                                                                                            \
  } while (0)

namespace rdattn::comm {
namespace {

// LibTorch's default stream (see the file comment).
const cudaStream_t kStream = nullptr;

StatusOr<ncclDataType_t> NcclType(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
    case at::kBFloat16:
      return ncclBfloat16;
#endif
    case at::kLong:
      return ncclInt64;
    case at::kInt:
      return ncclInt32;
    case at::kByte:
      return ncclUint8;
    default:
      return InvalidArgumentError(std::string("nccl AllReduceSum: unsupported dtype ") +
                                  c10::toString(t));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t nccl, MPI_Comm mpi, int rank, int world, int device)
      : nccl_(nccl), mpi_(mpi), rank_(rank), world_(world), device_(device) {}
  ~NcclCommunicator() override {
    if (nccl_ != nullptr) {
      cudaSetDevice(device_);
      ncclCommDestroy(nccl_);
    }
    internal::FreeComm(&mpi_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "nccl"; }
  at::Device device() const override {
    return at::Device(at::kCUDA, static_cast<at::DeviceIndex>(device_));
  }

  Status AllReduceSum(at::Tensor& t) override {
    RDATTN_RETURN_IF_ERROR(Check(t, "AllReduceSum"));
    StatusOr<ncclDataType_t> type = NcclType(t.scalar_type());
    if (!type.ok()) return type.status();
    if (t.numel() == 0) return Status::Ok();
    RDATTN_CUDA_CHECK(cudaSetDevice(device_));
    void* data = t.data_ptr();
    RDATTN_NCCL_CHECK(nccl_, ncclAllReduce(data, data, static_cast<size_t>(t.numel()), *type,
                                           ncclSum, nccl_, kStream));
    return Wait();
  }

  Status Broadcast(at::Tensor& t, int root) override {
    RDATTN_RETURN_IF_ERROR(Check(t, "Broadcast"));
    if (root < 0 || root >= world_) {
      return InvalidArgumentError("nccl Broadcast: root " + std::to_string(root) + " outside [0, " +
                                  std::to_string(world_) + ")");
    }
    if (t.numel() == 0) return Status::Ok();
    RDATTN_CUDA_CHECK(cudaSetDevice(device_));
    void* data = t.data_ptr();
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    RDATTN_NCCL_CHECK(nccl_, ncclBroadcast(data, data, bytes, ncclUint8, root, nccl_, kStream));
    return Wait();
  }

  // NCCL has no barrier: finish this rank's device work, then meet the others over MPI.
  Status Barrier() override {
    if (nccl_ == nullptr)
      return FailedPreconditionError("nccl Barrier: the communicator was aborted");
    RDATTN_CUDA_CHECK(cudaSetDevice(device_));
    RDATTN_CUDA_CHECK(cudaDeviceSynchronize());
    RDATTN_MPI_CHECK(MPI_Barrier(mpi_));
    return Status::Ok();
  }

  // Host values over MPI: no CUDA call, so it never waits on the device.
  Status AllReduceSumHost(double* values, int64_t n) override {
    if (n < 0 || n > INT_MAX) return InvalidArgumentError("nccl AllReduceSumHost: bad count");
    if (n == 0) return Status::Ok();
    if (values == nullptr) return InvalidArgumentError("nccl AllReduceSumHost: null values");
    RDATTN_MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, values, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, mpi_));
    return Status::Ok();
  }

 private:
  Status Check(const at::Tensor& t, const char* op) const {
    const std::string where = std::string("nccl ") + op + ": ";
    if (nccl_ == nullptr) return FailedPreconditionError(where + "the communicator was aborted");
    if (!t.defined()) return InvalidArgumentError(where + "tensor is undefined");
    if (!t.is_contiguous()) return InvalidArgumentError(where + "tensor is not contiguous");
    if (!t.is_cuda() || t.device().index() != device_) {
      return InvalidArgumentError(where + "tensor is on " + t.device().str() +
                                  ", the communicator on cuda:" + std::to_string(device_));
    }
    return Status::Ok();
  }

  // Waits for kStream; if NCCL reports an asynchronous error meanwhile, aborts the communicator
  // (it cannot be used again) and returns the error.
  Status Wait() {
    for (;;) {
      const cudaError_t q = cudaStreamQuery(kStream);
      if (q == cudaSuccess) return Status::Ok();
      if (q != cudaErrorNotReady) return CudaError(q, "cudaStreamQuery(0)", __FILE__, __LINE__);
      ncclResult_t async = ncclSuccess;
      RDATTN_NCCL_CHECK(nccl_, ncclCommGetAsyncError(nccl_, &async));
      if (async != ncclSuccess) {
        const Status s = NcclError(async, nccl_, "ncclCommGetAsyncError", __FILE__, __LINE__);
        ncclCommAbort(nccl_);
        nccl_ = nullptr;
        return s;
      }
      std::this_thread::yield();
    }
  }

  ncclComm_t nccl_;  // null after an abort
  MPI_Comm mpi_;     // duplicate of MPI_COMM_WORLD: bootstrap and Barrier
  int rank_;
  int world_;
  int device_;
};

// The rank within this node, from MPI (a collective over `mpi`: every rank calls it).
Status NodeRank(MPI_Comm mpi, int rank, int* node_rank) {
  MPI_Comm node = MPI_COMM_NULL;
  RDATTN_MPI_CHECK(MPI_Comm_split_type(mpi, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  const int rc = MPI_Comm_rank(node, node_rank);
  MPI_Comm_free(&node);
  if (rc != MPI_SUCCESS) return internal::MpiError(rc, "MPI_Comm_rank(node)", __FILE__, __LINE__);
  return Status::Ok();
}

// Local, no communication: checks that a CUDA device is usable and selects it. Touches the
// CUDA runtime only (never NCCL) so that a machine without a GPU or driver gets a clean error.
Status SelectDevice(int requested, int node_rank, int* device) {
  int count = 0;  // cudaGetDeviceCount leaves it unwritten on failure
  RDATTN_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count <= 0) return FailedPreconditionError("no CUDA device is visible");
  int d = requested;
  // One visible device per rank (CUDA_VISIBLE_DEVICES set per task): it is device 0; else the
  // launcher's local rank (or the rank within the node) modulo the visible devices.
  if (d < 0) d = launch::CudaDeviceForRank(launch::ReadLaunchEnv(), count, node_rank);
  if (d >= count) {
    return FailedPreconditionError("CUDA device " + std::to_string(d) + " requested, but only " +
                                   std::to_string(count) + " visible");
  }
  RDATTN_CUDA_CHECK(cudaSetDevice(d));
  *device = d;
  return Status::Ok();
}

StatusOr<std::unique_ptr<Communicator>> Bootstrap(MPI_Comm mpi, int device_index) {
  int rank = 0;
  int world = 0;
  RDATTN_MPI_CHECK(MPI_Comm_rank(mpi, &rank));
  RDATTN_MPI_CHECK(MPI_Comm_size(mpi, &world));
  int node_rank = 0;
  RDATTN_RETURN_IF_ERROR(NodeRank(mpi, rank, &node_rank));

  // 1. Every rank selects its device, then all agree before anyone touches NCCL: a rank that
  //    failed would otherwise leave the others waiting for the unique id forever.
  int device = -1;
  const Status local = SelectDevice(device_index, node_rank, &device);
  int ok = local.ok() ? 1 : 0;
  int all_ok = 0;
  RDATTN_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, mpi));
  if (!local.ok()) return local.WithPrefix("NCCL backend, rank " + std::to_string(rank));
  if (all_ok == 0) {
    return FailedPreconditionError("NCCL backend, rank " + std::to_string(rank) +
                                   ": another rank has no usable CUDA device");
  }

  // 2. Rank 0 creates the unique id and broadcasts it, with a flag saying whether that worked.
  struct {
    int ok;
    ncclUniqueId id;
  } msg;
  std::memset(&msg, 0, sizeof(msg));
  Status id_status;
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&msg.id);
    msg.ok = r == ncclSuccess ? 1 : 0;
    if (r != ncclSuccess) id_status = NcclError(r, nullptr, "ncclGetUniqueId", __FILE__, __LINE__);
  }
  RDATTN_MPI_CHECK(MPI_Bcast(&msg, static_cast<int>(sizeof(msg)), MPI_BYTE, 0, mpi));
  if (msg.ok == 0) {
    if (rank == 0) return id_status.WithPrefix("NCCL backend");
    return UnavailableError("NCCL backend: rank 0 could not create the NCCL unique id");
  }

  // 3. Create the communicator (a collective over all ranks, through NCCL's own bootstrap).
  ncclComm_t nccl = nullptr;
  RDATTN_NCCL_CHECK(nullptr, ncclCommInitRank(&nccl, world, msg.id, rank));
  return std::unique_ptr<Communicator>(new NcclCommunicator(nccl, mpi, rank, world, device));
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(int device_index) {
  RDATTN_RETURN_IF_ERROR(internal::EnsureMpiInitialized());
  MPI_Comm mpi = MPI_COMM_NULL;
  RDATTN_RETURN_IF_ERROR(internal::DupWorld(&mpi));
  StatusOr<std::unique_ptr<Communicator>> c = Bootstrap(mpi, device_index);
  if (!c.ok()) internal::FreeComm(&mpi);  // on success the communicator owns it
  return c;
}

}  // namespace rdattn::comm
