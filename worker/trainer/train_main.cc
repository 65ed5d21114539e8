// rdattn-train: one process per rank. Standalone (mpirun / srun) or launched by rdattn-worker.
//
//   rdattn-train [train] --job JOB.json [--events PATH|-] [--peak-flops F] [--attempt N]
//                        [--stop-after-steps N] [--attention auto|rdattn|sdpa]
//   rdattn-train validate --job JOB.json
//   rdattn-train export --checkpoint CKPT.pt --out MODEL.safetensors
//   rdattn-train eval (--checkpoint CKPT.pt | --weights MODEL.safetensors) --shard PATH...
//                     [--windows N] [--micro-batch N] [--attention auto|rdattn|sdpa]
//
// JOB.json is an rdattn.v1.RunSpec in protobuf's JSON mapping (docs/run-config.md). The command
// line is CLI11's (common/cli.h): --help on every command, --flag_name also accepted, and a usage
// error is one line "rdattn-train: MESSAGE (see --help)" with exit 2.
// Exit codes: 0 finished; 75 preempted (SIGTERM) after writing a checkpoint; 2 bad usage or
// bad config; 70 the launching worker is gone (RDATTN_SUPERVISOR_*: stopped at once, nothing
// written); 74 the machine failed (a checkpoint or the events file cannot be written: ENOSPC,
// EIO, EDQUOT, EROFS); 1 any other failure. docs/trainer.md has the whole story.
#include <sys/prctl.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/cpu_features.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/supervisor.h"
#include "model/attention.h"
#include "runspec/run_config.h"
#include "worker/comm/communicator.h"
#include "worker/trainer/events.h"
#include "worker/trainer/runtime.h"
#include "worker/trainer/trainer.h"

