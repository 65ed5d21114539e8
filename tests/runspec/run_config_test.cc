// ParseRunConfig: defaults, the paper recipe, every bad input of the trainer issue (each error
// names its field), the JSON forms protobuf allows, the fingerprint and the LR schedule.
// No LibTorch.
#include "runspec/run_config.h"
#include "worker/trainer/lr_schedule.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <limits>

namespace rdattn {
namespace {

using nlohmann::json;
using trainer::LearningRate;

// A small valid spec: preset tiny (context 64, byte vocabulary), 25 steps of 4 sequences.
json Minimal() {
  return json::parse(R"({
    "run_id": "t1",
    "init_seed": 7,
    "model": {"preset": "tiny", "arm": "rd"},
    "data": {"train_shards": ["train_*.bin"], "val_shards": ["val.bin"], "tokenizer": "byte",
             "data_seed": 3},
    "optim": {"peak_lr": 0.001},
    "schedule": {"total_tokens": 6400, "global_batch_tokens": 256}
  })");
}

json PaperS() {
  return json::parse(R"({
    "run_id": "paper-s",
    "recipe": "paper",
    "model": {"preset": "S", "arm": "block"},
    "data": {"train_shards": ["fineweb_train_*.bin"], "val_shards": ["fineweb_val_*.bin"],
             "tokenizer": "gpt2"}
  })");
}

RunConfig MustParse(const json& spec) {
  StatusOr<RunConfig> cfg = ParseRunConfig(spec);
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  if (!cfg.ok()) return RunConfig{};
  return *cfg;
}

// The error message of a spec that must fail (and must fail with INVALID_ARGUMENT).
std::string ErrorOf(const json& spec) {
  StatusOr<RunConfig> cfg = ParseRunConfig(spec);
  EXPECT_FALSE(cfg.ok()) << "expected an error for " << spec.dump();
  if (cfg.ok()) return "";
  EXPECT_EQ(cfg.status().code(), StatusCode::kInvalidArgument);
  return cfg.status().message();
}

// Splits "a: x; b: y" into its errors. A piece that does not start with "<path>: " (or that
// starts with "valid: ") continues the previous error.
bool StartsWithPath(const std::string& piece) {
  if (piece.rfind("valid: ", 0) == 0) return false;
  const size_t colon = piece.find(": ");
  if (colon == std::string::npos || colon == 0) return false;
  for (size_t i = 0; i < colon; ++i) {
    const char c = piece[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' ||
          c == ']'))
      return false;
  }
  return true;
}

std::vector<std::string> Split(const std::string& message) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= message.size()) {
    size_t end = message.find("; ", start);
    if (end == std::string::npos) end = message.size();
    const std::string piece = message.substr(start, end - start);
    if (!out.empty() && !StartsWithPath(piece)) {
      out.back() += "; " + piece;
    } else {
      out.push_back(piece);
    }
    start = end + 2;
  }
  return out;
}

::testing::AssertionResult HasError(const std::string& message, const std::string& expected) {
  for (const auto& e : Split(message))
    if (e == expected) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "no error \"" << expected << "\" in \"" << message << "\"";
}

::testing::AssertionResult HasErrorFor(const std::string& message, const std::string& field) {
  for (const auto& e : Split(message))
    if (e.rfind(field + ": ", 0) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "no error for " << field << " in \"" << message << "\"";
}

TEST(RunConfigTest, MinimalSpecGetsEveryDefault) {
  const RunConfig cfg = MustParse(Minimal());
  EXPECT_EQ(cfg.run_id, "t1");
  EXPECT_EQ(cfg.init_seed, 7u);
  EXPECT_EQ(cfg.preset, "tiny");
  EXPECT_EQ(cfg.model.arm, model::Arm::kRd);
  EXPECT_EQ(cfg.model.context, 64);
  EXPECT_EQ(cfg.model.vocab_size, 257);
  EXPECT_EQ(cfg.data.data_seed, 3u);
  EXPECT_EQ(cfg.data.tokenizer, "byte");
  // Schedule: 6400 / 256 = 25 steps of 4 sequences, one rank, no accumulation.
  EXPECT_EQ(cfg.schedule.total_steps, 25);
  EXPECT_EQ(cfg.schedule.stop_step, 25);
  EXPECT_EQ(cfg.schedule.global_batch_sequences, 4);
  EXPECT_EQ(cfg.schedule.micro_batch_sequences, 4);
  EXPECT_EQ(cfg.schedule.grad_accum_steps, 1);
  EXPECT_TRUE(cfg.schedule.milestones_tokens.empty());
  EXPECT_TRUE(cfg.schedule.milestone_steps.empty());
  // Optimiser defaults; warmup = round(0.05 × 25) = 1.
  EXPECT_DOUBLE_EQ(cfg.optim.peak_lr, 1e-3);
  EXPECT_DOUBLE_EQ(cfg.optim.min_lr_ratio, 0.1);
  EXPECT_EQ(cfg.optim.warmup_steps, 1);
  EXPECT_DOUBLE_EQ(cfg.optim.beta1, 0.9);
  EXPECT_DOUBLE_EQ(cfg.optim.beta2, 0.95);
  EXPECT_DOUBLE_EQ(cfg.optim.eps, 1e-8);
  EXPECT_DOUBLE_EQ(cfg.optim.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(cfg.optim.grad_clip, 1.0);
  EXPECT_EQ(cfg.optim.lr_decay, LrDecay::kCosine);
  // Parallel, checkpoint and metrics defaults.
  EXPECT_EQ(cfg.parallel.world_size, 1);
  EXPECT_EQ(cfg.parallel.threads_per_rank, 0);
  EXPECT_EQ(cfg.parallel.backend, Backend::kAuto);
  EXPECT_EQ(cfg.parallel.device, Device::kAuto);
  EXPECT_EQ(cfg.parallel.precision, Precision::kAuto);
  EXPECT_EQ(cfg.parallel.allreduce_bucket_bytes, 25 << 20);
  EXPECT_EQ(cfg.checkpoint.keep_last, 2);
  EXPECT_EQ(cfg.checkpoint.every_steps, 0);
  EXPECT_EQ(cfg.train_event_every_steps, 1);
  EXPECT_EQ(cfg.recipe, "");
}

TEST(RunConfigTest, TextEntryPointAndInvalidJson) {
  StatusOr<RunConfig> cfg = ParseRunConfigText(Minimal().dump());
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->schedule.total_steps, 25);

  StatusOr<RunConfig> bad = ParseRunConfigText("{\"run_id\": ");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind("RunSpec: invalid JSON", 0), 0u) << bad.status().message();

  EXPECT_EQ(ErrorOf(json::array()), "RunSpec: expected a JSON object, got []");
}

