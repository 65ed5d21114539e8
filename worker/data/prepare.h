// `rdattn-data prepare`: text files or JSONL -> llm.c shards split into train/val/test, plus a
// manifest. The library half of data_main.cc, so tests can call it directly.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/data/split.h"
#include "worker/data/tokenizer.h"

namespace rdattn::data {

enum class InputKind { kText, kJsonl };
enum class SplitMode { kHash, kFiles };

// Streaming limits of Prepare (docs/operations.md "Preparing data"). The reader cuts the input
// into batches of whole documents (JSONL lines) or pieces of one document (text files, cut where
// Tokenizer::LastCutPoint allows) of about kPrepareBatchBytes of text; at most
// PrepareWindow(threads) batches exist at once (read, being tokenized, or waiting to be written
// in order). So the text and ids in flight are bounded by the thread count, not the corpus size:
// each batch is at most kPrepareBatchBytes plus one document or piece (a piece is at most
// kPrepareBatchBytes + kPrepareReadBytes unless the text has no cut point, e.g. no ASCII " x"
// for that long), and its ids take 4 bytes a token (about 1 byte per byte of English text).
inline constexpr int64_t kPrepareBatchBytes = int64_t{512} << 10;
inline constexpr int64_t kPrepareReadBytes = int64_t{256} << 10;
inline constexpr int PrepareWindow(int threads) { return 2 * threads + 2; }

struct PrepareProgress {
  int64_t file_bytes_done = 0;   // of the input files (compressed bytes for .gz)
  int64_t file_bytes_total = 0;  // sum of the input files' sizes
  int64_t text_bytes = 0;        // decompressed text tokenized and written
  int64_t documents = 0;
  int64_t tokens = 0;
};

struct PrepareOptions {
  std::string tokenizer;  // "gpt2" | "byte" (recorded in the manifest)
  std::string vocab_bpe;  // recorded in the manifest for gpt2
  std::string out_dir;    // created when missing
  std::string prefix;     // NAME in NAME_train_000000.bin; no '/'
  int64_t shard_tokens = 100000000;
  InputKind kind = InputKind::kText;
  // Text: each file is one document whose id is the file's basename (".gz" included).
  // JSONL: each non-blank line is one document {"text": string, "id": string or integer}.
  std::vector<std::string> inputs;
  // SplitMode::kFiles only: these files are the val / test splits, everything else is train.
  // They are documents sources too (listing them in `inputs` as well is allowed).
  std::vector<std::string> val_files;
  std::vector<std::string> test_files;
  SplitMode split_mode = SplitMode::kHash;
  // Threads that tokenize (>= 1; besides them, one thread reads and the caller's writes). The
  // output bytes are the same for every value.
  int threads = 1;
  // When set, called on the calling thread after each batch is written.
  std::function<void(const PrepareProgress&)> on_progress;
};

struct SplitSummary {
  int64_t documents = 0;
  int64_t tokens = 0;
  std::vector<std::string> shards;  // file names inside out_dir
};

struct PrepareSummary {
  std::array<SplitSummary, 3> splits;  // indexed by Split
  std::string manifest_path;
  std::vector<std::string> warnings;       // e.g. an empty split
  std::vector<std::string> removed_stale;  // old shards of the same prefix beyond the new ones
  int64_t input_bytes = 0;                 // decompressed bytes of text
};

// "DIR/NAME_split_000007.bin"
std::string ShardFileName(const std::string& prefix, Split split, int index);

// Tokenizes every document as [EOT] + Encode(text) and packs each split's documents back to
// back into shards of opts.shard_tokens tokens (the last one shorter; a document may span two
// shards, as in llm.c). All shards are written under temporary names first and renamed into
// place only when every input was read without error, then the manifest is written (atomically);
// on error nothing in out_dir changes. Deterministic: the same inputs and options give the
// same bytes, for every opts.threads. Memory is bounded as stated at kPrepareBatchBytes. Shards of
// the same prefix left over from an earlier run with more shards
// (NAME_split_NNNNNN.bin with higher numbers) are removed, so a glob never mixes two runs.
StatusOr<PrepareSummary> Prepare(const PrepareOptions& opts, const Tokenizer& tokenizer);

}  // namespace rdattn::data
