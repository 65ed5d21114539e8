// The local (world size 1) communicator, the backend factory, the launcher environment reads,
// and the UNIMPLEMENTED stand-ins for backends this build lacks. No MPI, NCCL or CUDA headers
// here: those live in mpi_communicator.cc and nccl_communicator.cc.
#include "worker/comm/communicator.h"

#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

namespace rdattn::comm {
namespace {

// Parses a non-negative decimal integer; -1 if `text` is null, empty, signed or has junk.
long ParseNonNegative(const char* text) {
  if (text == nullptr || *text == '\0' || *text == '-' || *text == '+') return -1;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v > (1L << 30)) return -1;
  return v;
}

// The first variable in `names` that holds a valid value accepted by `ok`.
template <typename Ok>
long FirstEnv(std::initializer_list<const char*> names, Ok ok) {
  for (const char* name : names) {
    const long v = ParseNonNegative(std::getenv(name));
    if (v >= 0 && ok(v)) return v;
  }
  return -1;
}

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "local"; }

  Status AllReduceSum(at::Tensor& t) override {
    if (!t.defined()) return InvalidArgumentError("local AllReduceSum: tensor is undefined");
    if (!t.is_contiguous())
      return InvalidArgumentError("local AllReduceSum: tensor is not contiguous");
    return Status::Ok();  // the sum over one rank is the tensor itself
  }

  Status Broadcast(at::Tensor& t, int root) override {
    if (!t.defined()) return InvalidArgumentError("local Broadcast: tensor is undefined");
    if (!t.is_contiguous())
      return InvalidArgumentError("local Broadcast: tensor is not contiguous");
    if (root != 0) {
      return InvalidArgumentError("local Broadcast: root " + std::to_string(root) +
                                  " outside [0, 1)");
    }
    return Status::Ok();
  }

  Status Barrier() override { return Status::Ok(); }
};

Status WithField(const Status& s, const std::string& backend) {
  return s.WithPrefix("parallel.backend: \"" + backend + "\"");
}

StatusOr<std::unique_ptr<Communicator>> Mpi(const std::string& requested) {
  if (!MpiBuilt()) {
    return UnimplementedError("parallel.backend: \"" + requested +
                              "\" needs MPI, but this build has no MPI (configure with "
                              "libopenmpi-dev installed and RDATTN_WITH_MPI=ON)");
  }
  StatusOr<std::unique_ptr<Communicator>> c = MakeMpiCommunicator();
  if (!c.ok()) return WithField(c.status(), requested);
  return c;
}

StatusOr<std::unique_ptr<Communicator>> Nccl(const std::string& requested) {
  StatusOr<std::unique_ptr<Communicator>> c = MakeNcclCommunicator(-1);
  if (!c.ok()) return WithField(c.status(), requested);
  return c;
}

}  // namespace

std::unique_ptr<Communicator> MakeLocalCommunicator() {
  return std::make_unique<LocalCommunicator>();
}

bool MpiBuilt() {
#ifdef RDATTN_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool NcclBuilt() {
#ifdef RDATTN_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

int LauncherWorldSize() {
  const long v = FirstEnv({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE"},
                          [](long n) { return n >= 1; });
  return v >= 1 ? static_cast<int>(v) : 1;
}

int LauncherLocalRank() {
  const long v =
      FirstEnv({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"},
               [](long) { return true; });
  return static_cast<int>(v);
}

StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(const std::string& backend, bool cuda) {
  const int launched = LauncherWorldSize();
  if (backend == "local") {
    if (launched > 1) {
      return InvalidArgumentError(
          "parallel.backend: \"local\" runs a single rank, but the launcher started " +
          std::to_string(launched) +
          " (OMPI_COMM_WORLD_SIZE/PMI_SIZE/SLURM_NTASKS/WORLD_SIZE); "
          "use \"mpi\", \"nccl\" or \"auto\"");
    }
    return MakeLocalCommunicator();
  }
  if (backend == "mpi") return Mpi(backend);
  if (backend == "nccl") {
    if (!cuda) {
      return InvalidArgumentError(
          "parallel.backend: \"nccl\" reduces CUDA tensors, but this run is on the CPU; use "
          "\"mpi\" or \"auto\"");
    }
    if (!NcclBuilt()) {
      return UnimplementedError(
          "parallel.backend: \"nccl\" is not available: this build has no NCCL (needs the CUDA "
          "toolkit, NCCL and MPI at configure time)");
    }
    return Nccl(backend);
  }
  if (backend == "auto") {
    if (cuda && NcclBuilt()) return Nccl(backend);
    if (launched > 1 || MpiBuilt()) return Mpi(backend);
    return MakeLocalCommunicator();
  }
  return InvalidArgumentError("parallel.backend: unknown backend \"" + backend +
                              "\" (expected \"auto\", \"local\", \"mpi\" or \"nccl\")");
}

#ifndef RDATTN_HAVE_MPI
StatusOr<std::unique_ptr<Communicator>> MakeMpiCommunicator() {
  return UnimplementedError("MPI backend: this build has no MPI");
}
#endif

#ifndef RDATTN_HAVE_NCCL
StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(int /*device_index*/) {
  return UnimplementedError(
      "NCCL backend: this build has no NCCL (needs the CUDA toolkit, NCCL and MPI at configure "
      "time)");
}
#endif

}  // namespace rdattn::comm
