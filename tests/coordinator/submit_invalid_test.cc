// Bad input (issue 10): a table of invalid sweeps, each valid except for one defect, submitted
// the way a client does it — the file is parsed (ParseSweepYaml / ParseSweepJson, as `rdattn
// submit` does before it sends anything), then Core::SubmitSweep on a real SQLite file, both
// validate-only and for real. Every row names the field the error must name, the reason it must
// give and the code (the one a gRPC client sees), and after every row the store must be empty.
// The base sweep itself is submitted and stored once, so each row's rejection is its defect's.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/clock.h"
#include "coordinator/core.h"
#include "coordinator/store.h"
#include "proto/contract/contract.h"
#include "tests/coordinator/test_util.h"

namespace rdattn::coordinator {
namespace {

namespace pb = ::rdattn::v1;

// The base sweep: one scale of the tiny byte-level model (context 64), 2 seeds x {block, rd}
// and one control; 24 steps of 512 tokens (8 sequences, micro-batch 8, world size 1).
// Top-level keys start a line, so that With() can replace one of them.
constexpr char kBase[] = R"yaml(name: table
scales: [{name: s, preset: tiny}]
arms: [block, rd]
seeds: [1, 2]
controls: [{arm: tied, parent_arm: rd, stop_at_tokens: 6144}]
data: {train_shards: [/data/train_*.bin], val_shards: [/data/val.bin], tokenizer: byte}
optim: {peak_lr: 3e-3, warmup_steps: 2}
schedule: {total_tokens: 12288, global_batch_tokens: 512, micro_batch_sequences: 8, milestones_tokens: [6144, 12288]}
parallel: {world_size: 1}
checkpoint: {every_steps: 4}
max_attempts: 2
)yaml";

// The same sweep in protobuf's JSON mapping.
constexpr char kBaseJson[] = R"json({
  "name": "table",
  "scales": [{"name": "s", "preset": "tiny"}],
  "arms": ["block", "rd"],
  "seeds": [1, 2],
  "controls": [{"arm": "tied", "parentArm": "rd", "stopAtTokens": "6144"}],
  "data": {"trainShards": ["/data/train_*.bin"], "valShards": ["/data/val.bin"],
           "tokenizer": "byte"},
  "optim": {"peakLr": 3e-3, "warmupSteps": "2"},
  "schedule": {"totalTokens": "12288", "globalBatchTokens": "512", "microBatchSequences": 8,
               "milestonesTokens": ["6144", "12288"]},
  "parallel": {"worldSize": 1},
  "checkpoint": {"everySteps": "4"},
  "maxAttempts": 2
})json";

// `base` with the top-level key `key` replaced by `text` (appended when `base` has no such
// key). An empty `text` removes the key.
std::string WithIn(const std::string& base, const std::string& key, const std::string& text) {
  std::string out;
  bool replaced = false;
  size_t start = 0;
  while (start < base.size()) {
    const size_t end = base.find('\n', start);
    const std::string line = base.substr(start, end - start);
    start = end == std::string::npos ? base.size() : end + 1;
    if (line.rfind(key + ":", 0) == 0) {
      if (!text.empty()) out += text + "\n";
      replaced = true;
    } else {
      out += line + "\n";
    }
  }
  if (!replaced) out += text + "\n";
  return out;
}
std::string With(const std::string& key, const std::string& text) {
  return WithIn(kBase, key, text);
}

// kBaseJson with the value at JSON pointer `pointer` set to `value` (a JSON text).
std::string JsonWith(const std::string& pointer, const std::string& value) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(kBaseJson);
  j[nlohmann::ordered_json::json_pointer(pointer)] = nlohmann::ordered_json::parse(value);
  return j.dump();
}

enum class Format { kYaml, kJson };
// Where the sweep is rejected: by the client's parse (nothing is sent) or by SubmitSweep.
enum class Stage { kParse, kSubmit };

struct Row {
  std::string name;  // the defect, as a test name
  Format format;
  std::string spec;
  Stage stage;
  std::string field;   // the error part must start with "<field>: "
  std::string reason;  // ... and its reason must contain this
  StatusCode code = StatusCode::kInvalidArgument;
  std::string request_id = "req-1";
};

Row Yaml(std::string name, std::string spec, Stage stage, std::string field, std::string reason) {
  return Row{std::move(name), Format::kYaml,    std::move(spec),
             stage,           std::move(field), std::move(reason)};
}
Row Json(std::string name, std::string spec, Stage stage, std::string field, std::string reason) {
  return Row{std::move(name), Format::kJson,    std::move(spec),
             stage,           std::move(field), std::move(reason)};
}

