// rdattn-worker: one per node. Registers its slots with the coordinator, leases jobs, launches
// and supervises their rdattn-train ranks (a child process, or mpirun), relays their metric
// events, heartbeats, and reports how each attempt ended. Links gRPC, never LibTorch: the
// trainer is a separate process. docs/worker.md has the whole story.
//
// Flags are spelled --flag-name (as documented; --flag_name is still accepted); --help lists
// them. A usage error exits 2 with "rdattn-worker: <what, naming the flag> (see --help)".
#include <dirent.h>
#include <prometheus/exposer.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/cli.h"
#include "common/connection_flags.h"
#include "common/log.h"
#include "common/strings.h"
#include "worker/daemon/coordinator_client.h"
#include "worker/daemon/job_paths.h"
#include "worker/daemon/launch.h"
#include "worker/daemon/metrics.h"
#include "worker/daemon/worker.h"

#ifndef RDATTN_VERSION
#define RDATTN_VERSION "dev"
#endif

namespace {

namespace fs = std::filesystem;

constexpr int kExitUsage = 2;

// The command line, with its defaults.
struct Flags {
  rdattn::cli::ConnectionFlags connection;
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
  std::string metrics_retention = "300";
  bool verbose = false;
};

void AddFlags(CLI::App& app, Flags& f) {
  rdattn::cli::AddConnectionFlags(&app, &f.connection, {});
  app.add_option(
      "--slots", f.slots,
      "ranks this worker runs at once: GPUs on a GPU worker, rank slots on a CPU worker");
  app.add_option("--kind", f.kind, "hardware kind: cpu or gpu");
  app.add_option("--workdir", f.workdir,
                 "working directory (required): <workdir>/<job>/attempt-<n>/ holds job.json, "
                 "events.jsonl, stderr.log; <workdir>/worker_id keeps the worker's id");
  app.add_option("--checkpoint-root", f.checkpoint_root,
                 "checkpoint root (default <workdir>/checkpoints): jobs without checkpoint.dir "
                 "get <root>/<job>; share it between nodes so a requeued job resumes anywhere");
  app.add_option("--train-binary", f.train_binary,
                 "rdattn-train to launch (default: next to rdattn-worker, ../trainer/ in a build "
                 "tree, else PATH)");
  app.add_option("--mpirun", f.mpirun, "mpirun for jobs of world size > 1");
  app.add_option("--hostname", f.hostname, "hostname to register (default: gethostname)");
  app.add_option("--worker-id", f.worker_id,
                 "worker id to register with (default: <workdir>/worker_id, else assigned)");
  app.add_option("--threads-per-rank", f.threads_per_rank,
                 "threads per rank when a job does not set them (0: max(1, cores / slots))");
  app.add_flag("--once", f.once,
               "lease one job and exit when it is over (tests; default off, --once=false too)");
  app.add_option("--exit-when-idle", f.exit_when_idle,
                 "exit after this many seconds without a job (0: never)");
  app.add_option("--lease-wait", f.lease_wait, "seconds a LeaseJob long poll may wait");
  app.add_option("--stop-grace", f.stop_grace,
                 "seconds between SIGTERM and SIGKILL when the worker shuts down");
  app.add_option("--cancel-grace", f.cancel_grace,
                 "seconds between SIGTERM and SIGKILL for a cancel order without a grace");
  app.add_option("--unreachable-grace", f.unreachable_grace,
                 "seconds a job's ranks keep running while the coordinator cannot be reached "
                 "(then they checkpoint and stop; > 0)");
  app.add_option("--event-poll", f.event_poll, "seconds between reads of a job's events.jsonl");
  app.add_option("--max-start-failures", f.max_start_failures,
                 "after this many attempts in a row that failed at their start (job folder not "
                 "writable, ENOSPC/EIO, trainer exit 74) the worker stops leasing until a disk "
                 "probe passes (>= 0; 0: never)");
  app.add_option("--health-probe-seconds", f.health_probe_min,
                 "first wait before an unhealthy worker probes its disks; doubles after each "
                 "failed probe (> 0)");
  app.add_option("--health-probe-max-seconds", f.health_probe_max,
                 "longest wait between disk probes (>= --health-probe-seconds)");
  app.add_option("--stall-floor-seconds", f.stall_floor,
                 "progress watchdog: a job with no event for max(this, --stall-factor x its "
                 "slowest recent step) seconds is killed and retried as 'stalled' (0: no "
                 "watchdog). Must exceed the longest evaluation or checkpoint write");
  app.add_option("--stall-factor", f.stall_factor,
                 "progress watchdog: the bound's multiple of the job's slowest recent step "
                 "interval and of its slowest evaluation or checkpoint (0: the floor alone)");
  app.add_option("--stall-startup-seconds", f.stall_startup,
                 "progress watchdog: the least bound before a job's first step (start, data "
                 "checks, checkpoint load, the first step) and before an evaluation, checkpoint "
                 "or test evaluation the attempt has not timed yet");
  app.add_option("--metrics-listen", f.metrics_listen,
                 "serve Prometheus metrics at http://HOST:PORT/metrics (HOST an IP address; port "
                 "0 picks a free one; empty: off). docs/metrics.md");
  app.add_option("--metrics-retention", f.metrics_retention,
                 "seconds a finished job's metric series are still served before they are "
                 "removed (>= 0)");
  app.add_flag("--verbose", f.verbose, "debug logging (default off)");
}

std::chrono::milliseconds Seconds(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// "model name" of /proc/cpuinfo, or the first GPU's "Model:" from the NVIDIA driver.
std::string DeviceName(bool gpu) {
  auto field = [](const std::string& path, const std::string& key) -> std::string {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.compare(0, key.size(), key) != 0) continue;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string v = line.substr(colon + 1);
      return rdattn::strings::Trim(v);
    }
    return "";
  };
  if (gpu) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
      std::string name = field((e.path() / "information").string(), "Model");
      if (!name.empty()) return name;
    }
    return "";
  }
  return field("/proc/cpuinfo", "model name");
}

