#include "worker/trainer/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <tuple>
#include <vector>

#include "common/file_util.h"
#include "worker/io/safetensors.h"
#include "worker/trainer/machine_failure.h"

namespace rdattn::trainer {
namespace {

constexpr const char* kPrefix = "ckpt_step_";

// The first line of a LibTorch exception (the rest is its C++ backtrace).
std::string FirstLine(const char* what) {
  const std::string s(what);
  return s.substr(0, s.find('\n'));
}
constexpr const char* kSuffix = ".pt";

Status MakeDirs(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
        const int err = errno;
        const std::string why =
            "checkpoint.dir " + dir + ": cannot create " + cur + " (" + std::strerror(err) + ")";
        return IsMachineErrno(err) ? UnavailableError(why) : InvalidArgumentError(why);
      }
    }
    if (i < dir.size()) cur.push_back(dir[i]);
  }
  return Status::Ok();
}

struct CheckpointFile {
  int64_t step = 0;
  int attempt = 0;
  std::string path;
};

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), ::isdigit);
}

// The complete checkpoints in dir (ckpt_step_<8 digits>.pt and ckpt_step_<8 digits>.attempt-<A>.pt;
// a temporary file ends otherwise), ascending by step, then attempt.
std::vector<CheckpointFile> ListFiles(const std::string& dir) {
  std::vector<CheckpointFile> files;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return files;
  const size_t pl = std::strlen(kPrefix), sl = std::strlen(kSuffix);
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= pl + sl || name.compare(0, pl, kPrefix) != 0 ||
        name.compare(name.size() - sl, sl, kSuffix) != 0)
      continue;
    std::string digits = name.substr(pl, name.size() - pl - sl), attempt = "0";
    if (const size_t at = digits.find(".attempt-"); at != std::string::npos) {
      attempt = digits.substr(at + 9);
      digits.resize(at);
    }
    if (!AllDigits(digits) || !AllDigits(attempt) || attempt.size() > 9) continue;
    files.push_back({std::stoll(digits), std::atoi(attempt.c_str()), dir + "/" + name});
  }
  ::closedir(d);
  std::sort(files.begin(), files.end(), [](const CheckpointFile& a, const CheckpointFile& b) {
    return std::tie(a.step, a.attempt) < std::tie(b.step, b.attempt);
  });
  return files;
}

// RDATTN_FAILPOINT=checkpoint-before-rename:pause=SECONDS | :stop (a test hook; docs/trainer.md).
// Read once; nothing happens when it is unset.
void FailpointBeforeRename() {
  static const std::string spec = [] {
    const char* v = std::getenv("RDATTN_FAILPOINT");
    const std::string s = v == nullptr ? "" : v;
    const std::string name = "checkpoint-before-rename:";
    return s.rfind(name, 0) == 0 ? s.substr(name.size()) : std::string();
  }();
  if (spec.empty()) return;
  std::fprintf(stderr, "rdattn-train: failpoint checkpoint-before-rename:%s (pid %d)\n",
               spec.c_str(), static_cast<int>(::getpid()));
  if (spec == "stop") {
    ::raise(SIGSTOP);
  } else if (spec.rfind("pause=", 0) == 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(spec.c_str() + 6)));
  }
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

std::string CheckpointPath(const std::string& dir, int64_t step, int attempt) {
  char name[96];
  if (attempt > 0) {
    std::snprintf(name, sizeof(name), "%s%08lld.attempt-%d%s", kPrefix,
                  static_cast<long long>(step), attempt, kSuffix);
  } else {
    std::snprintf(name, sizeof(name), "%s%08lld%s", kPrefix, static_cast<long long>(step), kSuffix);
  }
  return dir + "/" + name;
}

