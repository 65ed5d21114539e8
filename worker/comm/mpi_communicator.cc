// The MPI backend: blocking MPI_Allreduce / MPI_Bcast / MPI_Barrier on host memory, over a
// duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN. CUDA tensors are staged through host
// copies (correct, slow: the NCCL backend is the GPU path). Also MPI initialisation, shared with
// the NCCL backend (mpi_util.h).
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include "worker/comm/communicator.h"
#include "worker/comm/mpi_util.h"
#include "worker/launch_env.h"

namespace rdattn::comm {
namespace internal {
namespace {

void FinalizeMpiAtExit() {
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
}

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

}  // namespace

Status MpiError(int rc, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  std::string what;
  if (MPI_Error_string(rc, text, &len) == MPI_SUCCESS && len > 0) {
    what.assign(text, static_cast<size_t>(len));
  } else {
    what = "MPI error code " + std::to_string(rc);
  }
  return InternalError(std::string(call) + " failed at " + Basename(file) + ":" +
                       std::to_string(line) + ": " + what);
}

Status EnsureMpiInitialized() {
  int finalized = 0;
  RDATTN_MPI_CHECK(MPI_Finalized(&finalized));
  if (finalized) return FailedPreconditionError("MPI has already been finalised in this process");
  int initialized = 0;
  RDATTN_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) return Status::Ok();  // someone else owns MPI's lifetime
  int provided = 0;
  RDATTN_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
  // We initialised MPI, so we finalise it. MPI cannot be initialised twice in a process, so this
  // point is reached at most once and the handler is registered once.
  std::atexit(FinalizeMpiAtExit);
  return Status::Ok();
}

Status DupWorld(MPI_Comm* out) {
  *out = MPI_COMM_NULL;
  RDATTN_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, out));
  const int rc = MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) {
    FreeComm(out);
    return MpiError(rc, "MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN)", __FILE__, __LINE__);
  }
  return Status::Ok();
}

void FreeComm(MPI_Comm* comm) {
  int finalized = 0;
  if (*comm != MPI_COMM_NULL && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) {
    MPI_Comm_free(comm);
  }
  *comm = MPI_COMM_NULL;
}

}  // namespace internal

namespace {

// MPI counts are int: larger buffers go in pieces of this many elements (or bytes).
constexpr int64_t kMaxCount = int64_t{1} << 30;

std::string What(const std::exception& e) {
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

// RDATTN_MPI_WAIT=spin turns WaitForPeers off (OpenMPI's own busy-polling wait).
bool SleepWhileWaiting() {
  const char* v = std::getenv("RDATTN_MPI_WAIT");
  return v == nullptr || std::strcmp(v, "spin") != 0;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int world)
      : comm_(comm), rank_(rank), world_(world), sleep_while_waiting_(SleepWhileWaiting()) {}
  ~MpiCommunicator() override { internal::FreeComm(&comm_); }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "mpi"; }

