// rdattn-train: one process per rank. Standalone (mpirun / srun) or launched by rdattn-worker.
//
//   rdattn-train [train] --job JOB.json [--events PATH|-] [--peak-flops F] [--attempt N]
//                        [--stop-after-steps N]
//   rdattn-train validate --job JOB.json
//   rdattn-train export --checkpoint CKPT.pt --out MODEL.safetensors
//   rdattn-train eval (--checkpoint CKPT.pt | --weights MODEL.safetensors) --shard PATH...
//                     [--windows N] [--micro-batch N]
//
// JOB.json is an rdattn.v1.RunSpec in protobuf's JSON mapping (docs/run-config.md).
// Exit codes: 0 finished; 75 preempted (SIGTERM) after writing a checkpoint; 2 bad usage or
// bad config; 70 the launching worker is gone (RDATTN_SUPERVISOR_*: stopped at once, nothing
// written); 1 any other failure. docs/trainer.md has the whole story.
#include <sys/prctl.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/run_config.h"
#include "common/supervisor.h"
#include "worker/comm/communicator.h"
#include "worker/trainer/events.h"
#include "worker/trainer/trainer.h"

namespace {

constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2, kExitOrphaned = 70,
              kExitPreempted = 75;

std::atomic<bool> g_stop{false};
extern "C" void OnTerminate(int) { g_stop.store(true); }

const char* kUsage =
    "usage:\n"
    "  rdattn-train [train] --job JOB.json [--events PATH|-] [--peak-flops F] [--attempt N]\n"
    "                       [--stop-after-steps N]\n"
    "  rdattn-train validate --job JOB.json\n"
    "  rdattn-train export --checkpoint CKPT.pt --out MODEL.safetensors\n"
    "  rdattn-train eval (--checkpoint CKPT.pt | --weights MODEL.safetensors) --shard PATH...\n"
    "                    [--windows N] [--micro-batch N]\n";

struct Args {
  std::string command = "train";
  std::string job, events, checkpoint, weights, out;
  std::vector<std::string> shards;
  double peak_flops = 0;
  int64_t stop_after_steps = 0, windows = 0, micro_batch = 8;
  int attempt = 0;
};

int Usage(const std::string& msg) {
  std::fprintf(stderr, "rdattn-train: %s\n%s", msg.c_str(), kUsage);
  return kExitUsage;
}

bool ParseNumber(const std::string& flag, const std::string& text, double* out, std::string* err) {
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0') {
    *err = flag + ": '" + text + "' is not a number";
    return false;
  }
  return true;
}

bool ParseInt(const std::string& flag, const std::string& text, int64_t* out, std::string* err) {
  char* end = nullptr;
  *out = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || *out < 0) {
    *err = flag + ": '" + text + "' is not a non-negative integer";
    return false;
  }
  return true;
}

// Returns an error message, or "" on success.
std::string ParseArgs(int argc, char** argv, Args* a) {
  int i = 1;
  if (i < argc && argv[i][0] != '-') a->command = argv[i++];
  if (a->command != "train" && a->command != "validate" && a->command != "export" &&
      a->command != "eval")
    return "unknown command '" + a->command + "'";
  std::string err;
  for (; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "-h" || f == "--help") return "help";
    if (i + 1 >= argc) return f + ": missing value";
    const std::string v = argv[++i];
    int64_t n = 0;
    if (f == "--job")
      a->job = v;
    else if (f == "--events")
      a->events = v;
    else if (f == "--checkpoint")
      a->checkpoint = v;
    else if (f == "--weights")
      a->weights = v;
    else if (f == "--out")
      a->out = v;
    else if (f == "--shard")
      a->shards.push_back(v);
    else if (f == "--peak-flops") {
      if (!ParseNumber(f, v, &a->peak_flops, &err)) return err;
    } else if (f == "--stop-after-steps") {
      if (!ParseInt(f, v, &a->stop_after_steps, &err)) return err;
    } else if (f == "--windows") {
      if (!ParseInt(f, v, &a->windows, &err)) return err;
    } else if (f == "--micro-batch") {
      if (!ParseInt(f, v, &a->micro_batch, &err)) return err;
    } else if (f == "--attempt") {
      if (!ParseInt(f, v, &n, &err)) return err;
      a->attempt = static_cast<int>(n);
    } else
      return "unknown flag " + f;
  }
  if ((a->command == "train" || a->command == "validate") && a->job.empty())
    return "--job is required";
  if (a->command == "export" && (a->checkpoint.empty() || a->out.empty()))
    return "export needs --checkpoint and --out";
  if (a->command == "eval") {
    if (a->checkpoint.empty() == a->weights.empty())
      return "eval needs exactly one of --checkpoint and --weights";
    if (a->shards.empty()) return "eval needs at least one --shard";
  }
  return "";
}

