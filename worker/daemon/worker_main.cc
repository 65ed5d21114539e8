// rdattn-worker: one per node. Registers its slots with the coordinator, leases jobs, launches
// and supervises their rdattn-train ranks (a child process, or mpirun), relays their metric
// events, heartbeats, and reports how each attempt ended. Links gRPC, never LibTorch: the
// trainer is a separate process. docs/worker.md has the whole story.
//
// Flags are spelled --flag-name (as documented; --flag_name is still accepted); --help lists
// them. A usage error exits 2 with "rdattn-worker: <what, naming the flag> (see --help)".
#include <prometheus/exposer.h>
#include <signal.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/cli.h"
#include "common/connection_flags.h"
#include "common/log.h"
#include "common/strings.h"
#include "worker/daemon/coordinator_client.h"
#include "worker/daemon/metrics.h"
#include "worker/daemon/worker.h"
#include "worker/daemon/worker_flags.h"

#ifndef RDATTN_VERSION
#define RDATTN_VERSION "dev"
#endif

namespace {

using namespace rdattn;          // NOLINT: a binary's main file
using namespace rdattn::worker;  // NOLINT

constexpr int kExitUsage = 2;

// The metrics of --metrics-listen (none when it is empty) and their HTTP exposer.
struct MetricsEndpoint {
  std::unique_ptr<WorkerMetrics> metrics;
  std::unique_ptr<prometheus::Exposer> exposer;
};

// Serves the worker's metrics at --metrics-listen; false (logged, naming the flag) when the
// address cannot be bound.
bool StartMetrics(const WorkerFlags& flags, MetricsEndpoint* endpoint) {
  if (flags.metrics_listen.empty()) return true;
  endpoint->metrics = std::make_unique<WorkerMetrics>(Seconds(flags.metrics_retention));
  try {
    endpoint->exposer = std::make_unique<prometheus::Exposer>(flags.metrics_listen);
  } catch (const std::exception& e) {
    log::Error("--metrics-listen " + flags.metrics_listen +
               ": cannot serve metrics there (address in use or not " + "local?): " + e.what());
    return false;
  }
  endpoint->exposer->RegisterCollectable(endpoint->metrics->registry());
  std::string host;
  int port = 0;
  SplitHostPort(flags.metrics_listen, &host, &port);  // checked by its validator
  const std::vector<int> ports = endpoint->exposer->GetListeningPorts();
  if (!ports.empty()) port = ports.front();
  log::Info("metrics on http://" + host + ":" + std::to_string(port) + "/metrics");
  return true;
}

void LogStartup(const WorkerFlags& flags, const WorkerOptions& options) {
  log::Info("rdattn-worker " + options.version + ": coordinator " + flags.connection.coordinator +
            ", " + std::to_string(options.slots) + " " + flags.kind + " slot(s), " +
            std::to_string(options.threads_per_rank) + " thread(s) per rank, workdir " +
            options.workdir + ", checkpoints " + options.checkpoint_root + ", trainer " +
            options.train_binary);
  if (options.watchdog.floor.count() > 0) {
    using strings::Fixed;
    log::Info("progress watchdog: a job silent for max(" + Fixed(flags.stall_floor, 1) + " s, " +
              Fixed(flags.stall_factor, 1) + " x its slowest recent step) is stopped (at least " +
              Fixed(flags.stall_startup, 1) + " s before its first step)");
  } else {
    log::Info("progress watchdog: off (--stall-floor-seconds 0)");
  }
}

// The exit code of a worker that stopped with `status`: 2 when it was refused for its setup
// (bad arguments, a wrong token), else 1.
int ExitCode(const Status& status) {
  if (status.ok()) return 0;
  log::Error(status.ToString());
  const StatusCode code = status.code();
  return code == StatusCode::kInvalidArgument || code == StatusCode::kUnauthenticated ||
                 code == StatusCode::kPermissionDenied
             ? kExitUsage
             : 1;
}

}  // namespace

int main(int argc, char** argv) {
  log::SetComponent("rdattn-worker");
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
  cli::Setup(app);
  WorkerFlags flags;
  AddWorkerFlags(app, flags);
  if (const int code = cli::Parse(app, argc, argv, kExitUsage); code >= 0) return code;
  if (flags.verbose) log::SetMinLevel(log::Level::kDebug);
  StatusOr<WorkerOptions> options = MakeWorkerOptions(flags, RDATTN_VERSION);
  if (!options.ok()) return cli::Usage(app, options.status().message(), kExitUsage);
  StatusOr<cli::Connection> connection = cli::ResolveConnection(flags.connection);
  if (!connection.ok()) return cli::Usage(app, connection.status().message(), kExitUsage);
  CoordinatorClientOptions client;
  client.address = connection->address;
  client.token = connection->token;
  client.ca_cert_pem = connection->ca_cert_pem;
  LogStartup(flags, *options);

  // The metrics outlive the worker (declared first); the exposer serves them until the end.
  MetricsEndpoint metrics;
  if (!StartMetrics(flags, &metrics)) return kExitUsage;
  options->metrics = metrics.metrics.get();
  Worker worker(std::move(*options), std::make_unique<CoordinatorClient>(client));

  std::thread signal_thread([&worker, shutdown_signals] {
    while (true) {
      int sig = 0;
      if (sigwait(&shutdown_signals, &sig) != 0) continue;
      if (sig == SIGUSR2) return;
      log::Info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT"));
      worker.RequestShutdown();
    }
  });
  const Status status = worker.Run();
  pthread_kill(signal_thread.native_handle(), SIGUSR2);
  signal_thread.join();
  return ExitCode(status);
}
