#include "worker/data/prepare.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/digest.h"
#include "common/file_util.h"
#include "common/sha256.h"
#include "worker/data/input.h"
#include "worker/data/shard.h"

namespace rdattn::data {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr Split kSplits[] = {Split::kTrain, Split::kVal, Split::kTest};

std::string Canonical(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::path(path), ec);
  return ec ? path : p.string();
}

std::string Basename(const std::string& path) { return fs::path(path).filename().string(); }

bool IsBlank(const std::string& s) {
  for (char c : s) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  }
  return true;
}

// The packing state of one split: the shard being written and the finished ones.
struct SplitWriter {
  Split split;
  std::vector<ShardWriter> finished;
  std::optional<ShardWriter> current;
  SplitSummary summary;
};

class Packer {
 public:
  explicit Packer(const PrepareOptions& opts) : opts_(opts) {
    for (Split s : kSplits) writers_[static_cast<int>(s)].split = s;
  }

  // Appends one document's ids to its split, rolling over to a new shard at shard_tokens.
  Status Add(Split split, const std::vector<uint32_t>& ids) {
    SplitWriter& w = writers_[static_cast<int>(split)];
    size_t off = 0;
    while (off < ids.size()) {
      if (!w.current.has_value()) {
        const int index = static_cast<int>(w.finished.size());
        const std::string name = ShardFileName(opts_.prefix, split, index);
        RDATTN_ASSIGN_OR_RETURN(ShardWriter sw,
                                ShardWriter::Create((fs::path(opts_.out_dir) / name).string()));
        w.current.emplace(std::move(sw));
        w.summary.shards.push_back(name);
      }
      const size_t room = static_cast<size_t>(opts_.shard_tokens - w.current->size());
      const size_t take = std::min(room, ids.size() - off);
      RDATTN_RETURN_IF_ERROR(w.current->Append(ids.data() + off, take));
      off += take;
      if (w.current->size() == opts_.shard_tokens) {
        RDATTN_RETURN_IF_ERROR(w.current->Finish());
        w.finished.push_back(std::move(*w.current));
        w.current.reset();
      }
    }
    w.summary.tokens += static_cast<int64_t>(ids.size());
    w.summary.documents += 1;
    return Status::Ok();
  }

  // Finishes every shard, then renames them all into place.
  Status Commit() {
    for (SplitWriter& w : writers_) {
      if (w.current.has_value()) {
        RDATTN_RETURN_IF_ERROR(w.current->Finish());
        w.finished.push_back(std::move(*w.current));
        w.current.reset();
      }
    }
    for (SplitWriter& w : writers_) {
      for (ShardWriter& sw : w.finished) RDATTN_RETURN_IF_ERROR(sw.Commit());
    }
    return Status::Ok();
  }

  const SplitSummary& summary(Split s) const { return writers_[static_cast<int>(s)].summary; }

  std::vector<int64_t> ShardSizes(Split s) const {
    std::vector<int64_t> out;
    for (const ShardWriter& sw : writers_[static_cast<int>(s)].finished) out.push_back(sw.size());
    return out;
  }

 private:
  const PrepareOptions& opts_;
  SplitWriter writers_[3];
};

struct InputRecord {
  std::string path;
  std::optional<Split> forced;  // files mode
  int64_t file_bytes = 0;
  int64_t text_bytes = 0;
  std::string sha256;
  int64_t documents = 0;
};

