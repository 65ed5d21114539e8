// rdattn-coordinator: opens the SQLite store, serves SweepService, WorkerService and
// grpc.health.v1, expires leases, and shuts down gracefully on SIGTERM/SIGINT. The first line on
// stdout is "listening on HOST:PORT" (tests read the OS-chosen port from it); logs go to stderr.
// With --metrics-listen it serves Prometheus metrics at /metrics (docs/metrics.md) and logs one
// line "rdattn-coordinator: metrics on http://HOST:PORT/metrics" with the bound port.
// docs/coordinator.md lists the flags (--help too). Flags are spelled --flag-name (as documented;
// --flag_name is still accepted). A usage error exits 1, like every other startup failure.
#include <absl/synchronization/mutex.h>
#include <absl/time/clock.h>
#include <absl/time/time.h>
#include <grpcpp/security/server_credentials.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "common/cli.h"
#include "common/file_util.h"
#include "common/log.h"
#include "coordinator/auth.h"
#include "coordinator/clock.h"
#include "coordinator/core.h"
#include "coordinator/metrics.h"
#include "coordinator/service.h"
#include "coordinator/stats/plots.h"
#include "coordinator/store.h"

namespace {

using namespace rdattn;               // NOLINT: a binary's main file
using namespace rdattn::coordinator;  // NOLINT

constexpr int kExitUsage = 1;

// The command line, with its defaults.
struct Flags {
  std::string listen = "127.0.0.1:50051";
  std::string db = "rdattn.db";
  std::string store_sync = "full";
  int lease_seconds = 60;
  int heartbeat_seconds = 10;
  int restart_grace_seconds = -1;
  int max_attempts = 3;
  double retry_backoff_base_seconds = 2;
  double retry_backoff_cap_seconds = 300;
  int machine_failure_factor = 10;
  std::string tokens_file;
  std::string tls_cert;
  std::string tls_key;
  int max_message_bytes = 4 << 20;
  int shutdown_grace_seconds = 5;
  std::string metrics_listen;
  int metrics_retention = 300;
  std::string gnuplot = "gnuplot";
  std::string report_temp_dir;
};

// Each flag's check is its CLI11 validator; the flags checked together are in CheckAfterParse.
void AddFlags(CLI::App& app, Flags& f) {
  using cli::NumberWhere;
  const CLI::Validator positive = NumberWhere([](double v) { return v > 0; }, "must be > 0");
  app.add_option("--listen", f.listen, "host:port to serve on; port 0 picks a free port");
  app.add_option("--db", f.db,
                 "SQLite database file (created if missing; WAL mode). One coordinator per file: "
                 "FILE.lock is held while it runs");
  app.add_option("--store-sync", f.store_sync,
                 "full: fsync the WAL before acknowledging a write (survives a power loss); "
                 "normal: do not (faster; only to measure the cost)")
      ->check(cli::OneOf({"full", "normal"}));
  app.add_option("--lease-seconds", f.lease_seconds,
                 "lease lifetime without a heartbeat renewal (> 0)")
      ->check(positive);
  app.add_option("--heartbeat-seconds", f.heartbeat_seconds,
                 "heartbeat interval told to workers (> 0)")
      ->check(positive);
  app.add_option("--restart-grace-seconds", f.restart_grace_seconds,
                 "after start, no lease expires for this long (workers reconnect first); -1: "
                 "--lease-seconds")
      ->check(
          NumberWhere([](double v) { return v >= -1; }, "must be >= 0 (or -1: the lease time)"));
  app.add_option("--max-attempts", f.max_attempts,
                 "attempts per job for sweeps that leave max_attempts at 0 (> 0)")
      ->check(positive);
  app.add_option("--retry-backoff-base-seconds", f.retry_backoff_base_seconds,
                 "after a failed attempt a job waits min(cap, base * 2^(failures-1)), jittered "
                 "into [d/2, d], before it is leased again (>= 0; 0: no backoff)")
      ->check(NumberWhere([](double v) { return v >= 0 && v <= 86400; }, "must be in [0, 86400]"));
  app.add_option("--retry-backoff-cap-seconds", f.retry_backoff_cap_seconds,
                 "the longest retry backoff (>= --retry-backoff-base-seconds)");
  app.add_option("--machine-failure-factor", f.machine_failure_factor,
                 "machine failures (a worker could not run the job: full disk, I/O error) do not "
                 "count against max_attempts; a job ends FAILED after this many times max_attempts "
                 "of them (> 0)")
      ->check(NumberWhere([](double v) { return v >= 1 && v <= 1000; }, "must be in [1, 1000]"));
  app.add_option("--tokens-file", f.tokens_file,
                 "bearer tokens, lines 'TOKEN ROLE NAME' (roles researcher|worker|admin); "
                 "empty: authentication OFF");
  app.add_option("--tls-cert", f.tls_cert,
                 "PEM server certificate chain (TLS when given with --tls-key)");
  app.add_option("--tls-key", f.tls_key, "PEM private key of --tls-cert");
  app.add_option("--max-message-bytes", f.max_message_bytes,
                 "largest request message accepted, in bytes (>= 1024); a bigger one is refused "
                 "with RESOURCE_EXHAUSTED")
      ->check(NumberWhere([](double v) { return v >= 1024; }, "must be >= 1024"));
  app.add_option("--shutdown-grace-seconds", f.shutdown_grace_seconds,
                 "on SIGTERM/SIGINT: time in-flight calls get to finish");
  app.add_option("--metrics-listen", f.metrics_listen,
                 "host:port to serve Prometheus metrics on at /metrics; port 0 picks a free port; "
                 "empty: no metrics");
  app.add_option("--metrics-retention", f.metrics_retention,
                 "seconds a terminal sweep keeps its rdattn_sweep_jobs series (>= 0)")
      ->check(NumberWhere([](double v) { return v >= 0; }, "must be >= 0"));
  app.add_option("--gnuplot", f.gnuplot,
                 "gnuplot executable for GetReport's plots: a path, or a name looked up in PATH "
                 "once at startup; empty: reports have no plots");
  app.add_option("--report-temp-dir", f.report_temp_dir,
                 "folder under which GetReport draws its plots (a private subfolder per report, "
                 "removed afterwards); empty: $TMPDIR, else /tmp");
  cli::CheckAfterParse(&app, [&f]() -> std::string {
    if (!(f.retry_backoff_cap_seconds >= f.retry_backoff_base_seconds &&
          f.retry_backoff_cap_seconds <= 86400)) {
      return "--retry-backoff-cap-seconds: must be in [--retry-backoff-base-seconds, 86400]";
    }
    if (f.tls_cert.empty() != f.tls_key.empty()) {
      return "--tls-cert and --tls-key must be given together";
    }
    return "";
  });
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const std::string& cert,
                                                               const std::string& key) {
  if (cert.empty()) return std::shared_ptr<grpc::ServerCredentials>();  // (and key: a check)
  StatusOr<std::string> cert_pem = ReadFile(cert);
  if (!cert_pem.ok()) return cert_pem.status().WithPrefix("--tls-cert");
  StatusOr<std::string> key_pem = ReadFile(key);
  if (!key_pem.ok()) return key_pem.status().WithPrefix("--tls-key");
  grpc::SslServerCredentialsOptions opts;
  opts.pem_key_cert_pairs.push_back({*key_pem, *cert_pem});
  return grpc::SslServerCredentials(opts);
}

int Fail(const Status& st) {
  std::fprintf(stderr, "rdattn-coordinator: %s\n", st.ToString().c_str());
  return 1;
}

// --gnuplot, resolved once: the absolute path every report runs, or "" (no plots). A missing
// default ("gnuplot" not in PATH) is a warning, as the coordinator works without plots; a
// missing binary that was asked for by name or path is an error.
StatusOr<std::string> ResolveGnuplot(const std::string& flag) {
  if (flag.empty()) {
    RDATTN_LOG(kInfo) << "--gnuplot is empty: reports have no plots";
    return std::string();
  }
  StatusOr<std::string> found = stats::FindGnuplot(flag);
  if (found.ok()) {
    RDATTN_LOG(kInfo) << "report plots drawn by " << *found;
    return found;
  }
  if (flag != "gnuplot") return InvalidArgumentError("--gnuplot: " + found.status().message());
  RDATTN_LOG(kWarning) << "--gnuplot: " << found.status().message()
                       << "; reports will have no plots";
  return std::string();
}

// --report-temp-dir, else $TMPDIR, else /tmp (the environment is read here, once). A given
// folder must exist; one from the environment that does not is a warning (reports then say
// their plots were not drawn).
StatusOr<std::string> ResolveReportTempDir(const std::string& flag) {
  std::string dir = flag;
  if (dir.empty()) {
    const char* env = std::getenv("TMPDIR");
    dir = env != nullptr && *env != '\0' ? env : "/tmp";
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    if (!flag.empty()) return InvalidArgumentError("--report-temp-dir: no folder " + dir);
    RDATTN_LOG(kWarning) << "report temporary folder " << dir << " (from TMPDIR) does not exist";
  }
  return dir;
}

}  // namespace

