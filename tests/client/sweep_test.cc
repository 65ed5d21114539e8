// The contract library's sweep functions: ParseSweepYaml / ParseSweepJson (the descriptor walk
// and its errors), ExpandSweep (job ids, pair groups, matched seeds, every validation error
// naming its field), the two documented examples, and the Status <-> grpc::Status mapping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "proto/contract/contract.h"

namespace rdattn::contract {
namespace {

// A small valid sweep: 2 scales x 3 seeds x 2 arms + 1 control = 18 jobs.
constexpr char kSweep[] = R"yaml(
name: unit
scales:
  - {name: a, preset: tiny}
  - {name: b, preset: tiny, shape: {layers: 4}, peak_lr: 1e-3, micro_batch_sequences: 8}
arms: [block, rd]
seeds: [1, 2, 3]
controls:
  - {arm: tied, parent_arm: rd, stop_at_tokens: 32_768}
data:
  train_shards: ["data/shards/sotu_train_*.bin"]
  val_shards: ["data/shards/sotu_val_*.bin"]
  tokenizer: byte
  val_windows: 16
optim: {peak_lr: 3e-3}
schedule:
  total_tokens: 65536
  global_batch_tokens: 4096
  micro_batch_sequences: 16
  milestones_tokens: [16384, 32768, 65536]
parallel: {world_size: 2, threads_per_rank: 1}
checkpoint: {dir: /ckpt, every_steps: 4}
priority: 5
hardware_kind: cpu
labels: {team: 7}
)yaml";

pb::SweepSpec MustParse(const std::string& yaml) {
  auto spec = ParseSweepYaml(yaml);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : pb::SweepSpec();
}

// The errors of a failed ExpandSweep / ParseSweep*, each as "path: reason"; the status joins
// exactly them.
template <typename T>
std::vector<std::string> Errors(const FieldErrorsOr<T>& result) {
  EXPECT_FALSE(result.ok());
  if (result.ok()) return {};
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(), JoinFieldErrors(result.errors()));
  std::vector<std::string> out;
  for (const FieldError& e : result.errors()) out.push_back(e.Text());
  return out;
}

std::vector<std::string> ExpandErrors(const std::string& yaml) {
  return Errors(ExpandSweep(MustParse(yaml), "sw"));
}

// The sweep with `key: value` replaced/added at the top level (yaml-cpp keeps the last one, so
// appending would be a duplicate-key error: replace the line instead).
std::string With(const std::string& top_key, const std::string& line) {
  std::istringstream in(kSweep);
  std::ostringstream out;
  std::string l;
  bool skipping = false;
  bool replaced = false;
  while (std::getline(in, l)) {
    const bool top = !l.empty() && l[0] != ' ';
    if (top) skipping = false;
    if (top && l.rfind(top_key + ":", 0) == 0) {
      out << line << "\n";
      skipping = true;
      replaced = true;
      continue;
    }
    if (!skipping) out << l << "\n";
  }
  if (!replaced) out << line << "\n";
  return out.str();
}

void Replace(std::string& s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
}

bool Contains(const std::vector<std::string>& errors, const std::string& text) {
  return std::any_of(errors.begin(), errors.end(),
                     [&](const std::string& e) { return e.find(text) != std::string::npos; });
}

std::string Dump(const std::vector<std::string>& errors) {
  std::string s;
  for (const auto& e : errors) s += "\n  " + e;
  return s;
}

#define EXPECT_ERROR(errors, text) \
  EXPECT_TRUE(Contains(errors, text)) << "missing: " << (text) << Dump(errors)

// --- Parsing -------------------------------------------------------------------------------

TEST(ParseSweepYamlTest, ReadsEveryKindOfField) {
  const pb::SweepSpec spec = MustParse(kSweep);
  EXPECT_EQ(spec.name(), "unit");
  ASSERT_EQ(spec.scales_size(), 2);
  EXPECT_EQ(spec.scales(1).shape().layers(), 4);
  EXPECT_TRUE(spec.scales(1).has_peak_lr());
  EXPECT_DOUBLE_EQ(spec.scales(1).peak_lr(), 1e-3);
  EXPECT_FALSE(spec.scales(0).has_peak_lr());
  EXPECT_EQ(spec.seeds_size(), 3);
  EXPECT_EQ(spec.seeds(2), 3u);
  EXPECT_EQ(spec.controls(0).stop_at_tokens(), 32768);  // "32_768": digit separators
  EXPECT_EQ(spec.schedule().milestones_tokens_size(), 3);
  EXPECT_EQ(spec.hardware_kind(), pb::HARDWARE_KIND_CPU);  // enum short name
  EXPECT_EQ(spec.labels().at("team"), "7");                // a plain scalar in a string field
  EXPECT_EQ(spec.priority(), 5);
}