constexpr Stage P = Stage::kParse;
constexpr Stage S = Stage::kSubmit;

// kBase with scale s given more fields, or a shape.
std::string Scale(const std::string& fields) {
  return With("scales", "scales: [{name: s, preset: tiny, " + fields + "}]");
}
std::string Shape(const std::string& fields) { return Scale("shape: {" + fields + "}"); }
std::string Schedule(const std::string& fields) {
  return "schedule: {total_tokens: 12288, global_batch_tokens: 512, micro_batch_sequences: 8, " +
         fields + "}";
}
std::string Optim(const std::string& fields) {
  return "optim: {peak_lr: 3e-3, warmup_steps: 2, " + fields + "}";
}
std::string Data(const std::string& fields) {
  return "data: {train_shards: [/data/train_*.bin], tokenizer: byte, " + fields + "}";
}
std::string Control(const std::string& fields) { return "controls: [{" + fields + "}]"; }

std::vector<Row> Rows() {
  std::vector<Row> rows = {
      // --- Unknown keys (the descriptor walk, with a "did you mean").
      Yaml("UnknownTopLevelKey", With("seed", "seed: [1]"), P, "seed",
           "unknown field (did you mean 'seeds'?)"),
      Yaml("UnknownShapeKey", Shape("widht: 64"), P, "scales[0].shape.widht",
           "unknown field (did you mean 'width'?)"),
      Yaml("UnknownDataKey", With("data", "data: {train_shard: [a.bin], tokenizer: byte}"), P,
           "data.train_shard", "unknown field (did you mean 'train_shards'?)"),
      Yaml("UnknownControlKey", With("controls", Control("arm: tied, parent: rd")), P,
           "controls[0].parent", "unknown field"),
      Yaml("UnknownOptimKey", With("optim", Optim("lr: 1")), P, "optim.lr", "unknown field"),
      Yaml("UnknownScaleKey", Scale("layers: 4"), P, "scales[0].layers", "unknown field"),
      Json("JsonUnknownKey", JsonWith("/scheduler", "{}"), P, "scheduler",
           "unknown field (did you mean 'schedule'?)"),

      // --- Wrong types.
      Yaml("NameIsAList", With("name", "name: [a]"), P, "name", "expected a single value"),
      Yaml("ArmsIsAScalar", With("arms", "arms: block"), P, "arms", "expected a list"),
      Yaml("ScalesIsAMapping", With("scales", "scales: {name: s, preset: tiny}"), P, "scales",
           "expected a list, got a mapping"),
      Yaml("SeedIsNotANumber", With("seeds", "seeds: [1, abc]"), P, "seeds[1]",
           "expected an integer"),
      Yaml("SeedIsFractional", With("seeds", "seeds: [1, 2.5]"), P, "seeds[1]",
           "expected an integer"),
      Yaml("PeakLrIsAWord", With("optim", "optim: {peak_lr: fast}"), P, "optim.peak_lr",
           "expected a number"),
      Yaml("WorldSizeIsFractional", With("parallel", "parallel: {world_size: 1.5}"), P,
           "parallel.world_size", "expected an integer"),
      Yaml("LabelIsAList", With("labels", "labels: {team: [a]}"), P, "labels.team",
           "expected a single value"),
      Yaml("UnknownHardwareKind", With("hardware_kind", "hardware_kind: tpu"), P, "hardware_kind",
           "unknown value 'tpu' (valid: cpu, gpu)"),
      Yaml("UnknownPrecision", With("parallel", "parallel: {world_size: 1, precision: fp16}"), P,
           "parallel.precision", "unknown value 'fp16'"),
      Yaml("PriorityOutOfInt32", With("priority", "priority: 3000000000"), P, "priority",
           "out of the int32 range"),
      Yaml("NegativeSeed", With("seeds", "seeds: [1, -2]"), P, "seeds[1]",
           "out of the uint64 range (it must not be negative)"),
      Yaml("SeedBeyondUint64", With("seeds", "seeds: [1, 18446744073709551616]"), P, "seeds[1]",
           "out of the uint64 range"),
      Yaml("NormEpsIsAWord", Shape("norm_eps: small"), P, "scales[0].shape.norm_eps",
           "expected a number"),
      Yaml("MilestonesIsAScalar", With("schedule", Schedule("milestones_tokens: 6144")), P,
           "schedule.milestones_tokens", "expected a list"),
      Yaml("EveryStepsIsABool", With("checkpoint", "checkpoint: {every_steps: true}"), P,
           "checkpoint.every_steps", "expected an integer"),
      Yaml("MaxAttemptsIsAWord", With("max_attempts", "max_attempts: three"), P, "max_attempts",
           "expected an integer"),
      Yaml("MaxAttemptsIsFractional", With("max_attempts", "max_attempts: 1.5"), P, "max_attempts",
           "expected an integer"),
      Yaml("NullInAList", With("seeds", "seeds: [1, null]"), P, "seeds[1]",
           "null is not allowed in a list"),
      Json("JsonSeedsIsAString", JsonWith("/seeds", R"("1")"), P, "seeds", "expected a list"),
      Json("JsonNameIsANumber", JsonWith("/name", "5"), P, "name", "expected a string, got 5"),
      Json("JsonShapeIsAList", JsonWith("/scales/0/shape", "[64]"), P, "scales[0].shape",
           "expected a mapping of ModelShape fields"),

      // --- Negative and zero numbers.
      Yaml("NegativePriority", With("priority", "priority: -1"), S, "priority", "must be >= 0"),
      Yaml("NegativeMaxAttempts", With("max_attempts", "max_attempts: -1"), S, "max_attempts",
           "must be >= 1"),
      Yaml("ZeroScalePeakLr", Scale("peak_lr: 0"), S, "scales[0].peak_lr",
           "must be a positive finite number"),
      Yaml("NanScalePeakLr", Scale("peak_lr: .nan"), S, "scales[0].peak_lr",
           "must be a positive finite number"),
      Yaml("NegativeScaleWorldSize", Scale("world_size: -2"), S, "scales[0].world_size",
           "must be at least 1"),
      Yaml("NegativeScaleMicroBatch", Scale("micro_batch_sequences: -3"), S,
           "scales[0].micro_batch_sequences", "must be positive"),
      Yaml("ZeroLayers", Shape("layers: 0"), S, "scales[0].shape.layers", "must be positive"),
      Yaml("NegativeWidth", Shape("width: -64"), S, "scales[0].shape.width", "must be positive"),
      Yaml("ZeroRopeTheta", Shape("rope_theta: 0"), S, "scales[0].shape.rope_theta",
           "must be a positive finite number"),
      Yaml("NegativeTotalTokens",
           With("schedule", "schedule: {total_tokens: -12288, global_batch_tokens: 512}"), S,
           "schedule.total_tokens", "must be positive"),
      Yaml("NegativeGlobalBatch",
           With("schedule", "schedule: {total_tokens: 12288, global_batch_tokens: -512}"), S,
           "schedule.global_batch_tokens", "must be positive"),
      Yaml("ZeroControlStop",
           With("controls", Control("arm: tied, parent_arm: rd, stop_at_tokens: 0")), S,
           "controls[0].stop_at_tokens", "must be > 0"),
      Yaml("NegativePeakLr", With("optim", "optim: {peak_lr: -3e-3}"), S, "optim.peak_lr",
           "must be a positive finite number"),
      Yaml("NegativeWarmup", With("optim", "optim: {peak_lr: 3e-3, warmup_steps: -1}"), S,
           "optim.warmup_steps", "must not be negative"),
      Yaml("ZeroAdamEps", With("optim", Optim("eps: 0")), S, "optim.eps",
           "must be a positive finite number"),
      Yaml("MinLrRatioAboveOne", With("optim", Optim("min_lr_ratio: 1.5")), S, "optim.min_lr_ratio",
           "must be in [0, 1]"),
      Yaml("Beta2IsOne", With("optim", Optim("beta2: 1")), S, "optim.beta2", "must be in [0, 1)"),
      Yaml("NegativeWeightDecay", With("optim", Optim("weight_decay: -0.1")), S,
           "optim.weight_decay", "must be a finite number >= 0"),
      Yaml("InfiniteGradClip", With("optim", Optim("grad_clip: .inf")), S, "optim.grad_clip",
           "must be a finite number >= 0"),
      Yaml("NegativeValWindows", With("data", Data("val_windows: -1")), S, "data.val_windows",
           "must not be negative"),
      Yaml("NegativeKeepLast", With("checkpoint", "checkpoint: {keep_last: -1}"), S,
           "checkpoint.keep_last", "must be at least 1"),
      Yaml("NegativeCheckpointEvery", With("checkpoint", "checkpoint: {every_steps: -4}"), S,
           "checkpoint.every_steps", "must not be negative"),
      Yaml("NegativeTrainEventEvery", With("metrics", "metrics: {train_event_every_steps: -1}"), S,
           "metrics.train_event_every_steps", "must be at least 1"),
      Yaml("NegativeWorldSize", With("parallel", "parallel: {world_size: -1}"), S,
           "parallel.world_size", "must be at least 1"),
      Yaml("NegativeThreadsPerRank",
           With("parallel", "parallel: {world_size: 1, threads_per_rank: -1}"), S,
           "parallel.threads_per_rank", "must not be negative"),
      Yaml("NegativeBucketBytes",
           With("parallel", "parallel: {world_size: 1, allreduce_bucket_bytes: -1}"), S,
           "parallel.allreduce_bucket_bytes", "must be positive"),

      // --- Duplicates.
      Yaml("DuplicateSeed", With("seeds", "seeds: [1, 2, 1]"), S, "seeds[2]", "duplicate seed 1"),
      Yaml("HexSeedIsNotAnInteger", With("seeds", "seeds: [1, 2, 0x1]"), P, "seeds[2]",
           "expected an integer"),
      Yaml("DuplicateSeedAsString", With("seeds", "seeds: [1, 2, '2']"), S, "seeds[2]",
           "duplicate seed 2"),
      Yaml("DuplicateArm", With("arms", "arms: [block, rd, block]"), S, "arms[2]",
           "duplicate arm 'block'"),
      Yaml("DuplicateScaleName",
           With("scales", "scales: [{name: s, preset: tiny}, {name: s, preset: tiny}]"), S,
           "scales[1].name", "duplicate scale name 's'"),
      Yaml("DuplicateScaleNameFromPreset",
           With("scales", "scales: [{preset: tiny}, {preset: tiny}]"), S, "scales[1].name",
           "duplicate scale name 'tiny'"),
      Yaml("DuplicateControlArm",
           With("controls",
                "controls: [{arm: tied, parent_arm: rd, stop_at_tokens: 6144}, "
                "{arm: tied, parent_arm: block, stop_at_tokens: 6144}]"),
           S, "controls[1].arm", "duplicate control arm 'tied'"),
      Yaml("DuplicateYamlKey", std::string(kBase) + "name: again\n", P, "name", "given twice"),
      Yaml("DuplicateKeyTwoSpellings",
           With("reference_arm", "reference_arm: block\nreferenceArm: block"), P, "reference_arm",
           "given twice (as reference_arm and referenceArm)"),
      Json("JsonDuplicateKey",
           R"({"name": "table", "scales": [{"name": "s", "preset": "tiny", "name": "t"}]})", P,
           "scales[0].name", "given twice"),

      // --- Unknown arms, controls and the reference arm.
      Yaml("UnknownArm", With("arms", "arms: [block, bogus]"), S, "arms[1]",
           "unknown arm 'bogus'; valid: standard, block, rd, tied, average, average_asym, "
           "frozen_v"),
      Yaml("ArmNamesAreCaseSensitive", With("arms", "arms: [block, RD]"), S, "arms[1]",
           "unknown arm 'RD'"),
      Yaml("UnknownControlArm",
           With("controls", Control("arm: bogus, parent_arm: rd, stop_at_tokens: 6144")), S,
           "controls[0].arm", "unknown arm 'bogus'"),
      Yaml("ControlArmIsAMainArm",
           With("controls", Control("arm: rd, parent_arm: block, stop_at_tokens: 6144")), S,
           "controls[0].arm", "'rd' is already one of arms"),
      Yaml("ControlParentNotAnArm",
           With("controls", Control("arm: tied, parent_arm: average, stop_at_tokens: 6144")), S,
           "controls[0].parent_arm", "'average' is not one of arms [block, rd]"),
      Yaml("ControlWithoutArm", With("controls", Control("parent_arm: rd, stop_at_tokens: 6144")),
           S, "controls[0].arm", "required"),
      Yaml("ControlWithoutParent", With("controls", Control("arm: tied, stop_at_tokens: 6144")), S,
           "controls[0].parent_arm", "required"),
      Yaml("ReferenceArmNotInArms", With("reference_arm", "reference_arm: tied"), S,
           "reference_arm", "'tied' is not one of arms [block, rd]"),
      Yaml("DefaultReferenceArmNotInArms", With("arms", "arms: [rd, average]"), S, "reference_arm",
           "not set, and the default 'block' is not one of arms [rd, average]"),

      // --- Budgets that do not divide.
      Yaml("BatchNotAMultipleOfContext",
           With("schedule", "schedule: {total_tokens: 12288, global_batch_tokens: 500}"), S,
           "schedule.global_batch_tokens", "500 is not a multiple of the context (64)"),
      Yaml("BatchNotDivisibleByMicroBatch",
           With("schedule",
                "schedule: {total_tokens: 12288, global_batch_tokens: 512, "
                "micro_batch_sequences: 3}"),
           S, "schedule.global_batch_tokens",
           "the global batch of 8 sequences is not divisible by parallel.world_size (1) × "
           "schedule.micro_batch_sequences (3)"),
      Yaml("BatchNotDivisibleByScaleWorldSize", Scale("world_size: 3"), S,
           "schedule.global_batch_tokens", "is not divisible by parallel.world_size (3)"),
      Yaml("WarmupAsLongAsTheRun", With("optim", "optim: {peak_lr: 3e-3, warmup_steps: 24}"), S,
           "optim.warmup_steps", "must be less than the schedule's total steps (24)"),

      // --- Milestones and stops.
      Yaml("MilestonesNotIncreasing",
           With("schedule", Schedule("milestones_tokens: [12288, 6144]")), S,
           "schedule.milestones_tokens[1]",
           "6144 is not greater than the previous milestone (12288)"),
      Yaml("MilestoneRepeated", With("schedule", Schedule("milestones_tokens: [6144, 6144]")), S,
           "schedule.milestones_tokens[1]", "is not greater than the previous milestone"),
      Yaml("MilestoneBeyondBudget", With("schedule", Schedule("milestones_tokens: [6144, 24576]")),
           S, "schedule.milestones_tokens[1]",
           "24576 is beyond the budget schedule.total_tokens (12288)"),
      Yaml("MilestoneZero", With("schedule", Schedule("milestones_tokens: [0, 6144]")), S,
           "schedule.milestones_tokens[0]", "must be positive"),
      Yaml("ControlStopsBeyondBudget",
           With("controls", Control("arm: tied, parent_arm: rd, stop_at_tokens: 20000")), S,
           "controls[0].stop_at_tokens", "is beyond"),
      Yaml("ControlStopsPastTotalInLastStep",
           With("controls", Control("arm: tied, parent_arm: rd, stop_at_tokens: 12289")), S,
           "controls[0].stop_at_tokens", "beyond"),

      // --- Vocabulary.
      Yaml("VocabSmallerThanTokenizer", Shape("vocab_size: 100"), S, "scales[0].shape.vocab_size",
           "100 is smaller than the byte tokenizer's 257 ids"),
      Yaml("VocabBelowTwo", Shape("vocab_size: 1"), S, "scales[0].shape.vocab_size",
           "must be at least 2"),
      Yaml("Gpt2TokenizerOnAByteModel",
           With("data", "data: {train_shards: [a.bin], tokenizer: gpt2}"), S,
           "scales[0].shape.vocab_size", "257 is smaller than the gpt2 tokenizer's 50257 ids"),
      Yaml("VocabTooLargeForShards", Shape("vocab_size: 70000"), S, "scales[0].shape.vocab_size",
           "70000 is larger than 65536"),

      // --- Empty lists and required fields.
      Yaml("NoScales", With("scales", "scales: []"), S, "scales", "must not be empty"),
      Yaml("NoArms", With("arms", "arms: []"), S, "arms", "must not be empty"),
      Yaml("NoSeeds", With("seeds", "seeds: []"), S, "seeds", "must not be empty"),
      Yaml("SeedsMissing", With("seeds", ""), S, "seeds", "must not be empty"),
      Yaml("NoTrainShards", With("data", "data: {train_shards: [], tokenizer: byte}"), S,
           "data.train_shards", "required: at least one shard path or glob"),
      Yaml("EmptyShardPath", With("data", Data("val_shards: ['']")), S, "data.val_shards[0]",
           "empty path"),
      Yaml("NameMissing", With("name", ""), S, "name", "required"),
      Yaml("NameEmpty", With("name", "name: ''"), S, "name", "required"),
      Yaml("TokenizerMissing", With("data", "data: {train_shards: [a.bin]}"), S, "data.tokenizer",
           "required; valid: gpt2, byte"),
      Yaml("UnknownTokenizer", With("data", "data: {train_shards: [a.bin], tokenizer: latin1}"), S,
           "data.tokenizer", "unknown tokenizer 'latin1'"),
      Yaml("UnknownPreset", With("scales", "scales: [{name: s, preset: XL}]"), S,
           "scales[0].preset", "unknown preset 'XL'; valid: S, M, tiny, cpu-small, cpu-bench"),
      Yaml("ShapeIncompleteWithoutPreset",
           With("scales", "scales: [{name: s, shape: {layers: 2, width: 64}}]"), S,
           "scales[0].shape.heads", "required when model.preset is empty"),
      Yaml("ScaleWithoutNameOrPreset", With("scales", "scales: [{shape: {layers: 2}}]"), S,
           "scales[0].name", "required when scales[0].preset is empty"),
      Yaml("PeakLrMissing", With("optim", "optim: {warmup_steps: 2}"), S, "optim.peak_lr",
           "required"),
      Yaml("TotalTokensMissing", With("schedule", "schedule: {global_batch_tokens: 512}"), S,
           "schedule.total_tokens", "required"),
      Yaml("UnknownRecipe", With("recipe", "recipe: fast"), S, "recipe",
           "unknown recipe 'fast'; valid: paper (or empty)"),
      Yaml("PaperRecipeWithoutPeakLrForTiny",
           "name: p\nrecipe: paper\nscales: [{preset: tiny}]\narms: [block]\nseeds: [1]\n"
           "data: {train_shards: [a.bin], tokenizer: byte}\n",
           S, "optim.peak_lr", "the paper recipe defines it only for model.preset S"),

      // --- Scale names (they become job ids and checkpoint folders).
      Yaml("ScaleNameWithSlash", With("scales", "scales: [{name: a/b, preset: tiny}]"), S,
           "scales[0].name", "'a/b' may contain only letters, digits"),
      Yaml("ScaleNameWithSpace", With("scales", "scales: [{name: 'a b', preset: tiny}]"), S,
           "scales[0].name", "may contain only"),
      Yaml("ScaleNameDotDot", With("scales", "scales: [{name: '..', preset: tiny}]"), S,
           "scales[0].name", "'..' is not a usable name"),
      Yaml("ScaleNameDot", With("scales", "scales: [{name: '.', preset: tiny}]"), S,
           "scales[0].name", "'.' is not a usable name"),
      Yaml("ScaleNameTooLong",
           With("scales", "scales: [{name: " + std::string(65, 'n') + ", preset: tiny}]"), S,
           "scales[0].name", "is 65 characters long, more than 64"),

      // --- Fields a sweep must leave to its seeds and controls.
      Yaml("DataSeedInASweep", With("data", Data("data_seed: 3")), S, "data.data_seed",
           "must not be set in a sweep"),
      Yaml("StopInASweep", With("schedule", Schedule("stop_at_tokens: 8")), S,
           "schedule.stop_at_tokens", "must not be set in a sweep"),
      Yaml("ResumeFromInASweep", With("checkpoint", "checkpoint: {resume_from: x.pt}"), S,
           "checkpoint.resume_from", "must not be set in a sweep"),
      Yaml("ReservedLabel", With("labels", "labels: {seed: x}"), S, "labels.seed",
           "reserved: set on every job from its place in the sweep"),

      // --- Parallel settings that do not go together.
      Yaml("Bf16OnCpu", With("parallel", "parallel: {world_size: 1, device: cpu, precision: bf16}"),
           S, "parallel.precision", "bf16 needs parallel.device cuda"),
      Yaml("NcclOnCpu", With("parallel", "parallel: {world_size: 1, device: cpu, backend: nccl}"),
           S, "parallel.backend", "nccl needs parallel.device cuda"),
      Yaml("LocalBackendWithTwoRanks",
           WithIn(With("parallel", "parallel: {world_size: 2, backend: local}"), "schedule",
                  "schedule: {total_tokens: 12288, global_batch_tokens: 512, "
                  "micro_batch_sequences: 4}"),
           S, "parallel.backend", "local runs only at parallel.world_size 1, got 2"),

      // --- Malformed files.
      Yaml("YamlUnclosedList", "name: x\n  bad: [\n", P, "line 2, column 6", "illegal map value"),
      Yaml("YamlUnclosedQuote", "name: \"x\nseeds: [1]\n", P, "line 2, column 11",
           "illegal EOF in scalar"),
      Yaml("YamlUnclosedQuoteAtTheEnd", std::string(kBase) + "description: 'the last line\n\n", P,
           "line 12, column 28", "illegal EOF in scalar"),
      Yaml("YamlTabIndent", "name: x\nscales:\n\t- {name: s}\n", P, "line 3, column 2",
           "illegal block entry"),
      Yaml("YamlTwoDocuments", std::string(kBase) + "---\nname: b\n", P, "SweepSpec",
           "a sweep file holds one YAML document, found 2"),
      Yaml("YamlTopLevelList", "- name: x\n- name: y\n", P, "SweepSpec",
           "expected a mapping of SweepSpec fields, got a list"),
      Yaml("YamlTopLevelScalar", "just a sentence\n", P, "SweepSpec",
           "expected a mapping of SweepSpec fields"),
      Yaml("YamlTrailingCommaAfterTheSweep", "{name: x, seeds: [1]},\n", P, "line 1, column 22",
           "unexpected ','"),
      Yaml("YamlLeadingComma", ", name: x\n", P, "line 1, column 1", "unexpected ','"),
      Yaml("YamlComplexKey", std::string(kBase) + "? [a, b]\n: 1\n", P, "SweepSpec",
           "a key must be a plain name"),
      Yaml("YamlAliasBomb",
           "name: x\na: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, "
           "*a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, "
           "*c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, "
           "*e, *e, *e, *e, *e, *e, *e, *e]\ng: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n",
           P, "SweepSpec", "more than"),
      Yaml("YamlAliasInsideItsOwnNode",
           With("scales", "scales: &s [{name: s, preset: tiny, shape: *s}]"), P, "scales[0].shape",
           "an alias names a mapping or list that it is inside of"),
      Yaml("YamlNestsTooDeep", "name: " + std::string(70, '[') + std::string(70, ']') + "\n", P,
           "SweepSpec", "the YAML nests deeper than 64 levels"),
      Json("JsonSyntaxError", R"({"name": })", P, "line 1, column 10", "syntax error"),
      Json("JsonTrailingComma", "{\"name\": \"x\",}", P, "line 1, column 14", "syntax error"),
      Json("JsonNumberBeyondDouble", R"({"name": "x", "optim": {"peakLr": 1e999}})", P,
           "optim.peakLr", "number overflow parsing '1e999'"),
      Json("JsonTopLevelList", "[1, 2]", P, "SweepSpec", "expected a mapping of SweepSpec fields"),
      Json("JsonTruncated", std::string(kBaseJson).substr(0, 40), P, "line 3, column 20",
           "missing closing quote"),

      // --- The request itself.
      [] {
        Row r = Yaml("NoRequestId", kBase, S, "request_id", "required");
        r.request_id = "";
        return r;
      }(),
  };
  return rows;
}