Status ValidateOptions(const PrepareOptions& opts, const Tokenizer& tok) {
  if (opts.tokenizer != tok.name()) {
    return InvalidArgumentError("--tokenizer " + opts.tokenizer +
                                " does not match the tokenizer given (" + tok.name() + ")");
  }
  if (tok.vocab_size() > 65536) {
    return InvalidArgumentError("tokenizer " + tok.name() + " has " +
                                std::to_string(tok.vocab_size()) +
                                " ids; shards hold uint16 ids (at most 65536)");
  }
  if (opts.out_dir.empty()) return InvalidArgumentError("--out: missing output folder");
  if (opts.prefix.empty()) return InvalidArgumentError("--prefix: missing shard name prefix");
  if (opts.prefix.find('/') != std::string::npos) {
    return InvalidArgumentError("--prefix '" + opts.prefix + "' must not contain '/'");
  }
  if (opts.shard_tokens < 1 || opts.shard_tokens > kShardMaxTokens) {
    return InvalidArgumentError("--shard-tokens " + std::to_string(opts.shard_tokens) +
                                " is outside 1.." + std::to_string(kShardMaxTokens));
  }
  if (opts.split_mode == SplitMode::kHash) {
    if (!opts.val_files.empty() || !opts.test_files.empty()) {
      return InvalidArgumentError("--val-files/--test-files need --split files (got --split hash)");
    }
    if (opts.inputs.empty())
      return InvalidArgumentError("no inputs: give --text FILE... or --jsonl FILE...");
  } else {
    if (opts.val_files.empty() && opts.test_files.empty()) {
      return InvalidArgumentError("--split files needs --val-files and/or --test-files");
    }
  }
  return Status::Ok();
}

// The inputs in order (inputs, then val and test files not already listed), each with its
// forced split in files mode. Errors on a file listed twice or in both --val-files and
// --test-files.
StatusOr<std::vector<InputRecord>> CollectInputs(const PrepareOptions& opts) {
  std::map<std::string, Split> forced;  // canonical path -> split
  std::map<std::string, std::string> forced_flag;
  auto mark = [&](const std::vector<std::string>& files, Split s, const char* flag) -> Status {
    for (const std::string& f : files) {
      const std::string key = Canonical(f);
      const auto it = forced.find(key);
      if (it != forced.end()) {
        if (it->second == s)
          return InvalidArgumentError(std::string(flag) + ": " + f + " is listed twice");
        return InvalidArgumentError(f + " is in both " + forced_flag[key] + " and " + flag);
      }
      forced.emplace(key, s);
      forced_flag.emplace(key, flag);
    }
    return Status::Ok();
  };
  RDATTN_RETURN_IF_ERROR(mark(opts.val_files, Split::kVal, "--val-files"));
  RDATTN_RETURN_IF_ERROR(mark(opts.test_files, Split::kTest, "--test-files"));

  std::vector<InputRecord> out;
  std::map<std::string, std::string> seen;  // canonical -> as given
  auto add = [&](const std::string& f) -> Status {
    const std::string key = Canonical(f);
    if (seen.count(key) != 0) return Status::Ok();
    seen.emplace(key, f);
    InputRecord r;
    r.path = f;
    if (opts.split_mode == SplitMode::kFiles) {
      const auto it = forced.find(key);
      r.forced = it == forced.end() ? Split::kTrain : it->second;
    }
    out.push_back(std::move(r));
    return Status::Ok();
  };
  const char* input_flag = opts.kind == InputKind::kText ? "--text" : "--jsonl";
  std::map<std::string, int> input_count;
  for (const std::string& f : opts.inputs) {
    if (++input_count[Canonical(f)] > 1) {
      return InvalidArgumentError(std::string(input_flag) + ": " + f + " is listed twice");
    }
    RDATTN_RETURN_IF_ERROR(add(f));
  }
  for (const std::string& f : opts.val_files) RDATTN_RETURN_IF_ERROR(add(f));
  for (const std::string& f : opts.test_files) RDATTN_RETURN_IF_ERROR(add(f));
  if (out.empty()) return InvalidArgumentError("no input files");
  // Every input must be a readable regular file before anything is written.
  for (const InputRecord& r : out) {
    struct stat st;
    if (::stat(r.path.c_str(), &st) != 0) {
      const int err = errno;
      return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kFailedPrecondition,
                    r.path + ": cannot open: " + std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) return InvalidArgumentError(r.path + ": not a regular file");
    if (::access(r.path.c_str(), R_OK) != 0) {
      return FailedPreconditionError(r.path + ": cannot open: " + std::strerror(errno));
    }
  }
  return out;
}