TEST(ParseSweepYamlTest, ScalarsFollowTheFieldType) {
  const pb::SweepSpec spec = MustParse(R"(
name: 2024
description: "true"
seeds: ["18446744073709551615", 1e3]
optim: {peak_lr: "6e-4", weight_decay: 0, grad_clip: .inf}
schedule: {total_tokens: 2.0e9}
parallel: {precision: PRECISION_FP64, backend: mpi}
)");
  EXPECT_EQ(spec.name(), "2024");
  EXPECT_EQ(spec.description(), "true");
  EXPECT_EQ(spec.seeds(0), 18446744073709551615ull);
  EXPECT_EQ(spec.seeds(1), 1000u);
  EXPECT_DOUBLE_EQ(spec.optim().peak_lr(), 6e-4);
  EXPECT_TRUE(spec.optim().has_weight_decay());  // explicit 0 keeps its presence
  EXPECT_TRUE(std::isinf(spec.optim().grad_clip()));
  EXPECT_EQ(spec.schedule().total_tokens(), 2000000000);
  EXPECT_EQ(spec.parallel().precision(), pb::PRECISION_FP64);
  EXPECT_EQ(spec.parallel().backend(), pb::BACKEND_MPI);
}

TEST(ParseSweepYamlTest, AcceptsCamelCaseAndNulls) {
  const pb::SweepSpec spec = MustParse(R"(
name: x
referenceArm: rd
maxAttempts: 2
description: ~
schedule: {globalBatchTokens: 4096, stop_at_tokens: null}
)");
  EXPECT_EQ(spec.reference_arm(), "rd");
  EXPECT_EQ(spec.max_attempts(), 2);
  EXPECT_EQ(spec.schedule().global_batch_tokens(), 4096);
  EXPECT_TRUE(spec.description().empty());
}

TEST(ParseSweepYamlTest, EmptyFileIsAnEmptySweep) {
  auto spec = ParseSweepYaml("");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->name().empty());
  EXPECT_ERROR(Errors(ExpandSweep(*spec, "")), "name: required");
}

TEST(ParseSweepYamlTest, UnknownFieldsNameTheFieldAllAtOnce) {
  const auto errors = Errors(ParseSweepYaml(R"(
name: x
seed: [1]
scales:
  - {name: a, preset: tiny, shape: {widht: 64}}
data: {train_shard: [a.bin]}
)"));
  ASSERT_EQ(errors.size(), 3u) << Dump(errors);
  EXPECT_EQ(errors[0], "seed: unknown field (did you mean 'seeds'?)");
  EXPECT_EQ(errors[1], "scales[0].shape.widht: unknown field (did you mean 'width'?)");
  EXPECT_EQ(errors[2], "data.train_shard: unknown field (did you mean 'train_shards'?)");
}

TEST(ParseSweepYamlTest, WrongValuesNameTheirField) {
  const auto errors = Errors(ParseSweepYaml(R"(
name: [a]
seeds: [1, abc, -1]
priority: 3000000000
hardware_kind: tpu
arms: block
scales: {name: a}
optim: {peak_lr: fast}
parallel: {world_size: 1.5}
labels: {team: [a]}
)"));
  EXPECT_ERROR(errors, "name: expected a single value, got a list");
  EXPECT_ERROR(errors, "seeds[1]: expected an integer, got \"abc\"");
  EXPECT_ERROR(errors, "seeds[2]: -1 is out of the uint64 range (it must not be negative)");
  EXPECT_ERROR(errors, "priority: 3000000000 is out of the int32 range");
  EXPECT_ERROR(errors, "hardware_kind: unknown value 'tpu' (valid: cpu, gpu)");
  EXPECT_ERROR(errors, "arms: expected a list");
  EXPECT_ERROR(errors, "scales: expected a list, got a mapping");
  EXPECT_ERROR(errors, "optim.peak_lr: expected a number");
  EXPECT_ERROR(errors, "parallel.world_size: expected an integer");
  EXPECT_ERROR(errors, "labels.team: expected a single value");
  EXPECT_EQ(errors.size(), 10u) << Dump(errors);
}

TEST(ParseSweepYamlTest, DuplicateKeysAndSyntaxErrors) {
  EXPECT_ERROR(Errors(ParseSweepYaml("name: a\nname: b\n")), "name: given twice");
  EXPECT_ERROR(Errors(ParseSweepYaml("name: a\nreference_arm: rd\nreferenceArm: rd\n")),
               "reference_arm: given twice (as reference_arm and referenceArm)");
  const auto syntax = Errors(ParseSweepYaml("name: x\n  bad: [\n"));
  ASSERT_EQ(syntax.size(), 1u);
  EXPECT_EQ(syntax[0].rfind("line 2, column", 0), 0u) << syntax[0];
  EXPECT_ERROR(Errors(ParseSweepYaml("- a\n- b\n")),
               "SweepSpec: expected a mapping of SweepSpec fields, got a list");
  EXPECT_ERROR(Errors(ParseSweepYaml("name: a\n---\nname: b\n")), "one YAML document");
}

TEST(ParseSweepJsonTest, ParsesAndRejectsLikeYaml) {
  auto spec = ParseSweepJson(R"({"name": "j", "seeds": [1, "2"], "hardwareKind": "gpu",
                                 "schedule": {"total_tokens": "65536"}})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->seeds(1), 2u);
  EXPECT_EQ(spec->hardware_kind(), pb::HARDWARE_KIND_GPU);
  EXPECT_EQ(spec->schedule().total_tokens(), 65536);

  const auto errors = Errors(
      ParseSweepJson(R"({"name": 5, "scales": [{"name": "a", "nme": "b"}], "scales_x": 1})"));
  EXPECT_ERROR(errors, "name: expected a string, got 5");
  EXPECT_ERROR(errors, "scales[0].nme: unknown field (did you mean 'name'?)");
  EXPECT_ERROR(errors, "scales_x: unknown field");
  EXPECT_ERROR(Errors(ParseSweepJson(R"({"name": "a", "scales": [{"name": "x", "name": "y"}]})")),
               "scales[0].name: given twice");
  const auto syntax = Errors(ParseSweepJson("{\"name\": }"));
  EXPECT_EQ(syntax[0].rfind("line 1, column", 0), 0u) << syntax[0];
}