// --- The harness --------------------------------------------------------------------------

StatusOr<pb::SweepSpec> Parse(const Row& row) {
  return row.format == Format::kYaml ? contract::ParseSweepYaml(row.spec)
                                     : contract::ParseSweepJson(row.spec);
}

// Rows in the sqlite tables of the coordinator's store.
int64_t CountRows(const std::string& db_path, const std::string& table) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  const std::string sql = "SELECT COUNT(*) FROM " + table;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  int64_t n = -1;
  if (stmt != nullptr && sqlite3_step(stmt) == SQLITE_ROW) n = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return n;
}

// One coordinator core on a fresh SQLite file.
class Coordinator {
 public:
  Coordinator() {
    auto store = Store::Open(db_path());
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (store.ok()) core_ = std::make_unique<Core>(std::move(*store), &clock_, CoreOptions{});
  }
  Core& core() { return *core_; }
  std::string db_path() const { return dir_.File("coord.db"); }

  StatusOr<pb::SubmitSweepResponse> Submit(const pb::SweepSpec& spec, const std::string& id,
                                           bool validate_only) {
    pb::SubmitSweepRequest req;
    req.set_request_id(id);
    *req.mutable_spec() = spec;
    req.set_validate_only(validate_only);
    return core_->SubmitSweep(req, "alice");
  }

