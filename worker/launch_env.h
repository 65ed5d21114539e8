// The launcher's environment, read once: which launcher started this process, the world size,
// this rank, its rank within the node and the node's rank count, and from them the CUDA device
// of the rank. The communicator (world size, NCCL device) and the trainer (model device) both
// use it, so the model and NCCL always sit on the same device. Plain C++ (no LibTorch, no MPI).
//
// Launchers, in the order they are recognised (the first whose world size is set and valid):
//   OpenMPI (mpirun, or srun with PMIx):  OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_RANK,LOCAL_SIZE}
//   MPICH / Intel MPI (Hydra, PMI):       PMI_SIZE, PMI_RANK, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   Slurm (srun):                         SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID,
//                                         SLURM_TASKS_PER_NODE (this node's count, when uniform)
//   torchrun:                             WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE
// A launcher that names the world but not the local rank (MPICH under srun's PMI2) takes it from
// another launcher's variables of the same world size (Slurm's), never from one that disagrees.
#pragma once

#include <functional>
#include <string_view>

namespace rdattn::launch {

enum class Launcher { kNone, kOpenMpi, kMpich, kSlurm, kTorchrun };
std::string_view LauncherName(
    Launcher launcher);  // "none", "openmpi", "mpich", "slurm", "torchrun"

struct LaunchEnv {
  Launcher launcher = Launcher::kNone;
  int world_size = 1;   // 1 without a launcher
  int rank = 0;         // 0 without a launcher or when it does not say
  int local_rank = -1;  // -1 when no launcher says
  int local_size = -1;  // -1 when no launcher says
};

// Looks a variable up; null when unset. The default reads the process environment.
using GetEnvFn = std::function<const char*(const char*)>;
LaunchEnv ReadLaunchEnv();
LaunchEnv ReadLaunchEnv(const GetEnvFn& getenv);

// The CUDA device of a rank that sees `visible` devices: -1 for none; 0 for one (one device per
// rank, e.g. CUDA_VISIBLE_DEVICES set per task by Slurm's GRES); else the local rank modulo
// `visible`, or, when no launcher says the local rank, `fallback_local_rank` (e.g. the rank
// within the node from MPI) modulo `visible`.
int CudaDeviceForRank(const LaunchEnv& env, int visible, int fallback_local_rank = 0);

}  // namespace rdattn::launch