TEST(ParseSweepTextProtoTest, ParsesAndNamesErrorsByLine) {
  auto spec = ParseSweepTextProto(R"(
name: "t"
scales { name: "a" preset: "tiny" }
arms: ["block", "rd"]
seeds: [1, 2]
hardware_kind: HARDWARE_KIND_CPU
)");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->scales(0).preset(), "tiny");
  EXPECT_EQ(spec->seeds_size(), 2);
  EXPECT_EQ(spec->hardware_kind(), pb::HARDWARE_KIND_CPU);

  const auto errors = Errors(ParseSweepTextProto("name: \"t\"\nseedz: [1]\n"));
  ASSERT_EQ(errors.size(), 1u) << Dump(errors);
  EXPECT_EQ(errors[0].rfind("line 2, column", 0), 0u) << errors[0];
  EXPECT_NE(errors[0].find("seedz"), std::string::npos) << errors[0];
}

// --- Expansion -----------------------------------------------------------------------------

TEST(ExpandSweepTest, JobsIdsAndPairGroups) {
  auto jobs = ExpandSweep(MustParse(kSweep), "sw");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 18u);  // 2 scales x 3 seeds x (2 arms + 1 control)

  // Order: scale, seed, main arms, then controls.
  const std::vector<std::string> first = {"sw/a/s1/block", "sw/a/s1/rd", "sw/a/s1/tied",
                                          "sw/a/s2/block"};
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ((*jobs)[i].job_id(), first[i]);
  EXPECT_EQ(jobs->back().job_id(), "sw/b/s3/tied");

  std::set<std::string> ids;
  std::map<std::string, int> group_sizes;
  for (const pb::JobSpec& j : *jobs) {
    ids.insert(j.job_id());
    group_sizes[j.pair_group()]++;
    EXPECT_EQ(j.job_id(), j.pair_group() + "/" + j.arm());
    EXPECT_EQ(j.pair_group(), "sw/" + j.scale() + "/s" + std::to_string(j.seed()));
    EXPECT_EQ(j.sweep_id(), "sw");
    EXPECT_EQ(j.attempt(), 0);
    EXPECT_EQ(j.priority(), 5);
    EXPECT_EQ(j.hardware_kind(), pb::HARDWARE_KIND_CPU);
    EXPECT_EQ(j.control_parent_arm(), j.arm() == "tied" ? "rd" : "");
  }
  EXPECT_EQ(ids.size(), 18u);
  EXPECT_EQ(group_sizes.size(), 6u);
  for (const auto& [group, n] : group_sizes) EXPECT_EQ(n, 3) << group;
}

