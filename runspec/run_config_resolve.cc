// The resolver of the run configuration: from the RawSpec the reader built to a RunConfig, with
// the recipe, the defaults (the initialisers of run_config.h, nowhere else), the derived
// schedule and every cross-field check; then ParseRunConfig, which runs reader and resolver.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>

#include "runspec/run_config_internal.h"

namespace rdattn {
namespace {

using run_config_internal::Camel;
using run_config_internal::Describe;
using run_config_internal::kTopLevel;
using run_config_internal::OJson;
using run_config_internal::Quote;
using run_config_internal::RawCheckpoint;
using run_config_internal::RawModel;
using run_config_internal::RawOptim;
using run_config_internal::RawParallel;
using run_config_internal::RawSchedule;
using run_config_internal::RawShape;
using run_config_internal::RawSpec;
using run_config_internal::ReadRunSpec;

// ------------------------------------------------------------------------------------------
// The paper recipe (MODEL.md Part I, "Recipe for the paper scale").
constexpr int64_t kPaperBatchTokens = 524288;                           // 512 sequences of 1024
constexpr int64_t kPaperSteps = 3815;                                   // 2.0B tokens
constexpr int64_t kPaperTotalTokens = kPaperSteps * kPaperBatchTokens;  // 2,000,158,720
constexpr int64_t kPaperMilestoneSteps[] = {477, 954, 1908, 3815};
constexpr int64_t kPaperWarmupSteps = 190;
constexpr double kPaperPeakLrS = 6e-4;
constexpr double kPaperPeakLrM = 3e-4;

// The default warmup when no recipe sets it: this share of the steps (rounded).
constexpr double kDefaultWarmupFraction = 0.05;

constexpr int64_t kGpt2Ids = 50257;  // 50256 BPE tokens + <|endoftext|>
constexpr int64_t kByteIds = 257;    // 256 bytes + EOT

std::string Num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// ------------------------------------------------------------------------------------------
// Resolution: recipe, defaults, derived values and every cross-field check.

int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }  // a ≥ 0, b > 0

bool Finite(double v) { return std::isfinite(v); }

// What resolution has established so far. A check that needs a value is skipped while the value
// is not known to be good: the value has an error of its own already.
struct Known {
  bool paper = false;     // recipe "paper"
  bool shape_ok = false;  // cfg.model is a complete, valid shape (ResolveModel)
  bool world_ok = false;  // cfg.parallel.world_size is valid (ResolveParallel)
  bool steps_ok = false;  // cfg.schedule.total_steps is computed (ResolveSchedule)
};

void ResolveModel(const RawSpec& r, RunConfig& cfg, Known& known, FieldErrors& e) {
  const RawModel& rm = r.model;
  std::optional<model::Arm> arm;
  if (rm.arm.empty()) {
    e.CheckAndMarkBad("model.arm", "required; valid: " + model::ValidArmNames());
  } else {
    arm = model::ParseArm(rm.arm);
    if (!arm) {
      e.CheckAndMarkBad("model.arm",
                        "unknown arm " + Quote(rm.arm) + "; valid: " + model::ValidArmNames());
    }
  }
  model::ModelConfig m;
  m.arm = arm.value_or(model::Arm::kBlock);
  bool preset_ok = true;
  if (!rm.preset.empty()) {
    if (auto p = model::Preset(rm.preset, m.arm)) {
      m = *p;
    } else {
      std::string names;
      for (const auto& n : model::PresetNames()) names += (names.empty() ? "" : ", ") + n;
      e.CheckAndMarkBad("model.preset", "unknown preset " + Quote(rm.preset) + "; valid: " + names);
      preset_ok = false;
    }
  }
  const bool explicit_shape = rm.preset.empty();
  bool complete = true;
  auto take_int = [&](const char* name, const std::optional<int64_t>& v, int64_t& dst) {
    const std::string path = std::string("model.shape.") + name;
    if (v) {
      dst = *v;
    } else if (explicit_shape) {
      e.CheckAndMarkBad(path, "required when model.preset is empty");
      dst = 0;
      complete = false;
    }
  };
  const RawShape& s = rm.shape;
  take_int("layers", s.layers, m.layers);
  take_int("width", s.width, m.width);
  take_int("heads", s.heads, m.heads);
  take_int("ffn_hidden", s.ffn_hidden, m.ffn_hidden);
  take_int("blocks", s.blocks, m.blocks);
  take_int("context", s.context, m.context);
  take_int("vocab_size", s.vocab_size, m.vocab_size);
  if (s.norm_eps) m.norm_eps = *s.norm_eps;
  if (s.key_norm_eps) m.key_norm_eps = *s.key_norm_eps;
  if (s.rope_theta) m.rope_theta = *s.rope_theta;

  // An unknown preset leaves no base shape: checking the defaults would report nonsense.
  known.shape_ok = preset_ok && complete;
  if (preset_ok) {
    const std::vector<FieldError> problems = m.Validate();
    for (const FieldError& p : problems) e.Check(FieldPath("model.shape", p.path), p.reason);
    if (!problems.empty()) known.shape_ok = false;
  }
  cfg.preset = rm.preset;
  cfg.model = m;
}

void ResolveData(const RawSpec& r, RunConfig& cfg, const Known& known, FieldErrors& e) {
  cfg.data = r.data;
  const DataConfig& d = cfg.data;
  if (d.train_shards.empty())
    e.Check("data.train_shards", "required: at least one shard path or glob");
  for (const auto* list : {&d.train_shards, &d.val_shards, &d.test_shards}) {
    const char* name = list == &d.train_shards ? "data.train_shards"
                       : list == &d.val_shards ? "data.val_shards"
                                               : "data.test_shards";
    for (size_t i = 0; i < list->size(); ++i)
      if ((*list)[i].empty()) e.Check(FieldIndex(name, i), "empty path");
  }
  int64_t ids = 0;
  if (d.tokenizer.empty()) {
    e.Check("data.tokenizer", "required; valid: gpt2, byte");
  } else if (d.tokenizer == "gpt2") {
    ids = kGpt2Ids;
  } else if (d.tokenizer == "byte") {
    ids = kByteIds;
  } else {
    e.Check("data.tokenizer", "unknown tokenizer " + Quote(d.tokenizer) + "; valid: gpt2, byte");
  }
  if (ids > 0 && known.shape_ok && cfg.model.vocab_size < ids) {
    e.Check("model.shape.vocab_size", std::to_string(cfg.model.vocab_size) +
                                          " is smaller than the " + d.tokenizer + " tokenizer's " +
                                          std::to_string(ids) + " ids");
  }
  if (d.val_windows < 0)
    e.Check("data.val_windows", "must not be negative, got " + std::to_string(d.val_windows));
  if (d.test_windows < 0)
    e.Check("data.test_windows", "must not be negative, got " + std::to_string(d.test_windows));
}

void ResolveParallel(const RawSpec& r, RunConfig& cfg, Known& known, FieldErrors& e) {
  const RawParallel& rp = r.parallel;
  ParallelConfig& p = cfg.parallel;
  // `p` starts as the defaults (run_config.h); 0 or unset keeps them.
  known.world_ok = true;
  if (rp.world_size < 0) {
    e.CheckAndMarkBad("parallel.world_size", "must be at least 1 (0 means " +
                                                 std::to_string(p.world_size) + "), got " +
                                                 std::to_string(rp.world_size));
    known.world_ok = false;
  }
  if (rp.world_size > 0) p.world_size = static_cast<int>(rp.world_size);
  if (rp.threads_per_rank < 0)
    e.Check("parallel.threads_per_rank", "must not be negative (0: the launcher chooses), got " +
                                             std::to_string(rp.threads_per_rank));
  p.threads_per_rank = static_cast<int>(std::max<int64_t>(0, rp.threads_per_rank));
  p.backend = rp.backend.value_or(p.backend);
  p.device = rp.device.value_or(p.device);
  p.precision = rp.precision.value_or(p.precision);
  if (rp.allreduce_bucket_bytes < 0) {
    e.Check("parallel.allreduce_bucket_bytes", "must be positive (0: the default of " +
                                                   std::to_string(p.allreduce_bucket_bytes >> 20) +
                                                   " MiB), got " +
                                                   std::to_string(rp.allreduce_bucket_bytes));
  }
  if (rp.allreduce_bucket_bytes > 0) p.allreduce_bucket_bytes = rp.allreduce_bucket_bytes;

  if (p.precision == Precision::kBf16 && p.device == Device::kCpu)
    e.Check("parallel.precision", "bf16 needs parallel.device cuda");
  if (p.backend == Backend::kNccl && p.device == Device::kCpu)
    e.Check("parallel.backend", "nccl needs parallel.device cuda (or auto)");
  if (p.backend == Backend::kLocal && p.world_size > 1)
    e.Check("parallel.backend",
            "local runs only at parallel.world_size 1, got " + std::to_string(p.world_size));
}

void ResolveSchedule(const RawSpec& r, RunConfig& cfg, Known& known, FieldErrors& e) {
  const bool paper = known.paper;
  const RawSchedule& rs = r.schedule;
  ScheduleConfig& s = cfg.schedule;
  s.total_tokens = rs.total_tokens != 0 ? rs.total_tokens : paper ? kPaperTotalTokens : 0;
  s.global_batch_tokens = rs.global_batch_tokens != 0 ? rs.global_batch_tokens
                          : paper                     ? kPaperBatchTokens
                                                      : 0;
  s.micro_batch_sequences = rs.micro_batch_sequences;
  s.stop_at_tokens = rs.stop_at_tokens;
  bool milestones_from_recipe = false;
  if (!rs.milestones_tokens.empty() || e.Bad("schedule.milestones_tokens")) {
    s.milestones_tokens = rs.milestones_tokens;
  } else if (paper) {
    milestones_from_recipe = true;
    for (int64_t step : kPaperMilestoneSteps)
      s.milestones_tokens.push_back(step * kPaperBatchTokens);
  }

  bool total_ok = true, batch_ok = true;
  if (s.total_tokens == 0) {
    e.CheckAndMarkBad("schedule.total_tokens", "required: the token budget (or recipe \"paper\")");
    total_ok = false;
  } else if (s.total_tokens < 0) {
    e.Check("schedule.total_tokens", "must be positive, got " + std::to_string(s.total_tokens));
    total_ok = false;
  }
  if (s.global_batch_tokens == 0) {
    e.CheckAndMarkBad("schedule.global_batch_tokens",
                      "required: tokens per optimizer step (or recipe \"paper\")");
    batch_ok = false;
  } else if (s.global_batch_tokens < 0) {
    e.Check("schedule.global_batch_tokens",
            "must be positive, got " + std::to_string(s.global_batch_tokens));
    batch_ok = false;
  }
  bool micro_ok = true;
  if (s.micro_batch_sequences < 0) {
    e.Check("schedule.micro_batch_sequences",
            "must be positive (0: the global batch's sequences / parallel.world_size), got " +
                std::to_string(s.micro_batch_sequences));
    micro_ok = false;
  }

  // Batch geometry.
  if (batch_ok && known.shape_ok) {
    const int64_t context = cfg.model.context;
    if (s.global_batch_tokens % context != 0) {
      e.Check("schedule.global_batch_tokens", std::to_string(s.global_batch_tokens) +
                                                  " is not a multiple of the context (" +
                                                  std::to_string(context) + ")");
    } else {
      s.global_batch_sequences = s.global_batch_tokens / context;
      const int64_t world = cfg.parallel.world_size;
      if (known.world_ok && micro_ok) {
        if (s.micro_batch_sequences == 0)
          s.micro_batch_sequences = std::max<int64_t>(1, s.global_batch_sequences / world);
        const int64_t per_pass = world * s.micro_batch_sequences;
        // A derived micro batch must fit the field it is written back to (int32 in the RunSpec
        // and in every stored job); a given one was read as an int32 already.
        if (s.micro_batch_sequences > std::numeric_limits<int32_t>::max()) {
          e.Check("schedule.global_batch_tokens",
                  "the global batch of " + std::to_string(s.global_batch_sequences) +
                      " sequences gives " + std::to_string(s.micro_batch_sequences) +
                      " per rank, above the largest schedule.micro_batch_sequences (" +
                      std::to_string(std::numeric_limits<int32_t>::max()) + ")");
        } else if (s.global_batch_sequences % per_pass != 0) {
          e.Check("schedule.global_batch_tokens",
                  "the global batch of " + std::to_string(s.global_batch_sequences) +
                      " sequences is not divisible by parallel.world_size (" +
                      std::to_string(world) + ") × schedule.micro_batch_sequences (" +
                      std::to_string(s.micro_batch_sequences) + ")");
        } else {
          s.grad_accum_steps = s.global_batch_sequences / per_pass;
        }
      }
    }
  }

  known.steps_ok = total_ok && batch_ok;
  const bool steps_ok = known.steps_ok;
  if (steps_ok) s.total_steps = CeilDiv(s.total_tokens, s.global_batch_tokens);
  const std::string budget =
      " is beyond the budget schedule.total_tokens (" + std::to_string(s.total_tokens) + ")";

  if (!e.Bad("schedule.milestones_tokens")) {
    for (size_t i = 0; i < s.milestones_tokens.size(); ++i) {
      const int64_t m = s.milestones_tokens[i];
      const std::string path = FieldIndex("schedule.milestones_tokens", i);
      if (m <= 0) {
        e.Check(path, "must be positive, got " + std::to_string(m));
        continue;
      }
      if (i > 0 && m <= s.milestones_tokens[i - 1]) {
        e.Check(path, std::to_string(m) + " is not greater than the previous milestone (" +
                          std::to_string(s.milestones_tokens[i - 1]) +
                          "); milestones must be sorted and unique");
        continue;
      }
      if (!steps_ok) continue;
      const int64_t step = CeilDiv(m, s.global_batch_tokens);
      if (step > s.total_steps) {
        e.Check(path, std::to_string(m) +
                          (milestones_from_recipe ? " (the paper recipe's milestone)" : "") +
                          budget);
        continue;
      }
      s.milestone_steps.push_back(step);
    }
  }
  if (s.stop_at_tokens < 0) {
    e.Check("schedule.stop_at_tokens", "must not be negative (0: run the whole schedule), got " +
                                           std::to_string(s.stop_at_tokens));
  } else if (steps_ok) {
    if (s.stop_at_tokens == 0) {
      s.stop_step = s.total_steps;
    } else {
      s.stop_step = CeilDiv(s.stop_at_tokens, s.global_batch_tokens);
      if (s.stop_step > s.total_steps) {
        e.Check("schedule.stop_at_tokens", std::to_string(s.stop_at_tokens) + budget);
        s.stop_step = s.total_steps;
      }
    }
  }
}

void ResolveOptim(const RawSpec& r, RunConfig& cfg, const Known& known, FieldErrors& e) {
  const bool paper = known.paper, steps_ok = known.steps_ok;
  const RawOptim& ro = r.optim;
  OptimConfig& o = cfg.optim;
  if (ro.peak_lr) {
    o.peak_lr = *ro.peak_lr;
    if (!(Finite(o.peak_lr) && o.peak_lr > 0))
      e.Check("optim.peak_lr", "must be a positive finite number, got " + Num(o.peak_lr));
  } else if (paper && (cfg.preset == "S" || cfg.preset == "M")) {
    o.peak_lr = cfg.preset == "S" ? kPaperPeakLrS : kPaperPeakLrM;
  } else if (paper) {
    e.Check("optim.peak_lr",
            "required: the paper recipe defines it only for model.preset S "
            "(6e-4) and M (3e-4), and model.preset is " +
                Quote(cfg.preset));
  } else {
    e.Check("optim.peak_lr", "required (a positive learning rate)");
  }
  // `o` starts as the defaults (run_config.h); an unset field keeps its default.
  o.min_lr_ratio = ro.min_lr_ratio.value_or(o.min_lr_ratio);
  if (!(Finite(o.min_lr_ratio) && o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1))
    e.Check("optim.min_lr_ratio", "must be in [0, 1], got " + Num(o.min_lr_ratio));

  std::string warmup_source;
  if (ro.warmup_steps) {
    o.warmup_steps = *ro.warmup_steps;
  } else if (paper) {
    o.warmup_steps = kPaperWarmupSteps;
    warmup_source = " (the paper recipe's value)";
  } else if (steps_ok) {
    o.warmup_steps =
        std::llround(kDefaultWarmupFraction * static_cast<double>(cfg.schedule.total_steps));
    warmup_source = " (the default, " + std::to_string(std::lround(kDefaultWarmupFraction * 100)) +
                    "% of the steps)";
  }
  if (o.warmup_steps < 0) {
    e.Check("optim.warmup_steps", "must not be negative, got " + std::to_string(o.warmup_steps));
  } else if (steps_ok && o.warmup_steps >= cfg.schedule.total_steps) {
    e.Check("optim.warmup_steps", std::to_string(o.warmup_steps) + warmup_source +
                                      " must be less than the schedule's total steps (" +
                                      std::to_string(cfg.schedule.total_steps) + ")");
  }

  auto unit_open = [&](const char* path, const std::optional<double>& v, double& dst) {
    dst = v.value_or(dst);
    if (!(Finite(dst) && dst >= 0 && dst < 1)) e.Check(path, "must be in [0, 1), got " + Num(dst));
  };
  unit_open("optim.beta1", ro.beta1, o.beta1);
  unit_open("optim.beta2", ro.beta2, o.beta2);
  o.eps = ro.eps.value_or(o.eps);
  if (!(Finite(o.eps) && o.eps > 0))
    e.Check("optim.eps", "must be a positive finite number, got " + Num(o.eps));
  auto non_negative = [&](const char* path, const std::optional<double>& v, double& dst) {
    dst = v.value_or(dst);
    if (!(Finite(dst) && dst >= 0)) e.Check(path, "must be a finite number >= 0, got " + Num(dst));
  };
  non_negative("optim.weight_decay", ro.weight_decay, o.weight_decay);
  non_negative("optim.grad_clip", ro.grad_clip, o.grad_clip);
  o.lr_decay = ro.lr_decay.value_or(o.lr_decay);
}

void ResolveRest(const RawSpec& r, RunConfig& cfg, FieldErrors& e) {
  const RawCheckpoint& rc = r.checkpoint;
  CheckpointConfig& c = cfg.checkpoint;
  c.dir = rc.dir;
  c.resume_from = rc.resume_from;
  c.stored_eval_milestones = rc.stored_eval_milestones;
  c.stored_evals_known = rc.stored_evals_known;
  c.coordinator_checkpoint = rc.coordinator_checkpoint;
  c.every_steps = rc.every_steps;
  if (rc.every_steps < 0)
    e.Check("checkpoint.every_steps",
            "must not be negative (0: only at the end and on SIGTERM), got " +
                std::to_string(rc.every_steps));
  // `c` and cfg.train_event_every_steps start as the defaults (run_config.h); 0 keeps them.
  if (rc.keep_last < 0) {
    e.Check("checkpoint.keep_last", "must be at least 1 (0: the default of " +
                                        std::to_string(c.keep_last) + "), got " +
                                        std::to_string(rc.keep_last));
  }
  if (rc.keep_last > 0) c.keep_last = static_cast<int>(rc.keep_last);

  if (r.train_event_every_steps < 0)
    e.Check("metrics.train_event_every_steps",
            "must be at least 1 (0: every step), got " + std::to_string(r.train_event_every_steps));
  if (r.train_event_every_steps > 0) cfg.train_event_every_steps = r.train_event_every_steps;
}

FieldErrorsOr<RunConfig> ParseOrdered(const OJson& spec) {
  if (!spec.is_object()) {
    return std::vector<FieldError>{{"RunSpec", "expected a JSON object, got " + Describe(spec)}};
  }
  FieldErrors e("RunSpec");
  RawSpec r;
  ReadRunSpec(spec, r, e);
  const size_t syntax_errors = e.size();

  RunConfig cfg;
  cfg.run_id = r.run_id;
  cfg.sweep_id = r.sweep_id;
  cfg.job_id = r.job_id;
  cfg.init_seed = r.init_seed;
  cfg.labels = r.labels;
  cfg.recipe = r.recipe;
  Known known;
  known.paper = r.recipe == "paper";
  if (!r.recipe.empty() && !known.paper)
    e.Check("recipe", "unknown recipe " + Quote(r.recipe) + "; valid: paper (or empty)");

  ResolveModel(r, cfg, known, e);
  ResolveData(r, cfg, known, e);
  ResolveParallel(r, cfg, known, e);
  ResolveSchedule(r, cfg, known, e);
  ResolveOptim(r, cfg, known, e);
  ResolveRest(r, cfg, e);

  if (e.empty()) return cfg;
  // Validation errors follow the document's order of top-level sections.
  std::vector<std::string> doc_order;
  for (auto it = spec.begin(); it != spec.end(); ++it) doc_order.push_back(it.key());
  e.StableSortFrom(syntax_errors, [&doc_order](const FieldError& error) {
    const std::string top = error.path.substr(0, error.path.find_first_of(".["));
    for (size_t i = 0; i < doc_order.size(); ++i)
      if (doc_order[i] == top || doc_order[i] == Camel(top)) return static_cast<int>(i);
    for (size_t i = 0; i < std::size(kTopLevel); ++i)
      if (kTopLevel[i] == top) return 1000 + static_cast<int>(i);
    return 2000;
  });
  return std::move(e).Take();
}

}  // namespace

