#include "worker/trainer/model_file.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "worker/comm/communicator.h"
#include "worker/io/safetensors.h"
#include "worker/trainer/evaluate.h"
#include "worker/trainer/runtime.h"
#include "worker/trainer/sampler.h"
#include "worker/trainer/trainer.h"

namespace rdattn::trainer {

StatusOr<model::Gpt> LoadModelFile(const std::string& path, CheckpointMeta* meta) {
  const bool is_safetensors =
      path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
  io::SafetensorsFile st;
  if (is_safetensors) {
    std::string error;
    if (!io::ReadSafetensors(path, &st, &error)) return InvalidArgumentError(error);
    if (!st.metadata.count("run_spec"))
      return InvalidArgumentError(path + ": no rdattn run_spec in the metadata");
    meta->spec =
        nlohmann::json::parse(st.metadata["run_spec"], nullptr, /*allow_exceptions=*/false);
    if (meta->spec.is_discarded())
      return DataLossError(path + ": the run_spec metadata is not valid JSON");
    if (st.metadata.count("step")) meta->step = std::stoll(st.metadata["step"]);
  } else {
    RDATTN_ASSIGN_OR_RETURN(*meta, ReadCheckpointMeta(path));
  }
  auto cfg = ParseRunConfig(meta->spec);
  if (!cfg.ok()) return cfg.status().WithPrefix(path + ": stored run spec");
  model::Gpt model(cfg->model, cfg->init_seed);
  if (cfg->parallel.precision == Precision::kFp64) model->to(at::kDouble);
  if (is_safetensors) {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      auto it = st.tensors.find(p.key());
      if (it == st.tensors.end()) return DataLossError(path + ": lacks tensor '" + p.key() + "'");
      if (it->second.sizes() != p.value().sizes())
        return DataLossError(path + ": tensor '" + p.key() + "' has shape " +
                             c10::str(it->second.sizes()) + ", the model expects " +
                             c10::str(p.value().sizes()));
      p.value().copy_(it->second);
    }
  } else {
    RDATTN_RETURN_IF_ERROR(LoadCheckpoint(path, model, nullptr, meta));
  }
  return model;
}

StatusOr<model::Gpt> LoadRunCheckpoint(const RunConfig& cfg, const Runtime& rt,
                                       const std::string& path, const std::string& context) {
  const at::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  model::Gpt past(cfg.model, cfg.init_seed);
  past->to(rt.device, rt.param_dtype);
  CheckpointMeta past_meta;
  const Status loaded = LoadCheckpoint(path, past, nullptr, &past_meta);
  at::Generator gen = at::detail::getDefaultCPUGenerator();  // a handle to the global generator
  gen.set_state(rng);
  RDATTN_RETURN_IF_ERROR(loaded.WithPrefix(context));
  return past;
}

StatusOr<EvalResult> EvaluateFile(const std::string& model_path,
                                  const std::vector<std::string>& shards, int64_t windows,
                                  int64_t micro_batch) {
  try {
    CheckpointMeta meta;
    RDATTN_ASSIGN_OR_RETURN(model::Gpt model, LoadModelFile(model_path, &meta));
    const auto vocab = static_cast<uint32_t>(model->config().vocab_size);
    RDATTN_ASSIGN_OR_RETURN(const std::vector<data::Shard> opened,
                            OpenShards(shards, vocab, "--shard"));
    const WindowIndex index(Pointers(opened), model->config().context);
    if (index.size() == 0) return InvalidArgumentError("--shard: no window of context+1 tokens");
    auto local = comm::MakeLocalCommunicator();
    Runtime rt;
    rt.param_dtype = model->emb.scalar_type();
    const std::vector<int64_t> list = EvalWindows(index.size(), windows);
    RDATTN_ASSIGN_OR_RETURN(
        const EvalOutput ev,
        Evaluate(
            model,
            {.index = index, .windows = list, .micro_batch = std::max<int64_t>(micro_batch, 1)},
            *local, rt, Diagnostics::kOff));
    EvalResult r;
    r.nll = ev.nll;
    r.tokens = ev.tokens;
    r.windows = static_cast<int64_t>(list.size());
    r.arm = std::string(model::ArmName(model->config().arm));
    return r;
  } catch (const std::exception& e) {
    return InternalError(std::string("eval failed: ") + e.what());
  }
}

Status ExportCheckpoint(const std::string& checkpoint_path, const std::string& out_path) {
  try {
    CheckpointMeta meta;
    RDATTN_ASSIGN_OR_RETURN(model::Gpt model, LoadModelFile(checkpoint_path, &meta));
    return ExportSafetensors(out_path, model, meta);
  } catch (const std::exception& e) {
    return InternalError(std::string("export failed: ") + e.what());
  }
}

}  // namespace rdattn::trainer