TEST(ExpandSweepTest, EveryRunHasMatchedSeedsAndParses) {
  auto jobs = ExpandSweep(MustParse(kSweep), "sw");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  for (const pb::JobSpec& j : *jobs) {
    const pb::RunSpec& run = j.run();
    EXPECT_EQ(run.init_seed(), j.seed()) << j.job_id();
    EXPECT_EQ(run.data().data_seed(), j.seed()) << j.job_id();
    EXPECT_EQ(run.run_id(), j.job_id());
    EXPECT_EQ(run.job_id(), j.job_id());
    EXPECT_EQ(run.sweep_id(), "sw");
    EXPECT_EQ(run.model().arm(), j.arm());
    EXPECT_EQ(run.checkpoint().dir(), "/ckpt/" + j.job_id());
    EXPECT_EQ(run.labels().at("pair_group"), j.pair_group());
    EXPECT_EQ(run.labels().at("seed"), std::to_string(j.seed()));
    EXPECT_EQ(run.labels().at("team"), "7");
    auto cfg = ParseRunSpec(run);
    ASSERT_TRUE(cfg.ok()) << j.job_id() << ": " << cfg.status().ToString();
    EXPECT_EQ(cfg->init_seed, j.seed());
    EXPECT_EQ(cfg->data.data_seed, j.seed());
    // Per-scale overrides.
    if (j.scale() == "b") {
      EXPECT_EQ(cfg->model.layers, 4);
      EXPECT_DOUBLE_EQ(cfg->optim.peak_lr, 1e-3);
      EXPECT_EQ(cfg->schedule.micro_batch_sequences, 8);
    } else {
      EXPECT_DOUBLE_EQ(cfg->optim.peak_lr, 3e-3);
      EXPECT_EQ(cfg->schedule.micro_batch_sequences, 16);
    }
    EXPECT_EQ(cfg->schedule.stop_at_tokens, j.arm() == "tied" ? 32768 : 0);
  }
}

TEST(ExpandSweepTest, PairGroupsShareScheduleWorldSizeAndSeeds) {
  auto jobs = ExpandSweep(MustParse(kSweep), "sw");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  std::map<std::string, nlohmann::json> reference;  // pair group -> fingerprint without arm
  for (const pb::JobSpec& j : *jobs) {
    auto cfg = ParseRunSpec(j.run());
    ASSERT_TRUE(cfg.ok());
    nlohmann::json f = NumericFingerprint(*cfg);
    f["model"].erase("arm");
    auto [it, inserted] = reference.emplace(j.pair_group(), f);
    if (!inserted) {
      EXPECT_EQ(it->second, f) << j.job_id() << " differs from its pair group in "
                               << ::testing::PrintToString(FingerprintDifferences(it->second, f));
    }
  }
  // Different seeds differ; different scales differ.
  EXPECT_NE(reference.at("sw/a/s1"), reference.at("sw/a/s2"));
  EXPECT_NE(reference.at("sw/a/s1"), reference.at("sw/b/s1"));
}

TEST(ExpandSweepTest, DefaultsAndEmptySweepId) {
  auto jobs = ExpandSweep(MustParse(With("controls", "controls: []")), "");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ(jobs->size(), 12u);
  EXPECT_EQ(jobs->front().job_id(), "a/s1/block");
  EXPECT_EQ(jobs->front().pair_group(), "a/s1");
  pb::SweepSpec spec = MustParse(kSweep);
  EXPECT_EQ(MaxAttempts(spec), kDefaultMaxAttempts);
  EXPECT_EQ(ReferenceArm(spec), "block");
  spec.set_max_attempts(7);
  EXPECT_EQ(MaxAttempts(spec), 7);
  pb::ScaleSpec scale;
  scale.set_preset("S");
  EXPECT_EQ(ScaleName(scale), "S");
}

TEST(ExpandSweepTest, RunIsTheResolvedRunSpec) {
  // The paper recipe fills the schedule; the stored run carries the values explicitly.
  auto jobs = ExpandSweep(MustParse(R"(
name: p
recipe: paper
scales: [{preset: S}]
arms: [block, rd]
seeds: [1]
data: {train_shards: [a.bin], tokenizer: gpt2}
)"),
                          "sw");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  const pb::RunSpec& run = jobs->front().run();
  EXPECT_EQ(run.schedule().total_tokens(), 3815LL * 524288);
  EXPECT_EQ(run.schedule().global_batch_tokens(), 524288);
  EXPECT_EQ(run.schedule().milestones_tokens_size(), 4);
  EXPECT_DOUBLE_EQ(run.optim().peak_lr(), 6e-4);
  EXPECT_EQ(run.optim().warmup_steps(), 190);
  EXPECT_EQ(run.model().preset(), "S");
  EXPECT_EQ(run.recipe(), "paper");
}

// --- Validation: every error names its field --------------------------------------------------

