// How rdattn-worker starts a job's ranks: the command line and the environment, as data. No
// processes are started here (process.h does that), so the rules are unit-testable.
//
//   world size 1:  rdattn-train train --job J --events E --attempt N
//   world size W:  mpirun -np W --oversubscribe --bind-to none -x OMP_NUM_THREADS
//                         rdattn-train train --job J --events E --attempt N
// Both with OMP_NUM_THREADS = threads per rank (and MKL_NUM_THREADS the same), plus
// OMPI_ALLOW_RUN_AS_ROOT{,_CONFIRM}=1 under mpirun when the worker runs as root, plus
// CUDA_VISIBLE_DEVICES = the job's GPUs on a GPU worker, plus RDATTN_SUPERVISOR_{PID,START,HOST}
// naming the worker (forwarded with -x under mpirun).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/supervisor.h"

namespace rdattn::worker {

struct LaunchSpec {
  std::string train_binary;  // path of rdattn-train (resolved)
  std::string mpirun;        // path of mpirun (resolved; used when world_size > 1)
  int world_size = 1;        // ranks
  int threads_per_rank = 1;  // intra-op threads per rank (OMP_NUM_THREADS)
  std::string job_json;      // --job
  std::string events;        // --events
  int attempt = 0;           // --attempt (1-based; 0 omits the flag)
  bool run_as_root = false;  // the worker's effective uid is 0 (OpenMPI refuses without a waiver)
  // The job's GPUs as CUDA_VISIBLE_DEVICES (e.g. "2,3"); empty: leave the variable alone.
  std::string cuda_visible_devices;
  // The worker itself, passed as RDATTN_SUPERVISOR_* (and -x under mpirun): a rank whose
  // worker is gone stops at once (common/supervisor.h). Unset: the variables are not set.
  std::optional<Supervisor> supervisor;
};

struct CommandLine {
  std::vector<std::string> argv;  // argv[0] is the program path
  // Variables set (or replaced) on top of the worker's own environment, in this order.
  std::vector<std::pair<std::string, std::string>> env;
};

CommandLine BuildCommandLine(const LaunchSpec& spec);

// "A=1 B=2 prog arg ..." for logs; arguments with spaces or quotes are single-quoted.
std::string FormatCommandLine(const CommandLine& cmd);

// The worker's environment (`environ`) with cmd.env applied: "NAME=value" strings.
std::vector<std::string> MergedEnvironment(const CommandLine& cmd);

// A program path: one containing '/' must be an executable file; a bare name is searched on
// PATH. NOT_FOUND names what was looked for.
StatusOr<std::string> FindExecutable(std::string_view name_or_path);

}  // namespace rdattn::worker