  Status AllReduceSum(at::Tensor& t) override {
    if (!t.defined()) return InvalidArgumentError("mpi AllReduceSum: tensor is undefined");
    if (!t.is_contiguous())
      return InvalidArgumentError("mpi AllReduceSum: tensor is not contiguous");
    MPI_Datatype type = MPI_DATATYPE_NULL;
    switch (t.scalar_type()) {
      case at::kFloat:
        type = MPI_FLOAT;
        break;
      case at::kDouble:
        type = MPI_DOUBLE;
        break;
      case at::kLong:
        type = MPI_INT64_T;
        break;
      case at::kInt:
        type = MPI_INT32_T;
        break;
      case at::kHalf:
      case at::kBFloat16:
        // MPI has no 16-bit float sum: sum in float32, round once.
        return Staged(t, at::kFloat, [this](at::Tensor& f) { return AllReduceSum(f); });
      default:
        return InvalidArgumentError(std::string("mpi AllReduceSum: unsupported dtype ") +
                                    c10::toString(t.scalar_type()) +
                                    " (float32, float64, int64, int32, float16, bfloat16)");
    }
    if (!t.is_cpu()) {
      return Staged(t, t.scalar_type(), [this](at::Tensor& h) { return AllReduceSum(h); });
    }
    RDATTN_RETURN_IF_ERROR(WaitForPeers());
    char* data = static_cast<char*>(t.data_ptr());
    const int64_t n = t.numel();
    const int64_t elem = t.element_size();
    for (int64_t off = 0; off < n; off += kMaxCount) {
      const int count = static_cast<int>(std::min(kMaxCount, n - off));
      RDATTN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + off * elem, count, type, MPI_SUM, comm_));
    }
    return Status::Ok();
  }

  Status Broadcast(at::Tensor& t, int root) override {
    if (!t.defined()) return InvalidArgumentError("mpi Broadcast: tensor is undefined");
    if (!t.is_contiguous()) return InvalidArgumentError("mpi Broadcast: tensor is not contiguous");
    if (root < 0 || root >= world_) {
      return InvalidArgumentError("mpi Broadcast: root " + std::to_string(root) + " outside [0, " +
                                  std::to_string(world_) + ")");
    }
    if (!t.is_cpu()) {
      return Staged(t, t.scalar_type(), [this, root](at::Tensor& h) { return Broadcast(h, root); });
    }
    char* data = static_cast<char*>(t.data_ptr());
    const int64_t n = t.numel() * t.element_size();
    for (int64_t off = 0; off < n; off += kMaxCount) {
      const int count = static_cast<int>(std::min(kMaxCount, n - off));
      RDATTN_MPI_CHECK(MPI_Bcast(data + off, count, MPI_BYTE, root, comm_));
    }
    return Status::Ok();
  }

  Status Barrier() override {
    RDATTN_MPI_CHECK(MPI_Barrier(comm_));
    return Status::Ok();
  }

  Status AllReduceSumHost(double* values, int64_t n) override {
    if (n < 0 || n > kMaxCount) return InvalidArgumentError("mpi AllReduceSumHost: bad count");
    if (n == 0) return Status::Ok();
    if (values == nullptr) return InvalidArgumentError("mpi AllReduceSumHost: null values");
    RDATTN_RETURN_IF_ERROR(WaitForPeers());
    RDATTN_MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, values, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, comm_));
    return Status::Ok();
  }

 private:
  // Waits until every rank has reached this point, in an MPI_Ibarrier polled with MPI_Test:
  // a short spin, then sleeps of 20 µs doubling to 200 µs between polls. OpenMPI's blocking
  // collectives busy-poll, and a rank that arrives early (the gradient all-reduce, after the
  // slower rank's backward) then spins on a core that the rank it waits for, or anything else
  // on a shared or oversubscribed machine, could use. The collective that follows starts with
  // every rank present, so its own spinning is the transfer alone. Costs one barrier (a few µs
  // on one host) per collective; off with RDATTN_MPI_WAIT=spin and at world size 1.
  Status WaitForPeers() {
    if (!sleep_while_waiting_ || world_ == 1) return Status::Ok();
    MPI_Request request = MPI_REQUEST_NULL;
    RDATTN_MPI_CHECK(MPI_Ibarrier(comm_, &request));
    constexpr int kSpinPolls = 64;
    std::chrono::microseconds nap(20);
    for (int polls = 0;; ++polls) {
      int done = 0;
      RDATTN_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
      if (done != 0) return Status::Ok();
      if (polls < kSpinPolls) continue;
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(200));
    }
  }

  // Runs `op` on a contiguous host copy of `t` in `dtype`, then copies the result back into `t`.
  template <typename Op>
  Status Staged(at::Tensor& t, at::ScalarType dtype, Op op) {
    try {
      at::Tensor host = t.detach().to(at::kCPU, dtype).contiguous();
      RDATTN_RETURN_IF_ERROR(op(host));
      t.detach().copy_(host);
      return Status::Ok();
    } catch (const std::exception& e) {
      return InternalError("mpi backend: staging a " + std::string(c10::toString(t.scalar_type())) +
                           " tensor through host memory failed: " + What(e));
    }
  }

  MPI_Comm comm_;  // our duplicate of MPI_COMM_WORLD; never MPI_COMM_NULL while alive
  int rank_;
  int world_;
  bool sleep_while_waiting_;  // WaitForPeers before AllReduceSum / AllReduceSumHost
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> MakeMpiCommunicator() {
  RDATTN_RETURN_IF_ERROR(internal::EnsureMpiInitialized());
  MPI_Comm comm = MPI_COMM_NULL;
  RDATTN_RETURN_IF_ERROR(internal::DupWorld(&comm));
  int rank = 0;
  int world = 0;
  if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &world) != MPI_SUCCESS) {
    internal::FreeComm(&comm);
    return InternalError("MPI backend: MPI_Comm_rank/MPI_Comm_size failed");
  }
  const int launched = launch::ReadLaunchEnv().world_size;
  if (world == 1 && launched > 1) {
    // Every process is its own singleton: the launcher's MPI and ours do not talk (e.g. srun
    // without --mpi=pmix). Training would silently run `launched` independent copies.
    internal::FreeComm(&comm);
    return FailedPreconditionError(
        "MPI backend: the launcher started " + std::to_string(launched) +
        " processes but MPI sees a world of 1; launch with this MPI's mpirun, or srun --mpi=pmix");
  }
  return std::unique_ptr<Communicator>(new MpiCommunicator(comm, rank, world));
}

}  // namespace rdattn::comm