rdattn::StatusOr<rdattn::RunConfig> LoadJob(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return rdattn::InvalidArgumentError("--job " + path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  auto cfg = rdattn::ParseRunConfigText(ss.str());
  if (!cfg.ok()) return cfg.status().WithPrefix("--job " + path);
  return cfg;
}

int ExitFor(const rdattn::Status& st) {
  return st.code() == rdattn::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

// A rank launched by rdattn-worker stops at once when the worker is gone: the kernel kills a
// direct child (PR_SET_PDEATHSIG), and a thread polls the worker's pid for ranks under mpirun.
// No checkpoint and no event: the lease is as good as lost and a newer attempt may run.
rdattn::StatusOr<std::unique_ptr<rdattn::SupervisorWatch>> WatchSupervisor() {
  RDATTN_ASSIGN_OR_RETURN(const std::optional<rdattn::Supervisor> sup,
                          rdattn::SupervisorFromEnvironment());
  if (!sup) return std::unique_ptr<rdattn::SupervisorWatch>();
  if (::getppid() == sup->pid) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto gone = [pid = sup->pid] {
    rdattn::log::Error("the worker that launched this rank (pid " + std::to_string(pid) +
                       ") is gone; stopping now, without a checkpoint");
    ::_exit(kExitOrphaned);
  };
  if (!rdattn::SupervisorAlive(*sup)) gone();
  return std::make_unique<rdattn::SupervisorWatch>(*sup, 200, gone);
}

int RunTrain(const Args& a) {
  auto watch = WatchSupervisor();
  if (!watch.ok()) {
    std::fprintf(stderr, "rdattn-train: %s\n", watch.status().ToString().c_str());
    return kExitUsage;
  }
  auto cfg = LoadJob(a.job);
  if (!cfg.ok()) {
    std::fprintf(stderr, "rdattn-train: %s\n", cfg.status().ToString().c_str());
    return ExitFor(cfg.status());
  }
  const bool cuda = cfg->parallel.device == rdattn::Device::kCuda ||
                    (cfg->parallel.device == rdattn::Device::kAuto && torch::cuda::is_available());
  auto comm = rdattn::comm::MakeCommunicator(cfg->parallel.backend,
                                             cuda ? rdattn::Device::kCuda : rdattn::Device::kCpu);
  if (!comm.ok()) {
    std::fprintf(stderr, "rdattn-train: %s\n", comm.status().ToString().c_str());
    return ExitFor(comm.status());
  }
  const int rank = (*comm)->rank();
  // From here every line of this rank carries job=, rank= and (in the loop) step=.
  rdattn::log::SetJob(cfg->job_id);
  rdattn::log::SetRank(rank);
  std::unique_ptr<rdattn::trainer::EventSink> sink;
  if (rank == 0) {
    auto opened = rdattn::trainer::EventSink::Open(a.events.empty() ? "-" : a.events);
    if (!opened.ok()) {
      rdattn::log::Error(opened.status().ToString());
      return kExitUsage;
    }
    sink = std::move(opened).value();
    sink->SetIdentity(cfg->run_id, cfg->job_id, a.attempt);
  }
  std::signal(SIGTERM, OnTerminate);
  std::signal(SIGINT, OnTerminate);
  rdattn::trainer::TrainOptions opts;
  opts.peak_flops_per_rank = a.peak_flops;
  opts.stop_after_steps = a.stop_after_steps;
  opts.attempt = a.attempt;
  opts.stop_requested = &g_stop;
  opts.events = sink.get();
  auto outcome = rdattn::trainer::Train(*cfg, **comm, opts);
  if (!outcome.ok()) {
    rdattn::log::Error(outcome.status().ToString());
    if (sink) sink->Emit("FAILED", {{"error", outcome.status().ToString()}});
    return ExitFor(outcome.status());
  }
  if (*outcome == rdattn::trainer::TrainOutcome::kPreempted) {
    if (rank == 0)
      rdattn::log::Info("stopped early; a checkpoint was written, resume by re-running");
    return kExitPreempted;
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  rdattn::log::SetComponent("rdattn-train");
  Args a;
  const std::string err = ParseArgs(argc, argv, &a);
  if (err == "help") {
    std::printf("%s", kUsage);
    return kExitOk;
  }
  if (!err.empty()) return Usage(err);
  if (a.command == "validate") {
    auto cfg = LoadJob(a.job);
    if (!cfg.ok()) {
      std::fprintf(stderr, "rdattn-train: %s\n", cfg.status().ToString().c_str());
      return ExitFor(cfg.status());
    }
    std::printf("%s\n", rdattn::ResolvedConfigJson(*cfg).dump(2).c_str());
    return kExitOk;
  }
  if (a.command == "export") {
    const rdattn::Status st = rdattn::trainer::ExportCheckpoint(a.checkpoint, a.out);
    if (!st.ok()) {
      std::fprintf(stderr, "rdattn-train: %s\n", st.ToString().c_str());
      return ExitFor(st);
    }
    std::printf("wrote %s\n", a.out.c_str());
    return kExitOk;
  }
  if (a.command == "eval") {
    auto r = rdattn::trainer::EvaluateFile(a.checkpoint.empty() ? a.weights : a.checkpoint,
                                           a.shards, a.windows, a.micro_batch);
    if (!r.ok()) {
      std::fprintf(stderr, "rdattn-train: %s\n", r.status().ToString().c_str());
      return ExitFor(r.status());
    }
    std::printf("{\"nll\": %.17g, \"tokens\": %lld, \"windows\": %lld, \"arm\": \"%s\"}\n", r->nll,
                static_cast<long long>(r->tokens), static_cast<long long>(r->windows),
                r->arm.c_str());
    return kExitOk;
  }
  return RunTrain(a);
}