int main(int argc, char** argv) {
  // Block the shutdown signals before any thread starts, so only the waiter below sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // Abseil's lock-order graph (on in Debian's build) costs every lock of the hot path; the
  // tests keep it (they run the same code with it on).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  CLI::App app(
      "rdattn-coordinator --listen HOST:PORT --db FILE [--tokens-file FILE] ...\n"
      "Serves SweepService, WorkerService and grpc.health.v1 over the SQLite store "
      "(docs/coordinator.md).",
      "rdattn-coordinator");
  cli::Setup(app);
  Flags flags;
  AddFlags(app, flags);
  if (const int code = cli::Parse(app, argc, argv, kExitUsage); code >= 0) return code;

  log::SetComponent("rdattn-coordinator");

  const int lease_s = flags.lease_seconds;
  const int heartbeat_s = flags.heartbeat_seconds;
  if (heartbeat_s >= lease_s) {
    RDATTN_LOG(kWarning) << "--heartbeat-seconds " << heartbeat_s << " >= --lease-seconds "
                         << lease_s << ": leases will expire between heartbeats";
  }
  const int metrics_retention_s = flags.metrics_retention;
  const std::string& metrics_listen = flags.metrics_listen;

  Authenticator auth;
  const std::string tokens_file = flags.tokens_file;
  if (tokens_file.empty()) {
    RDATTN_LOG(kWarning) << "authentication is OFF (no --tokens-file): every caller is an admin. "
                            "Use --tokens-file outside a trusted loopback setup.";
  } else {
    StatusOr<std::vector<TokenEntry>> tokens = LoadTokensFile(tokens_file);
    if (!tokens.ok()) return Fail(tokens.status());
    RDATTN_LOG(kInfo) << "authentication on: " << tokens->size() << " tokens from " << tokens_file;
    auth = Authenticator(std::move(*tokens));
  }
  StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
      Credentials(flags.tls_cert, flags.tls_key);
  if (!creds.ok()) return Fail(creds.status());

  const std::string db_path = flags.db;
  // One coordinator per store (docs/operations.md, "One coordinator per store"): the lock is
  // taken before the file is opened and held until the process exits.
  std::unique_ptr<FileLock> store_lock;
  StoreOptions store_options;
  store_options.synchronous_full = flags.store_sync == "full";
  store_options.quick_check = true;
  if (db_path != ":memory:") {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    const std::string holder = "pid " + std::to_string(getpid()) + ", host " + host + ", started " +
                               absl::FormatTime(absl::Now()) + "\n";
    StatusOr<std::unique_ptr<FileLock>> lock = FileLock::Acquire(db_path + ".lock", holder);
    if (!lock.ok()) return Fail(lock.status().WithPrefix("database " + db_path));
    store_lock = std::move(*lock);
    // SQLite's recovery silently drops a damaged WAL's tail: look at it first.
    StatusOr<WalCheck> wal = CheckWal(db_path + "-wal");
    if (!wal.ok()) return Fail(wal.status());
    if (!wal->damage.empty()) {
      store_options.new_epoch_reason = "damaged WAL " + db_path + "-wal: " + wal->damage;
      RDATTN_LOG(kError) << "DAMAGED WAL: " << db_path << "-wal (" << wal->bytes
                         << " bytes): " << wal->damage << ". SQLite recovers only the "
                         << wal->commits
                         << " transactions before it: writes that were acknowledged may be LOST "
                         << "(sweeps, results, events). Starting a new store epoch so that "
                         << "watchers are told; check recent submissions.";
    } else if (wal->exists && wal->bytes > 0) {
      RDATTN_LOG(kInfo) << "WAL " << db_path << "-wal: " << wal->frames << " frames, "
                        << wal->commits << " commits to recover, no damage seen";
    }
  }
  StatusOr<std::unique_ptr<Store>> store = Store::Open(db_path, store_options);
  if (!store.ok()) {
    return Fail(store.status().code() == StatusCode::kDataLoss
                    ? store.status().WithPrefix("refusing to serve a damaged store (restore " +
                                                db_path + " from a backup)")
                    : store.status());
  }
  RDATTN_LOG(kInfo) << "store " << db_path << ": quick_check ok, epoch " << (*store)->epoch()
                    << ", synchronous=" << flags.store_sync;

  // Declared before the core and the server, which borrow it (destroyed after them).
  std::unique_ptr<CoordinatorMetrics> metrics;
  if (!metrics_listen.empty()) metrics = std::make_unique<CoordinatorMetrics>();

  SystemClock clock;
  CoreOptions options;
  options.lease_ttl = absl::Seconds(lease_s);
  options.heartbeat_interval = absl::Seconds(heartbeat_s);
  options.default_max_attempts = flags.max_attempts;
  options.retry_backoff_base = absl::Seconds(flags.retry_backoff_base_seconds);
  options.retry_backoff_cap = absl::Seconds(flags.retry_backoff_cap_seconds);
  options.machine_failure_factor = flags.machine_failure_factor;
  options.reap_interval = std::min(absl::Seconds(1), options.lease_ttl / 4);
  const int grace_s = flags.restart_grace_seconds;
  options.restart_grace = grace_s < 0 ? options.lease_ttl : absl::Seconds(grace_s);
  StatusOr<std::string> gnuplot = ResolveGnuplot(flags.gnuplot);
  if (!gnuplot.ok()) return Fail(gnuplot.status());
  options.report_gnuplot = *gnuplot;
  StatusOr<std::string> report_temp_dir = ResolveReportTempDir(flags.report_temp_dir);
  if (!report_temp_dir.ok()) return Fail(report_temp_dir.status());
  options.report_temp_dir = *report_temp_dir;
  Core core(std::move(*store), &clock, options, metrics.get());
  // GetSweep and ListSweeps read on a connection of their own (docs/coordinator.md "Reads").
  StatusOr<std::unique_ptr<Store>> reader = Store::OpenReader(db_path);
  if (!reader.ok()) return Fail(reader.status());
  core.SetReadStore(std::move(*reader));
  core.StartReaper();

  // Declared after the core: destroyed (no more scrapes) before it.
  std::unique_ptr<MetricsExposer> exposer;
  if (metrics) {
    StatusOr<std::unique_ptr<MetricsExposer>> started = MetricsExposer::Start(
        metrics_listen, {metrics->registry(), std::make_shared<StateCollector>(
                                                  &core, absl::Seconds(metrics_retention_s))});
    if (!started.ok()) return Fail(started.status());
    exposer = std::move(*started);
  }

  ServerOptions server_options;
  server_options.listen = flags.listen;
  server_options.credentials = *creds;
  server_options.max_receive_message_bytes = flags.max_message_bytes;
  server_options.metrics = metrics.get();
  StatusOr<std::unique_ptr<CoordinatorServer>> server =
      CoordinatorServer::Start(&core, &auth, server_options);
  if (!server.ok()) return Fail(server.status());

  const std::string& listen = server_options.listen;
  const std::string host = listen.substr(0, listen.rfind(':'));
  std::printf("listening on %s:%d\n", host.c_str(), (*server)->port());
  std::fflush(stdout);
  RDATTN_LOG(kInfo) << "rdattn-coordinator serving on " << host << ":" << (*server)->port() << " ("
                    << (*creds ? "TLS" : "plaintext") << "), database " << db_path << ", lease "
                    << lease_s << " s, heartbeat " << heartbeat_s << " s";
  if (exposer) {
    // One line, on stderr: how tests and scripts find a port-0 endpoint (docs/metrics.md).
    std::fprintf(stderr, "rdattn-coordinator: metrics on %s\n", exposer->url().c_str());
    std::fflush(stderr);
  } else {
    RDATTN_LOG(kInfo) << "metrics off (no --metrics-listen)";
  }

  CoordinatorServer* srv = server->get();
  const absl::Duration grace = absl::Seconds(flags.shutdown_grace_seconds);
  std::thread waiter([&signals, srv, grace] {
    int sig = 0;
    sigwait(&signals, &sig);
    RDATTN_LOG(kInfo) << "signal " << sig << ": shutting down";
    srv->Shutdown(grace);
  });
  srv->Wait();
  waiter.join();
  core.Shutdown();
  RDATTN_LOG(kInfo) << "rdattn-coordinator stopped";
  return 0;
}