// Parses one JSONL line into (id, text). `where` is "file:line".
Status ParseJsonlLine(const std::string& line, const std::string& where, std::string* id,
                      std::string* text) {
  const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return InvalidArgumentError(where + ": not valid JSON (or not valid UTF-8)");
  if (!j.is_object())
    return InvalidArgumentError(where + ": expected a JSON object with \"text\" and \"id\"");
  const auto t = j.find("text");
  if (t == j.end()) return InvalidArgumentError(where + ": missing \"text\"");
  if (!t->is_string()) return InvalidArgumentError(where + ": \"text\" must be a string");
  const auto i = j.find("id");
  if (i == j.end()) return InvalidArgumentError(where + ": missing \"id\"");
  if (i->is_string()) {
    *id = i->get<std::string>();
  } else if (i->is_number_unsigned()) {
    *id = std::to_string(i->get<uint64_t>());
  } else if (i->is_number_integer()) {
    *id = std::to_string(i->get<int64_t>());
  } else {
    return InvalidArgumentError(where + ": \"id\" must be a string or an integer");
  }
  *text = t->get<std::string>();
  return Status::Ok();
}

}  // namespace

std::string ShardFileName(const std::string& prefix, Split split, int index) {
  char num[16];
  std::snprintf(num, sizeof(num), "%06d", index);
  return prefix + "_" + std::string(SplitName(split)) + "_" + num + ".bin";
}

