// The local (world size 1) communicator, the backend factory (the launcher's world size from
// worker/launch_env.h), and the UNIMPLEMENTED stand-ins for backends this build lacks. No MPI, NCCL
// or CUDA headers here: those live in mpi_communicator.cc and nccl_communicator.cc.
#include "worker/comm/communicator.h"

#include <cstdint>
#include <string>
#include <utility>

#include "worker/launch_env.h"

namespace rdattn::comm {
namespace {

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

Status Communicator::AllReduceSumHost(double* values, int64_t n) {
  if (n < 0) return InvalidArgumentError("AllReduceSumHost: negative count");
  if (n > 0 && values == nullptr) return InvalidArgumentError("AllReduceSumHost: null values");
  if (world_size() == 1) return Status::Ok();
  return UnimplementedError(backend() + " AllReduceSumHost: not provided by this backend");
}

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

StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(Backend backend, Device tensors) {
  if (tensors == Device::kAuto) {
    return InvalidArgumentError(
        "parallel.device: resolve \"auto\" to cpu or cuda before choosing a backend");
  }
  const bool cuda = tensors == Device::kCuda;
  const std::string name(BackendName(backend));
  const int launched = launch::ReadLaunchEnv().world_size;
  switch (backend) {
    case Backend::kLocal:
      if (launched > 1) {
        return InvalidArgumentError(
            "parallel.backend: \"local\" runs a single rank, but the launcher started " +
            std::to_string(launched) +
            " (OMPI_COMM_WORLD_SIZE/PMI_SIZE/SLURM_NTASKS/WORLD_SIZE); "
            "use \"mpi\", \"nccl\" or \"auto\"");
      }
      return MakeLocalCommunicator();
    case Backend::kMpi:
      return Mpi(name);
    case Backend::kNccl:
      if (!cuda) {
        return InvalidArgumentError(
            "parallel.backend: \"nccl\" reduces CUDA tensors, but this run is on the CPU; use "
            "\"mpi\" or \"auto\"");
      }
      if (!NcclBuilt()) {
        return UnimplementedError(
            "parallel.backend: \"nccl\" is not available: this build has no NCCL (needs the "
            "CUDA toolkit, NCCL and MPI at configure time)");
      }
      return Nccl(name);
    case Backend::kAuto:
      if (cuda && NcclBuilt()) return Nccl(name);
      if (launched > 1 || MpiBuilt()) return Mpi(name);
      return MakeLocalCommunicator();
  }
  return InvalidArgumentError("parallel.backend: unknown backend " +
                              std::to_string(static_cast<int>(backend)));
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