  // Every table a submission writes is empty, and ListSweeps finds nothing.
  void ExpectNothingStored() {
    for (const char* table : {"sweeps", "jobs", "attempts", "events"}) {
      EXPECT_EQ(CountRows(db_path(), table), 0) << table;
    }
    auto list = core_->ListSweeps(pb::ListSweepsRequest());
    ASSERT_TRUE(list.ok()) << list.status().ToString();
    EXPECT_EQ(list->sweeps_size(), 0);
  }

 private:
  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Core> core_;
};

// The reasons of the field errors that name `field` (what a client reads from the
// google.rpc.BadRequest field violations of the status details).
std::vector<std::string> ReasonsNaming(const Status& status, const std::string& field) {
  std::vector<std::string> out;
  for (const FieldError& e : status.field_errors()) {
    if (e.path == field) out.push_back(e.reason);
  }
  return out;
}

void ExpectNamesField(const Status& status, const Row& row) {
  ASSERT_FALSE(status.ok()) << "accepted: " << row.spec;
  EXPECT_EQ(status.code(), row.code) << status.ToString();
  // The code a gRPC client sees (service.cc maps with ToGrpcStatus).
  EXPECT_EQ(static_cast<int>(contract::ToGrpcStatus(status).error_code()),
            static_cast<int>(row.code));
  // ... and the rest of what it sees: the text for people, every field error's "field: reason"
  // joined, and the field errors themselves in the details.
  const Status wire = contract::FromGrpcStatus(contract::ToGrpcStatus(status));
  EXPECT_EQ(wire.message(), status.message());
  EXPECT_EQ(wire.field_errors(), status.field_errors());
  EXPECT_EQ(status.message(), JoinFieldErrors(status.field_errors()));
  const std::vector<std::string> reasons = ReasonsNaming(wire, row.field);
  ASSERT_FALSE(reasons.empty()) << "no error names '" << row.field << "' in: " << status.message();
  bool found = false;
  for (const std::string& reason : reasons) {
    EXPECT_FALSE(reason.empty());
    if (reason.find(row.reason) != std::string::npos) found = true;
  }
  EXPECT_TRUE(found) << "'" << row.field << "' is named, but not with '" << row.reason
                     << "': " << status.message();
}

