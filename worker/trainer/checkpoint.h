// Checkpoints: parameters, buffers, AdamW state, step, tokens, the sampler position (the step:
// the data order is a pure function of it), the CPU generator state and the resolved config.
// Written by rank 0 atomically (temporary file, fsync, rename, fsync of the directory),
// keeping the last K. Format: docs/trainer.md "Checkpoints".
#pragma once

#include <torch/serialize/archive.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "model/gpt.h"
#include "worker/trainer/optimizer.h"

namespace rdattn::trainer {

struct CheckpointMeta {
  int64_t step = 0;            // optimizer steps completed
  int64_t tokens = 0;          // training tokens consumed
  nlohmann::json config;       // ResolvedConfigJson (for people)
  nlohmann::json spec;         // RunSpecJson: re-parseable by ParseRunConfig
  nlohmann::json fingerprint;  // NumericFingerprint
  std::string init_checksum;   // of the shared parameters at step 0
  // Milestones (tokens) this run's lineage has evaluated up to this checkpoint: what a
  // standalone resume trusts (under a coordinator the lease says what is stored).
  std::vector<int64_t> evaluated_milestones;
  bool evaluated_milestones_known = true;  // false: written before rdattn recorded them
  int attempt = 0;                         // the attempt that wrote it (0 standalone)
};

// The checkpoint of `step` written by `attempt` inside dir: "ckpt_step_00000040.pt" for attempt 0
// (standalone), "ckpt_step_00000040.attempt-3.pt" for attempt 3. Every attempt writes only files
// of its own name, so no attempt can replace another's checkpoint (docs/operations.md "Fencing").
std::string CheckpointPath(const std::string& dir, int64_t step, int attempt = 0);

// Writes a checkpoint for meta.step (named for meta.attempt) and deletes, among the checkpoints of
// this attempt and older ones, all but the newest `keep_last` steps, sparing the steps in
// `keep_steps` (the milestones: a resumed run re-evaluates a milestone from its checkpoint).
// `fence`, when set, runs after the file is written and before it becomes visible, and again
// after: an error from it (a fenced attempt) discards the file, so a fenced attempt leaves
// nothing. The archive is streamed to a file this function writes itself (write, fsync, close,
// rename, fsync of the directory): a file that cannot be written (ENOSPC, EIO, EDQUOT, EROFS, ...)
// is UNAVAILABLE naming the path and strerror, the temporary file is removed and the previous
// checkpoints are untouched. Test hook: RDATTN_FAILPOINT=checkpoint-before-rename:pause=SECONDS
// or :stop (SIGSTOP itself) pauses between the fence check and the rename (docs/trainer.md).
StatusOr<std::string> SaveCheckpoint(const std::string& dir, const CheckpointMeta& meta,
                                     model::Gpt& model, AdamW* optimizer, int keep_last,
                                     const std::vector<int64_t>& keep_steps = {},
                                     const std::function<Status()>& fence = nullptr);

// Every complete checkpoint in `dir` as (step, path): the newest step first and, within a step,
// the highest attempt first.
std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir);

// The checkpoint of `step` in `dir` that reads (the highest attempt's first); "" when none does.
std::string ReadableCheckpointOfStep(const std::string& dir, int64_t step);

// Reads only the metadata (config and step) of a checkpoint.
StatusOr<CheckpointMeta> ReadCheckpointMeta(const std::string& path);

// Loads parameters and buffers into `model` (which must have the checkpoint's shape) and, when
// `optimizer` is not null, its state. Errors name the file and the tensor.
Status LoadCheckpoint(const std::string& path, model::Gpt& model, AdamW* optimizer,
                      CheckpointMeta* meta);

// Writes every parameter and buffer as float32 (float64 stays float64) to a safetensors file,
// with metadata {"format": "rdattn", "arm", "config" (resolved JSON), "run_spec" (RunSpec JSON),
// "step", "init_checksum"}.
Status ExportSafetensors(const std::string& out_path, model::Gpt& model,
                         const CheckpointMeta& meta);

}  // namespace rdattn::trainer
