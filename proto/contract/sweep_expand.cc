// ExpandSweep: validates a SweepSpec and expands it into jobs, one per (scale, seed, arm) and
// per (scale, seed, control). The sweep's own rules (names, arms, seeds, controls, priority)
// are checked here; every job's RunSpec is then checked by ParseRunSpec (= ParseRunConfig, the
// trainer's one validation function), and the paths of its FieldErrors are renamed to the sweep
// field the user wrote ("model.shape.width" -> "scales[0].shape.width"). Each distinct error is
// reported once, with the scales it occurs at when it does not occur at every scale.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "model/config.h"
#include "proto/contract/contract.h"

namespace rdattn::contract {
namespace {

// Labels every job's RunSpec gets from its place in the sweep; a sweep may not set them.
const char* const kJobLabels[] = {"sweep", "scale", "arm", "seed", "pair_group"};

using strings::Quote;

std::string FormatDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string ListOf(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// A scale name is a part of every job id, and job ids become folder names: the worker's job
// folder (one path component: "<sweep_id>_<scale>_s<seed>_<arm>", at most 255 bytes) and the
// sweep's "<checkpoint.dir>/<job id>". 64 characters leave room for the rest of the id.
constexpr size_t kMaxScaleNameChars = 64;

bool ValidScaleName(const std::string& name) {
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return !name.empty();
}

// Token shards hold uint16 ids, and the trainer opens them with the model's vocabulary, which
// must be at most 65536 (worker/data/shard.h, Shard::Open). A larger vocabulary passes
// ParseRunConfig but would fail every job when its shards are opened.
constexpr int64_t kMaxShardVocab = 65536;

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// One arm to run at every (scale, seed): a main arm or a control.
struct ArmPlan {
  std::string arm;
  std::string field;           // "arms[1]" or "controls[0].arm"
  int control_index = -1;      // index into SweepSpec.controls, or -1 for a main arm
  std::string parent_arm;      // controls only
  int64_t stop_at_tokens = 0;  // controls only
};

// Where one job came from, to rename its RunSpec errors.
struct JobOrigin {
  int scale_index = 0;
  int seed_index = 0;
  const ArmPlan* arm = nullptr;
  const std::string* seeds_field = nullptr;  // "seeds" or "seed_policy.initial"
};

// RunSpec field path -> the sweep field the user wrote.
std::string SweepField(const std::string& path, const pb::SweepSpec& spec, const JobOrigin& o) {
  const pb::ScaleSpec& scale = spec.scales(o.scale_index);
  std::string scale_field = FieldIndex("scales", o.scale_index);
  auto starts = [&path](const std::string& root) {
    return path == root || StartsWith(path, root + ".") || StartsWith(path, root + "[");
  };
  if (starts("model.preset")) return scale_field + ".preset";
  if (starts("model.shape")) return scale_field + path.substr(std::string("model").size());
  if (starts("model.arm")) return o.arm->field;
  if (starts("model")) return scale_field;
  if (starts("init_seed") || starts("data.data_seed")) {
    return FieldIndex(o.seeds_field != nullptr ? *o.seeds_field : "seeds", o.seed_index);
  }
  if (starts("optim.peak_lr") && scale.has_peak_lr()) return scale_field + ".peak_lr";
  if (starts("parallel.world_size") && scale.world_size() != 0) {
    return scale_field + ".world_size";
  }
  if (starts("schedule.micro_batch_sequences") && scale.micro_batch_sequences() != 0) {
    return scale_field + ".micro_batch_sequences";
  }
  if (starts("schedule.stop_at_tokens") && o.arm->control_index >= 0) {
    return FieldIndex("controls", o.arm->control_index) + ".stop_at_tokens";
  }
  if (starts("run_id") || starts("job_id") || starts("sweep_id")) return "sweep_id";
  if (path == "RunSpec" || path.empty()) return "SweepSpec";
  return path;
}

// The RunSpec errors of all jobs, renamed and deduplicated, with the scales each occurs at.
class RunErrors {
 public:
  explicit RunErrors(const pb::SweepSpec& spec) : spec_(spec) {}

  void AddRunErrors(const std::vector<FieldError>& errors, const JobOrigin& origin) {
    for (const FieldError& e : errors) {
      Add({SweepField(e.path, spec_, origin), e.reason}, origin.scale_index);
    }
  }

  void Add(const FieldError& error, int scale_index) {
    auto it = scales_.find(error);
    if (it == scales_.end()) {
      order_.push_back(error);
      it = scales_.emplace(error, std::set<int>{}).first;
    }
    it->second.insert(scale_index);
  }

  // Appends every error to `errors`; an error on a sweep-wide field that only some scales hit
  // says which ("... (at scale 'M')").
  void AppendTo(FieldErrors& errors) const {
    const int scale_count = spec_.scales_size();
    for (const FieldError& error : order_) {
      const std::set<int>& at = scales_.at(error);
      if (scale_count <= 1 || static_cast<int>(at.size()) == scale_count ||
          StartsWith(error.path, "scales[")) {
        errors.Add(error);
        continue;
      }
      std::vector<std::string> names;
      names.reserve(at.size());
      for (int i : at) names.push_back(Quote(ScaleName(spec_.scales(i))));
      errors.Add(error.path, error.reason + " (at scale" + (names.size() > 1 ? "s " : " ") +
                                 ListOf(names) + ")");
    }
  }

 private:
  const pb::SweepSpec& spec_;
  std::vector<FieldError> order_;
  std::map<FieldError, std::set<int>> scales_;
};

// --- The sweep's own rules -----------------------------------------------------------------

void CheckScales(const pb::SweepSpec& spec, FieldErrors& errors) {
  if (spec.scales_size() == 0) {
    errors.Add("scales", "must not be empty (e.g. [{name: S, preset: S}])");
  }
  std::set<std::string> names;
  for (int i = 0; i < spec.scales_size(); ++i) {
    const pb::ScaleSpec& scale = spec.scales(i);
    const std::string field = FieldIndex("scales", i);
    const std::string name = ScaleName(scale);
    if (name.empty()) {
      errors.Add(field + ".name",
                 "required when scales[" + std::to_string(i) + "].preset is empty");
    } else if (!ValidScaleName(name)) {
      errors.Add(field + (scale.name().empty() ? ".preset" : ".name"),
                 Quote(name) + " may contain only letters, digits, '_', '-' and '.'");
    } else if (name == "." || name == "..") {
      // "<checkpoint.dir>/<sweep>/../s1/block" would leave the sweep's folder (and meet the
      // jobs of other sweeps there).
      errors.Add(field + ".name", Quote(name) + " is not a usable name (it is a path step)");
    } else if (name.size() > kMaxScaleNameChars) {
      errors.Add(field + ".name", "is " + std::to_string(name.size()) +
                                      " characters long, more than " +
                                      std::to_string(kMaxScaleNameChars) +
                                      " (it is a part of every job id and folder name)");
    } else if (!names.insert(name).second) {
      errors.Add(field + ".name", "duplicate scale name " + Quote(name));
    }
  }
}

// The main arms and the controls, in job order; bad ones are reported and left out.
std::vector<ArmPlan> CheckArms(const pb::SweepSpec& spec, FieldErrors& errors) {
  std::vector<ArmPlan> plans;
  std::set<std::string> main_arms;
  std::vector<std::string> main_list;
  if (spec.arms_size() == 0) errors.Add("arms", "must not be empty (e.g. [block, rd])");
  for (int j = 0; j < spec.arms_size(); ++j) {
    const std::string& arm = spec.arms(j);
    const std::string field = FieldIndex("arms", j);
    if (!model::ParseArm(arm)) {
      errors.Add(field, "unknown arm " + Quote(arm) + "; valid: " + model::ValidArmNames());
    } else if (!main_arms.insert(arm).second) {
      errors.Add(field, "duplicate arm " + Quote(arm));
    } else {
      main_list.push_back(arm);
      plans.push_back(ArmPlan{arm, field, -1, "", 0});
    }
  }

  const std::string reference = ReferenceArm(spec);
  if (spec.arms_size() > 0 && !main_arms.count(reference)) {
    errors.Add("reference_arm",
               spec.reference_arm().empty()
                   ? "not set, and the default " + Quote(reference) + " is not one of arms [" +
                         ListOf(main_list) + "]"
                   : Quote(reference) + " is not one of arms [" + ListOf(main_list) + "]");
  }

  std::set<std::string> control_arms;
  for (int k = 0; k < spec.controls_size(); ++k) {
    const pb::ControlSpec& c = spec.controls(k);
    const std::string field = FieldIndex("controls", k);
    bool ok = true;
    if (c.arm().empty()) {
      errors.Add(field + ".arm", "required");
      ok = false;
    } else if (!model::ParseArm(c.arm())) {
      errors.Add(field + ".arm",
                 "unknown arm " + Quote(c.arm()) + "; valid: " + model::ValidArmNames());
      ok = false;
    } else if (main_arms.count(c.arm())) {
      errors.Add(field + ".arm", Quote(c.arm()) + " is already one of arms (a control needs " +
                                     "an arm of its own)");
      ok = false;
    } else if (!control_arms.insert(c.arm()).second) {
      errors.Add(field + ".arm", "duplicate control arm " + Quote(c.arm()));
      ok = false;
    }
    if (c.parent_arm().empty()) {
      errors.Add(field + ".parent_arm", "required (one of arms [" + ListOf(main_list) + "])");
      ok = false;
    } else if (!main_arms.count(c.parent_arm())) {
      errors.Add(field + ".parent_arm",
                 Quote(c.parent_arm()) + " is not one of arms [" + ListOf(main_list) + "]");
      ok = false;
    }
    if (c.stop_at_tokens() <= 0) {
      errors.Add(field + ".stop_at_tokens",
                 "must be > 0 (the token count the control stops at), got " +
                     std::to_string(c.stop_at_tokens()));
      ok = false;
    }
    if (ok)
      plans.push_back(ArmPlan{c.arm(), field + ".arm", k, c.parent_arm(), c.stop_at_tokens()});
  }
  return plans;
}

// Limits of a seed policy (docs/sweeps.md "Seed policy"): the design's Monte Carlo costs
// simulations x max normal draws at submission.
constexpr int kMaxPolicySeeds = 1000;
constexpr int kMinPolicySimulations = 10000;
constexpr int kMaxPolicySimulations = 2000000;
constexpr double kMaxPolicyDraws = 2e8;

void CheckSeedList(const google::protobuf::RepeatedField<uint64_t>& seeds, const std::string& field,
                   std::set<uint64_t>& seen, FieldErrors& errors) {
  for (int n = 0; n < seeds.size(); ++n) {
    if (!seen.insert(seeds.Get(n)).second) {
      errors.Add(FieldIndex(field, n), "duplicate seed " + std::to_string(seeds.Get(n)));
    }
  }
}

void CheckSeedPolicy(const pb::SeedPolicy& p, FieldErrors& errors) {
  std::set<uint64_t> seen;
  if (p.initial_size() < 2) {
    errors.Add("seed_policy.initial",
               "needs at least 2 seeds (the first look tests a paired t statistic), got " +
                   std::to_string(p.initial_size()));
  }
  CheckSeedList(p.initial(), "seed_policy.initial", seen, errors);
  CheckSeedList(p.next(), "seed_policy.next", seen, errors);
  if (p.max() < p.initial_size() || p.max() > kMaxPolicySeeds) {
    errors.Add("seed_policy.max",
               "must be from the size of initial (" + std::to_string(p.initial_size()) + ") to " +
                   std::to_string(kMaxPolicySeeds) + ", got " + std::to_string(p.max()));
  }
  if (p.max() > p.initial_size() && p.step() < 1) {
    errors.Add("seed_policy.step",
               "must be >= 1 (seeds added after a look), got " + std::to_string(p.step()));
  }
  if (p.next_size() > 0 && p.initial_size() + p.next_size() < p.max()) {
    errors.Add("seed_policy.next", "lists " + std::to_string(p.next_size()) +
                                       " seeds; initial + next must reach max (" +
                                       std::to_string(p.max()) + ")");
  }
  if (p.alpha() != 0 && !(p.alpha() > 0 && p.alpha() < 0.5)) {
    errors.Add("seed_policy.alpha",
               "must be in (0, 0.5) (0: 0.05), got " + FormatDouble(p.alpha()));
  }
  if (!p.boundary().empty() && p.boundary() != "obrien_fleming" && p.boundary() != "pocock") {
    errors.Add("seed_policy.boundary",
               "unknown boundary " + Quote(p.boundary()) + "; valid: obrien_fleming, pocock");
  }
  if (p.has_futility_effect_sd() &&
      !(p.futility_effect_sd() >= 0 && p.futility_effect_sd() <= 100)) {
    errors.Add("seed_policy.futility_effect_sd",
               "must be in [0, 100] standard deviations of delta (0: no futility boundary), got " +
                   FormatDouble(p.futility_effect_sd()));
  }
  if (p.futility_power() != 0 && !(p.futility_power() > 0.5 && p.futility_power() < 1)) {
    errors.Add("seed_policy.futility_power",
               "must be in (0.5, 1) (0: 0.8), got " + FormatDouble(p.futility_power()));
  }
  if (p.simulations() != 0 &&
      (p.simulations() < kMinPolicySimulations || p.simulations() > kMaxPolicySimulations)) {
    errors.Add("seed_policy.simulations", "must be from " + std::to_string(kMinPolicySimulations) +
                                              " to " + std::to_string(kMaxPolicySimulations) +
                                              " (0: 200,000), got " +
                                              std::to_string(p.simulations()));
  } else if (static_cast<double>(p.simulations() == 0 ? 200000 : p.simulations()) * p.max() >
             kMaxPolicyDraws) {
    errors.Add("seed_policy.simulations",
               "simulations x max is more than 2e8 draws (the design would take minutes): lower "
               "one of them");
  }
}

void CheckSeeds(const pb::SweepSpec& spec, FieldErrors& errors) {
  if (spec.has_seed_policy()) {
    if (spec.seeds_size() > 0) {
      errors.Add("seeds", "give a list of seeds or a seed policy (seed_policy), not both");
    }
    CheckSeedPolicy(spec.seed_policy(), errors);
    return;
  }
  if (spec.seeds_size() == 0) errors.Add("seeds", "must not be empty (e.g. [1, 2, 3])");
  std::set<uint64_t> seen;
  CheckSeedList(spec.seeds(), "seeds", seen, errors);
}

void CheckSweepFields(const pb::SweepSpec& spec, FieldErrors& errors) {
  if (spec.name().empty()) errors.Add("name", "required");
  if (spec.priority() < 0) {
    errors.Add("priority",
               "must be >= 0 (higher runs first), got " + std::to_string(spec.priority()));
  }
  if (spec.max_attempts() < 0) {
    errors.Add("max_attempts", "must be >= 1 (0: the default, " +
                                   std::to_string(kDefaultMaxAttempts) + "), got " +
                                   std::to_string(spec.max_attempts()));
  }
  if (!pb::HardwareKind_IsValid(spec.hardware_kind())) {
    errors.Add("hardware_kind", "unknown value " + std::to_string(spec.hardware_kind()));
  }
  if (spec.data().data_seed() != 0) {
    errors.Add("data.data_seed",
               "must not be set in a sweep: each job's data seed is its seed (seeds)");
  }
  if (spec.schedule().stop_at_tokens() != 0) {
    errors.Add("schedule.stop_at_tokens",
               "must not be set in a sweep: controls stop early with controls[].stop_at_tokens");
  }
  if (!spec.checkpoint().resume_from().empty()) {
    errors.Add("checkpoint.resume_from",
               "must not be set in a sweep: every job would resume from the same file");
  }
  for (const char* key : kJobLabels) {
    if (spec.labels().count(key)) {
      errors.Add(FieldPath("labels", key),
                 "reserved: set on every job from its place in the sweep");
    }
  }
}

// --- Jobs ----------------------------------------------------------------------------------

struct JobIds {
  std::string job_id;
  std::string pair_group;
};

JobIds MakeIds(const std::string& sweep_id, const std::string& scale, uint64_t seed,
               const std::string& arm) {
  const std::string prefix = sweep_id.empty() ? "" : sweep_id + "/";
  JobIds ids;
  ids.pair_group = prefix + scale + "/s" + std::to_string(seed);
  ids.job_id = ids.pair_group + "/" + arm;
  return ids;
}

pb::RunSpec MakeRunSpec(const pb::SweepSpec& spec, const std::string& sweep_id,
                        const pb::ScaleSpec& scale, const ArmPlan& arm, uint64_t seed,
                        const JobIds& ids) {
  pb::RunSpec run;
  run.set_run_id(ids.job_id);
  run.set_sweep_id(sweep_id);
  run.set_job_id(ids.job_id);
  run.set_init_seed(seed);
  pb::ModelSpec* model = run.mutable_model();
  model->set_preset(scale.preset());
  model->set_arm(arm.arm);
  *model->mutable_shape() = scale.shape();
  *run.mutable_data() = spec.data();
  run.mutable_data()->set_data_seed(seed);
  *run.mutable_optim() = spec.optim();
  if (scale.has_peak_lr()) run.mutable_optim()->set_peak_lr(scale.peak_lr());
  *run.mutable_schedule() = spec.schedule();
  if (scale.micro_batch_sequences() != 0) {
    run.mutable_schedule()->set_micro_batch_sequences(scale.micro_batch_sequences());
  }
  if (arm.control_index >= 0) run.mutable_schedule()->set_stop_at_tokens(arm.stop_at_tokens);
  *run.mutable_parallel() = spec.parallel();
  if (scale.world_size() != 0) run.mutable_parallel()->set_world_size(scale.world_size());
  *run.mutable_checkpoint() = spec.checkpoint();
  if (!spec.checkpoint().dir().empty()) {
    run.mutable_checkpoint()->set_dir(spec.checkpoint().dir() + "/" + ids.job_id);
  }
  *run.mutable_metrics() = spec.metrics();
  run.set_recipe(spec.recipe());
  auto& labels = *run.mutable_labels();
  for (const auto& [key, value] : spec.labels()) labels[key] = value;
  labels["sweep"] = spec.name();
  labels["scale"] = ScaleName(scale);
  labels["arm"] = arm.arm;
  labels["seed"] = std::to_string(seed);
  labels["pair_group"] = ids.pair_group;
  return run;
}

}  // namespace

FieldErrorsOr<std::vector<pb::JobSpec>> ExpandSweep(const pb::SweepSpec& spec,
                                                    const std::string& sweep_id) {
  FieldErrors errors("SweepSpec");
  CheckSweepFields(spec, errors);
  CheckScales(spec, errors);
  const std::vector<ArmPlan> arms = CheckArms(spec, errors);
  CheckSeeds(spec, errors);

  // Every job's run, through the trainer's validation. Bad scale names still get their runs
  // checked (under the name as written) so that one submission shows every problem; with no
  // valid arm or no seed, a stand-in still checks the shared sections (no job is built then).
  const std::vector<ArmPlan> stand_in_arms = {ArmPlan{"block", "arms", -1, "", 0}};
  const std::vector<ArmPlan>& run_arms = arms.empty() ? stand_in_arms : arms;
  // With a seed policy the sweep starts with its initial seeds (the coordinator adds the rest).
  const bool policy = spec.has_seed_policy();
  const auto& seeds = policy ? spec.seed_policy().initial() : spec.seeds();
  const std::string seeds_field = policy ? "seed_policy.initial" : "seeds";
  const int seed_count = std::max(seeds.size(), 1);
  RunErrors run_errors(spec);
  std::vector<pb::JobSpec> jobs;
  for (int i = 0; i < spec.scales_size(); ++i) {
    const pb::ScaleSpec& scale = spec.scales(i);
    const std::string scale_name = ScaleName(scale);
    for (int n = 0; n < seed_count; ++n) {
      const uint64_t seed = !seeds.empty() ? seeds.Get(n) : 0;
      for (const ArmPlan& arm : run_arms) {
        const JobIds ids = MakeIds(sweep_id, scale_name, seed, arm.arm);
        const JobOrigin origin{i, n, &arm, &seeds_field};
        auto cfg = ParseRunSpec(MakeRunSpec(spec, sweep_id, scale, arm, seed, ids));
        if (!cfg.ok()) {
          if (cfg.errors().empty()) return cfg.status();  // not about a field
          run_errors.AddRunErrors(cfg.errors(), origin);
          continue;
        }
        if (cfg->model.vocab_size > kMaxShardVocab) {
          run_errors.Add({SweepField("model.shape.vocab_size", spec, origin),
                          std::to_string(cfg->model.vocab_size) + " is larger than " +
                              std::to_string(kMaxShardVocab) +
                              ", the most that uint16 token shards can index"},
                         i);
          continue;
        }
        const ScheduleConfig& schedule = cfg->schedule;
        if (arm.control_index >= 0 && schedule.stop_at_tokens > schedule.total_tokens) {
          run_errors.Add({FieldIndex("controls", arm.control_index) + ".stop_at_tokens",
                          std::to_string(schedule.stop_at_tokens) +
                              " is beyond the schedule's total_tokens (" +
                              std::to_string(schedule.total_tokens) + ")"},
                         i);
          continue;
        }
        if (!errors.empty()) continue;  // keep checking runs, build no jobs
        auto run = RunSpecFromConfig(*cfg);
        if (!run.ok()) return run.status();
        pb::JobSpec job;
        job.set_job_id(ids.job_id);
        job.set_sweep_id(sweep_id);
        job.set_pair_group(ids.pair_group);
        job.set_scale(scale_name);
        job.set_arm(arm.arm);
        job.set_seed(seed);
        *job.mutable_run() = std::move(run).value();
        job.set_attempt(0);
        job.set_control_parent_arm(arm.parent_arm);
        job.set_priority(spec.priority());
        job.set_hardware_kind(spec.hardware_kind());
        jobs.push_back(std::move(job));
      }
    }
  }
  run_errors.AppendTo(errors);
  if (!errors.empty()) return std::move(errors).Take();
  return jobs;
}

}  // namespace rdattn::contract
