// The run configuration: one typed struct per run, parsed and validated by ONE function,
// ParseRunConfig, from the JSON form (protobuf's JSON mapping) of rdattn.v1.RunSpec
// (proto/rdattn/v1/run_spec.proto). The trainer (rdattn-train), the worker and the coordinator
// all call it, so a run the coordinator accepts is a run the trainer accepts. Plain C++17 plus
// nlohmann::json: no LibTorch, no protobuf (the trainer-only GPU build has neither).
//
// Every problem is reported at once, each naming its field ("schedule.milestones_tokens[2]:
// 3000000 is beyond schedule.total_tokens (2000000)"). The defaults are the member initialisers
// below (docs/run-config.md lists them), and only those: the resolver starts from a default
// RunConfig and overrides what the spec sets. A value that would be silently wrong is an error.
//
// The parts (one library, rdattn_run_config): run_config_read.cc (JSON -> raw spec, syntax
// errors), run_config_resolve.cc (recipe, defaults, derived schedule, checks; ParseRunConfig),
// run_config_write.cc (ResolvedConfigJson, RunSpecJson, the fingerprint). The learning-rate
// schedule is the trainer's (worker/trainer/lr_schedule.h).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/field_error.h"
#include "common/status.h"
#include "model/config.h"

namespace rdattn {

enum class Backend { kAuto, kLocal, kMpi, kNccl };
enum class Device { kAuto, kCpu, kCuda };
enum class Precision { kAuto, kFp32, kBf16, kFp64 };
enum class LrDecay { kCosine, kLinear, kConstant };

std::string_view BackendName(Backend b);      // "auto", "local", "mpi", "nccl"
std::string_view DeviceName(Device d);        // "auto", "cpu", "cuda"
std::string_view PrecisionName(Precision p);  // "auto", "fp32", "bf16", "fp64"
std::string_view LrDecayName(LrDecay d);      // "cosine", "linear", "constant"

struct DataConfig {
  std::vector<std::string> train_shards;  // paths or globs (expanded by the trainer)
  std::vector<std::string> val_shards;
  std::vector<std::string> test_shards;
  std::string tokenizer;  // "gpt2" or "byte"
  uint64_t data_seed = 0;
  int64_t val_windows = 0;   // 0: every window of the val shards
  int64_t test_windows = 0;  // 0: every window of the test shards
};

struct OptimConfig {
  double peak_lr = 0;  // no default: required (the paper recipe sets it for S and M)
  double min_lr_ratio = 0.1;
  int64_t warmup_steps = 0;  // unset: 5% of the steps (run_config_resolve.cc), or the recipe's
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // on matrices only
  double grad_clip = 1.0;     // 0 disables clipping
  LrDecay lr_decay = LrDecay::kCosine;
};

struct ScheduleConfig {
  int64_t total_tokens = 0;
  int64_t global_batch_tokens = 0;
  int64_t micro_batch_sequences = 0;
  std::vector<int64_t> milestones_tokens;  // sorted, unique
  int64_t stop_at_tokens = 0;              // 0: run to total_tokens
  // Derived (computed and checked by ParseRunConfig, never recomputed in the loop):
  int64_t total_steps = 0;               // ceil(total_tokens / global_batch_tokens)
  int64_t stop_step = 0;                 // the step the run stops at (≤ total_steps)
  int64_t global_batch_sequences = 0;    // global_batch_tokens / context
  int64_t grad_accum_steps = 0;          // global_batch_sequences / (world_size × micro_batch)
  std::vector<int64_t> milestone_steps;  // first step whose tokens reach each milestone
};

struct ParallelConfig {
  int world_size = 1;        // 0 in the spec means this
  int threads_per_rank = 0;  // 0: the launcher chooses
  Backend backend = Backend::kAuto;
  Device device = Device::kAuto;
  Precision precision = Precision::kAuto;
  int64_t allreduce_bucket_bytes = 25 << 20;
};

struct CheckpointConfig {
  std::string dir;          // empty: no checkpoints
  int64_t every_steps = 0;  // 0: only at milestones, at the end and on SIGTERM
  int keep_last = 2;
  std::string resume_from;  // a checkpoint file; empty: the latest in dir, if any
  // From the worker's lease (run_spec.proto CheckpointSpec): the milestones whose evaluation
  // the coordinator has stored (valid when stored_evals_known), and the newest checkpoint it
  // knows of.
  std::vector<int64_t> stored_eval_milestones;
  bool stored_evals_known = false;
  std::string coordinator_checkpoint;
};

struct RunConfig {
  std::string run_id;
  std::string sweep_id;
  std::string job_id;
  uint64_t init_seed = 0;
  std::string preset;  // the preset the model shape started from ("" when fully explicit)
  model::ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  ScheduleConfig schedule;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  int64_t train_event_every_steps = 1;
  std::string recipe;  // "" or "paper"
  std::map<std::string, std::string> labels;
};

// Parses and validates a RunSpec in protobuf's JSON mapping. Field names may be snake_case
// (proto) or lowerCamelCase (JSON); int64 values may be numbers or decimal strings; enums may
// be their proto names ("PRECISION_FP64") or short names ("fp64"). Unknown fields are errors.
// Every problem is a FieldError (docs/run-config.md "Errors" gives their order); status() joins
// them into one INVALID_ARGUMENT, and so does converting the result to StatusOr<RunConfig>.
FieldErrorsOr<RunConfig> ParseRunConfig(const nlohmann::json& spec);
FieldErrorsOr<RunConfig> ParseRunConfigText(std::string_view json_text);

// The resolved config (every default applied, derived values included), as JSON. Written at
// start, into every checkpoint and into exports.
nlohmann::json ResolvedConfigJson(const RunConfig& cfg);

// The resolved config as a RunSpec (protobuf's JSON mapping, proto field names, 64-bit integers
// as decimal strings, enums by proto name) with every field explicit. ParseRunConfig reads it
// back to a config with the same NumericFingerprint and ResolvedConfigJson: this is the form in
// which a resolved config is handed to the trainer.
nlohmann::json RunSpecJson(const RunConfig& cfg);

// The fields that change the numbers a run produces (model, seeds, data, optimiser, schedule,
// world size, precision), as canonical JSON. Resume refuses a checkpoint whose fingerprint
// differs, and names the fields that differ.
nlohmann::json NumericFingerprint(const RunConfig& cfg);
std::vector<std::string> FingerprintDifferences(const nlohmann::json& a, const nlohmann::json& b);

// Where a run evaluates: the configured milestones up to the stop step, and the stop step itself
// when it is not one of them. The trainer evaluates there; the coordinator and the report expect
// a val NLL for each.
struct EvalMilestone {
  int64_t step = 0;
  int64_t tokens = 0;  // what KIND_EVAL's milestone_tokens says
};
std::vector<EvalMilestone> EvalMilestones(const ScheduleConfig& schedule);

}  // namespace rdattn
