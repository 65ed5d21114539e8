// `rdattn-data prepare`: text files or JSONL -> llm.c shards split into train/val/test, plus a
// manifest. The library half of data_main.cc, so tests can call it directly.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/data/split.h"
#include "worker/data/tokenizer.h"

namespace rdattn::data {

enum class InputKind { kText, kJsonl };
enum class SplitMode { kHash, kFiles };

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
// same bytes. Shards of the same prefix left over from an earlier run with more shards
// (NAME_split_NNNNNN.bin with higher numbers) are removed, so a glob never mixes two runs.
StatusOr<PrepareSummary> Prepare(const PrepareOptions& opts, const Tokenizer& tokenizer);

}  // namespace rdattn::data