struct BadCase {
  std::string top_key;  // top-level key replaced
  std::string line;     // its replacement
  std::string error;    // expected text in one of the errors
};

TEST(ExpandSweepTest, EveryErrorNamesItsField) {
  const std::vector<BadCase> cases = {
      {"name", "name: \"\"", "name: required"},
      {"scales", "scales: []", "scales: must not be empty"},
      {"scales", "scales: [{shape: {layers: 2}}]", "scales[0].name: required when"},
      {"scales", "scales: [{name: a, preset: tiny}, {name: a, preset: tiny}]",
       "scales[1].name: duplicate scale name 'a'"},
      {"scales", "scales: [{name: a/b, preset: tiny}]", "scales[0].name: 'a/b' may contain only"},
      {"scales", "scales: [{name: a, preset: X}]", "scales[0].preset: unknown preset 'X'"},
      {"scales", "scales: [{name: a, preset: tiny, shape: {width: 63}}]",
       "scales[0].shape.width: 63 is not divisible by heads (2)"},
      {"scales", "scales: [{name: a, shape: {layers: 2}}]",
       "scales[0].shape.width: required when model.preset is empty"},
      {"scales", "scales: [{name: a, preset: tiny, peak_lr: -1}]",
       "scales[0].peak_lr: must be a positive finite number"},
      {"scales", "scales: [{name: a, preset: tiny, world_size: -1}]", "scales[0].world_size:"},
      {"scales", "scales: [{name: a, preset: tiny, micro_batch_sequences: -3}]",
       "scales[0].micro_batch_sequences:"},
      {"arms", "arms: []", "arms: must not be empty"},
      {"arms", "arms: [block, x]", "arms[1]: unknown arm 'x'; valid: standard, block, rd"},
      {"arms", "arms: [block, rd, rd]", "arms[2]: duplicate arm 'rd'"},
      {"arms", "arms: [rd, tied]", "reference_arm: not set, and the default 'block' is not one"},
      {"reference_arm", "reference_arm: average", "reference_arm: 'average' is not one of arms"},
      {"seeds", "seeds: []", "seeds: must not be empty"},
      {"seeds", "seeds: [1, 2, 3, 2]", "seeds[3]: duplicate seed 2"},
      {"controls", "controls: [{arm: x, parent_arm: rd, stop_at_tokens: 4096}]",
       "controls[0].arm: unknown arm 'x'"},
      {"controls", "controls: [{parent_arm: rd, stop_at_tokens: 4096}]",
       "controls[0].arm: required"},
      {"controls", "controls: [{arm: rd, parent_arm: block, stop_at_tokens: 4096}]",
       "controls[0].arm: 'rd' is already one of arms"},
      {"controls",
       "controls: [{arm: tied, parent_arm: rd, stop_at_tokens: 4096}, "
       "{arm: tied, parent_arm: block, stop_at_tokens: 4096}]",
       "controls[1].arm: duplicate control arm 'tied'"},
      {"controls", "controls: [{arm: tied, parent_arm: average, stop_at_tokens: 4096}]",
       "controls[0].parent_arm: 'average' is not one of arms [block, rd]"},
      {"controls", "controls: [{arm: tied, stop_at_tokens: 4096}]",
       "controls[0].parent_arm: required"},
      {"controls", "controls: [{arm: tied, parent_arm: rd}]",
       "controls[0].stop_at_tokens: must be > 0"},
      {"controls", "controls: [{arm: tied, parent_arm: rd, stop_at_tokens: 65537}]",
       "controls[0].stop_at_tokens: "},
      {"controls", "controls: [{arm: tied, parent_arm: rd, stop_at_tokens: 900000}]",
       "controls[0].stop_at_tokens: 900000 is beyond the budget"},
      {"priority", "priority: -1", "priority: must be >= 0"},
      {"max_attempts", "max_attempts: -1", "max_attempts: must be >= 1"},
      {"data", "data: {train_shards: [a.bin], tokenizer: byte, data_seed: 3}",
       "data.data_seed: must not be set in a sweep"},
      {"data", "data: {train_shards: [a.bin], tokenizer: latin1}", "data.tokenizer:"},
      {"data", "data: {tokenizer: byte}", "data.train_shards: required"},
      {"optim", "optim: {peak_lr: 3e-3, beta1: 1.5}", "optim.beta1: must be in [0, 1)"},
      {"schedule",
       "schedule: {total_tokens: 65536, global_batch_tokens: 4096, milestones_tokens: [16384, "
       "8192]}",
       "schedule.milestones_tokens[1]: 8192 is not greater than the previous milestone"},
      {"schedule", "schedule: {total_tokens: 65536, global_batch_tokens: 1000}",
       "schedule.global_batch_tokens: 1000 is not a multiple of the context (64)"},
      {"schedule", "schedule: {total_tokens: 65536, global_batch_tokens: 4096, stop_at_tokens: 8}",
       "schedule.stop_at_tokens: must not be set in a sweep"},
      {"parallel", "parallel: {world_size: 2, device: cpu, precision: bf16}",
       "parallel.precision: bf16 needs parallel.device cuda"},
      {"checkpoint", "checkpoint: {resume_from: x.pt}",
       "checkpoint.resume_from: must not be set in a sweep"},
      {"checkpoint", "checkpoint: {keep_last: -1}", "checkpoint.keep_last:"},
      {"labels", "labels: {arm: x}", "labels.arm: reserved"},
      {"recipe", "recipe: fast", "recipe:"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.line);
    const auto errors = ExpandErrors(With(c.top_key, c.line));
    EXPECT_ERROR(errors, c.error);
  }
}

