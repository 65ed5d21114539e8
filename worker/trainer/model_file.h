// Model files: a checkpoint (.pt) or an export (.safetensors with the run spec in its metadata)
// loaded into a model built from the stored run spec, for rdattn-train's `eval` and `export`
// (EvaluateFile, ExportCheckpoint in trainer.h, defined here); and a past checkpoint of the
// running job, for re-evaluating a milestone.
#pragma once

#include <string>

#include "common/status.h"
#include "model/gpt.h"
#include "worker/trainer/checkpoint.h"
#include "worker/trainer/runtime.h"

namespace rdattn::trainer {

// The model of `path` (on the CPU, float64 when the run was fp64) and its metadata: a
// checkpoint's, or for an export the run spec and step of its safetensors metadata.
// INVALID_ARGUMENT for an unreadable file or one without a run spec, DATA_LOSS for a corrupt
// one or a tensor missing or of the wrong shape; the run spec's own errors prefixed with the path.
StatusOr<model::Gpt> LoadModelFile(const std::string& path, CheckpointMeta* meta);

// The weights of one of this run's checkpoints in a model of the run's shape on rt's device and
// dtype, with no optimizer (a milestone re-evaluated after resume). Building the model draws
// from the global CPU generator; its state is put back, so the run's random stream is unchanged.
// LoadCheckpoint's errors, prefixed with `context`.
StatusOr<model::Gpt> LoadRunCheckpoint(const RunConfig& cfg, const Runtime& rt,
                                       const std::string& path, const std::string& context);

}  // namespace rdattn::trainer
