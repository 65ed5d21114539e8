#include "worker/trainer/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "worker/io/safetensors.h"

namespace rdattn::trainer {
namespace {

constexpr const char* kPrefix = "ckpt_step_";

// The first line of a LibTorch exception (the rest is its C++ backtrace).
std::string FirstLine(const char* what) {
  const std::string s(what);
  return s.substr(0, s.find('\n'));
}
constexpr const char* kSuffix = ".pt";

Status FsyncPath(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return InternalError(path + ": cannot open for fsync (" + std::strerror(errno) + ")");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return InternalError(path + ": fsync failed (" + std::strerror(errno) + ")");
  return Status::Ok();
}

Status MakeDirs(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
        return InvalidArgumentError("checkpoint.dir " + dir + ": cannot create " + cur + " (" +
                                    std::strerror(errno) + ")");
    }
    if (i < dir.size()) cur.push_back(dir[i]);
  }
  return Status::Ok();
}

// Steps of the complete checkpoints in dir, ascending.
std::vector<int64_t> ListSteps(const std::string& dir) {
  std::vector<int64_t> steps;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return steps;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const size_t pl = std::strlen(kPrefix), sl = std::strlen(kSuffix);
    if (name.size() <= pl + sl || name.compare(0, pl, kPrefix) != 0 ||
        name.compare(name.size() - sl, sl, kSuffix) != 0)
      continue;
    const std::string digits = name.substr(pl, name.size() - pl - sl);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    steps.push_back(std::stoll(digits));
  }
  ::closedir(d);
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string MetaJson(const CheckpointMeta& m) {
  return nlohmann::json{{"format", "rdattn-checkpoint-v1"},
                        {"step", m.step},
                        {"tokens", m.tokens},
                        {"config", m.config},
                        {"spec", m.spec},
                        {"fingerprint", m.fingerprint},
                        {"init_checksum", m.init_checksum},
                        {"evaluated_milestones", m.evaluated_milestones},
                        {"attempt", m.attempt}}
      .dump();
}

StatusOr<CheckpointMeta> ParseMeta(const std::string& path, const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.value("format", "") != "rdattn-checkpoint-v1")
      return DataLossError(path + ": not an rdattn checkpoint (format '" + j.value("format", "") +
                           "')");
    CheckpointMeta m;
    m.step = j.at("step").get<int64_t>();
    m.tokens = j.at("tokens").get<int64_t>();
    m.config = j.at("config");
    m.spec = j.at("spec");
    m.fingerprint = j.at("fingerprint");
    m.init_checksum = j.value("init_checksum", "");
    if (j.contains("evaluated_milestones")) {
      m.evaluated_milestones = j.at("evaluated_milestones").get<std::vector<int64_t>>();
    } else {
      m.evaluated_milestones_known = false;
    }
    m.attempt = j.value("attempt", 0);
    return m;
  } catch (const std::exception& e) {
    return DataLossError(path + ": bad checkpoint metadata: " + e.what());
  }
}

}  // namespace

std::string CheckpointPath(const std::string& dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s%08lld%s", kPrefix, static_cast<long long>(step), kSuffix);
  return dir + "/" + name;
}

StatusOr<std::string> SaveCheckpoint(const std::string& dir, const CheckpointMeta& meta,
                                     model::Gpt& model, AdamW* optimizer, int keep_last,
                                     const std::vector<int64_t>& keep_steps,
                                     const std::function<Status()>& before_rename) {
  RDATTN_RETURN_IF_ERROR(MakeDirs(dir));
  const std::string path = CheckpointPath(dir, meta.step);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    torch::serialize::OutputArchive ar;
    for (const auto& p : model->named_parameters())
      ar.write("param." + p.key(), p.value().detach().cpu());
    for (const auto& b : model->named_buffers())
      ar.write("buffer." + b.key(), b.value().cpu(), /*is_buffer=*/true);
    if (optimizer != nullptr) {
      torch::serialize::OutputArchive opt;
      optimizer->Save(opt);
      ar.write("optimizer", opt);
    }
    ar.write("rng.cpu", at::detail::getDefaultCPUGenerator().get_state());
    ar.write("meta", c10::IValue(MetaJson(meta)));
    ar.save_to(tmp);
  } catch (const std::exception& e) {
    std::remove(tmp.c_str());
    return InternalError(tmp + ": writing the checkpoint failed: " + e.what());
  }
  RDATTN_RETURN_IF_ERROR(FsyncPath(tmp, false));
  if (before_rename) {
    if (Status st = before_rename(); !st.ok()) {
      std::remove(tmp.c_str());
      return st;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return InternalError(path + ": rename failed (" + std::strerror(errno) + ")");
  }
  RDATTN_RETURN_IF_ERROR(FsyncPath(dir, true));
  std::vector<int64_t> steps = ListSteps(dir);
  steps.erase(std::remove_if(steps.begin(), steps.end(),
                             [&](int64_t s) {
                               return std::find(keep_steps.begin(), keep_steps.end(), s) !=
                                      keep_steps.end();
                             }),
              steps.end());
  const int keep = std::max(keep_last, 1);
  for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i)
    std::remove(CheckpointPath(dir, steps[i]).c_str());
  return path;
}

