// Supervisor liveness (docs/operations.md, "Ranks die with their worker"): a worker passes
// its pid, its start time and its host to the ranks it launches in RDATTN_SUPERVISOR_*; a rank
// on that host whose supervisor is gone stops at once, without a checkpoint or an event (its
// lease is as good as lost). Plain C++, Linux /proc.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"

namespace rdattn {

struct Supervisor {
  pid_t pid = 0;
  uint64_t start_ticks = 0;  // field 22 of /proc/<pid>/stat: tells a reused pid apart
  std::string host;          // where the supervisor runs (gethostname)
};

// This process's identity as a supervisor (for the worker to export).
Supervisor SelfAsSupervisor();
// The environment variables that carry a Supervisor (RDATTN_SUPERVISOR_PID, _START, _HOST).
std::vector<std::pair<std::string, std::string>> SupervisorEnvironment(const Supervisor& s);
// From the environment; nullopt when not set, or when the supervisor runs on another host (a
// remote rank of an MPI job cannot see it: mpirun stops those ranks when a local one ends).
// INVALID_ARGUMENT when the variables are malformed.
StatusOr<std::optional<Supervisor>> SupervisorFromEnvironment();
// Whether the process `s` still runs (same pid and start time, not a zombie).
bool SupervisorAlive(const Supervisor& s);
// Start time of `pid` (field 22 of /proc/<pid>/stat), 0 if unknown.
uint64_t ProcessStartTicks(pid_t pid);

// Polls SupervisorAlive every `interval` on its own thread and calls `on_gone` once when the
// supervisor has gone (the trainer's on_gone prints a line and _exit()s).
class SupervisorWatch {
 public:
  SupervisorWatch(const Supervisor& s, int interval_ms, std::function<void()> on_gone);
  ~SupervisorWatch();
  SupervisorWatch(const SupervisorWatch&) = delete;
  SupervisorWatch& operator=(const SupervisorWatch&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace rdattn