FieldErrorsOr<RunConfig> ParseRunConfig(const nlohmann::json& spec) {
  // nlohmann::json keeps object keys sorted; the converted copy keeps that order.
  return ParseOrdered(OJson(spec));
}

FieldErrorsOr<RunConfig> ParseRunConfigText(std::string_view json_text) {
  OJson spec;
  try {
    spec = OJson::parse(json_text.begin(), json_text.end());
  } catch (const OJson::exception& ex) {
    // parse_error, and out_of_range for a number beyond double ("1e999").
    return std::vector<FieldError>{{"RunSpec", std::string("invalid JSON: ") + ex.what()}};
  }
  return ParseOrdered(spec);
}

std::vector<EvalMilestone> EvalMilestones(const ScheduleConfig& s) {
  std::vector<EvalMilestone> out;
  bool last_is_milestone = false;
  for (size_t i = 0; i < s.milestone_steps.size() && i < s.milestones_tokens.size(); ++i) {
    if (s.milestone_steps[i] > s.stop_step) continue;
    out.push_back({s.milestone_steps[i], s.milestones_tokens[i]});
    if (s.milestone_steps[i] == s.stop_step) last_is_milestone = true;
  }
  if (!last_is_milestone && s.stop_step > 0) {
    out.push_back({s.stop_step, s.stop_step * s.global_batch_tokens});
  }
  return out;
}

}  // namespace rdattn