TEST(ExpandSweepTest, SeveralErrorsAtOnceEachReportedOnce) {
  // A bad milestone hits all 18 jobs and a bad width the 9 jobs of scale b; each is reported
  // once, after the sweep-level error.
  std::string yaml = kSweep;
  Replace(yaml, "priority: 5", "priority: -3");
  Replace(yaml, "milestones_tokens: [16384, 32768, 65536]",
          "milestones_tokens: [16384, 100000000]");
  Replace(yaml, "shape: {layers: 4}", "shape: {width: 63}");
  const auto errors = ExpandErrors(yaml);
  ASSERT_EQ(errors.size(), 3u) << Dump(errors);
  EXPECT_EQ(errors[0], "priority: must be >= 0 (higher runs first), got -3");
  EXPECT_ERROR(errors, "schedule.milestones_tokens[1]: 100000000 is beyond the budget");
  EXPECT_ERROR(errors, "scales[1].shape.width: 63 is not divisible by heads (2)");
}

TEST(ExpandSweepTest, SharedSectionsAreCheckedWithoutArmsOrSeeds) {
  std::string yaml = kSweep;
  Replace(yaml, "arms: [block, rd]", "arms: [x]");
  Replace(yaml, "seeds: [1, 2, 3]", "seeds: []");
  Replace(yaml, "controls:\n  - {arm: tied, parent_arm: rd, stop_at_tokens: 32_768}\n", "");
  Replace(yaml, "tokenizer: byte", "tokenizer: latin1");
  const auto errors = ExpandErrors(yaml);
  EXPECT_ERROR(errors, "arms[0]: unknown arm 'x'");
  EXPECT_ERROR(errors, "seeds: must not be empty");
  EXPECT_ERROR(errors, "data.tokenizer:");
}

TEST(ExpandSweepTest, ControlStopsWithinTheBudget) {
  // 65,000 tokens are 16 steps of 4096 (65,536 tokens): ParseRunConfig accepts a stop at
  // 65,500, but it is past the budget the user wrote.
  std::string yaml = kSweep;
  Replace(yaml, "total_tokens: 65536", "total_tokens: 65000");
  Replace(yaml, "stop_at_tokens: 32_768", "stop_at_tokens: 65500");
  EXPECT_ERROR(ExpandErrors(yaml),
               "controls[0].stop_at_tokens: 65500 is beyond the schedule's total_tokens (65000)");
}

TEST(ExpandSweepTest, RejectsUnknownEnumNumbers) {
  pb::SweepSpec spec = MustParse(kSweep);
  spec.set_hardware_kind(static_cast<pb::HardwareKind>(7));
  EXPECT_ERROR(Errors(ExpandSweep(spec, "sw")), "hardware_kind: unknown value 7");
}

TEST(ExpandSweepTest, ErrorsOfOneScaleSayWhichScale) {
  // Scale b's micro-batch of 8 x world size 3 does not divide the 64-sequence batch; scale a
  // (16 x the sweep's world size 2) is fine. The field is sweep-wide, so the error says where.
  std::string yaml = kSweep;
  Replace(yaml, "micro_batch_sequences: 8}", "micro_batch_sequences: 8, world_size: 3}");
  const auto errors = ExpandErrors(yaml);
  ASSERT_EQ(errors.size(), 1u) << Dump(errors);
  EXPECT_ERROR(errors, "(at scale 'b')");
  EXPECT_ERROR(errors,
               "schedule.global_batch_tokens: the global batch of 64 sequences is not "
               "divisible by parallel.world_size (3)");
}

// --- The documented examples ----------------------------------------------------------------