// gtest prints a failing row by its name (not as bytes).
void PrintTo(const Row& row, std::ostream* os) { *os << row.name; }

class SubmitInvalidTest : public ::testing::TestWithParam<Row> {};

TEST_P(SubmitInvalidTest, RejectedNamingTheFieldAndNothingStored) {
  const Row& row = GetParam();
  SCOPED_TRACE(row.spec);
  Coordinator coord;
  StatusOr<pb::SweepSpec> spec = Parse(row);
  if (row.stage == Stage::kParse) {
    // The client stops here: nothing reaches the coordinator.
    ExpectNamesField(spec.status(), row);
    return;
  }
  ASSERT_TRUE(spec.ok()) << "expected to parse: " << spec.status().ToString();
  // `rdattn validate` / a dry run, then the real submission: the same answer, nothing stored.
  for (const bool validate_only : {true, false}) {
    SCOPED_TRACE(validate_only ? "validate_only" : "submit");
    StatusOr<pb::SubmitSweepResponse> resp = coord.Submit(*spec, row.request_id, validate_only);
    if (validate_only && row.request_id.empty()) {
      // validate_only needs no request id; the rest of the sweep is valid.
      EXPECT_TRUE(resp.ok()) << resp.status().ToString();
      continue;
    }
    ExpectNamesField(resp.status(), row);
    coord.ExpectNothingStored();
  }
}

