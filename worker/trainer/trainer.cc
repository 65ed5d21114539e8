#include "worker/trainer/trainer.h"

// First: torch/nn/utils/clip_grad.h does not include what it uses.
#include <torch/types.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "model/gpt.h"
#include "worker/comm/buckets.h"
#include "worker/data/shard.h"
#include "worker/io/safetensors.h"
#include "worker/launch_env.h"
#include "worker/trainer/checkpoint.h"
#include "worker/trainer/fence.h"
#include "worker/trainer/lr_schedule.h"
#include "worker/trainer/sampler.h"

namespace rdattn::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Peak resident set size of this process (VmHWM), bytes; -1 if unknown.
int64_t PeakRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "cpu";
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// bf16 autocast for CUDA while alive (LibTorch 1.13 and 2.x spell it differently).
class AutocastGuard {
 public:
  explicit AutocastGuard(bool on) : on_(on) {
    if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(true);
#endif
  }
  ~AutocastGuard() {
    if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCUDA, false);
#else
    at::autocast::set_enabled(false);
#endif
    at::autocast::clear_cache();
  }

 private:
  bool on_;
};

// FNV-1a over the window count, the data seed and the first min(64, steps) global batches.
std::string DataOrderChecksum(const Sampler& sampler, uint64_t seed, int64_t steps) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
  mix(static_cast<uint64_t>(sampler.num_windows()));
  mix(seed);
  for (int64_t k = 0; k < std::min<int64_t>(steps, 64); ++k)
    for (int64_t w : sampler.GlobalBatch(k)) mix(static_cast<uint64_t>(w));
  return Hex64(h);
}

struct Runtime {
  at::Device device = at::kCPU;
  at::ScalarType param_dtype = at::kFloat;
  bool autocast_bf16 = false;
  bool cuda = false;
};

// The device decided once: the communicator's for NCCL (it chose it from the launcher's
// environment), else launch::CudaDeviceForRank by the same rule.
StatusOr<Runtime> ResolveRuntime(const ParallelConfig& p, const comm::Communicator& comm) {
  Runtime rt;
  const bool have_cuda = torch::cuda::is_available();
  rt.cuda = p.device == Device::kCuda || (p.device == Device::kAuto && have_cuda);
  if (rt.cuda && !have_cuda)
    return FailedPreconditionError(
        "parallel.device: cuda was requested but LibTorch sees no CUDA device");
  if (rt.cuda && comm.device().is_cuda()) {
    rt.device = comm.device();
  } else if (rt.cuda) {
    const int n = static_cast<int>(torch::cuda::device_count());
    const int d = launch::CudaDeviceForRank(launch::ReadLaunchEnv(), n, /*fallback=*/0);
    rt.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(std::max(d, 0)));
  }
  const Precision prec = p.precision == Precision::kAuto
                             ? (rt.cuda ? Precision::kBf16 : Precision::kFp32)
                             : p.precision;
  if (prec == Precision::kBf16 && !rt.cuda)
    return FailedPreconditionError("parallel.precision: bf16 autocast needs a CUDA device");
  rt.param_dtype = prec == Precision::kFp64 ? at::kDouble : at::kFloat;
  rt.autocast_bf16 = prec == Precision::kBf16;
  return rt;
}

StatusOr<std::vector<data::Shard>> OpenShards(const std::vector<std::string>& patterns,
                                              uint32_t vocab, const std::string& field) {
  std::vector<data::Shard> shards;
  if (patterns.empty()) return shards;
  auto paths = data::ExpandShardPaths(patterns);
  if (!paths.ok()) return paths.status().WithPrefix(field);
  for (const auto& path : *paths) {
    auto shard = data::Shard::Open(path, vocab);
    if (!shard.ok()) return shard.status().WithPrefix(field);
    shards.push_back(std::move(shard).value());
  }
  return shards;
}

std::vector<const data::Shard*> Pointers(const std::vector<data::Shard>& shards) {
  std::vector<const data::Shard*> out;
  for (const auto& s : shards) out.push_back(&s);
  return out;
}

