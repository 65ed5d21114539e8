// Internal to rdattn_run_config: what its three parts share. run_config_read.cc walks the JSON
// into a RawSpec (syntax errors: types, ranges, unknown fields); run_config_resolve.cc turns the
// RawSpec into a RunConfig (recipe, defaults, derived values, every cross-field check);
// run_config_write.cc writes a RunConfig back as JSON. Not for use outside runspec/run_config_*.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/field_error.h"
#include "common/strings.h"
#include "runspec/run_config.h"

namespace rdattn::run_config_internal {

// The walk runs on an insertion-ordered document so that syntax errors come out in document
// order (nlohmann::json sorts object keys).
using OJson = nlohmann::ordered_json;

// A short rendering of a JSON value for error messages.
std::string Describe(const OJson& v);
// snake_case → lowerCamelCase, as protobuf derives json_name.
std::string Camel(std::string_view snake);
using strings::Quote;

// ------------------------------------------------------------------------------------------
// Enums: how the RunSpec spells each value, for the reader and the writers.

// One row of an enum's table: how the RunSpec spells a value (proto name, short name, number)
// and the C++ value it means. Several rows may mean one value (UNSPECIFIED and AUTO); the last
// row of a value is how it is written back (see Canonical).
template <typename T>
struct EnumEntry {
  std::string_view proto;       // "PRECISION_FP64"
  std::string_view short_name;  // "fp64"
  int number;
  T value;
};

// The value a number means; the first row's value for a number the table lacks.
template <typename T, size_t N>
T FromNumber(const EnumEntry<T> (&table)[N], int number) {
  for (const auto& entry : table)
    if (entry.number == number) return entry.value;
  return table[0].value;
}

// The row a value is written back as: its last row.
template <typename T, size_t N>
const EnumEntry<T>& Canonical(const EnumEntry<T> (&table)[N], T value) {
  const EnumEntry<T>* found = &table[0];
  for (const auto& entry : table)
    if (entry.value == value) found = &entry;
  return *found;
}

// A number-0 row (UNSPECIFIED, and "auto" for device and precision) means "not set": the reader
// leaves the field unset and the resolver keeps the default of run_config.h. Its value only
// matters for writing back (Canonical).
inline constexpr EnumEntry<Backend> kBackendEnum[] = {
    {"BACKEND_UNSPECIFIED", "unspecified", 0, Backend::kAuto},
    {"BACKEND_AUTO", "auto", 1, Backend::kAuto},
    {"BACKEND_LOCAL", "local", 2, Backend::kLocal},
    {"BACKEND_MPI", "mpi", 3, Backend::kMpi},
    {"BACKEND_NCCL", "nccl", 4, Backend::kNccl},
};
inline constexpr EnumEntry<Device> kDeviceEnum[] = {
    {"DEVICE_UNSPECIFIED", "unspecified", 0, Device::kAuto},
    {"DEVICE_UNSPECIFIED", "auto", 0, Device::kAuto},
    {"DEVICE_CPU", "cpu", 1, Device::kCpu},
    {"DEVICE_CUDA", "cuda", 2, Device::kCuda},
};
inline constexpr EnumEntry<Precision> kPrecisionEnum[] = {
    {"PRECISION_UNSPECIFIED", "unspecified", 0, Precision::kAuto},
    {"PRECISION_UNSPECIFIED", "auto", 0, Precision::kAuto},
    {"PRECISION_FP32", "fp32", 1, Precision::kFp32},
    {"PRECISION_BF16", "bf16", 2, Precision::kBf16},
    {"PRECISION_FP64", "fp64", 3, Precision::kFp64},
};
inline constexpr EnumEntry<LrDecay> kLrDecayEnum[] = {
    {"LR_DECAY_UNSPECIFIED", "unspecified", 0, LrDecay::kCosine},
    {"LR_DECAY_COSINE", "cosine", 1, LrDecay::kCosine},
    {"LR_DECAY_LINEAR", "linear", 2, LrDecay::kLinear},
    {"LR_DECAY_CONSTANT", "constant", 3, LrDecay::kConstant},
};
inline constexpr std::string_view kBackendValid =
    "auto, local, mpi, nccl (or BACKEND_* names, or 0-4)";
inline constexpr std::string_view kDeviceValid = "auto, cpu, cuda (or DEVICE_* names, or 0-2)";
inline constexpr std::string_view kPrecisionValid =
    "auto, fp32, bf16, fp64 (or PRECISION_* names, or 0-3)";
inline constexpr std::string_view kLrDecayValid =
    "cosine, linear, constant (or LR_DECAY_* names, or 0-3)";

// ------------------------------------------------------------------------------------------
// The raw spec: what the document said, with presence. Plain proto3 scalars keep 0 / empty for
// "unset"; proto3 `optional` fields and enums are std::optional. No defaults here: they are the
// initialisers of the structs in run_config.h, applied by the resolver.

struct RawShape {
  std::optional<int64_t> layers, width, heads, ffn_hidden, blocks, context, vocab_size;
  std::optional<double> norm_eps, key_norm_eps, rope_theta;
};
struct RawModel {
  std::string preset;
  std::string arm;
  RawShape shape;
};
struct RawOptim {
  std::optional<double> peak_lr, min_lr_ratio;
  std::optional<int64_t> warmup_steps;
  std::optional<double> beta1, beta2, eps, weight_decay, grad_clip;
  std::optional<LrDecay> lr_decay;
};
struct RawSchedule {
  int64_t total_tokens = 0;
  int64_t global_batch_tokens = 0;
  int64_t micro_batch_sequences = 0;
  std::vector<int64_t> milestones_tokens;
  int64_t stop_at_tokens = 0;
};
struct RawParallel {
  int64_t world_size = 0;
  int64_t threads_per_rank = 0;
  std::optional<Backend> backend;
  std::optional<Device> device;
  std::optional<Precision> precision;
  int64_t allreduce_bucket_bytes = 0;
};
struct RawCheckpoint {
  std::string dir;
  int64_t every_steps = 0;
  int64_t keep_last = 0;
  std::string resume_from;
  std::vector<int64_t> stored_eval_milestones;
  bool stored_evals_known = false;
  std::string coordinator_checkpoint;
};
struct RawSpec {
  std::string run_id, sweep_id, job_id;
  uint64_t init_seed = 0;
  RawModel model;
  DataConfig data;
  RawOptim optim;
  RawSchedule schedule;
  RawParallel parallel;
  RawCheckpoint checkpoint;
  int64_t train_event_every_steps = 0;
  std::string recipe;
  std::map<std::string, std::string> labels;
};

// The top-level fields of RunSpec, in field-number order (used to order validation errors).
inline constexpr std::string_view kTopLevel[] = {
    "run_id",   "sweep_id", "job_id",     "init_seed", "model",  "data",  "optim",
    "schedule", "parallel", "checkpoint", "metrics",   "recipe", "labels"};

// Reads `spec` (a JSON object) into `r`, recording every syntax error (wrong type, out of range,
// unknown field, a field given twice) in document order; a field with one is marked bad.
void ReadRunSpec(const OJson& spec, RawSpec& r, FieldErrors& e);

}  // namespace rdattn::run_config_internal