std::string RowName(const ::testing::TestParamInfo<Row>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Table, SubmitInvalidTest, ::testing::ValuesIn(Rows()), RowName);

TEST(SubmitInvalidTableTest, HasAtLeastFiftyRowsWithUniqueNames) {
  const std::vector<Row> rows = Rows();
  EXPECT_GE(rows.size(), 50u);
  std::set<std::string> names;
  for (const Row& r : rows) EXPECT_TRUE(names.insert(r.name).second) << r.name;
}

// The base sweeps are valid: each row's rejection is its own defect. Both are stored, once.
TEST(SubmitInvalidTableTest, BaseSweepsAreAcceptedAndStored) {
  Coordinator coord;
  for (const auto& [format, text] : {std::pair{Format::kYaml, std::string(kBase)},
                                     std::pair{Format::kJson, std::string(kBaseJson)}}) {
    Row row{"base", format, text, Stage::kSubmit, "", ""};
    StatusOr<pb::SweepSpec> spec = Parse(row);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    const std::string id = format == Format::kYaml ? "yaml" : "json";
    auto resp = coord.Submit(*spec, id, /*validate_only=*/false);
    ASSERT_TRUE(resp.ok()) << resp.status().ToString();
    EXPECT_TRUE(resp->created());
  }
  EXPECT_EQ(CountRows(coord.db_path(), "sweeps"), 2);
  // 1 scale x 2 seeds x (2 arms + 1 control), per sweep.
  EXPECT_EQ(CountRows(coord.db_path(), "jobs"), 12);
}

// A rejected submission leaves no trace that would block a corrected one with the same id.
TEST(SubmitInvalidTableTest, RequestIdOfARejectedSubmissionCanBeReused) {
  Coordinator coord;
  auto bad = contract::ParseSweepYaml(With("seeds", "seeds: [1, 1]"));
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(coord.Submit(*bad, "req-7", false).status().code(), StatusCode::kInvalidArgument);
  coord.ExpectNothingStored();
  auto good = contract::ParseSweepYaml(kBase);
  ASSERT_TRUE(good.ok());
  auto resp = coord.Submit(*good, "req-7", false);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_TRUE(resp->created());
}

}  // namespace
}  // namespace rdattn::coordinator