// [n, context+1] int64 token windows on `device`.
at::Tensor MakeBatch(const WindowIndex& index, const std::vector<int64_t>& windows, size_t begin,
                     size_t end, at::Device device) {
  const int64_t n = static_cast<int64_t>(end - begin), w = index.context() + 1;
  at::Tensor batch = at::empty({n, w}, at::TensorOptions().dtype(at::kLong));
  int64_t* out = batch.data_ptr<int64_t>();
  for (size_t i = begin; i < end; ++i)
    index.Copy(windows[i], out + static_cast<int64_t>(i - begin) * w);
  return device.is_cpu() ? batch : batch.to(device, /*non_blocking=*/false);
}

struct EvalOutput {
  double nll = 0;
  int64_t tokens = 0;
  model::DepthDiagnostics depth;
};

// Mean NLL over the fixed windows; rank r takes windows r, r+W, …; sums are all-reduced.
StatusOr<EvalOutput> Evaluate(model::Gpt& model, const WindowIndex& index,
                              const std::vector<int64_t>& windows, int64_t micro_batch,
                              comm::Communicator& comm, const Runtime& rt, bool diagnostics) {
  torch::NoGradGuard no_grad;
  model->eval();
  std::vector<int64_t> mine;
  for (size_t i = static_cast<size_t>(comm.rank()); i < windows.size();
       i += static_cast<size_t>(comm.world_size()))
    mine.push_back(windows[i]);
  const model::ModelConfig& mc = model->config();
  model::DepthStatsAccumulator acc(mc);
  double nll_sum = 0;
  int64_t tokens = 0;
  const int64_t T = index.context();
  for (size_t b = 0; b < mine.size(); b += static_cast<size_t>(micro_batch)) {
    const size_t e = std::min(mine.size(), b + static_cast<size_t>(micro_batch));
    const at::Tensor batch = MakeBatch(index, mine, b, e, rt.device);
    model::ForwardOutput out;
    {
      AutocastGuard autocast(rt.autocast_bf16);
      out = model->Forward(batch.narrow(1, 0, T), {.capture_routes = diagnostics});
    }
    const at::Tensor logits = out.logits.to(model::ComputeDtype(out.logits.scalar_type()));
    nll_sum += at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                                      batch.narrow(1, 1, T).reshape({-1}), {}, at::Reduction::Sum)
                   .item<double>();
    tokens += batch.size(0) * T;
    if (diagnostics) acc.Add(out.routes);
  }
  model->train();
  const std::vector<int64_t> ks = model::CountSources(mc).attention;
  at::Tensor packed =
      at::cat(
          {at::tensor({nll_sum, static_cast<double>(tokens)},
                      at::TensorOptions().dtype(at::kDouble)),
           diagnostics ? acc.PackSums(ks) : at::empty({0}, at::TensorOptions().dtype(at::kDouble))})
          .to(rt.device);
  RDATTN_RETURN_IF_ERROR(comm.AllReduceSum(packed));
  packed = packed.cpu();
  EvalOutput r;
  r.tokens = static_cast<int64_t>(std::llround(packed[1].item<double>()));
  if (r.tokens == 0) return FailedPreconditionError("evaluation saw no tokens");
  r.nll = packed[0].item<double>() / static_cast<double>(r.tokens);
  if (diagnostics) {
    acc.UnpackSums(packed.narrow(0, 2, packed.numel() - 2), ks);
    r.depth = acc.Finalize();
  }
  return r;
}

nlohmann::json DepthJson(const model::DepthDiagnostics& d) {
  nlohmann::json j = nlohmann::json::object();
  auto arr = [](const std::vector<double>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (double x : v) a.push_back(JsonDouble(x));
    return a;
  };
  j["route_entropy_qk_nats"] = arr(d.entropy_qk_nats);
  if (!d.js_nats.empty()) {
    j["js_nats"] = arr(d.js_nats);
    j["js_bits"] = arr(d.js_bits);
    j["js_sqrt"] = arr(d.sqrt_js);
    j["js_of_mean_nats"] = arr(d.js_of_mean_nats);
    j["route_entropy_v_nats"] = arr(d.entropy_second_nats);
    j["js_mean_nats"] = JsonDouble(d.mean_js_nats);
    j["js_mean_bits"] = JsonDouble(d.mean_js_bits);
    double s = 0;
    for (double x : d.sqrt_js) s += x;
    j["js_mean_sqrt"] =
        JsonDouble(d.sqrt_js.empty() ? 0.0 : s / static_cast<double>(d.sqrt_js.size()));
    j["js_mean_multi_source_nats"] = JsonDouble(d.mean_js_nats_multi);
  }
  return j;
}

