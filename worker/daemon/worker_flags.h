// rdattn-worker's command line: the flags with their defaults and checks (CLI11 validators, one
// check of two flags after parse), and the WorkerOptions they make. Only worker_main.cc uses it.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "common/connection_flags.h"
#include "common/status.h"
#include "worker/daemon/worker.h"

namespace rdattn::worker {

// rdattn-worker's command line, with its defaults (--help lists each flag).
struct WorkerFlags {
  cli::ConnectionFlags connection;
  int slots = 1;
  std::string kind = "cpu";
  std::string workdir;
  std::string checkpoint_root;
  std::string train_binary;
  std::string mpirun = "mpirun";
  std::string hostname;
  std::string worker_id;
  int threads_per_rank = 0;
  bool once = false;
  double exit_when_idle = 0;
  double lease_wait = 20;
  double stop_grace = 30;
  double cancel_grace = 10;
  double unreachable_grace = 1800;
  double event_poll = 0.2;
  int max_start_failures = 3;
  double health_probe_min = 1;
  double health_probe_max = 60;
  double stall_floor = 600;
  double stall_factor = 20;
  double stall_startup = 1800;
  std::string metrics_listen;
  double metrics_retention = 300;
  bool verbose = false;
};

// Adds the flags to `app`, stored into `f` (which must outlive the parse). Every check of one flag
// is its validator; --health-probe-max-seconds >= --health-probe-seconds is checked after parse.
void AddWorkerFlags(CLI::App& app, WorkerFlags& f);

// The options of a worker from its parsed flags: creates the workdir, finds rdattn-train and
// mpirun, reads the machine (usable cores, hostname, device name, $CUDA_VISIBLE_DEVICES).
// INVALID_ARGUMENT / NOT_FOUND name the flag whose folder or program is not usable.
StatusOr<WorkerOptions> MakeWorkerOptions(const WorkerFlags& flags, const std::string& version);

// "HOST:PORT" with a non-empty HOST and a port 0..65535 (IPv6 hosts in brackets: [::1]:9402).
bool SplitHostPort(const std::string& address, std::string* host, int* port);

// Seconds as milliseconds (truncated).
std::chrono::milliseconds Seconds(double s);

}  // namespace rdattn::worker
