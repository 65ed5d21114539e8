// The writers of the run configuration: the resolved config as JSON (logs, checkpoints,
// exports), as a RunSpec in protobuf's JSON mapping (what the trainer is handed), and the
// numeric fingerprint that resume compares.
#include <set>
#include <string>
#include <vector>

#include "runspec/run_config_internal.h"

namespace rdattn {
namespace {

using run_config_internal::Canonical;
using run_config_internal::kBackendEnum;
using run_config_internal::kDeviceEnum;
using run_config_internal::kLrDecayEnum;
using run_config_internal::kPrecisionEnum;

nlohmann::json ShapeJson(const model::ModelConfig& m) {
  return {{"layers", m.layers},         {"width", m.width},       {"heads", m.heads},
          {"ffn_hidden", m.ffn_hidden}, {"blocks", m.blocks},     {"context", m.context},
          {"vocab_size", m.vocab_size}, {"norm_eps", m.norm_eps}, {"key_norm_eps", m.key_norm_eps},
          {"rope_theta", m.rope_theta}};
}

// The data section: the same in the resolved config and the fingerprint (which shards, in what
// order, what is held out), so a change of any of it changes the fingerprint.
nlohmann::json DataJson(const DataConfig& d) {
  return {{"train_shards", d.train_shards}, {"val_shards", d.val_shards},
          {"test_shards", d.test_shards},   {"tokenizer", d.tokenizer},
          {"data_seed", d.data_seed},       {"val_windows", d.val_windows},
          {"test_windows", d.test_windows}};
}

nlohmann::json OptimJson(const OptimConfig& o) {
  return {{"peak_lr", o.peak_lr},
          {"min_lr_ratio", o.min_lr_ratio},
          {"warmup_steps", o.warmup_steps},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"grad_clip", o.grad_clip},
          {"lr_decay", LrDecayName(o.lr_decay)}};
}

nlohmann::json ScheduleJson(const ScheduleConfig& s, bool with_stop) {
  nlohmann::json j = {{"total_tokens", s.total_tokens},
                      {"global_batch_tokens", s.global_batch_tokens},
                      {"micro_batch_sequences", s.micro_batch_sequences},
                      {"milestones_tokens", s.milestones_tokens},
                      {"total_steps", s.total_steps},
                      {"global_batch_sequences", s.global_batch_sequences},
                      {"grad_accum_steps", s.grad_accum_steps},
                      {"milestone_steps", s.milestone_steps}};
  if (with_stop) {
    j["stop_at_tokens"] = s.stop_at_tokens;
    j["stop_step"] = s.stop_step;
  }
  return j;
}

void Differences(const nlohmann::json& a, const nlohmann::json& b, const std::string& path,
                 std::vector<std::string>& out) {
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (auto it = a.begin(); it != a.end(); ++it) keys.insert(it.key());
    for (auto it = b.begin(); it != b.end(); ++it) keys.insert(it.key());
    for (const auto& k : keys) {
      const std::string p = FieldPath(path, k);
      if (!a.contains(k) || !b.contains(k)) {
        out.push_back(p);
      } else {
        Differences(a.at(k), b.at(k), p, out);
      }
    }
    return;
  }
  if (a != b) out.push_back(path);
}

}  // namespace

std::string_view BackendName(Backend b) { return Canonical(kBackendEnum, b).short_name; }
std::string_view DeviceName(Device d) { return Canonical(kDeviceEnum, d).short_name; }
std::string_view PrecisionName(Precision p) { return Canonical(kPrecisionEnum, p).short_name; }
std::string_view LrDecayName(LrDecay d) { return Canonical(kLrDecayEnum, d).short_name; }

nlohmann::json ResolvedConfigJson(const RunConfig& cfg) {
  nlohmann::json j;
  j["run_id"] = cfg.run_id;
  j["sweep_id"] = cfg.sweep_id;
  j["job_id"] = cfg.job_id;
  j["init_seed"] = cfg.init_seed;
  j["recipe"] = cfg.recipe;
  j["labels"] = cfg.labels;
  j["model"] = {{"preset", cfg.preset},
                {"arm", model::ArmName(cfg.model.arm)},
                {"shape", ShapeJson(cfg.model)}};
  j["data"] = DataJson(cfg.data);
  j["optim"] = OptimJson(cfg.optim);
  j["schedule"] = ScheduleJson(cfg.schedule, /*with_stop=*/true);
  const ParallelConfig& p = cfg.parallel;
  j["parallel"] = {{"world_size", p.world_size},
                   {"threads_per_rank", p.threads_per_rank},
                   {"backend", BackendName(p.backend)},
                   {"device", DeviceName(p.device)},
                   {"precision", PrecisionName(p.precision)},
                   {"allreduce_bucket_bytes", p.allreduce_bucket_bytes}};
  const CheckpointConfig& c = cfg.checkpoint;
  j["checkpoint"] = {{"dir", c.dir},
                     {"every_steps", c.every_steps},
                     {"keep_last", c.keep_last},
                     {"resume_from", c.resume_from}};
  j["metrics"] = {{"train_event_every_steps", cfg.train_event_every_steps}};
  return j;
}