// Default rdattn-train: beside this binary, then the build tree's ../trainer/, then PATH.
rdattn::StatusOr<std::string> DefaultTrainBinary() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& candidate :
         {self.parent_path() / "rdattn-train",
          self.parent_path().parent_path() / "trainer" / "rdattn-train"}) {
      auto found = rdattn::worker::FindExecutable(candidate.string());
      if (found.ok()) return found;
    }
  }
  return rdattn::worker::FindExecutable("rdattn-train");
}

// "HOST:PORT" with a non-empty HOST and a port 0..65535 (IPv6 hosts in brackets: [::1]:9402).
bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  const std::string port_text = address.substr(colon + 1);
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *port = std::stoi(port_text);
  *host = address.substr(0, colon);
  return *port <= 65535;
}

}  // namespace

int main(int argc, char** argv) {
  rdattn::log::SetComponent("rdattn-worker");
  // Block the shutdown signals in every thread (gRPC's too, created below); one thread takes
  // them with sigwait. Children get an empty mask and default dispositions (process.cc).
  sigset_t shutdown_signals;
  sigemptyset(&shutdown_signals);
  sigaddset(&shutdown_signals, SIGTERM);
  sigaddset(&shutdown_signals, SIGINT);
  sigaddset(&shutdown_signals, SIGUSR2);  // internal: ends the signal thread
  pthread_sigmask(SIG_BLOCK, &shutdown_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  CLI::App app(
      "rdattn-worker --coordinator HOST:PORT --workdir DIR [--slots N] [--kind cpu|gpu] ...\n"
      "Leases rdattn jobs from the coordinator and runs their rdattn-train ranks "
      "(docs/worker.md).",
      "rdattn-worker");
  rdattn::cli::Setup(app);
  Flags flags;
  AddFlags(app, flags);
  if (const int code = rdattn::cli::Parse(app, argc, argv, kExitUsage); code >= 0) return code;
  auto usage = [&app](const std::string& message) {
    return rdattn::cli::Usage(app, message, kExitUsage);
  };
  if (flags.verbose) rdattn::log::SetMinLevel(rdattn::log::Level::kDebug);

  rdattn::worker::WorkerOptions options;
  const std::string coordinator = flags.connection.coordinator;
  if (flags.workdir.empty()) return usage("--workdir is required");
  options.slots = flags.slots;
  if (options.slots < 1) return usage("--slots must be at least 1");
  const std::string kind = flags.kind;
  if (kind == "cpu") {
    options.kind = rdattn::v1::HARDWARE_KIND_CPU;
  } else if (kind == "gpu") {
    options.kind = rdattn::v1::HARDWARE_KIND_GPU;
  } else {
    return usage("--kind must be cpu or gpu, not '" + kind + "'");
  }
  std::error_code ec;
  fs::create_directories(flags.workdir, ec);
  if (ec) return usage("--workdir " + flags.workdir + ": " + ec.message());
  options.workdir = fs::absolute(flags.workdir).lexically_normal().string();
  options.checkpoint_root = flags.checkpoint_root.empty()
                                ? rdattn::worker::JoinPath(options.workdir, "checkpoints")
                                : fs::absolute(flags.checkpoint_root).lexically_normal().string();
  const std::string train_flag = flags.train_binary;
  auto train =
      train_flag.empty() ? DefaultTrainBinary() : rdattn::worker::FindExecutable(train_flag);
  if (!train.ok()) return usage("--train-binary: " + train.status().message());
  options.train_binary = fs::absolute(*train).lexically_normal().string();
  options.mpirun = flags.mpirun;
  if (options.slots > 1 && !rdattn::worker::FindExecutable(options.mpirun).ok()) {
    rdattn::log::Warning("mpirun '" + options.mpirun +
                         "' not found: jobs of world size > 1 will fail");
  }
  const int threads = flags.threads_per_rank;
  if (threads < 0) return usage("--threads-per-rank must not be negative");
  options.threads_per_rank = threads > 0 ? threads : std::max(1, UsableCores() / options.slots);
  options.hostname = flags.hostname;
  if (options.hostname.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    options.hostname = host;
  }
  options.worker_id = flags.worker_id;
  options.device_name = DeviceName(options.kind == rdattn::v1::HARDWARE_KIND_GPU);
  options.version = RDATTN_VERSION;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && *visible) {
    std::string list = visible;
    for (size_t start = 0; start <= list.size();) {
      const size_t comma = std::min(list.find(',', start), list.size());
      if (comma > start) options.gpu_ids.push_back(list.substr(start, comma - start));
      start = comma + 1;
    }
  }
  options.once = flags.once;
  if (flags.exit_when_idle > 0) options.exit_when_idle = Seconds(flags.exit_when_idle);
  options.lease_wait = Seconds(std::max(0.1, flags.lease_wait));
  options.stop_grace = Seconds(std::max(0.0, flags.stop_grace));
  options.cancel_grace = Seconds(std::max(0.0, flags.cancel_grace));
  if (flags.unreachable_grace <= 0) {
    return usage("--unreachable-grace: must be > 0 seconds");
  }
  options.unreachable_grace = Seconds(flags.unreachable_grace);
  options.event_poll_interval = Seconds(std::max(0.01, flags.event_poll));
  if (flags.max_start_failures < 0) return usage("--max-start-failures: must be >= 0");
  if (!(std::isfinite(flags.health_probe_min) && flags.health_probe_min > 0))
    return usage("--health-probe-seconds: must be > 0");
  if (!(std::isfinite(flags.health_probe_max) && flags.health_probe_max >= flags.health_probe_min))
    return usage("--health-probe-max-seconds: must be >= --health-probe-seconds");
  options.max_start_failures = flags.max_start_failures;
  options.health_probe_min = Seconds(flags.health_probe_min);
  options.health_probe_max = Seconds(flags.health_probe_max);
  for (const auto& [name, value] : {std::pair{"--stall-floor-seconds", flags.stall_floor},
                                    std::pair{"--stall-factor", flags.stall_factor},
                                    std::pair{"--stall-startup-seconds", flags.stall_startup}}) {
    if (!std::isfinite(value) || value < 0) {
      return usage(std::string(name) + ": must be a number >= 0, not " + std::to_string(value));
    }
  }
  options.watchdog.floor = Seconds(flags.stall_floor);
  options.watchdog.factor = flags.stall_factor;
  options.watchdog.startup = Seconds(flags.stall_startup);

  const std::string metrics_listen = flags.metrics_listen;
  std::string metrics_host;
  int metrics_port = 0;
  if (!metrics_listen.empty() && !SplitHostPort(metrics_listen, &metrics_host, &metrics_port)) {
    return usage("--metrics-listen must be HOST:PORT (port 0-65535), not '" + metrics_listen + "'");
  }
  double retention_s = 0;
  const std::string retention_flag = flags.metrics_retention;
  if (!absl::SimpleAtod(retention_flag, &retention_s) || !std::isfinite(retention_s) ||
      retention_s < 0) {
    return usage("--metrics-retention must be a number of seconds >= 0, not '" + retention_flag +
                 "'");
  }

  rdattn::worker::CoordinatorClientOptions client;
  rdattn::StatusOr<rdattn::cli::Connection> connection =
      rdattn::cli::ResolveConnection(flags.connection);
  if (!connection.ok()) return usage(connection.status().message());
  client.address = connection->address;
  client.token = connection->token;
  client.ca_cert_pem = connection->ca_cert_pem;

  rdattn::log::Info("rdattn-worker " + options.version + ": coordinator " + coordinator + ", " +
                    std::to_string(options.slots) + " " + kind + " slot(s), " +
                    std::to_string(options.threads_per_rank) + " thread(s) per rank, workdir " +
                    options.workdir + ", checkpoints " + options.checkpoint_root + ", trainer " +
                    options.train_binary);
  if (options.watchdog.floor.count() > 0) {
    using rdattn::strings::Fixed;
    rdattn::log::Info("progress watchdog: a job silent for max(" + Fixed(flags.stall_floor, 1) +
                      " s, " + Fixed(flags.stall_factor, 1) +
                      " x its slowest recent step) is stopped (at least " +
                      Fixed(flags.stall_startup, 1) + " s before its first step)");
  } else {
    rdattn::log::Info("progress watchdog: off (--stall-floor-seconds 0)");
  }

  // The metrics outlive the worker (declared first); the exposer serves them until the end.
  std::unique_ptr<rdattn::worker::WorkerMetrics> metrics;
  std::unique_ptr<prometheus::Exposer> exposer;
  if (!metrics_listen.empty()) {
    metrics = std::make_unique<rdattn::worker::WorkerMetrics>(Seconds(retention_s));
    try {
      exposer = std::make_unique<prometheus::Exposer>(metrics_listen);
    } catch (const std::exception& e) {
      rdattn::log::Error("--metrics-listen " + metrics_listen +
                         ": cannot serve metrics there (address in use or not " +
                         "local?): " + e.what());
      return kExitUsage;
    }
    exposer->RegisterCollectable(metrics->registry());
    const std::vector<int> ports = exposer->GetListeningPorts();
    if (!ports.empty()) metrics_port = ports.front();
    rdattn::log::Info("metrics on http://" + metrics_host + ":" + std::to_string(metrics_port) +
                      "/metrics");
    options.metrics = metrics.get();
  }
  rdattn::worker::Worker worker(std::move(options),
                                std::make_unique<rdattn::worker::CoordinatorClient>(client));

  std::thread signal_thread([&worker, shutdown_signals] {
    while (true) {
      int sig = 0;
      if (sigwait(&shutdown_signals, &sig) != 0) continue;
      if (sig == SIGUSR2) return;
      rdattn::log::Info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT"));
      worker.RequestShutdown();
    }
  });

  const rdattn::Status status = worker.Run();
  pthread_kill(signal_thread.native_handle(), SIGUSR2);
  signal_thread.join();
  if (!status.ok()) {
    rdattn::log::Error(status.ToString());
    const auto code = status.code();
    return code == rdattn::StatusCode::kInvalidArgument ||
                   code == rdattn::StatusCode::kUnauthenticated ||
                   code == rdattn::StatusCode::kPermissionDenied
               ? kExitUsage
               : 1;
  }
  return 0;
}