// Every rank learns whether all ranks succeeded; a failure anywhere fails everywhere.
Status AgreeOk(comm::Communicator& comm, const Runtime& rt, const Status& local) {
  at::Tensor bad =
      at::full({1}, local.ok() ? 0.0 : 1.0, at::TensorOptions().dtype(at::kDouble)).to(rt.device);
  RDATTN_RETURN_IF_ERROR(comm.AllReduceSum(bad));
  if (bad.cpu().item<double>() > 0) return local.ok() ? AbortedError("another rank failed") : local;
  return Status::Ok();
}

struct ResumePlan {
  std::string path;                    // "" : from scratch
  std::vector<EvalMilestone> missing;  // at or before the resume step, evaluation not stored
};

bool IsReadableFile(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

// Chooses the checkpoint to resume from: the explicit checkpoint.resume_from (used as is), else
// the newest that reads among the directory's and the coordinator's. A milestone before it
// whose evaluation is missing needs its own checkpoint; if that is gone, the run resumes from
// an earlier checkpoint (and trains through the milestone again) instead.
StatusOr<ResumePlan> PlanResume(const RunConfig& cfg, const CheckpointMeta& self,
                                const std::vector<EvalMilestone>& milestones,
                                std::vector<std::string>* warnings) {
  auto check_fingerprint = [&](const std::string& path, const CheckpointMeta& saved) -> Status {
    const auto diff = FingerprintDifferences(saved.fingerprint, self.fingerprint);
    if (diff.empty()) return Status::Ok();
    std::string fields;
    for (const auto& d : diff) fields += (fields.empty() ? "" : ", ") + d;
    return FailedPreconditionError(
        path + ": the checkpoint was written by a run whose config differs in: " + fields);
  };
  auto missing_at = [&](int64_t step, const CheckpointMeta& saved) {
    const std::vector<int64_t>& stored = cfg.checkpoint.stored_evals_known
                                             ? cfg.checkpoint.stored_eval_milestones
                                             : saved.evaluated_milestones;
    std::vector<EvalMilestone> out;
    if (cfg.data.val_shards.empty()) return out;
    if (!cfg.checkpoint.stored_evals_known && !saved.evaluated_milestones_known) return out;
    for (const EvalMilestone& m : milestones)
      if (m.step <= step && std::find(stored.begin(), stored.end(), m.tokens) == stored.end())
        out.push_back(m);
    return out;
  };
  ResumePlan plan;
  if (!cfg.checkpoint.resume_from.empty()) {
    RDATTN_ASSIGN_OR_RETURN(const CheckpointMeta saved,
                            ReadCheckpointMeta(cfg.checkpoint.resume_from));
    RDATTN_RETURN_IF_ERROR(check_fingerprint(cfg.checkpoint.resume_from, saved));
    plan.path = cfg.checkpoint.resume_from;
    for (const EvalMilestone& m : missing_at(saved.step, saved)) {
      if (m.step == saved.step) {
        plan.missing.push_back(m);
      } else {
        warnings->push_back("milestone " + std::to_string(m.tokens) + " was not evaluated before " +
                            plan.path + " and cannot be re-evaluated from an explicit resume_from");
      }
    }
    return plan;
  }
  std::vector<std::pair<int64_t, std::string>> candidates;
  if (!cfg.checkpoint.dir.empty()) candidates = ListCheckpoints(cfg.checkpoint.dir);
  const std::string& theirs = cfg.checkpoint.coordinator_checkpoint;
  if (!theirs.empty()) {
    // A checkpoint of this run's own directory is listed already, or was pruned for a newer one.
    const bool own = !cfg.checkpoint.dir.empty() &&
                     std::filesystem::path(theirs).parent_path().lexically_normal() ==
                         std::filesystem::path(cfg.checkpoint.dir).lexically_normal();
    const bool listed = own || std::any_of(candidates.begin(), candidates.end(),
                                           [&](const auto& c) { return c.second == theirs; });
    if (!listed && IsReadableFile(theirs)) {
      auto saved = ReadCheckpointMeta(theirs);
      if (saved.ok()) {
        candidates.emplace_back(saved->step, theirs);
      } else {
        warnings->push_back("the coordinator's checkpoint " + theirs + " does not read (" +
                            saved.status().message() + "); not resuming from it");
      }
    } else if (!listed) {
      std::string where = candidates.empty() ? "from scratch" : "from " + candidates.front().second;
      warnings->push_back("the coordinator's checkpoint " + theirs + " is not readable here (" +
                          std::strerror(errno) + "); resuming " + where);
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
  }
  int64_t limit = std::numeric_limits<int64_t>::max();
  for (const auto& [step, path] : candidates) {
    if (step > limit) continue;
    auto saved = ReadCheckpointMeta(path);
    if (!saved.ok()) {
      warnings->push_back(path + " does not read (" + saved.status().message() +
                          "); trying an older checkpoint");
      continue;
    }
    RDATTN_RETURN_IF_ERROR(check_fingerprint(path, *saved));
    const std::vector<EvalMilestone> missing = missing_at(saved->step, *saved);
    bool ok = true;
    for (const EvalMilestone& m : missing) {
      if (m.step == saved->step) continue;
      const std::string at = CheckpointPath(cfg.checkpoint.dir, m.step);
      if (!ReadCheckpointMeta(at).ok()) {
        warnings->push_back(
            "milestone " + std::to_string(m.tokens) + " (step " + std::to_string(m.step) +
            ") has no stored evaluation and no readable checkpoint; resuming from step " +
            std::to_string(m.step) + " or earlier to evaluate it again");
        limit = m.step;
        ok = false;
        break;
      }
    }
    if (!ok) continue;
    plan.path = path;
    plan.missing = missing;
    return plan;
  }
  if (!candidates.empty() && plan.path.empty())
    warnings->push_back("no usable checkpoint among " + std::to_string(candidates.size()) +
                        "; starting from step 0");
  return plan;
}

StatusOr<TrainOutcome> TrainImpl(const RunConfig& cfg, comm::Communicator& comm,
                                 const TrainOptions& opts) {
  const int rank = comm.rank(), world = comm.world_size();
  EventSink* events = rank == 0 ? opts.events : nullptr;
  if (world != cfg.parallel.world_size)
    return FailedPreconditionError("parallel.world_size: the run wants " +
                                   std::to_string(cfg.parallel.world_size) +
                                   " ranks but the launcher started " + std::to_string(world));
  if (cfg.parallel.threads_per_rank > 0) at::set_num_threads(cfg.parallel.threads_per_rank);
  RDATTN_ASSIGN_OR_RETURN(const Runtime rt, ResolveRuntime(cfg.parallel, comm));

  // Data: every token id is checked against the model's vocabulary when a shard is opened.
  const auto vocab = static_cast<uint32_t>(cfg.model.vocab_size);
  RDATTN_ASSIGN_OR_RETURN(const std::vector<data::Shard> train_shards,
                          OpenShards(cfg.data.train_shards, vocab, "data.train_shards"));
  RDATTN_ASSIGN_OR_RETURN(const std::vector<data::Shard> val_shards,
                          OpenShards(cfg.data.val_shards, vocab, "data.val_shards"));
  RDATTN_ASSIGN_OR_RETURN(const std::vector<data::Shard> test_shards,
                          OpenShards(cfg.data.test_shards, vocab, "data.test_shards"));
  const int64_t T = cfg.model.context;
  const WindowIndex train_index(Pointers(train_shards), T), val_index(Pointers(val_shards), T),
      test_index(Pointers(test_shards), T);
  if (train_index.size() == 0)
    return InvalidArgumentError(
        "data.train_shards: no window of context+1 = " + std::to_string(T + 1) + " tokens");
  const Sampler sampler(train_index.size(), cfg.data.data_seed,
                        cfg.schedule.global_batch_sequences);
  const std::string data_order_checksum =
      DataOrderChecksum(sampler, cfg.data.data_seed, cfg.schedule.total_steps);
  const std::vector<int64_t> val_windows = EvalWindows(val_index.size(), cfg.data.val_windows);
  const std::vector<int64_t> test_windows = EvalWindows(test_index.size(), cfg.data.test_windows);

  // Model: built from the init seed on every rank, then rank 0's weights are broadcast and
  // verified equal everywhere.
  model::Gpt model(cfg.model, cfg.init_seed);
  model->to(rt.device, rt.param_dtype);
  std::vector<at::Tensor> params = model->parameters();
  RDATTN_RETURN_IF_ERROR(comm::BroadcastAndVerify(comm, params).WithPrefix("initial parameters"));
  const std::string init_checksum = Hex64(model::ParameterChecksum(model->SharedParameters()));

  const OptimConfig& o = cfg.optim;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(model->DecayParameters(), std::make_unique<torch::optim::AdamWOptions>(
                                                    torch::optim::AdamWOptions(o.peak_lr)
                                                        .betas({o.beta1, o.beta2})
                                                        .eps(o.eps)
                                                        .weight_decay(o.weight_decay)));
  groups.emplace_back(model->NoDecayParameters(), std::make_unique<torch::optim::AdamWOptions>(
                                                      torch::optim::AdamWOptions(o.peak_lr)
                                                          .betas({o.beta1, o.beta2})
                                                          .eps(o.eps)
                                                          .weight_decay(0.0)));
  torch::optim::AdamW optimizer(std::move(groups));

  // Fencing: this attempt claims the checkpoint directory; an older attempt still running
  // (its worker gone) sees the claim and writes nothing more.
  const AttemptFence fence(cfg.checkpoint.dir, opts.attempt);
  RDATTN_RETURN_IF_ERROR(AgreeOk(comm, rt, rank == 0 ? fence.Claim() : Status::Ok()));
  if (events != nullptr) events->SetGate([&fence] { return fence.Check().ok(); });

  // Resume: the newest checkpoint that reads (a corrupt or truncated one is skipped, with a
  // warning), and the milestones whose evaluation is not stored.
  CheckpointMeta meta;
  meta.config = ResolvedConfigJson(cfg);
  meta.spec = RunSpecJson(cfg);
  meta.fingerprint = NumericFingerprint(cfg);
  meta.init_checksum = init_checksum;
  meta.attempt = opts.attempt;
  const std::vector<EvalMilestone> milestones = EvalMilestones(cfg.schedule);
  std::vector<std::string> warnings;
  RDATTN_ASSIGN_OR_RETURN(const ResumePlan plan, PlanResume(cfg, meta, milestones, &warnings));
  int64_t start_step = 0;
  if (!plan.path.empty()) {
    CheckpointMeta loaded;
    RDATTN_RETURN_IF_ERROR(LoadCheckpoint(plan.path, model, &optimizer, &loaded));
    start_step = loaded.step;
    meta.init_checksum = loaded.init_checksum;
    meta.evaluated_milestones = loaded.evaluated_milestones;
  }
  for (const std::string& w : warnings)
    std::fprintf(stderr, "rdattn-train: warning: %s\n", w.c_str());

  const ScheduleConfig& s = cfg.schedule;
  const model::FlopCounts flops = model::CountFlops(cfg.model);
  const int threads = at::get_num_threads();
  const std::string device_name = rt.cuda ? rt.device.str() : CpuModelName();
  const double peak = opts.peak_flops_per_rank > 0
                          ? opts.peak_flops_per_rank
                          : DefaultPeakFlops(rt.cuda, device_name, threads);
  int64_t param_count = 0;
  for (const auto& p : params) param_count += p.numel();
  const nlohmann::json where = {
      {"hardware_kind", rt.cuda ? "HARDWARE_KIND_GPU" : "HARDWARE_KIND_CPU"},
      {"device_name", device_name},
      {"world_size", world}};
  if (events != nullptr) {
    nlohmann::json init = where;
    init.update({{"step", start_step},
                 {"tokens", start_step * s.global_batch_tokens},
                 {"param_count", param_count},
                 {"flops_per_token", flops.training()},
                 {"peak_flops_per_second", peak},
                 {"init_param_checksum", meta.init_checksum},
                 {"data_order_checksum", data_order_checksum}});
    events->Emit("INIT", init);
    for (const std::string& w : warnings)
      events->Emit("WARNING", {{"step", start_step}, {"warning", w}});
  }

  std::vector<int64_t> milestone_steps_kept;
  for (const EvalMilestone& m : milestones) milestone_steps_kept.push_back(m.step);
  auto write_checkpoint = [&](int64_t completed) -> Status {
    if (cfg.checkpoint.dir.empty()) return Status::Ok();
    meta.step = completed;
    meta.tokens = completed * s.global_batch_tokens;
    Status st;
    std::string path;
    if (rank == 0) {
      auto saved =
          SaveCheckpoint(cfg.checkpoint.dir, meta, model, &optimizer, cfg.checkpoint.keep_last,
                         milestone_steps_kept, [&fence] { return fence.Check(); });
      if (saved.ok())
        path = *saved;
      else
        st = saved.status();
    }
    // Every rank learns whether rank 0 succeeded.
    at::Tensor ok =
        at::full({1}, st.ok() ? 0.0 : 1.0, at::TensorOptions().dtype(at::kDouble)).to(rt.device);
    RDATTN_RETURN_IF_ERROR(comm.AllReduceSum(ok));
    if (ok.cpu().item<double>() > 0)
      return st.ok() ? InternalError("rank 0 failed to write a checkpoint") : st;
    if (events != nullptr)
      events->Emit("CHECKPOINT",
                   {{"step", completed}, {"tokens", meta.tokens}, {"checkpoint_path", path}});
    return Status::Ok();
  };

  auto evaluate_model = [&](model::Gpt& evaluated, int64_t completed,
                            int64_t milestone_tokens) -> Status {
    if (val_windows.empty()) return Status::Ok();
    const bool diag = model::HasDepthRead(cfg.model.arm);
    RDATTN_ASSIGN_OR_RETURN(const EvalOutput ev, Evaluate(evaluated, val_index, val_windows,
                                                          s.micro_batch_sequences, comm, rt, diag));
    if (std::find(meta.evaluated_milestones.begin(), meta.evaluated_milestones.end(),
                  milestone_tokens) == meta.evaluated_milestones.end())
      meta.evaluated_milestones.push_back(milestone_tokens);
    if (events != nullptr) {
      nlohmann::json e = diag ? DepthJson(ev.depth) : nlohmann::json::object();
      e.update({{"step", completed},
                {"tokens", completed * s.global_batch_tokens},
                {"milestone_tokens", milestone_tokens},
                {"val_nll", JsonDouble(ev.nll)},
                {"eval_tokens", ev.tokens}});
      events->Emit("EVAL", e);
    }
    return Status::Ok();
  };
  auto evaluate = [&](int64_t completed, int64_t milestone_tokens) -> Status {
    return evaluate_model(model, completed, milestone_tokens);
  };

  // Milestones at or before the resume point whose evaluation is not stored (an attempt that
  // died before its events got through): evaluated again, deterministically, from the model
  // as it was at the milestone (its checkpoint; the current model when it is the resume point).
  for (const EvalMilestone& m : plan.missing) {
    if (m.step == start_step) {
      RDATTN_RETURN_IF_ERROR(evaluate(m.step, m.tokens));
      continue;
    }
    const at::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
    model::Gpt past(cfg.model, cfg.init_seed);
    past->to(rt.device, rt.param_dtype);
    CheckpointMeta past_meta;
    const Status loaded =
        LoadCheckpoint(CheckpointPath(cfg.checkpoint.dir, m.step), past, nullptr, &past_meta);
    at::Generator gen = at::detail::getDefaultCPUGenerator();  // a handle to the global generator
    gen.set_state(rng);
    RDATTN_RETURN_IF_ERROR(
        loaded.WithPrefix("re-evaluating milestone " + std::to_string(m.tokens)));
    RDATTN_RETURN_IF_ERROR(evaluate_model(past, m.step, m.tokens));
  }

  const int64_t accum = s.grad_accum_steps, mb = s.micro_batch_sequences;
  model->train();
  int64_t steps_here = 0;
  for (int64_t step = start_step; step < s.stop_step; ++step) {
    const auto t_step = Clock::now();
    double data_s = 0, allreduce_s = 0;
    const double lr = LearningRate(o, s, step);
    for (auto& group : optimizer.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    optimizer.zero_grad();
    const std::vector<int64_t> windows = sampler.RankSlice(step, rank, world);
    double loss_sum = 0;
    for (int64_t m = 0; m < accum; ++m) {
      const auto t_data = Clock::now();
      const at::Tensor batch = MakeBatch(train_index, windows, static_cast<size_t>(m * mb),
                                         static_cast<size_t>((m + 1) * mb), rt.device);
      data_s += Seconds(t_data, Clock::now());
      at::Tensor loss;
      {
        AutocastGuard autocast(rt.autocast_bf16);
        loss = model::GptImpl::Loss(model->forward(batch.narrow(1, 0, T)), batch.narrow(1, 1, T)) /
               static_cast<double>(accum);
      }
      loss.backward();
      loss_sum += loss.item<double>();
    }
    std::vector<at::Tensor> grads;
    for (auto& p : params) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      grads.push_back(p.grad());
    }
    if (rt.cuda) torch::cuda::synchronize();
    const auto t_ar = Clock::now();
    RDATTN_RETURN_IF_ERROR(
        comm::AllReduceMeanGradients(comm, grads, cfg.parallel.allreduce_bucket_bytes));
    if (rt.cuda) torch::cuda::synchronize();
    allreduce_s = Seconds(t_ar, Clock::now());
    double grad_norm;
    if (o.grad_clip > 0) {
      grad_norm = torch::nn::utils::clip_grad_norm_(params, o.grad_clip);
    } else {
      double sq = 0;
      for (const auto& g : grads) sq += g.to(at::kDouble).pow(2).sum().item<double>();
      grad_norm = std::sqrt(sq);
    }
    optimizer.step();

    // One small all-reduce: the mean loss over ranks and whether any rank must stop.
    ++steps_here;
    const bool stop_local = (opts.stop_requested != nullptr && opts.stop_requested->load()) ||
                            (opts.stop_after_steps > 0 && steps_here >= opts.stop_after_steps);
    // Rank 0 also looks at the fence: a newer attempt has claimed the checkpoint directory.
    const Status fenced = rank == 0 ? fence.Check() : Status::Ok();
    at::Tensor stats = at::tensor({loss_sum, stop_local ? 1.0 : 0.0, fenced.ok() ? 0.0 : 1.0},
                                  at::TensorOptions().dtype(at::kDouble))
                           .to(rt.device);
    RDATTN_RETURN_IF_ERROR(comm.AllReduceSum(stats));
    stats = stats.cpu();
    const double loss = stats[0].item<double>() / world;
    const bool stop = stats[1].item<double>() > 0;
    if (stats[2].item<double>() > 0) {
      return fenced.ok() ? AbortedError("fenced: rank 0 saw a newer attempt's claim on " +
                                        cfg.checkpoint.dir)
                         : fenced;
    }
    if (rt.cuda) torch::cuda::synchronize();
    const double step_s = Seconds(t_step, Clock::now());
    const int64_t completed = step + 1;
    if (rank == 0 && opts.losses != nullptr) opts.losses->push_back(loss);
    if (!std::isfinite(loss)) {
      if (events != nullptr)
        events->Emit("FAILED",
                     {{"step", completed},
                      {"train_loss", JsonDouble(loss)},
                      {"error", "train loss is not finite at step " + std::to_string(completed)}});
      return InternalError("train loss is not finite at step " + std::to_string(completed));
    }
    if (events != nullptr && (completed % cfg.train_event_every_steps == 0 ||
                              completed == s.stop_step || step == start_step)) {
      const double tps = static_cast<double>(s.global_batch_tokens) / step_s;
      nlohmann::json e = where;
      e.update({{"step", completed},
                {"tokens", completed * s.global_batch_tokens},
                {"train_loss", JsonDouble(loss)},
                {"lr", lr},
                {"grad_norm", JsonDouble(grad_norm)},
                {"tokens_per_second", tps},
                {"mfu", flops.training() * tps / (peak * world)},
                {"step_seconds", step_s},
                {"compute_seconds", step_s - data_s - allreduce_s},
                {"allreduce_seconds", allreduce_s},
                {"data_seconds", data_s},
                {"peak_memory_bytes", PeakRssBytes()}});
      events->Emit("TRAIN_STEP", e);
    }
    bool checkpointed = false;
    for (size_t i = 0; i < s.milestone_steps.size(); ++i) {
      if (s.milestone_steps[i] != completed) continue;
      RDATTN_RETURN_IF_ERROR(evaluate(completed, s.milestones_tokens[i]));
      RDATTN_RETURN_IF_ERROR(write_checkpoint(completed));
      checkpointed = true;
    }
    if (completed == s.stop_step) {
      if (!checkpointed) {
        if (std::find(s.milestone_steps.begin(), s.milestone_steps.end(), completed) ==
            s.milestone_steps.end())
          RDATTN_RETURN_IF_ERROR(evaluate(completed, completed * s.global_batch_tokens));
        RDATTN_RETURN_IF_ERROR(write_checkpoint(completed));
      }
      break;
    }
    if (!checkpointed && cfg.checkpoint.every_steps > 0 &&
        completed % cfg.checkpoint.every_steps == 0) {
      RDATTN_RETURN_IF_ERROR(write_checkpoint(completed));
      checkpointed = true;
    }
    if (stop) {
      if (!checkpointed) RDATTN_RETURN_IF_ERROR(write_checkpoint(completed));
      return TrainOutcome::kPreempted;
    }
  }

  // The end of the run: test NLL over the test windows.
  nlohmann::json fin = where;
  fin.update({{"step", s.stop_step},
              {"tokens", s.stop_step * s.global_batch_tokens},
              {"peak_memory_bytes", PeakRssBytes()}});
  if (!test_windows.empty()) {
    RDATTN_ASSIGN_OR_RETURN(const EvalOutput test,
                            Evaluate(model, test_index, test_windows, s.micro_batch_sequences, comm,
                                     rt, /*diagnostics=*/false));
    fin["test_nll"] = JsonDouble(test.nll);
    fin["eval_tokens"] = test.tokens;
  }
  if (events != nullptr) events->Emit("FINISHED", fin);
  return TrainOutcome::kFinished;
}

StatusOr<model::Gpt> LoadModelFile(const std::string& path, CheckpointMeta* meta) {
  // A checkpoint (.pt) or an export (.safetensors with the run spec in its metadata).
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

}  // namespace

double DefaultPeakFlops(bool cuda, const std::string& device_name, int threads) {
  if (cuda) {
    if (device_name.find("H100") != std::string::npos ||
        device_name.find("H200") != std::string::npos)
      return 989e12;
    if (device_name.find("A100") != std::string::npos) return 312e12;
    return 989e12;
  }
  return 80e9 * std::max(threads, 1);
}

StatusOr<TrainOutcome> Train(const RunConfig& cfg, comm::Communicator& comm,
                             const TrainOptions& opts) {
  try {
    return TrainImpl(cfg, comm, opts);
  } catch (const std::exception& e) {
    return InternalError(std::string("training failed: ") + e.what());
  }
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
    RDATTN_ASSIGN_OR_RETURN(const EvalOutput ev,
                            Evaluate(model, index, EvalWindows(index.size(), windows),
                                     std::max<int64_t>(micro_batch, 1), *local, rt, false));
    EvalResult r;
    r.nll = ev.nll;
    r.tokens = ev.tokens;
    r.windows = static_cast<int64_t>(EvalWindows(index.size(), windows).size());
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