std::string ReadExample(const std::string& name) {
  std::ifstream in(std::string(RDATTN_EXAMPLES_DIR) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ExamplesTest, CpuDemoValidates) {
  auto spec = ParseSweepYaml(ReadExample("cpu-demo.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto jobs = ExpandSweep(*spec, "demo");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ(jobs->size(), 6u);  // 1 scale x 3 seeds x 2 arms
  for (const pb::JobSpec& j : *jobs) {
    auto cfg = ParseRunSpec(j.run());
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    EXPECT_EQ(cfg->parallel.world_size, 1);
    EXPECT_EQ(cfg->parallel.threads_per_rank, 1);
    EXPECT_EQ(cfg->data.tokenizer, "byte");
    EXPECT_EQ(cfg->schedule.global_batch_tokens, 4096);
    EXPECT_EQ(cfg->schedule.milestones_tokens.size(), 3u);
    EXPECT_EQ(cfg->model.context, 128);
  }
}

TEST(ExamplesTest, PaperExpandsToFiftyJobs) {
  auto spec = ParseSweepYaml(ReadExample("paper.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto jobs = ExpandSweep(*spec, "paper");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  // 2 scales x 5 seeds x 2 arms + 3 controls x 2 scales x 5 seeds.
  ASSERT_EQ(jobs->size(), 50u);
  std::map<std::string, int> per_arm;
  std::set<std::string> groups;
  for (const pb::JobSpec& j : *jobs) {
    per_arm[j.arm()]++;
    groups.insert(j.pair_group());
    auto cfg = ParseRunSpec(j.run());
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    EXPECT_DOUBLE_EQ(cfg->optim.peak_lr, j.scale() == "S" ? 6e-4 : 3e-4) << j.job_id();
    EXPECT_EQ(cfg->schedule.total_tokens, 3815LL * 524288);
    EXPECT_EQ(cfg->schedule.total_steps, 3815);
    EXPECT_EQ(cfg->parallel.world_size, 8);
    const bool control = j.arm() == "tied" || j.arm() == "average" || j.arm() == "frozen_v";
    EXPECT_EQ(cfg->schedule.stop_at_tokens, control ? 954LL * 524288 : 0) << j.job_id();
    EXPECT_EQ(cfg->schedule.stop_at_tokens, control ? 500170752 : 0);
    EXPECT_EQ(cfg->schedule.stop_step, control ? 954 : 3815);
    EXPECT_EQ(j.control_parent_arm().empty(), !control);
  }
  EXPECT_EQ(groups.size(), 10u);
  for (const char* arm : {"block", "rd", "tied", "average", "frozen_v"}) {
    EXPECT_EQ(per_arm[arm], 10) << arm;
  }
}

// --- Status conversion, field errors in the details --------------------------------------------

TEST(StatusConvertTest, RoundTripsEveryCode) {
  for (int c = 0; c <= 16; ++c) {
    const Status s(static_cast<StatusCode>(c), c == 0 ? "" : "message " + std::to_string(c));
    const grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    EXPECT_EQ(g.error_message(), s.message());
    const Status back = FromGrpcStatus(g);
    EXPECT_EQ(back.code(), s.code());
    EXPECT_EQ(back.message(), s.message());
  }
  // 20 is no grpc::StatusCode but inside the enum's value range (UBSan rejects 99).
  EXPECT_EQ(FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(20), "x")).code(),
            StatusCode::kUnknown);
  EXPECT_TRUE(ToGrpcStatus(Status::Ok()).ok());
}

TEST(StatusConvertTest, FieldErrorStatusCarriesTheErrorsBesideTheText) {
  const std::vector<FieldError> errors = {{"arms[0]", "unknown arm 'x'; valid: block, rd"},
                                          {"seeds", "must not be empty"}};
  const Status s = FieldErrorStatus(errors);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "arms[0]: unknown arm 'x'; valid: block, rd; seeds: must not be empty");
  EXPECT_EQ(s.field_errors(), errors);
  // Context added on the way up changes the text, not the fields.
  const Status prefixed = s.WithPrefix("sweep.yaml");
  EXPECT_EQ(prefixed.message(), "sweep.yaml: " + s.message());
  EXPECT_EQ(prefixed.field_errors(), errors);
  // A FieldErrorsOr's status and its StatusOr conversion carry them too; other statuses do not.
  const FieldErrorsOr<int> failed(errors);
  EXPECT_EQ(failed.status().field_errors(), errors);
  EXPECT_EQ(StatusOr<int>(failed).status().field_errors(), errors);
  EXPECT_TRUE(InvalidArgumentError("sweep_id: required").field_errors().empty());
  EXPECT_TRUE(FieldErrorStatus({}).ok());
}

// AIP-193 on the wire: the details are a google.rpc.Status with the call's code and message and
// one Any of google.rpc.BadRequest, a FieldViolation per field error in order.
TEST(StatusConvertTest, FieldErrorsTravelAsBadRequestFieldViolations) {
  const std::vector<FieldError> errors = {{"arms[0]", "unknown arm 'x; seeds: y'; valid: block"},
                                          {"line 3, column 2", "bad"},
                                          {"scales[0].shape.width", "required"}};
  const Status s = FieldErrorStatus(errors);
  const grpc::Status g = ToGrpcStatus(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(g.error_message(), s.message());  // the text stays for people
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(g.error_details()));
  EXPECT_EQ(details.code(), 3);
  EXPECT_EQ(details.message(), s.message());
  ASSERT_EQ(details.details_size(), 1);
  EXPECT_EQ(details.details(0).type_url(), "type.googleapis.com/google.rpc.BadRequest");
  google::rpc::BadRequest bad_request;
  ASSERT_TRUE(details.details(0).UnpackTo(&bad_request));
  ASSERT_EQ(bad_request.field_violations_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(bad_request.field_violations(i).field(), errors[i].path);
    EXPECT_EQ(bad_request.field_violations(i).description(), errors[i].reason);
  }
  const Status back = FromGrpcStatus(g);
  EXPECT_EQ(back.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(back.message(), s.message());
  EXPECT_EQ(back.field_errors(), errors);
  // A status without field errors sends no details.
  EXPECT_TRUE(ToGrpcStatus(InvalidArgumentError("sweep_id: required")).error_details().empty());
  EXPECT_TRUE(ToGrpcStatus(NotFoundError("no sweep x")).error_details().empty());
}

TEST(StatusConvertTest, DetailsOfOtherKindsOrUnreadableKeepCodeAndMessage) {
  // Bytes that are no google.rpc.Status: the code and message stay, no field errors.
  const Status garbage =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a: b", "\xff\xff\xff"));
  EXPECT_EQ(garbage.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(garbage.message(), "a: b");
  EXPECT_TRUE(garbage.field_errors().empty());
  // Details of another type are skipped; every BadRequest's violations are read.
  google::rpc::Status details;
  details.set_code(3);
  details.set_message("m");
  google::rpc::ErrorInfo info;
  info.set_reason("OTHER");
  details.add_details()->PackFrom(info);
  google::rpc::BadRequest bad_request;
  google::rpc::BadRequest::FieldViolation* v = bad_request.add_field_violations();
  v->set_field("seeds");
  v->set_description("must not be empty");
  details.add_details()->PackFrom(bad_request);
  const Status mixed = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "m", details.SerializeAsString()));
  EXPECT_EQ(mixed.message(), "m");
  EXPECT_EQ(mixed.field_errors(), (std::vector<FieldError>{{"seeds", "must not be empty"}}));
}

TEST(RunSpecBridgeTest, ConfigRoundTrip) {
  auto jobs = ExpandSweep(MustParse(kSweep), "sw");
  ASSERT_TRUE(jobs.ok());
  auto cfg = ParseRunSpec(jobs->back().run());
  ASSERT_TRUE(cfg.ok());
  auto spec = RunSpecFromConfig(*cfg);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto again = ParseRunSpec(*spec);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ResolvedConfigJson(*cfg), ResolvedConfigJson(*again));
  EXPECT_EQ(RunSpecToJson(*spec)["model"]["arm"], "tied");
}

TEST(SweepErrorsTest, RunErrorsAreRenamedOnTheStructure) {
  // The run's FieldErrors are renamed path by path: a reason that itself reads like a second
  // error ("; seeds: ...") stays whole, and the model's shape error moves under scales[0].
  auto spec = ParseSweepYaml(R"(
name: t
scales: [{name: a, preset: tiny, shape: {width: 63}}]
arms: ["x; seeds: y", block]
seeds: [1]
data: {train_shards: [a.bin], tokenizer: byte}
optim: {peak_lr: 1e-3}
schedule: {total_tokens: 65536, global_batch_tokens: 4096}
)");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const auto jobs = ExpandSweep(*spec, "sw");
  ASSERT_FALSE(jobs.ok());
  ASSERT_EQ(jobs.errors().size(), 2u) << jobs.status().message();
  EXPECT_EQ(jobs.errors()[0].path, "arms[0]");
  EXPECT_EQ(jobs.errors()[0].reason.rfind("unknown arm 'x; seeds: y'; valid: ", 0), 0u);
  EXPECT_EQ(jobs.errors()[1].path, "scales[0].shape.width");
  EXPECT_EQ(jobs.errors()[1].reason, "63 is not divisible by heads (2)");
}

}  // namespace
}  // namespace rdattn::contract