StatusOr<std::string> SaveCheckpoint(const std::string& dir, const CheckpointMeta& meta,
                                     model::Gpt& model, AdamW* optimizer, int keep_last,
                                     const std::vector<int64_t>& keep_steps,
                                     const std::function<Status()>& fence) {
  RDATTN_RETURN_IF_ERROR(MakeDirs(dir));
  const std::string path = CheckpointPath(dir, meta.step, meta.attempt);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  // A failure of the file system: the temporary file goes, the previous checkpoints stay.
  auto io_failure = [&](const std::string& what, int err) -> Status {
    ::unlink(tmp.c_str());
    return UnavailableError(path + ": the checkpoint of step " + std::to_string(meta.step) +
                            " was not written (" + what + " " + tmp + "): " + std::strerror(err) +
                            "; the temporary file is removed");
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    const std::string why = path + ": the checkpoint of step " + std::to_string(meta.step) +
                            " was not written (cannot create " + tmp + "): " + std::strerror(err);
    // A full, read-only or failing disk is the machine's; anything else (EACCES) the setup's.
    return IsMachineErrno(err) ? UnavailableError(why)
                               : InvalidArgumentError("checkpoint.dir " + why);
  }
  // LibTorch streams the archive through this writer, which always reports the whole chunk as
  // written: a short count makes LibTorch 1.13's stream writer throw, and throw again from its
  // destructor (std::terminate). The first error is kept and reported below instead.
  int write_errno = 0;
  auto writer = [&](const void* data, size_t n) -> size_t {
    if (write_errno == 0 && !WriteAll(fd, static_cast<const char*>(data), n)) write_errno = errno;
    return n;
  };
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
    ar.save_to(writer);
  } catch (const std::exception& e) {
    ::close(fd);
    ::unlink(tmp.c_str());
    if (write_errno != 0) return io_failure("write failed", write_errno);
    return InternalError(tmp + ": writing the checkpoint failed: " + FirstLine(e.what()));
  }
  if (write_errno != 0) {
    ::close(fd);
    return io_failure("write failed", write_errno);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return io_failure("fsync failed", err);
  }
  if (::close(fd) != 0) return io_failure("close failed", errno);
  if (fence) {
    if (Status st = fence(); !st.ok()) {
      ::unlink(tmp.c_str());
      return st;
    }
  }
  FailpointBeforeRename();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return io_failure("rename failed", errno);
  // A newer attempt may have claimed the directory while this one was between the check and the
  // rename: the file bears this attempt's name, so it replaced nothing; it goes again.
  if (fence) {
    if (Status st = fence(); !st.ok()) {
      ::unlink(path.c_str());
      return st;
    }
  }
  // A directory that cannot be synced may lose the new name on a power loss: the new file goes
  // too, so that the previous checkpoint is the one to resume from, as the error says.
  if (Status st = FsyncPath(dir); !st.ok()) {
    ::unlink(path.c_str());
    return UnavailableError(path + ": the checkpoint of step " + std::to_string(meta.step) +
                            " was removed again: " + st.message() +
                            " (its name might not survive a power loss)");
  }
  // keep_last: among the files of this attempt and older ones (a newer attempt's are never
  // touched), the newest `keep` steps stay, the milestones' too; an older attempt's file of the
  // step just written is superseded by it.
  const std::vector<CheckpointFile> files = ListFiles(dir);
  std::vector<int64_t> steps;
  for (const CheckpointFile& f : files)
    if (f.attempt <= meta.attempt && (steps.empty() || steps.back() != f.step))
      steps.push_back(f.step);
  steps.erase(std::remove_if(steps.begin(), steps.end(),
                             [&](int64_t s) {
                               return std::find(keep_steps.begin(), keep_steps.end(), s) !=
                                      keep_steps.end();
                             }),
              steps.end());
  const size_t keep = static_cast<size_t>(std::max(keep_last, 1));
  const std::vector<int64_t> pruned(
      steps.begin(), steps.end() - static_cast<ptrdiff_t>(std::min(keep, steps.size())));
  for (const CheckpointFile& f : files) {
    if (f.attempt > meta.attempt) continue;
    const bool old_step = std::find(pruned.begin(), pruned.end(), f.step) != pruned.end();
    const bool superseded = f.step == meta.step && f.attempt < meta.attempt;
    if (old_step || superseded) ::unlink(f.path.c_str());
  }
  return path;
}

std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  const std::vector<CheckpointFile> files = ListFiles(dir);
  for (auto it = files.rbegin(); it != files.rend(); ++it) out.emplace_back(it->step, it->path);
  return out;
}

std::string ReadableCheckpointOfStep(const std::string& dir, int64_t step) {
  for (const auto& [s, path] : ListCheckpoints(dir))
    if (s == step && ReadCheckpointMeta(path).ok()) return path;
  return "";
}

namespace {

// Loads the checkpoint at `path` into `ar` and returns its metadata. LibTorch's errors are
// exceptions, which the callers turn into DataLoss.
StatusOr<CheckpointMeta> OpenCheckpoint(const std::string& path,
                                        torch::serialize::InputArchive& ar) {
  ar.load_from(path);
  c10::IValue meta;
  if (!ar.try_read("meta", meta) || !meta.isString())
    return DataLossError(path + ": checkpoint has no metadata");
  return ParseMeta(path, meta.toStringRef());
}

}  // namespace

StatusOr<CheckpointMeta> ReadCheckpointMeta(const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0) return NotFoundError(path + ": no such checkpoint");
  try {
    torch::serialize::InputArchive ar;
    return OpenCheckpoint(path, ar);
  } catch (const std::exception& e) {
    return DataLossError(path + ": cannot read checkpoint: " + FirstLine(e.what()));
  }
}

Status LoadCheckpoint(const std::string& path, model::Gpt& model, AdamW* optimizer,
                      CheckpointMeta* meta) {
  if (::access(path.c_str(), R_OK) != 0) return NotFoundError(path + ": no such checkpoint");
  try {
    torch::serialize::InputArchive ar;
    RDATTN_ASSIGN_OR_RETURN(CheckpointMeta parsed, OpenCheckpoint(path, ar));
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