nlohmann::json RunSpecJson(const RunConfig& cfg) {
  // Protobuf's JSON mapping with proto field names: 64-bit integers as decimal strings, enums
  // by their proto names. Every field is explicit, so the recipe fills nothing on re-reading.
  auto str = [](auto v) { return std::to_string(v); };
  auto strs = [&str](const std::vector<int64_t>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (int64_t x : v) a.push_back(str(x));
    return a;
  };
  nlohmann::json j;
  j["run_id"] = cfg.run_id;
  j["sweep_id"] = cfg.sweep_id;
  j["job_id"] = cfg.job_id;
  j["init_seed"] = str(cfg.init_seed);
  j["model"] = {{"preset", cfg.preset},
                {"arm", model::ArmName(cfg.model.arm)},
                {"shape", ShapeJson(cfg.model)}};
  const DataConfig& d = cfg.data;
  j["data"] = {{"train_shards", d.train_shards},     {"val_shards", d.val_shards},
               {"test_shards", d.test_shards},       {"tokenizer", d.tokenizer},
               {"data_seed", str(d.data_seed)},      {"val_windows", str(d.val_windows)},
               {"test_windows", str(d.test_windows)}};
  const OptimConfig& o = cfg.optim;
  j["optim"] = {{"peak_lr", o.peak_lr},
                {"min_lr_ratio", o.min_lr_ratio},
                {"warmup_steps", str(o.warmup_steps)},
                {"beta1", o.beta1},
                {"beta2", o.beta2},
                {"eps", o.eps},
                {"weight_decay", o.weight_decay},
                {"grad_clip", o.grad_clip},
                {"lr_decay", Canonical(kLrDecayEnum, o.lr_decay).proto}};
  const ScheduleConfig& s = cfg.schedule;
  j["schedule"] = {{"total_tokens", str(s.total_tokens)},
                   {"global_batch_tokens", str(s.global_batch_tokens)},
                   {"micro_batch_sequences", s.micro_batch_sequences},
                   {"milestones_tokens", strs(s.milestones_tokens)},
                   {"stop_at_tokens", str(s.stop_at_tokens)}};
  const ParallelConfig& p = cfg.parallel;
  j["parallel"] = {{"world_size", p.world_size},
                   {"threads_per_rank", p.threads_per_rank},
                   {"backend", Canonical(kBackendEnum, p.backend).proto},
                   {"device", Canonical(kDeviceEnum, p.device).proto},
                   {"precision", Canonical(kPrecisionEnum, p.precision).proto},
                   {"allreduce_bucket_bytes", str(p.allreduce_bucket_bytes)}};
  const CheckpointConfig& c = cfg.checkpoint;
  j["checkpoint"] = {{"dir", c.dir},
                     {"every_steps", str(c.every_steps)},
                     {"keep_last", c.keep_last},
                     {"resume_from", c.resume_from},
                     {"stored_eval_milestones", strs(c.stored_eval_milestones)},
                     {"stored_evals_known", c.stored_evals_known},
                     {"coordinator_checkpoint", c.coordinator_checkpoint}};
  j["metrics"] = {{"train_event_every_steps", str(cfg.train_event_every_steps)}};
  j["recipe"] = cfg.recipe;
  j["labels"] = cfg.labels;
  return j;
}

nlohmann::json NumericFingerprint(const RunConfig& cfg) {
  nlohmann::json j;
  j["model"] = {{"arm", model::ArmName(cfg.model.arm)}, {"shape", ShapeJson(cfg.model)}};
  j["init_seed"] = cfg.init_seed;
  j["data"] = DataJson(cfg.data);
  j["optim"] = OptimJson(cfg.optim);
  // The stopping point is left out: stopping earlier or later changes no number of the steps
  // both runs take (a control stopped at 0.5B may be resumed to run on).
  j["schedule"] = ScheduleJson(cfg.schedule, /*with_stop=*/false);
  j["parallel"] = {{"world_size", cfg.parallel.world_size},
                   {"precision", PrecisionName(cfg.parallel.precision)},
                   {"device", DeviceName(cfg.parallel.device)}};
  return j;
}

std::vector<std::string> FingerprintDifferences(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<std::string> out;
  Differences(a, b, "", out);
  return out;
}

}  // namespace rdattn