std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  const std::vector<int64_t> steps = ListSteps(dir);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it)
    out.emplace_back(*it, CheckpointPath(dir, *it));
  return out;
}

StatusOr<std::string> LatestCheckpoint(const std::string& dir) {
  const std::vector<int64_t> steps = ListSteps(dir);
  if (steps.empty()) return std::string();
  return CheckpointPath(dir, steps.back());
}

StatusOr<CheckpointMeta> ReadCheckpointMeta(const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0) return NotFoundError(path + ": no such checkpoint");
  try {
    torch::serialize::InputArchive ar;
    ar.load_from(path);
    c10::IValue meta;
    if (!ar.try_read("meta", meta) || !meta.isString())
      return DataLossError(path + ": checkpoint has no metadata");
    return ParseMeta(path, meta.toStringRef());
  } catch (const std::exception& e) {
    return DataLossError(path + ": cannot read checkpoint: " + FirstLine(e.what()));
  }
}

Status LoadCheckpoint(const std::string& path, model::Gpt& model, AdamW* optimizer,
                      CheckpointMeta* meta) {
  if (::access(path.c_str(), R_OK) != 0) return NotFoundError(path + ": no such checkpoint");
  try {
    torch::serialize::InputArchive ar;
    ar.load_from(path);
    c10::IValue m;
    if (!ar.try_read("meta", m) || !m.isString())
      return DataLossError(path + ": checkpoint has no metadata");
    RDATTN_ASSIGN_OR_RETURN(CheckpointMeta parsed, ParseMeta(path, m.toStringRef()));
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      at::Tensor t;
      if (!ar.try_read("param." + p.key(), t))
        return DataLossError(path + ": checkpoint lacks parameter '" + p.key() + "'");
      if (t.sizes() != p.value().sizes())
        return DataLossError(path + ": parameter '" + p.key() + "' has shape " +
                             c10::str(t.sizes()) + ", the model expects " +
                             c10::str(p.value().sizes()));
      p.value().copy_(t);
    }
    for (auto& b : model->named_buffers()) {
      at::Tensor t;
      if (ar.try_read("buffer." + b.key(), t, /*is_buffer=*/true)) b.value().copy_(t);
    }
    if (optimizer != nullptr) {
      torch::serialize::InputArchive opt;
      if (!ar.try_read("optimizer", opt))
        return DataLossError(path + ": checkpoint lacks the optimizer state");
      optimizer->Load(opt);
    }
    at::Tensor rng;
    if (ar.try_read("rng.cpu", rng)) {
      at::Generator gen = at::detail::getDefaultCPUGenerator();  // a handle to the global generator
      gen.set_state(rng);
    }
    if (meta != nullptr) *meta = std::move(parsed);
  } catch (const std::exception& e) {
    return DataLossError(path + ": cannot load checkpoint: " + FirstLine(e.what()));
  }
  return Status::Ok();
}

Status ExportSafetensors(const std::string& out_path, model::Gpt& model,
                         const CheckpointMeta& meta) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& p : model->named_parameters()) {
    at::Tensor t = p.value().detach().cpu();
    if (t.scalar_type() != at::kDouble) t = t.to(at::kFloat);
    tensors.emplace_back(p.key(), t);
  }
  for (const auto& b : model->named_buffers()) tensors.emplace_back(b.key(), b.value().cpu());
  std::sort(tensors.begin(), tensors.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::map<std::string, std::string> md{{"format", "rdattn"},
                                        {"arm", std::string(model::ArmName(model->config().arm))},
                                        {"config", meta.config.dump()},
                                        {"run_spec", meta.spec.dump()},
                                        {"step", std::to_string(meta.step)},
                                        {"init_checksum", meta.init_checksum}};
  std::string error;
  if (!io::WriteSafetensors(out_path, tensors, md, &error)) return InternalError(error);
  return Status::Ok();
}

}  // namespace rdattn::trainer