TEST(RunConfigTest, PaperRecipeForS) {
  const RunConfig cfg = MustParse(PaperS());
  EXPECT_EQ(cfg.model.context, 1024);
  EXPECT_EQ(cfg.schedule.global_batch_tokens, 524288);
  EXPECT_EQ(cfg.schedule.total_tokens, 2000158720);
  EXPECT_EQ(cfg.schedule.total_steps, 3815);
  EXPECT_EQ(cfg.schedule.stop_step, 3815);
  EXPECT_EQ(cfg.schedule.global_batch_sequences, 512);
  EXPECT_EQ(cfg.schedule.micro_batch_sequences, 512);
  EXPECT_EQ(cfg.schedule.grad_accum_steps, 1);
  EXPECT_EQ(
      cfg.schedule.milestones_tokens,
      (std::vector<int64_t>{477LL * 524288, 954LL * 524288, 1908LL * 524288, 3815LL * 524288}));
  EXPECT_EQ(cfg.schedule.milestone_steps, (std::vector<int64_t>{477, 954, 1908, 3815}));
  EXPECT_EQ(cfg.optim.warmup_steps, 190);
  EXPECT_DOUBLE_EQ(cfg.optim.peak_lr, 6e-4);
  EXPECT_DOUBLE_EQ(cfg.optim.min_lr_ratio, 0.1);
  EXPECT_DOUBLE_EQ(cfg.optim.beta1, 0.9);
  EXPECT_DOUBLE_EQ(cfg.optim.beta2, 0.95);
  EXPECT_DOUBLE_EQ(cfg.optim.eps, 1e-8);
  EXPECT_DOUBLE_EQ(cfg.optim.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(cfg.optim.grad_clip, 1.0);
  EXPECT_EQ(cfg.optim.lr_decay, LrDecay::kCosine);

  // The LR schedule: warmup from peak/190, peak at step 189, cosine to 10% at step 3814.
  EXPECT_DOUBLE_EQ(LearningRate(cfg.optim, cfg.schedule, 0), 6e-4 / 190);
  EXPECT_NEAR(LearningRate(cfg.optim, cfg.schedule, 3814), 6e-5, 1e-12);
  EXPECT_DOUBLE_EQ(LearningRate(cfg.optim, cfg.schedule, 189), 6e-4);
  int64_t argmax = -1;
  double max = -1;
  for (int64_t step = 0; step < cfg.schedule.total_steps; ++step) {
    const double lr = LearningRate(cfg.optim, cfg.schedule, step);
    if (lr > max) {
      max = lr;
      argmax = step;
    }
    if (step > 0 && step < 190) {
      EXPECT_GT(lr, LearningRate(cfg.optim, cfg.schedule, step - 1)) << step;
    }
    if (step > 190) {
      EXPECT_LT(lr, LearningRate(cfg.optim, cfg.schedule, step - 1)) << step;
    }
  }
  EXPECT_EQ(argmax, 189);
  EXPECT_DOUBLE_EQ(max, 6e-4);
  // Halfway through the decay the cosine is at the midpoint of peak and min.
  const int64_t mid = 190 + (3815 - 1 - 190) / 2;
  EXPECT_NEAR(LearningRate(cfg.optim, cfg.schedule, mid), (6e-4 + 6e-5) / 2, 1e-12);
}

TEST(RunConfigTest, PaperRecipeForMAndExplicitFieldsWin) {
  json spec = PaperS();
  spec["model"]["preset"] = "M";
  RunConfig cfg = MustParse(spec);
  EXPECT_DOUBLE_EQ(cfg.optim.peak_lr, 3e-4);
  EXPECT_EQ(cfg.schedule.total_steps, 3815);

  // Explicit values win, including proto3-optional zeros; a control stops at 0.5B (step 954).
  spec["optim"] = {{"peak_lr", 1e-3}, {"weight_decay", 0}, {"warmup_steps", 0}};
  spec["schedule"] = {{"stop_at_tokens", 954LL * 524288}};
  cfg = MustParse(spec);
  EXPECT_DOUBLE_EQ(cfg.optim.peak_lr, 1e-3);
  EXPECT_DOUBLE_EQ(cfg.optim.weight_decay, 0.0);
  EXPECT_EQ(cfg.optim.warmup_steps, 0);
  EXPECT_EQ(cfg.schedule.stop_step, 954);
  EXPECT_EQ(cfg.schedule.total_steps, 3815);
  // With no warmup the decay starts at step 0 and ends at the last step.
  EXPECT_DOUBLE_EQ(LearningRate(cfg.optim, cfg.schedule, 0), 1e-3);
  EXPECT_NEAR(LearningRate(cfg.optim, cfg.schedule, 3814), 1e-4, 1e-15);
}

TEST(RunConfigTest, PaperRecipeNeedsPeakLrForOtherPresets) {
  json spec = PaperS();
  spec["model"]["preset"] = "cpu-small";
  spec["data"]["tokenizer"] = "byte";
  EXPECT_EQ(ErrorOf(spec),
            "optim.peak_lr: required: the paper recipe defines it only for model.preset S "
            "(6e-4) and M (3e-4), and model.preset is 'cpu-small'");
  spec["optim"]["peak_lr"] = 1e-3;
  const RunConfig cfg = MustParse(spec);
  EXPECT_EQ(cfg.schedule.global_batch_sequences, 4096);  // 524288 / 128
}

TEST(RunConfigTest, PaperRecipeValuesThatDoNotFitAnOverrideSayWhereTheyCameFrom) {
  json spec = PaperS();
  spec["schedule"] = {{"total_tokens", 524288 * 400}};  // 400 steps: the 477+ milestones overrun
  const std::string err = ErrorOf(spec);
  EXPECT_TRUE(HasError(err,
                       "schedule.milestones_tokens[0]: 250085376 (the paper recipe's "
                       "milestone) is beyond the budget schedule.total_tokens (209715200)"));
  EXPECT_TRUE(HasErrorFor(err, "schedule.milestones_tokens[3]"));
  EXPECT_EQ(Split(err).size(), 4u) << err;
  spec["schedule"]["total_tokens"] = 524288 * 150;  // 150 steps: warmup 190 is too long too
  spec["schedule"]["milestones_tokens"] = {524288 * 100};
  EXPECT_EQ(ErrorOf(spec),
            "optim.warmup_steps: 190 (the paper recipe's value) must be less than "
            "the schedule's total steps (150)");
}

TEST(RunConfigTest, UnknownRecipe) {
  json spec = Minimal();
  spec["recipe"] = "chinchilla";
  EXPECT_EQ(ErrorOf(spec), "recipe: unknown recipe 'chinchilla'; valid: paper (or empty)");
}

// --- the bad inputs of the trainer issue ("Bad input"), each naming its field ---------------

TEST(RunConfigTest, UnknownArm) {
  json spec = Minimal();
  spec["model"]["arm"] = "x";
  EXPECT_EQ(ErrorOf(spec),
            "model.arm: unknown arm 'x'; valid: standard, block, rd, tied, average, "
            "average_asym, frozen_v");
  spec["model"].erase("arm");
  EXPECT_EQ(ErrorOf(spec),
            "model.arm: required; valid: standard, block, rd, tied, average, average_asym, "
            "frozen_v");
}

TEST(RunConfigTest, WidthNotDivisibleByHeads) {
  json spec = Minimal();
  spec["model"]["shape"] = {{"width", 30}, {"heads", 4}};
  EXPECT_EQ(ErrorOf(spec), "model.shape.width: 30 is not divisible by heads (4)");
}

// The derived micro batch is written back into int32 fields (RunSpec, stored jobs): one that
// does not fit is refused at parse time, naming the batch (found by the run_spec fuzzer: the
// config was accepted and its RunSpec then failed to serialise).
TEST(RunConfigTest, DerivedMicroBatchMustFitItsInt32Field) {
  json spec = Minimal();
  spec["model"]["preset"] = "cpu-small";  // context 128
  spec["schedule"] = {{"total_tokens", 7680},
                      {"global_batch_tokens", int64_t{128} << 31}};  // 2^31 sequences
  EXPECT_EQ(ErrorOf(spec),
            "schedule.global_batch_tokens: the global batch of 2147483648 sequences gives "
            "2147483648 per rank, above the largest schedule.micro_batch_sequences "
            "(2147483647)");
  // Over 2 ranks the derived micro batch is 2^30 and fits.
  spec["parallel"] = {{"world_size", 2}};
  const RunConfig cfg = MustParse(spec);
  EXPECT_EQ(cfg.schedule.micro_batch_sequences, int64_t{1} << 30);
  EXPECT_EQ(cfg.schedule.grad_accum_steps, 1);
}

TEST(RunConfigTest, GlobalBatchNotDivisibleByWorldTimesMicroBatch) {
  json spec = Minimal();
  spec["model"]["preset"] = "cpu-small";                                      // context 128
  spec["schedule"] = {{"total_tokens", 7680}, {"global_batch_tokens", 768}};  // 6 sequences
  spec["parallel"] = {{"world_size", 4}};
  EXPECT_EQ(ErrorOf(spec),
            "schedule.global_batch_tokens: the global batch of 6 sequences is not divisible by "
            "parallel.world_size (4) × schedule.micro_batch_sequences (1)");
  // With an explicit micro batch: 8 sequences over 2 ranks × 3.
  spec["schedule"]["global_batch_tokens"] = 1024;
  spec["parallel"]["world_size"] = 2;
  spec["schedule"]["micro_batch_sequences"] = 3;
  EXPECT_EQ(ErrorOf(spec),
            "schedule.global_batch_tokens: the global batch of 8 sequences is not divisible by "
            "parallel.world_size (2) × schedule.micro_batch_sequences (3)");
  // 8 = 2 ranks × 2 sequences × 2 accumulation steps.
  spec["schedule"]["micro_batch_sequences"] = 2;
  const RunConfig cfg = MustParse(spec);
  EXPECT_EQ(cfg.schedule.grad_accum_steps, 2);
  EXPECT_EQ(cfg.parallel.world_size, 2);
}

TEST(RunConfigTest, GlobalBatchNotAMultipleOfTheContext) {
  json spec = Minimal();
  spec["model"]["preset"] = "cpu-small";
  spec["schedule"]["global_batch_tokens"] = 1000;
  EXPECT_EQ(ErrorOf(spec),
            "schedule.global_batch_tokens: 1000 is not a multiple of the context (128)");
}

TEST(RunConfigTest, MilestoneBeyondTheBudget) {
  json spec = Minimal();
  spec["model"]["preset"] = "cpu-small";
  spec["schedule"] = {{"total_tokens", 2000000},
                      {"global_batch_tokens", 128000},
                      {"milestones_tokens", {500000, 1000000, 3000000}}};
  EXPECT_EQ(ErrorOf(spec),
            "schedule.milestones_tokens[2]: 3000000 is beyond the budget "
            "schedule.total_tokens (2000000)");
  // A milestone inside the last (partial) step's tokens is fine: 16 steps reach 2,048,000.
  spec["schedule"]["milestones_tokens"] = {500000, 1000000, 2048000};
  const RunConfig cfg = MustParse(spec);
  EXPECT_EQ(cfg.schedule.total_steps, 16);
  EXPECT_EQ(cfg.schedule.milestone_steps, (std::vector<int64_t>{4, 8, 16}));
}

TEST(RunConfigTest, MilestonesMustBeSortedUniqueAndPositive) {
  json spec = Minimal();
  spec["schedule"]["milestones_tokens"] = {1024, 1024, 512, 0};
  const std::string err = ErrorOf(spec);
  EXPECT_TRUE(HasError(err,
                       "schedule.milestones_tokens[1]: 1024 is not greater than the previous "
                       "milestone (1024); milestones must be sorted and unique"));
  EXPECT_TRUE(HasErrorFor(err, "schedule.milestones_tokens[2]"));
  EXPECT_TRUE(HasError(err, "schedule.milestones_tokens[3]: must be positive, got 0"));
}

TEST(RunConfigTest, StopAtTokens) {
  json spec = Minimal();
  spec["schedule"]["stop_at_tokens"] = 1000;  // ceil(1000 / 256) = 4
  RunConfig cfg = MustParse(spec);
  EXPECT_EQ(cfg.schedule.stop_step, 4);
  EXPECT_EQ(cfg.schedule.total_steps, 25);
  spec["schedule"]["stop_at_tokens"] = 7000;
  EXPECT_EQ(ErrorOf(spec),
            "schedule.stop_at_tokens: 7000 is beyond the budget schedule.total_tokens (6400)");
}

TEST(RunConfigTest, OtherExactMessages) {
  json spec = Minimal();
  spec["model"]["preset"] = "cpu-bench";  // vocab 512
  spec["data"]["tokenizer"] = "gpt2";
  EXPECT_EQ(ErrorOf(spec),
            "model.shape.vocab_size: 512 is smaller than the gpt2 tokenizer's 50257 ids");

  spec = Minimal();
  spec["model"]["shape"] = {{"vocab_size", 256}};
  EXPECT_EQ(ErrorOf(spec),
            "model.shape.vocab_size: 256 is smaller than the byte tokenizer's 257 ids");

  spec = Minimal();
  spec["model"]["preset"] = "X";
  EXPECT_EQ(ErrorOf(spec),
            "model.preset: unknown preset 'X'; valid: S, M, tiny, cpu-small, cpu-bench");

  spec = Minimal();
  spec["parallel"] = {{"precision", "bf16"}, {"device", "cpu"}};
  EXPECT_EQ(ErrorOf(spec), "parallel.precision: bf16 needs parallel.device cuda");
  spec["parallel"]["device"] = "cuda";
  EXPECT_EQ(MustParse(spec).parallel.precision, Precision::kBf16);

  spec = Minimal();
  spec["data"]["tokenizer"] = "sentencepiece";
  EXPECT_EQ(ErrorOf(spec), "data.tokenizer: unknown tokenizer 'sentencepiece'; valid: gpt2, byte");
  spec["data"].erase("tokenizer");
  EXPECT_EQ(ErrorOf(spec), "data.tokenizer: required; valid: gpt2, byte");

  spec = Minimal();
  spec["data"]["train_shards"] = json::array();
  EXPECT_EQ(ErrorOf(spec), "data.train_shards: required: at least one shard path or glob");
}

TEST(RunConfigTest, ExplicitShapeWithoutPreset) {
  json spec = Minimal();
  spec["model"] = {{"arm", "block"}, {"shape", {{"width", 64}, {"heads", 2}}}};
  const std::string err = ErrorOf(spec);
  for (const char* f : {"layers", "ffn_hidden", "blocks", "context", "vocab_size"})
    EXPECT_TRUE(
        HasError(err, std::string("model.shape.") + f + ": required when model.preset is empty"))
        << f;
  EXPECT_FALSE(HasErrorFor(err, "model.shape.width"));
  EXPECT_FALSE(HasErrorFor(err, "model.shape.norm_eps"));
  EXPECT_EQ(Split(err).size(), 5u) << err;  // nothing else: no cascade from the missing fields

  spec["model"]["shape"] = {{"layers", 4},       {"width", 96},           {"heads", 3},
                            {"ffn_hidden", 256}, {"blocks", 2},           {"context", 32},
                            {"vocab_size", 300}, {"rope_theta", 500000.0}};
  spec["schedule"]["global_batch_tokens"] = 128;
  const RunConfig cfg = MustParse(spec);
  EXPECT_EQ(cfg.preset, "");
  EXPECT_EQ(cfg.model.width, 96);
  EXPECT_EQ(cfg.model.head_dim(), 32);
  EXPECT_DOUBLE_EQ(cfg.model.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(cfg.model.norm_eps, 1e-6);
  EXPECT_EQ(cfg.schedule.global_batch_sequences, 4);
}

TEST(RunConfigTest, RangeChecks) {
  json spec = Minimal();
  spec["optim"] = {
      {"peak_lr", -1}, {"min_lr_ratio", 1.5},  {"beta1", 1.0},    {"beta2", -0.1},
      {"eps", 0},      {"weight_decay", -0.5}, {"grad_clip", -1}, {"warmup_steps", 25}};
  spec["parallel"] = {{"world_size", -2},
                      {"threads_per_rank", -1},
                      {"allreduce_bucket_bytes", -5},
                      {"backend", "local"}};
  spec["checkpoint"] = {{"keep_last", -1}, {"every_steps", -3}};
  spec["metrics"] = {{"train_event_every_steps", -1}};
  spec["data"]["val_windows"] = -1;
  spec["data"]["test_windows"] = -2;
  const std::string err = ErrorOf(spec);
  for (const char* f :
       {"optim.peak_lr", "optim.min_lr_ratio", "optim.beta1", "optim.beta2", "optim.eps",
        "optim.weight_decay", "optim.grad_clip", "optim.warmup_steps", "parallel.world_size",
        "parallel.threads_per_rank", "parallel.allreduce_bucket_bytes", "checkpoint.keep_last",
        "checkpoint.every_steps", "metrics.train_event_every_steps", "data.val_windows",
        "data.test_windows"})
    EXPECT_TRUE(HasErrorFor(err, f)) << f;
  EXPECT_TRUE(
      HasError(err, "optim.warmup_steps: 25 must be less than the schedule's total steps (25)"));

  // Non-finite doubles arrive as strings and are rejected where they are read.
  spec = Minimal();
  spec["optim"]["peak_lr"] = "NaN";
  spec["model"]["shape"] = {{"norm_eps", "Infinity"}};
  const std::string err2 = ErrorOf(spec);
  EXPECT_TRUE(HasErrorFor(err2, "optim.peak_lr"));
  EXPECT_TRUE(HasErrorFor(err2, "model.shape.norm_eps"));

  // Backend constraints.
  spec = Minimal();
  spec["parallel"] = {{"backend", "nccl"}, {"device", "cpu"}};
  EXPECT_EQ(ErrorOf(spec), "parallel.backend: nccl needs parallel.device cuda (or auto)");
}

TEST(RunConfigTest, ErrorsAreFieldErrorsJoinedOnce) {
  json spec = Minimal();
  spec["model"]["arm"] = "x; data: y";  // a reason with "; <field>:" in it stays one error
  spec["model"]["shape"] = {{"width", 30}, {"heads", 4}};
  spec["schedule"]["total_tokenz"] = 5;
  const FieldErrorsOr<RunConfig> cfg = ParseRunConfig(spec);
  ASSERT_FALSE(cfg.ok());
  const std::vector<FieldError> expected = {
      {"schedule.total_tokenz", "unknown field"},
      {"model.arm", "unknown arm 'x; data: y'; valid: " + model::ValidArmNames()},
      {"model.shape.width", "30 is not divisible by heads (4)"}};
  EXPECT_EQ(cfg.errors(), expected);
  EXPECT_EQ(cfg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cfg.status().message(), JoinFieldErrors(expected));
  const StatusOr<RunConfig> as_status = ParseRunConfig(spec);  // the boundary's conversion
  EXPECT_EQ(as_status.status().message(), cfg.status().message());

  const FieldErrorsOr<RunConfig> text = ParseRunConfigText("[1");
  ASSERT_EQ(text.errors().size(), 1u);
  EXPECT_EQ(text.errors()[0].path, "RunSpec");
  EXPECT_EQ(text.errors()[0].reason.rfind("invalid JSON: ", 0), 0u) << text.errors()[0].reason;
}

TEST(FieldErrorsTest, KeepsOrderDropsRepeatsAndErrorsOnBadPaths) {
  FieldErrors errors("RunSpec");
  errors.Add("", "expected an object");
  errors.AddAndMarkBad("a.b", "expected an int32");
  errors.Add("a.b", "expected an int32");   // the same error again
  errors.Check("a.b", "must be positive");  // moot: a.b is bad
  errors.CheckAndMarkBad("c", "required");
  errors.Check("c", "must be positive");
  errors.Check("d[0]", "empty path");
  const std::vector<FieldError> expected = {{"RunSpec", "expected an object"},
                                            {"a.b", "expected an int32"},
                                            {"c", "required"},
                                            {"d[0]", "empty path"}};
  EXPECT_EQ(errors.list(), expected);
  EXPECT_EQ(errors.ToStatus().message(),
            "RunSpec: expected an object; a.b: expected an int32; c: required; d[0]: empty path");
  errors.StableSortFrom(1, [](const FieldError& e) { return e.path == "a.b" ? 1 : 0; });
  EXPECT_EQ(errors.list()[1].path, "c");
  EXPECT_EQ(errors.list()[2].path, "d[0]");
  EXPECT_EQ(errors.list()[3].path, "a.b");
  EXPECT_TRUE(FieldErrors("x").ToStatus().ok());
  EXPECT_EQ(FieldPath("", "a"), "a");
  EXPECT_EQ(FieldPath("a", "b"), "a.b");
  EXPECT_EQ(FieldIndex("a", 2), "a[2]");
}

TEST(RunConfigTest, SeveralErrorsAtOnce) {
  json spec = Minimal();
  spec["model"]["arm"] = "x";
  spec["model"]["shape"] = {{"width", 30}, {"heads", 4}};
  spec["model"]["preset"] = "cpu-small";
  spec["schedule"] = {{"total_tokens", 2000000},
                      {"global_batch_tokens", 128000},
                      {"milestones_tokens", {500000, 1000000, 3000000}},
                      {"total_tokenz", 5}};
  spec["parallel"] = {{"world_size", -1}};
  const std::string err = ErrorOf(spec);
  const std::vector<std::string> errors = Split(err);
  ASSERT_EQ(errors.size(), 5u) << err;
  // Syntax errors first, then validation errors by section, in the document's order (a
  // nlohmann::json object keeps its keys sorted: model, parallel, schedule).
  EXPECT_EQ(errors[0], "schedule.total_tokenz: unknown field");
  EXPECT_EQ(errors[1],
            "model.arm: unknown arm 'x'; valid: standard, block, rd, tied, average, average_asym, "
            "frozen_v");
  EXPECT_EQ(errors[2], "model.shape.width: 30 is not divisible by heads (4)");
  EXPECT_EQ(errors[3], "parallel.world_size: must be at least 1 (0 means 1), got -1");
  // The broken shape and world size skip the batch geometry; the milestone is still checked.
  EXPECT_EQ(errors[4],
            "schedule.milestones_tokens[2]: 3000000 is beyond the budget schedule.total_tokens "
            "(2000000)");
}

TEST(RunConfigTest, UnknownFields) {
  json spec = Minimal();
  spec["schedule"]["total_tokenz"] = 5;
  EXPECT_EQ(ErrorOf(spec), "schedule.total_tokenz: unknown field");
  spec = Minimal();
  spec["modle"] = json::object();
  EXPECT_EQ(ErrorOf(spec), "modle: unknown field");
  spec = Minimal();
  spec["model"]["shape"] = {{"hidden", 4}};
  EXPECT_EQ(ErrorOf(spec), "model.shape.hidden: unknown field");
  // A key that is no plain name is quoted, so "field: reason" stays unambiguous (tests/fuzz).
  spec = Minimal();
  spec[": eckpoint"] = 1;
  EXPECT_EQ(ErrorOf(spec), "\"\\x3a\\x20eckpoint\": unknown field");
  spec = Minimal();
  spec["schedule"][""] = 1;
  EXPECT_EQ(ErrorOf(spec), "schedule.\"\": unknown field");
}

TEST(RunConfigTest, ErrorsInDocumentOrder) {
  // The text entry point keeps the document's key order.
  StatusOr<RunConfig> cfg = ParseRunConfigText(R"({
    "schedule": {"zeta": 1, "alpha": 2},
    "model": {"preset": "tiny", "arm": "x", "shape": {"width": "wide"}},
    "data": {"train_shards": ["a"], "tokenizer": "byte"},
    "optim": {"peak_lr": 0.001, "beta1": 2}
  })");
  ASSERT_FALSE(cfg.ok());
  const std::vector<std::string> errors = Split(cfg.status().message());
  ASSERT_EQ(errors.size(), 7u) << cfg.status().message();
  EXPECT_EQ(errors[0], "schedule.zeta: unknown field");
  EXPECT_EQ(errors[1], "schedule.alpha: unknown field");
  EXPECT_EQ(
      errors[2],
      "model.shape.width: expected an int32 (a JSON integer or a decimal string), got \"wide\"");
  // Validation errors follow the document's section order: schedule, model, optim.
  EXPECT_EQ(errors[3], "schedule.total_tokens: required: the token budget (or recipe \"paper\")");
  EXPECT_EQ(
      errors[4],
      "schedule.global_batch_tokens: required: tokens per optimizer step (or recipe \"paper\")");
  EXPECT_EQ(errors[5].rfind("model.arm: unknown arm 'x'", 0), 0u);
  EXPECT_EQ(errors[6], "optim.beta1: must be in [0, 1), got 2");
}

TEST(RunConfigTest, TypeErrorsNameFieldAndType) {
  json spec = Minimal();
  spec["schedule"]["total_tokens"] = "12x";
  spec["data"]["data_seed"] = -1;
  spec["data"]["train_shards"] = {"a", 3};
  spec["optim"]["peak_lr"] = true;
  spec["labels"] = {{"scale", 1}};
  spec["model"]["shape"] = {{"width", 1.5}, {"heads", 4294967296LL}};
  spec["parallel"] = {{"device", "tpu"}};
  spec["checkpoint"] = "often";
  const std::string err = ErrorOf(spec);
  EXPECT_TRUE(HasError(err,
                       "schedule.total_tokens: expected an int64 (a JSON integer or a decimal "
                       "string), got \"12x\""));
  EXPECT_TRUE(HasError(err,
                       "data.data_seed: expected a uint64 (a non-negative JSON integer or a "
                       "decimal string), got -1"));
  EXPECT_TRUE(HasError(err, "data.train_shards[1]: expected a string, got 3"));
  EXPECT_TRUE(HasError(err,
                       "optim.peak_lr: expected a double (a JSON number, or \"NaN\", "
                       "\"Infinity\" or \"-Infinity\"), got true"));
  EXPECT_TRUE(HasError(err, "labels.scale: expected a string, got 1"));
  EXPECT_TRUE(HasError(err,
                       "model.shape.width: expected an int32 (a JSON integer or a decimal "
                       "string), got 1.5"));
  EXPECT_TRUE(HasError(err, "model.shape.heads: 4294967296 is out of the int32 range"));
  EXPECT_TRUE(HasError(err,
                       "parallel.device: unknown value 'tpu'; valid: auto, cpu, cuda (or "
                       "DEVICE_* names, or 0-2)"));
  EXPECT_TRUE(HasError(err, "checkpoint: expected an object, got \"often\""));
  // Each bad field is reported once: no "required" or range cascade on the same field.
  EXPECT_FALSE(
      HasError(err, "schedule.total_tokens: required: the token budget (or recipe \"paper\")"));
  EXPECT_FALSE(HasError(err, "optim.peak_lr: required (a positive learning rate)"));
  EXPECT_FALSE(HasErrorFor(err, "data.train_shards"));
}

TEST(RunConfigTest, Int64AndUint64AsStrings) {
  json spec = Minimal();
  spec["schedule"]["total_tokens"] = "6400";
  spec["schedule"]["global_batch_tokens"] = "256";
  spec["schedule"]["milestones_tokens"] = {"1024", 2048};
  spec["init_seed"] = "18446744073709551615";
  spec["data"]["data_seed"] = "12345678901234567890";
  spec["model"]["shape"] = {{"context", "64"}};
  spec["optim"]["warmup_steps"] = "3";
  spec["optim"]["peak_lr"] = "0.002";
  const RunConfig cfg = MustParse(spec);
  EXPECT_EQ(cfg.schedule.total_tokens, 6400);
  EXPECT_EQ(cfg.schedule.total_steps, 25);
  EXPECT_EQ(cfg.schedule.milestone_steps, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(cfg.init_seed, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(cfg.data.data_seed, 12345678901234567890ULL);
  EXPECT_EQ(cfg.optim.warmup_steps, 3);
  EXPECT_DOUBLE_EQ(cfg.optim.peak_lr, 0.002);

  spec["schedule"]["total_tokens"] = "99999999999999999999";
  EXPECT_EQ(ErrorOf(spec),
            "schedule.total_tokens: \"99999999999999999999\" is out of the int64 range");
}

// Every enum value is written back under one name: the short name in the resolved config, the
// proto name in the RunSpec; both parse back to the value.
TEST(RunConfigTest, EveryEnumValueIsWrittenBackAndParsesBack) {
  EXPECT_EQ(BackendName(Backend::kAuto), "auto");
  EXPECT_EQ(BackendName(Backend::kLocal), "local");
  EXPECT_EQ(BackendName(Backend::kMpi), "mpi");
  EXPECT_EQ(BackendName(Backend::kNccl), "nccl");
  EXPECT_EQ(DeviceName(Device::kAuto), "auto");
  EXPECT_EQ(DeviceName(Device::kCpu), "cpu");
  EXPECT_EQ(DeviceName(Device::kCuda), "cuda");
  EXPECT_EQ(PrecisionName(Precision::kAuto), "auto");
  EXPECT_EQ(PrecisionName(Precision::kFp32), "fp32");
  EXPECT_EQ(PrecisionName(Precision::kBf16), "bf16");
  EXPECT_EQ(PrecisionName(Precision::kFp64), "fp64");
  EXPECT_EQ(LrDecayName(LrDecay::kCosine), "cosine");
  EXPECT_EQ(LrDecayName(LrDecay::kLinear), "linear");
  EXPECT_EQ(LrDecayName(LrDecay::kConstant), "constant");

  struct Case {
    json parallel;
    std::string lr_decay;
    std::string backend, device, precision, lr_decay_proto;
  };
  const Case cases[] = {
      {{{"backend", "auto"}, {"device", "auto"}, {"precision", "auto"}},
       "cosine",
       "BACKEND_AUTO",
       "DEVICE_UNSPECIFIED",
       "PRECISION_UNSPECIFIED",
       "LR_DECAY_COSINE"},
      {{{"backend", "local"}, {"device", "cpu"}, {"precision", "fp32"}},
       "linear",
       "BACKEND_LOCAL",
       "DEVICE_CPU",
       "PRECISION_FP32",
       "LR_DECAY_LINEAR"},
      {{{"backend", "mpi"}, {"device", "cpu"}, {"precision", "fp64"}},
       "constant",
       "BACKEND_MPI",
       "DEVICE_CPU",
       "PRECISION_FP64",
       "LR_DECAY_CONSTANT"},
      {{{"backend", "nccl"}, {"device", "cuda"}, {"precision", "bf16"}},
       "cosine",
       "BACKEND_NCCL",
       "DEVICE_CUDA",
       "PRECISION_BF16",
       "LR_DECAY_COSINE"},
  };
  for (const Case& c : cases) {
    json spec = Minimal();
    spec["parallel"] = c.parallel;
    spec["optim"]["lr_decay"] = c.lr_decay;
    const RunConfig cfg = MustParse(spec);
    const json runspec = RunSpecJson(cfg);
    EXPECT_EQ(runspec["parallel"]["backend"], c.backend) << c.parallel.dump();
    EXPECT_EQ(runspec["parallel"]["device"], c.device) << c.parallel.dump();
    EXPECT_EQ(runspec["parallel"]["precision"], c.precision) << c.parallel.dump();
    EXPECT_EQ(runspec["optim"]["lr_decay"], c.lr_decay_proto) << c.lr_decay;
    const RunConfig again = MustParse(runspec);
    EXPECT_EQ(again.parallel.backend, cfg.parallel.backend);
    EXPECT_EQ(again.parallel.device, cfg.parallel.device);
    EXPECT_EQ(again.parallel.precision, cfg.parallel.precision);
    EXPECT_EQ(again.optim.lr_decay, cfg.optim.lr_decay);
  }
}

TEST(RunConfigTest, EnumsByProtoNameShortNameOrNumber) {
  for (const json& v : {json("PRECISION_FP64"), json("fp64"), json(3)}) {
    json spec = Minimal();
    spec["parallel"] = {{"precision", v}};
    EXPECT_EQ(MustParse(spec).parallel.precision, Precision::kFp64) << v.dump();
  }
  for (const json& v : {json("LR_DECAY_LINEAR"), json("linear"), json(2)}) {
    json spec = Minimal();
    spec["optim"]["lr_decay"] = v;
    EXPECT_EQ(MustParse(spec).optim.lr_decay, LrDecay::kLinear) << v.dump();
  }
  for (const json& v : {json("BACKEND_MPI"), json("mpi"), json(3)}) {
    json spec = Minimal();
    spec["parallel"] = {{"backend", v}};
    EXPECT_EQ(MustParse(spec).parallel.backend, Backend::kMpi) << v.dump();
  }
  for (const json& v : {json("DEVICE_CUDA"), json("cuda"), json(2)}) {
    json spec = Minimal();
    spec["parallel"] = {{"device", v}};
    EXPECT_EQ(MustParse(spec).parallel.device, Device::kCuda) << v.dump();
  }
  // UNSPECIFIED means the default.
  json spec = Minimal();
  spec["parallel"] = {{"precision", "PRECISION_UNSPECIFIED"}, {"backend", 0}, {"device", "auto"}};
  spec["optim"]["lr_decay"] = "LR_DECAY_UNSPECIFIED";
  const RunConfig cfg = MustParse(spec);
  EXPECT_EQ(cfg.parallel.precision, Precision::kAuto);
  EXPECT_EQ(cfg.parallel.backend, Backend::kAuto);
  EXPECT_EQ(cfg.parallel.device, Device::kAuto);
  EXPECT_EQ(cfg.optim.lr_decay, LrDecay::kCosine);

  spec["parallel"] = {{"precision", 9}};
  EXPECT_EQ(ErrorOf(spec),
            "parallel.precision: unknown value 9; valid: auto, fp32, bf16, fp64 "
            "(or PRECISION_* names, or 0-3)");
  spec["parallel"] = {{"precision", "FP64"}};
  EXPECT_TRUE(HasErrorFor(ErrorOf(spec), "parallel.precision"));
}

TEST(RunConfigTest, CamelCaseKeys) {
  const json spec = json::parse(R"({
    "runId": "camel",
    "initSeed": "11",
    "model": {"preset": "cpu-small", "arm": "frozen_v",
              "shape": {"vocabSize": 300, "keyNormEps": 1e-5}},
    "data": {"trainShards": ["t.bin"], "valShards": ["v.bin"], "tokenizer": "byte",
             "dataSeed": 5, "valWindows": "16"},
    "optim": {"peakLr": 0.002, "minLrRatio": 0.0, "warmupSteps": 2, "weightDecay": 0,
              "gradClip": 0, "lrDecay": "LR_DECAY_CONSTANT"},
    "schedule": {"totalTokens": "10240", "globalBatchTokens": 512, "microBatchSequences": 2,
                 "milestonesTokens": ["2048"], "stopAtTokens": 4096},
    "parallel": {"worldSize": 2, "threadsPerRank": 1, "allreduceBucketBytes": 1048576},
    "checkpoint": {"everySteps": 5, "keepLast": 3, "resumeFrom": "ck.pt"},
    "metrics": {"trainEventEverySteps": 10},
    "labels": {"pair_group": "g1", "scaleName": "cpu"}
  })");
  const RunConfig cfg = MustParse(spec);
  EXPECT_EQ(cfg.run_id, "camel");
  EXPECT_EQ(cfg.init_seed, 11u);
  EXPECT_EQ(cfg.model.arm, model::Arm::kFrozenV);
  EXPECT_EQ(cfg.model.vocab_size, 300);
  EXPECT_DOUBLE_EQ(cfg.model.key_norm_eps, 1e-5);
  EXPECT_EQ(cfg.data.val_shards, (std::vector<std::string>{"v.bin"}));
  EXPECT_EQ(cfg.data.data_seed, 5u);
  EXPECT_EQ(cfg.data.val_windows, 16);
  EXPECT_DOUBLE_EQ(cfg.optim.peak_lr, 0.002);
  EXPECT_DOUBLE_EQ(cfg.optim.min_lr_ratio, 0.0);
  EXPECT_EQ(cfg.optim.warmup_steps, 2);
  EXPECT_DOUBLE_EQ(cfg.optim.weight_decay, 0.0);
  EXPECT_DOUBLE_EQ(cfg.optim.grad_clip, 0.0);
  EXPECT_EQ(cfg.optim.lr_decay, LrDecay::kConstant);
  EXPECT_EQ(cfg.schedule.total_steps, 20);
  EXPECT_EQ(cfg.schedule.global_batch_sequences, 4);
  EXPECT_EQ(cfg.schedule.micro_batch_sequences, 2);
  EXPECT_EQ(cfg.schedule.grad_accum_steps, 1);
  EXPECT_EQ(cfg.schedule.milestone_steps, (std::vector<int64_t>{4}));
  EXPECT_EQ(cfg.schedule.stop_step, 8);
  EXPECT_EQ(cfg.parallel.world_size, 2);
  EXPECT_EQ(cfg.parallel.threads_per_rank, 1);
  EXPECT_EQ(cfg.parallel.allreduce_bucket_bytes, 1 << 20);
  EXPECT_EQ(cfg.checkpoint.every_steps, 5);
  EXPECT_EQ(cfg.checkpoint.keep_last, 3);
  EXPECT_EQ(cfg.checkpoint.resume_from, "ck.pt");
  EXPECT_EQ(cfg.train_event_every_steps, 10);
  // Map keys are data, not field names: not converted.
  EXPECT_EQ(cfg.labels.at("scaleName"), "cpu");
  EXPECT_EQ(cfg.labels.at("pair_group"), "g1");
  // Constant decay: peak after warmup.
  EXPECT_DOUBLE_EQ(LearningRate(cfg.optim, cfg.schedule, 0), 0.001);
  EXPECT_DOUBLE_EQ(LearningRate(cfg.optim, cfg.schedule, 19), 0.002);

  json twice = Minimal();
  twice["schedule"]["totalTokens"] = 6400;
  EXPECT_EQ(ErrorOf(twice), "schedule.total_tokens: given twice (as total_tokens and totalTokens)");
}

TEST(RunConfigTest, NullMeansUnset) {
  json spec = Minimal();
  spec["checkpoint"] = nullptr;
  spec["optim"]["beta1"] = nullptr;
  const RunConfig cfg = MustParse(spec);
  EXPECT_DOUBLE_EQ(cfg.optim.beta1, 0.9);
}

TEST(RunConfigTest, LinearDecayAndWarmupDefaultRounding) {
  json spec = Minimal();
  spec["optim"]["lr_decay"] = "linear";
  spec["schedule"]["total_tokens"] = 256 * 10;  // 10 steps: warmup round(0.5) = 1
  RunConfig cfg = MustParse(spec);
  EXPECT_EQ(cfg.optim.warmup_steps, 1);
  // step 0: warmup 1e-3 × 1/1; then linear from peak at step 1 to 1e-4 at step 9.
  EXPECT_DOUBLE_EQ(LearningRate(cfg.optim, cfg.schedule, 0), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRate(cfg.optim, cfg.schedule, 1), 1e-3);
  EXPECT_NEAR(LearningRate(cfg.optim, cfg.schedule, 5), 1e-3 - 0.9e-3 * 0.5, 1e-15);
  EXPECT_NEAR(LearningRate(cfg.optim, cfg.schedule, 9), 1e-4, 1e-15);
  EXPECT_NEAR(LearningRate(cfg.optim, cfg.schedule, 100), 1e-4, 1e-15);  // clamped

  spec["schedule"]["total_tokens"] = 256;  // 1 step: no warmup
  cfg = MustParse(spec);
  EXPECT_EQ(cfg.schedule.total_steps, 1);
  EXPECT_EQ(cfg.optim.warmup_steps, 0);
  EXPECT_DOUBLE_EQ(LearningRate(cfg.optim, cfg.schedule, 0), 1e-3);

  // ceil: a partial last step still counts.
  spec["schedule"]["total_tokens"] = 257;
  EXPECT_EQ(MustParse(spec).schedule.total_steps, 2);
}

TEST(RunConfigTest, FingerprintDifferences) {
  const RunConfig a = MustParse(Minimal());
  EXPECT_TRUE(FingerprintDifferences(NumericFingerprint(a), NumericFingerprint(a)).empty());

  json spec = Minimal();
  spec["optim"]["peak_lr"] = 0.002;
  spec["schedule"]["total_tokens"] = 6300;  // still 25 steps, so the warmup is unchanged
  const RunConfig b = MustParse(spec);
  EXPECT_EQ(FingerprintDifferences(NumericFingerprint(a), NumericFingerprint(b)),
            (std::vector<std::string>{"optim.peak_lr", "schedule.total_tokens"}));

  spec = Minimal();
  spec["model"]["arm"] = "block";
  spec["model"]["shape"] = {{"rope_theta", 500000}};
  spec["data"]["train_shards"] = {"other_*.bin"};
  spec["init_seed"] = 8;
  spec["parallel"] = {{"world_size", 2}, {"precision", "fp64"}};
  const RunConfig c = MustParse(spec);
  EXPECT_EQ(FingerprintDifferences(NumericFingerprint(a), NumericFingerprint(c)),
            (std::vector<std::string>{"data.train_shards", "init_seed", "model.arm",
                                      "model.shape.rope_theta", "parallel.precision",
                                      "parallel.world_size", "schedule.micro_batch_sequences"}));

  // Labels, ids, checkpointing, threads and the stopping point change no number.
  spec = Minimal();
  spec["run_id"] = "other";
  spec["labels"] = {{"k", "v"}};
  spec["checkpoint"] = {{"dir", "/tmp/x"}, {"every_steps", 5}};
  spec["parallel"] = {{"threads_per_rank", 4}};
  spec["schedule"]["stop_at_tokens"] = 1024;
  const RunConfig d = MustParse(spec);
  EXPECT_TRUE(FingerprintDifferences(NumericFingerprint(a), NumericFingerprint(d)).empty());

  // Keys present on one side only are differences too.
  const json x = {{"a", 1}, {"b", {{"c", 2}}}};
  const json y = {{"a", 1}, {"b", {{"d", 2}}}};
  EXPECT_EQ(FingerprintDifferences(x, y), (std::vector<std::string>{"b.c", "b.d"}));
}

TEST(RunConfigTest, ResolvedConfigJson) {
  const RunConfig cfg = MustParse(PaperS());
  const json j = ResolvedConfigJson(cfg);
  EXPECT_EQ(j["model"]["arm"], "block");
  EXPECT_EQ(j["model"]["preset"], "S");
  EXPECT_EQ(j["model"]["shape"]["width"], 576);
  EXPECT_EQ(j["schedule"]["total_steps"], 3815);
  EXPECT_EQ(j["schedule"]["milestone_steps"], json({477, 954, 1908, 3815}));
  EXPECT_EQ(j["schedule"]["stop_step"], 3815);
  EXPECT_EQ(j["schedule"]["global_batch_sequences"], 512);
  EXPECT_EQ(j["schedule"]["grad_accum_steps"], 1);
  EXPECT_EQ(j["optim"]["lr_decay"], "cosine");
  EXPECT_EQ(j["parallel"]["precision"], "auto");
  EXPECT_EQ(j["parallel"]["backend"], "auto");
  EXPECT_EQ(j["checkpoint"]["keep_last"], 2);
  EXPECT_EQ(j["metrics"]["train_event_every_steps"], 1);
  EXPECT_EQ(j["recipe"], "paper");
  // Serialises and parses back unchanged (doubles round-trip exactly).
  EXPECT_EQ(json::parse(j.dump()), j);
}

TEST(RunConfigTest, RunSpecJsonRoundTrips) {
  json explicit_spec = json::parse(R"({
    "run_id": "r", "sweep_id": "s", "job_id": "j", "init_seed": "18446744073709551615",
    "model": {"arm": "average_asym", "shape": {"layers": 4, "width": 96, "heads": 3,
              "ffn_hidden": 256, "blocks": 2, "context": 32, "vocab_size": 300,
              "norm_eps": 1e-5, "key_norm_eps": 1e-8, "rope_theta": 500000}},
    "data": {"train_shards": ["a", "b"], "val_shards": ["v"], "test_shards": ["t"],
             "tokenizer": "byte", "data_seed": 99, "val_windows": 10, "test_windows": 20},
    "optim": {"peak_lr": 0.0123456789012345, "min_lr_ratio": 0, "warmup_steps": 0,
              "beta1": 0.8, "beta2": 0.99, "eps": 1e-10, "weight_decay": 0, "grad_clip": 0,
              "lr_decay": "linear"},
    "schedule": {"total_tokens": 100000, "global_batch_tokens": 1024,
                 "micro_batch_sequences": 4, "milestones_tokens": [1024, 50000],
                 "stop_at_tokens": 60000},
    "parallel": {"world_size": 4, "threads_per_rank": 2, "backend": "mpi", "device": "cpu",
                 "precision": "fp64", "allreduce_bucket_bytes": 4096},
    "checkpoint": {"dir": "/ck", "every_steps": 7, "keep_last": 5, "resume_from": "/ck/x"},
    "metrics": {"train_event_every_steps": 3},
    "labels": {"pair_group": "p"}
  })");
  for (const json& spec : {Minimal(), PaperS(), explicit_spec}) {
    const RunConfig cfg = MustParse(spec);
    const json runspec = RunSpecJson(cfg);
    // Protobuf's JSON mapping: 64-bit integers as strings, enums by proto name.
    EXPECT_TRUE(runspec["schedule"]["total_tokens"].is_string());
    EXPECT_TRUE(runspec["parallel"]["precision"].get<std::string>().rfind("PRECISION_", 0) == 0);
    StatusOr<RunConfig> again = ParseRunConfigText(runspec.dump());
    ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << runspec.dump(2);
    EXPECT_TRUE(
        FingerprintDifferences(NumericFingerprint(cfg), NumericFingerprint(*again)).empty());
    EXPECT_EQ(NumericFingerprint(cfg), NumericFingerprint(*again));
    EXPECT_EQ(ResolvedConfigJson(cfg), ResolvedConfigJson(*again));
    EXPECT_EQ(RunSpecJson(*again), runspec);
  }
  const RunConfig cfg = MustParse(explicit_spec);
  EXPECT_EQ(cfg.schedule.grad_accum_steps, 2);  // 32 sequences / (4 ranks × 4)
  EXPECT_EQ(cfg.model.arm, model::Arm::kAverageAsym);
}

}  // namespace
}  // namespace rdattn
