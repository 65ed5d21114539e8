// The launcher environment (worker/launch_env.h): the variables of OpenMPI, MPICH / Intel MPI
// (Hydra), Slurm and torchrun, mixed ones (mpirun inside an allocation, MPICH under srun), bad
// values, and the CUDA device each rank gets.
#include "worker/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace rdattn::launch {
namespace {

using Vars = std::map<std::string, std::string>;

LaunchEnv Read(const Vars& vars) {
  return ReadLaunchEnv([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

struct Case {
  const char* what;
  Vars vars;
  Launcher launcher;
  int world, rank, local_rank, local_size;
};

class LaunchEnvTest : public ::testing::TestWithParam<Case> {};

TEST_P(LaunchEnvTest, ReadsTheLauncher) {
  const Case& c = GetParam();
  const LaunchEnv env = Read(c.vars);
  EXPECT_EQ(env.launcher, c.launcher) << c.what << ": " << LauncherName(env.launcher);
  EXPECT_EQ(env.world_size, c.world) << c.what;
  EXPECT_EQ(env.rank, c.rank) << c.what;
  EXPECT_EQ(env.local_rank, c.local_rank) << c.what;
  EXPECT_EQ(env.local_size, c.local_size) << c.what;
}

INSTANTIATE_TEST_SUITE_P(
    Launchers, LaunchEnvTest,
    ::testing::Values(
        Case{"nothing", {}, Launcher::kNone, 1, 0, -1, -1},
        Case{"openmpi mpirun -n 8 on 2 nodes",
             {{"OMPI_COMM_WORLD_SIZE", "8"},
              {"OMPI_COMM_WORLD_RANK", "5"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}},
             Launcher::kOpenMpi,
             8,
             5,
             1,
             4},
        Case{"mpich / intel mpi hydra",
             {{"PMI_SIZE", "4"},
              {"PMI_RANK", "3"},
              {"MPI_LOCALRANKID", "1"},
              {"MPI_LOCALNRANKS", "2"}},
             Launcher::kMpich,
             4,
             3,
             1,
             2},
        Case{"slurm srun -N 2 --ntasks-per-node 4",
             {{"SLURM_NTASKS", "8"},
              {"SLURM_PROCID", "6"},
              {"SLURM_LOCALID", "2"},
              {"SLURM_TASKS_PER_NODE", "4(x2)"}},
             Launcher::kSlurm,
             8,
             6,
             2,
             4},
        Case{"slurm with uneven nodes: no local size",
             {{"SLURM_NTASKS", "7"},
              {"SLURM_PROCID", "6"},
              {"SLURM_LOCALID", "2"},
              {"SLURM_TASKS_PER_NODE", "4,3"}},
             Launcher::kSlurm,
             7,
             6,
             2,
             -1},
        Case{"torchrun --nproc-per-node 4",
             {{"WORLD_SIZE", "4"}, {"RANK", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "4"}},
             Launcher::kTorchrun,
             4,
             2,
             2,
             4},
        // mpirun inside an sbatch allocation: OpenMPI's own variables win over the allocation's.
        Case{"openmpi inside a slurm allocation",
             {{"SLURM_NTASKS", "16"},
              {"SLURM_PROCID", "0"},
              {"SLURM_LOCALID", "0"},
              {"OMPI_COMM_WORLD_SIZE", "2"},
              {"OMPI_COMM_WORLD_RANK", "1"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}},
             Launcher::kOpenMpi,
             2,
             1,
             1,
             -1},
        // MPICH under srun --mpi=pmi2: PMI names the world but not the local rank; Slurm's
        // variables describe the same world and give it.
        Case{"mpich under srun",
             {{"PMI_SIZE", "8"},
              {"PMI_RANK", "5"},
              {"SLURM_NTASKS", "8"},
              {"SLURM_PROCID", "5"},
              {"SLURM_LOCALID", "1"},
              {"SLURM_TASKS_PER_NODE", "4(x2)"}},
             Launcher::kMpich,
             8,
             5,
             1,
             4},
        // ...but never from a launcher that disagrees on the world.
        Case{"a local rank of another world is not taken",
             {{"OMPI_COMM_WORLD_SIZE", "3"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "2"}},
             Launcher::kOpenMpi,
             3,
             0,
             -1,
             -1},
        Case{"junk values are ignored",
             {{"OMPI_COMM_WORLD_SIZE", "junk"},
              {"PMI_SIZE", "-2"},
              {"SLURM_NTASKS", "+4"},
              {"WORLD_SIZE", "2"},
              {"RANK", "9"},
              {"LOCAL_RANK", " 1"}},
             Launcher::kTorchrun,
             2,
             0,
             -1,
             -1},
        Case{"a world size of 0 is no launcher",
             {{"WORLD_SIZE", "0"}},
             Launcher::kNone,
             1,
             0,
             -1,
             -1},
        Case{"a local rank past the local size drops the size",
             {{"WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}},
             Launcher::kTorchrun,
             4,
             0,
             3,
             -1}));

TEST(CudaDeviceForRankTest, OneRuleForEveryLauncher) {
  LaunchEnv env;
  EXPECT_EQ(CudaDeviceForRank(env, 0), -1);  // no device
  EXPECT_EQ(CudaDeviceForRank(env, 1), 0);   // one per rank (CUDA_VISIBLE_DEVICES per task)
  EXPECT_EQ(CudaDeviceForRank(env, 8, /*fallback=*/3), 3);  // no launcher: MPI's node rank
  env.local_rank = 5;
  EXPECT_EQ(CudaDeviceForRank(env, 8, 3), 5);
  EXPECT_EQ(CudaDeviceForRank(env, 4, 3), 1);  // more ranks than devices: wrap
  EXPECT_EQ(CudaDeviceForRank(env, 1, 3), 0);
  // The same variables give the same device whether the trainer or NCCL asks.
  const LaunchEnv mpich = Read({{"PMI_SIZE", "8"}, {"MPI_LOCALRANKID", "3"}});
  const LaunchEnv slurm = Read({{"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "3"}});
  const LaunchEnv torchrun = Read({{"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"}});
  const LaunchEnv openmpi =
      Read({{"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}});
  for (const LaunchEnv& e : {mpich, slurm, torchrun, openmpi}) {
    EXPECT_EQ(CudaDeviceForRank(e, 8, 0), 3) << LauncherName(e.launcher);
  }
}

}  // namespace
}  // namespace rdattn::launch
