#include "worker/data/prepare.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/digest.h"
#include "common/file_util.h"
#include "common/sha256.h"
#include "worker/data/input.h"
#include "worker/data/ordered_pipeline.h"
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

  // Appends ids (a document, or a piece of one) to the split, rolling over to a new shard at
  // shard_tokens; ends_document counts one document.
  Status Add(Split split, const std::vector<uint32_t>& ids, bool ends_document) {
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
    if (ends_document) w.summary.documents += 1;
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
  if (opts.threads < 1) {
    return InvalidArgumentError("--threads " + std::to_string(opts.threads) +
                                ": need at least 1 tokenizing thread");
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

// --- the pipeline: read in order, tokenize in parallel, write in order ------------------------

// A whole document (a JSONL line) or a piece of one (a text file cut at a cut point).
struct Piece {
  int input = 0;                // index into the inputs
  int64_t line = 0;             // JSONL: 1-based line number
  std::string bytes;            // JSONL: the raw line; text: a piece of the file's text
  bool starts_document = true;  // gets the EOT in front
  bool ends_document = true;    // counts one document
};

struct Batch {
  std::vector<Piece> pieces;
  int64_t file_bytes_done = 0;  // input file bytes consumed when the batch was cut
};

struct EncodedPiece {
  int input = 0;
  Split split = Split::kTrain;
  std::vector<uint32_t> ids;
  int64_t text_bytes = 0;
  bool ends_document = true;
};

struct EncodedBatch {
  std::vector<EncodedPiece> pieces;  // those before the first error
  Status status = Status::Ok();      // the first error of the batch
  int64_t file_bytes_done = 0;
};

// Reads the inputs in order into batches of about kPrepareBatchBytes of text (the reader
// thread).
class CorpusReader {
 public:
  CorpusReader(const PrepareOptions& opts, const Tokenizer& tok,
               const std::vector<InputRecord>& inputs)
      : opts_(opts), tok_(tok), inputs_(inputs) {}

  StatusOr<bool> Next(Batch* batch) {
    int64_t batch_bytes = 0;
    while (batch_bytes < kPrepareBatchBytes) {
      if (current_ < 0) {
        if (next_ == static_cast<int>(inputs_.size())) break;
        RDATTN_RETURN_IF_ERROR(Open(next_++));
      }
      if (lines_ != nullptr) {
        std::string line;
        RDATTN_ASSIGN_OR_RETURN(const bool more, lines_->Next(&line));
        if (!more) {
          Close();
          continue;
        }
        if (IsBlank(line)) continue;
        batch_bytes += static_cast<int64_t>(line.size());
        batch->pieces.push_back(
            Piece{current_, lines_->line_number(), std::move(line), true, true});
        continue;
      }
      RDATTN_ASSIGN_OR_RETURN(
          const size_t n, chunks_->ReadAppend(static_cast<size_t>(kPrepareReadBytes), &pending_));
      if (n == 0) {  // the end of the document (an empty file is a document too: [EOT])
        batch_bytes += static_cast<int64_t>(pending_.size());
        batch->pieces.push_back(Piece{current_, 0, std::move(pending_), first_piece_, true});
        Close();
        continue;
      }
      if (static_cast<int64_t>(pending_.size()) < kPrepareBatchBytes) continue;
      const size_t cut = tok_.LastCutPoint(pending_, scan_from_);
      if (cut == 0) {  // no cut point yet: keep reading (only new cut points need a look)
        scan_from_ = pending_.size() - 1;
        continue;
      }
      batch_bytes += static_cast<int64_t>(cut);
      batch->pieces.push_back(Piece{current_, 0, pending_.substr(0, cut), first_piece_, false});
      pending_.erase(0, cut);
      first_piece_ = false;
      scan_from_ = 1;
    }
    batch->file_bytes_done = done_bytes_ + RawOffset();
    return !batch->pieces.empty();
  }

 private:
  Status Open(int i) {
    const InputRecord& in = inputs_[i];
    if (opts_.kind == InputKind::kText) {
      RDATTN_ASSIGN_OR_RETURN(chunks_, ChunkReader::Open(in.path));
    } else {
      RDATTN_ASSIGN_OR_RETURN(lines_, LineReader::Open(in.path));
    }
    current_ = i;
    pending_.clear();
    first_piece_ = true;
    scan_from_ = 1;
    return Status::Ok();
  }
  void Close() {
    done_bytes_ += inputs_[current_].file_bytes;
    chunks_.reset();
    lines_.reset();
    pending_ = std::string();
    current_ = -1;
  }
  int64_t RawOffset() const {
    if (chunks_ != nullptr) return chunks_->raw_offset();
    if (lines_ != nullptr) return lines_->raw_offset();
    return 0;
  }

  const PrepareOptions& opts_;
  const Tokenizer& tok_;
  const std::vector<InputRecord>& inputs_;
  int next_ = 0;      // the next input to open
  int current_ = -1;  // the open input, or -1
  std::unique_ptr<ChunkReader> chunks_;
  std::unique_ptr<LineReader> lines_;
  std::string pending_;  // text read and not yet cut off
  bool first_piece_ = true;
  size_t scan_from_ = 1;
  int64_t done_bytes_ = 0;  // file bytes of the inputs already closed
};

// Tokenizes one batch (a worker thread). JSONL lines are parsed here, so errors come back in
// document order through the batch.
EncodedBatch EncodeBatch(Batch&& batch, const PrepareOptions& opts, const Tokenizer& tok,
                         const std::vector<InputRecord>& inputs,
                         const std::vector<Split>& text_split) {
  EncodedBatch out;
  out.file_bytes_done = batch.file_bytes_done;
  out.pieces.reserve(batch.pieces.size());
  std::string id, json_text;
  for (Piece& p : batch.pieces) {
    EncodedPiece e;
    e.input = p.input;
    e.ends_document = p.ends_document;
    std::string_view text = p.bytes;
    if (opts.kind == InputKind::kJsonl) {
      const InputRecord& in = inputs[p.input];
      const std::string where = in.path + ":" + std::to_string(p.line);
      out.status = ParseJsonlLine(p.bytes, where, &id, &json_text);
      if (!out.status.ok()) break;
      text = json_text;
      e.split = in.forced.has_value() ? *in.forced : SplitOfDocument(id);
    } else {
      e.split = text_split[p.input];
    }
    e.ids.reserve(text.size() / 3 + 2);
    if (p.starts_document) e.ids.push_back(tok.eot());
    tok.EncodeAppend(text, &e.ids);
    e.text_bytes = static_cast<int64_t>(text.size());
    std::string().swap(p.bytes);  // the text is no longer needed
    out.pieces.push_back(std::move(e));
  }
  return out;
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
  PrepareProgress progress;
  std::vector<Split> text_split(inputs.size(), Split::kTrain);  // --text: the split of each file
  for (size_t i = 0; i < inputs.size(); ++i) {
    InputRecord& in = inputs[i];
    struct stat st;
    if (::stat(in.path.c_str(), &st) == 0) in.file_bytes = st.st_size;
    progress.file_bytes_total += in.file_bytes;
    text_split[i] = in.forced.has_value() ? *in.forced : SplitOfDocument(Basename(in.path));
  }
  // The inputs' SHA-256 for the manifest, on a thread of its own beside the pipeline: each file
  // is read a second time, as before, but the tokenizers no longer wait for it. It writes only
  // InputRecord::sha256, which nothing else touches until it is joined.
  Status hash_status = Status::Ok();
  std::atomic<bool> stop_hashing{false};  // set when Prepare returns early
  std::thread hasher([&inputs, &hash_status, &stop_hashing] {
    for (InputRecord& in : inputs) {
      if (stop_hashing) return;
      StatusOr<std::string> h = Sha256HexOfFile(in.path);
      if (!h.ok()) {
        hash_status = h.status();
        return;
      }
      in.sha256 = *std::move(h);
    }
  });
  struct Joiner {
    std::thread& t;
    std::atomic<bool>& stop;
    ~Joiner() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } join_hasher{hasher, stop_hashing};
  CorpusReader reader(opts, tok, inputs);
  const std::function<StatusOr<bool>(Batch*)> read = [&](Batch* b) { return reader.Next(b); };
  const std::function<EncodedBatch(Batch &&)> work = [&](Batch&& b) {
    return EncodeBatch(std::move(b), opts, tok, inputs, text_split);
  };
  const std::function<Status(EncodedBatch &&)> write = [&](EncodedBatch&& b) -> Status {
    for (const EncodedPiece& e : b.pieces) {
      RDATTN_RETURN_IF_ERROR(packer.Add(e.split, e.ids, e.ends_document));
      inputs[e.input].text_bytes += e.text_bytes;
      progress.text_bytes += e.text_bytes;
      progress.tokens += static_cast<int64_t>(e.ids.size());
      if (e.ends_document) {
        inputs[e.input].documents += 1;
        progress.documents += 1;
      }
    }
    RDATTN_RETURN_IF_ERROR(b.status);
    progress.file_bytes_done = b.file_bytes_done;
    if (opts.on_progress) opts.on_progress(progress);
    return Status::Ok();
  };
  RDATTN_RETURN_IF_ERROR((RunOrderedPipeline<Batch, EncodedBatch>(
      opts.threads, PrepareWindow(opts.threads), read, work, write)));
  hasher.join();
  RDATTN_RETURN_IF_ERROR(hash_status);
  for (const InputRecord& in : inputs) summary.input_bytes += in.text_bytes;
  progress.file_bytes_done = progress.file_bytes_total;  // the last batch may end before EOF
  if (opts.on_progress) opts.on_progress(progress);

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
  // The content digest of each shard as published (docs/operations.md "Data identity"; the
  // trainer checks every shard it opens against it), the shards spread over opts.threads threads.
  std::vector<std::string> shard_paths;
  for (Split s : kSplits) {
    for (const std::string& name : packer.summary(s).shards)
      shard_paths.push_back((fs::path(opts.out_dir) / name).string());
  }
  std::vector<StatusOr<std::string>> digests(shard_paths.size(), InternalError("not computed"));
  std::vector<int64_t> digest_bytes(shard_paths.size(), 0);
  {
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    const size_t n = std::min(shard_paths.size(), static_cast<size_t>(opts.threads));
    for (size_t t = 0; t < n; ++t) {
      pool.emplace_back([&] {
        for (size_t k = next++; k < shard_paths.size(); k = next++)
          digests[k] = FileDigest(shard_paths[k], &digest_bytes[k]);
      });
    }
    for (std::thread& t : pool) t.join();
  }
  size_t shard_k = 0;
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
      const int64_t bytes = digest_bytes[shard_k];
      RDATTN_ASSIGN_OR_RETURN(const std::string digest, std::move(digests[shard_k]));
      ++shard_k;
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