StatusOr<PrepareSummary> Prepare(const PrepareOptions& opts, const Tokenizer& tok) {
  RDATTN_RETURN_IF_ERROR(ValidateOptions(opts, tok));
  RDATTN_ASSIGN_OR_RETURN(std::vector<InputRecord> inputs, CollectInputs(opts));

  std::string vocab_sha;
  if (tok.name() == "gpt2" && !opts.vocab_bpe.empty()) {
    RDATTN_ASSIGN_OR_RETURN(vocab_sha, Sha256HexOfFile(opts.vocab_bpe));
  }
  {
    std::error_code ec;
    fs::create_directories(opts.out_dir, ec);
    if (ec || !fs::is_directory(opts.out_dir)) {
      return FailedPreconditionError("--out " + opts.out_dir + ": cannot create folder" +
                                     (ec ? ": " + ec.message() : std::string()));
    }
  }

  PrepareSummary summary;
  Packer packer(opts);
  std::vector<uint32_t> ids;
  const uint32_t eot = tok.eot();
  for (InputRecord& in : inputs) {
    {
      struct stat st;
      if (::stat(in.path.c_str(), &st) == 0) in.file_bytes = st.st_size;
    }
    RDATTN_ASSIGN_OR_RETURN(in.sha256, Sha256HexOfFile(in.path));
    if (opts.kind == InputKind::kText) {
      RDATTN_ASSIGN_OR_RETURN(const std::string text, ReadInputFile(in.path));
      ids.clear();
      ids.push_back(eot);
      tok.EncodeAppend(text, &ids);
      const Split split = in.forced.has_value() ? *in.forced : SplitOfDocument(Basename(in.path));
      RDATTN_RETURN_IF_ERROR(packer.Add(split, ids));
      in.text_bytes = static_cast<int64_t>(text.size());
      in.documents = 1;
    } else {
      RDATTN_ASSIGN_OR_RETURN(std::unique_ptr<LineReader> reader, LineReader::Open(in.path));
      std::string line, id, text;
      while (true) {
        RDATTN_ASSIGN_OR_RETURN(const bool more, reader->Next(&line));
        if (!more) break;
        if (IsBlank(line)) continue;
        const std::string where = in.path + ":" + std::to_string(reader->line_number());
        RDATTN_RETURN_IF_ERROR(ParseJsonlLine(line, where, &id, &text));
        ids.clear();
        ids.push_back(eot);
        tok.EncodeAppend(text, &ids);
        const Split split = in.forced.has_value() ? *in.forced : SplitOfDocument(id);
        RDATTN_RETURN_IF_ERROR(packer.Add(split, ids));
        in.text_bytes += static_cast<int64_t>(text.size());
        in.documents += 1;
      }
    }
    summary.input_bytes += in.text_bytes;
  }

  RDATTN_RETURN_IF_ERROR(packer.Commit());

  // Old shards of this prefix beyond the ones just written (an earlier run with more data).
  for (Split s : kSplits) {
    for (int k = static_cast<int>(packer.summary(s).shards.size());; ++k) {
      const std::string name = ShardFileName(opts.prefix, s, k);
      const std::string path = (fs::path(opts.out_dir) / name).string();
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) break;
      if (::unlink(path.c_str()) != 0) {
        return FailedPreconditionError(
            path + ": cannot remove a stale shard of an earlier run: " + std::strerror(errno));
      }
      summary.removed_stale.push_back(name);
    }
  }

  Json manifest;
  manifest["format"] =
      "llm.c data shards: 256 x int32 LE header (magic 20240520, version 1, "
      "token count), then uint16 LE tokens";
  manifest["tokenizer"] = tok.name();
  manifest["vocab_size"] = tok.vocab_size();
  manifest["eot"] = tok.eot();
  if (tok.name() == "gpt2") {
    manifest["tokenizer_file"] = Json{{"path", opts.vocab_bpe}, {"sha256", vocab_sha}};
  }
  manifest["document_layout"] = "[eot] + tokens of the document, documents packed back to back";
  manifest["input_kind"] = opts.kind == InputKind::kText ? "text" : "jsonl";
  if (opts.split_mode == SplitMode::kHash) {
    manifest["split"] = "hash";
    manifest["split_rule"] =
        "SHA-256 of the document id (text: file basename; jsonl: \"id\") read as a big-endian "
        "256-bit integer, mod 1000: 0-989 train, 990-994 val, 995-999 test";
  } else {
    manifest["split"] = "files";
  }
  manifest["shard_tokens"] = opts.shard_tokens;
  Json jin = Json::array();
  for (const InputRecord& in : inputs) {
    Json e;
    e["path"] = in.path;
    e["sha256"] = in.sha256;
    e["file_bytes"] = in.file_bytes;
    e["text_bytes"] = in.text_bytes;
    e["documents"] = in.documents;
    if (in.forced.has_value()) e["split"] = std::string(SplitName(*in.forced));
    jin.push_back(std::move(e));
  }
  manifest["inputs"] = std::move(jin);
  Json jsplits = Json::object();
  for (Split s : kSplits) {
    const SplitSummary& ss = packer.summary(s);
    summary.splits[static_cast<int>(s)] = ss;
    Json e;
    e["documents"] = ss.documents;
    e["tokens"] = ss.tokens;
    Json shards = Json::array();
    const std::vector<int64_t> sizes = packer.ShardSizes(s);
    for (size_t i = 0; i < ss.shards.size(); ++i) {
      // The content digest of the file as published (docs/operations.md "Data identity"): the
      // trainer checks every shard it opens against it.
      int64_t bytes = 0;
      RDATTN_ASSIGN_OR_RETURN(const std::string digest,
                              FileDigest((fs::path(opts.out_dir) / ss.shards[i]).string(), &bytes));
      shards.push_back(Json{{"file", ss.shards[i]},
                            {"tokens", i < sizes.size() ? sizes[i] : 0},
                            {"bytes", bytes},
                            {"digest", digest}});
    }
    e["shards"] = std::move(shards);
    jsplits[std::string(SplitName(s))] = std::move(e);
    if (ss.documents == 0) {
      summary.warnings.push_back("split " + std::string(SplitName(s)) + " has no documents; no " +
                                 std::string(SplitName(s)) + " shard was written");
    }
  }
  manifest["splits"] = std::move(jsplits);
  summary.manifest_path = (fs::path(opts.out_dir) / (opts.prefix + ".manifest.json")).string();
  const std::string text = manifest.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
  RDATTN_RETURN_IF_ERROR(WriteFileAtomically(summary.manifest_path, text));
  return summary;
}

}  // namespace rdattn::data
