// A job's launcher process (rdattn-train, or mpirun and its ranks) in a session of its own, so
// that stopping a job reaches every rank: OpenMPI puts each local rank in a process group of its
// own, but they all stay in the launcher's session. posix_spawn (safe in a threaded process):
// stdin from /dev/null, stdout and stderr appended to files, default signal dispositions and an
// empty signal mask (the worker blocks SIGTERM in its threads), no inherited descriptors.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "worker/daemon/launch.h"
#include "worker/daemon/outcome.h"

namespace rdattn::worker {

class ChildProcess {
 public:
  struct Options {
    CommandLine command;
    std::string stdout_path;  // appended to; empty: /dev/null
    std::string stderr_path;  // appended to; empty: /dev/null
    // The launcher is mpirun: signals for the ranks go to the other members of the session,
    // not to mpirun itself (OpenMPI's mpirun answers SIGTERM by killing the ranks after a few
    // seconds, which would cut a checkpoint short). mpirun exits when its ranks have.
    bool launcher_is_mpirun = false;
  };

  // Starts the process. NOT_FOUND / PERMISSION_DENIED / INTERNAL name the program and errno.
  static StatusOr<std::unique_ptr<ChildProcess>> Spawn(const Options& options);

  // Kills the group and reaps the launcher if it is still running.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Sends `sig` to the ranks: every process of the session, but under mpirun every one except
  // mpirun. Before mpirun has started any rank, mpirun itself gets the signal, once: signalled
  // again while it aborts, OpenMPI 4's mpirun can crash. No effect once the launcher was
  // reaped. Thread-safe.
  void SignalRanks(int sig);
  // SIGKILL to every process of the session. No effect once the launcher was reaped.
  // Thread-safe.
  void KillAll();

  // Waits up to `timeout` for the launcher to exit. When it has: SIGKILLs whatever is left of
  // its session (strays), reaps it and returns its status (the same status on later calls).
  std::optional<ExitStatus> Wait(std::chrono::milliseconds timeout);

 private:
  ChildProcess(pid_t pid, bool launcher_is_mpirun)
      : pid_(pid), launcher_is_mpirun_(launcher_is_mpirun) {}

  // Signals every process of the session (skipping the launcher when `spare_launcher`).
  // Returns how many were signalled. Requires the launcher not yet reaped.
  int SignalSession(int sig, bool spare_launcher) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const pid_t pid_;  // also the session and process group id
  const bool launcher_is_mpirun_;
  absl::Mutex mu_;
  std::optional<ExitStatus> exit_ ABSL_GUARDED_BY(mu_);   // set once reaped
  bool ranks_seen_ ABSL_GUARDED_BY(mu_) = false;          // mpirun had ranks when signalled
  bool launcher_signalled_ ABSL_GUARDED_BY(mu_) = false;  // mpirun itself got a signal
};

// Pids of the live (not zombie) processes of session `sid` (from /proc), in no particular order.
std::vector<pid_t> SessionMembers(pid_t sid);

}  // namespace rdattn::worker