namespace {

constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2, kExitOrphaned = 70,
              kExitPreempted = 75;
// The machine failed, not the job (EX_IOERR): a checkpoint or rank 0's events file cannot be
// written. The worker reports JOB_OUTCOME_MACHINE_FAILED; the job is retried elsewhere without
// using up an attempt.
constexpr int kExitMachine = 74;

std::atomic<bool> g_stop{false};
extern "C" void OnTerminate(int) { g_stop.store(true); }

struct Args {
  std::string command = "train";
  std::string job, events, checkpoint, weights, out;
  std::vector<std::string> shards;
  double peak_flops = 0;
  int64_t stop_after_steps = 0, windows = 0, micro_batch = 8;
  int attempt = 0;
  std::string attention = "auto";
};

// --attention: the causal attention kernel (model/attention.h SetAttentionKernel). auto: LibTorch's
// scaled_dot_product_attention on CUDA when the LibTorch has it (2.1+), rdattn's own kernel on the
// CPU. Not part of the run's numeric fingerprint: the kernels agree to rounding, not bitwise, so
// the arms of one comparison must run with the same choice (docs/trainer.md).
void AddAttentionOption(CLI::App* command, Args& a) {
  command
      ->add_option("--attention", a.attention,
                   "causal attention kernel: auto (SDPA on CUDA with LibTorch >= 2.1, rdattn's "
                   "own on the CPU), rdattn, or sdpa (LibTorch >= 2.1)")
      ->check(CLI::IsMember({"auto", "rdattn", "sdpa"}))
      ->default_str("auto");
}

// The four subcommands, each with its flags (`rdattn-train COMMAND --help` lists them).
void AddCommands(CLI::App& app, Args& a) {
  app.require_subcommand(1);
  CLI::App* train = app.add_subcommand(
      "train", "train one rank of JOB.json (the default command when none is named)");
  train->add_option("--job", a.job, "the RunSpec, JSON (docs/run-config.md)")->required();
  train->add_option("--events", a.events, "rank 0's event stream: a file, or - (stdout)")
      ->default_str("-");
  train->add_option("--peak-flops", a.peak_flops,
                    "peak FLOP/s of one rank, for the MFU of TRAIN_STEP events; 0: no MFU");
  train->add_option("--attempt", a.attempt, "the attempt number the events carry")
      ->check(rdattn::cli::NonNegativeInteger());
  train
      ->add_option("--stop-after-steps", a.stop_after_steps,
                   "stop (checkpoint, exit 75) after this many steps of this run; 0: never")
      ->check(rdattn::cli::NonNegativeInteger());
  AddAttentionOption(train, a);

  CLI::App* validate =
      app.add_subcommand("validate", "print the resolved configuration of JOB.json as JSON");
  validate->add_option("--job", a.job, "the RunSpec, JSON (docs/run-config.md)")->required();

  CLI::App* export_ = app.add_subcommand("export", "write a checkpoint's weights as safetensors");
  export_->add_option("--checkpoint", a.checkpoint, "a trainer checkpoint (ckpt_step_N.pt)")
      ->required();
  export_->add_option("--out", a.out, "the safetensors file to write")->required();

  CLI::App* eval = app.add_subcommand(
      "eval", "held-out NLL of a checkpoint or safetensors file on shards, printed as JSON");
  eval->add_option("--checkpoint", a.checkpoint,
                   "a trainer checkpoint (one of --checkpoint and --weights)");
  eval->add_option("--weights", a.weights,
                   "a safetensors file written by export (one of --checkpoint and --weights)");
  eval->add_option("--shard", a.shards, "an llm.c shard; repeat the flag or list several paths")
      ->required()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  eval->add_option("--windows", a.windows, "windows to evaluate; 0: every window of the shards")
      ->check(rdattn::cli::NonNegativeInteger());
  eval->add_option("--micro-batch", a.micro_batch, "windows per forward pass")
      ->check(rdattn::cli::NonNegativeInteger());
  AddAttentionOption(eval, a);
}

// What the flags of one command cannot say alone; "" when the command line is good.
std::string CheckArgs(const Args& a) {
  if (a.command == "eval" && a.checkpoint.empty() == a.weights.empty())
    return "eval needs exactly one of --checkpoint and --weights";
  return "";
}

// Applies --attention; "" when done, else why not (sdpa on a LibTorch without it).
std::string SelectAttention(const std::string& name) {
  using rdattn::model::AttentionKernel;
  const AttentionKernel k = name == "sdpa"     ? AttentionKernel::kSdpa
                            : name == "rdattn" ? AttentionKernel::kRdattn
                                               : AttentionKernel::kAuto;
  try {
    rdattn::model::SetAttentionKernel(k);
  } catch (const c10::Error& e) {
    return "--attention " + name + ": " + e.what_without_backtrace();
  }
  return "";
}

rdattn::StatusOr<rdattn::RunConfig> LoadJob(const std::string& path) {
  // A job file that cannot be read is a usage error (exit 2), as a bad one is.
  auto text = rdattn::ReadFile(path);
  if (!text.ok()) return rdattn::InvalidArgumentError("--job " + text.status().message());
  auto cfg = rdattn::ParseRunConfigText(*text);
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
  if (const rdattn::Status st = rdattn::trainer::CheckDeviceAvailable(cfg->parallel); !st.ok()) {
    std::fprintf(stderr, "rdattn-train: %s\n", st.ToString().c_str());
    return ExitFor(st);
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
      return opened.status().code() == rdattn::StatusCode::kUnavailable ? kExitMachine : kExitUsage;
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
  bool machine_failure = false;
  opts.machine_failure = &machine_failure;
  auto outcome = rdattn::trainer::Train(*cfg, **comm, opts);
  // The events file cannot be written: stderr is all that is left.
  auto events_failed = [&] {
    if (!sink || sink->status().ok()) return false;
    rdattn::log::Error(sink->status().ToString() + "; the machine failed (exit 74)");
    return true;
  };
  if (!outcome.ok()) {
    if (!sink || outcome.status().message() != sink->status().message())
      rdattn::log::Error(outcome.status().ToString());
    // A fenced rank's gate drops this (it writes nothing after the newer attempt's claim).
    if (sink) sink->Emit("FAILED", {{"error", outcome.status().ToString()}});
    if (events_failed() || machine_failure) return kExitMachine;
    return ExitFor(outcome.status());
  }
  if (events_failed()) return kExitMachine;
  if (*outcome == rdattn::trainer::TrainOutcome::kPreempted) {
    if (rank == 0)
      rdattn::log::Info("stopped early; a checkpoint was written, resume by re-running");
    return kExitPreempted;
  }
  return kExitOk;
}

int RunValidate(const Args& a) {
  auto cfg = LoadJob(a.job);
  if (!cfg.ok()) {
    std::fprintf(stderr, "rdattn-train: %s\n", cfg.status().ToString().c_str());
    return ExitFor(cfg.status());
  }
  std::printf("%s\n", rdattn::ResolvedConfigJson(*cfg).dump(2).c_str());
  return kExitOk;
}

int RunExport(const Args& a) {
  const rdattn::Status st = rdattn::trainer::ExportCheckpoint(a.checkpoint, a.out);
  if (!st.ok()) {
    std::fprintf(stderr, "rdattn-train: %s\n", st.ToString().c_str());
    return ExitFor(st);
  }
  std::printf("wrote %s\n", a.out.c_str());
  return kExitOk;
}

int RunEval(const Args& a) {
  auto r = rdattn::trainer::EvaluateFile(a.checkpoint.empty() ? a.weights : a.checkpoint, a.shards,
                                         a.windows, a.micro_batch);
  if (!r.ok()) {
    std::fprintf(stderr, "rdattn-train: %s\n", r.status().ToString().c_str());
    return ExitFor(r.status());
  }
  std::printf("{\"nll\": %.17g, \"tokens\": %lld, \"windows\": %lld, \"arm\": \"%s\"}\n", r->nll,
              static_cast<long long>(r->tokens), static_cast<long long>(r->windows),
              r->arm.c_str());
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  rdattn::log::SetComponent("rdattn-train");
  rdattn::cpu::UseBestBlasKernels(argv);  // may execute this program again (common/cpu_features.h)
  CLI::App app(
      "One rank of a training run, standalone (mpirun, srun) or launched by rdattn-worker\n"
      "(docs/trainer.md). Exit codes: 0 finished; 75 preempted (SIGTERM) after writing a\n"
      "checkpoint; 2 bad usage or bad config; 70 the launching worker is gone; 74 the machine\n"
      "failed (a checkpoint or the events file cannot be written); 1 any other failure.",
      "rdattn-train");
  rdattn::cli::Setup(app);
  Args a;
  AddCommands(app, a);
  app.footer(
      "Without a command, rdattn-train runs `train`; `rdattn-train COMMAND --help` lists "
      "its flags.");
  std::vector<std::string> args = rdattn::cli::DashSpelling(argc, argv);
  rdattn::cli::DefaultSubcommand("train", &args);
  if (const int code = rdattn::cli::Parse(app, args, kExitUsage); code >= 0) return code;
  a.command = app.get_subcommands().front()->get_name();
  if (const std::string err = CheckArgs(a); !err.empty()) {
    return rdattn::cli::Usage(app, err, kExitUsage);
  }
  if (a.command == "validate") return RunValidate(a);
  if (a.command == "export") return RunExport(a);
  if (const std::string err = SelectAttention(a.attention); !err.empty()) {
    std::fprintf(stderr, "rdattn-train: %s\n", err.c_str());
    return kExitUsage;
  }
  if (a.command == "eval") return RunEval(a);
  return RunTrain(a);
}
