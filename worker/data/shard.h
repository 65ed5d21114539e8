// llm.c data shards (karpathy/llm.c dev/data/data_common.py): a header of 256 little-endian
// int32 — [0] = 20240520 (magic), [1] = 1 (version), [2] = number of tokens N, the rest 0 —
// followed by N little-endian uint16 token ids. File size = 1024 + 2 * N bytes.
// llm.c's own shards (e.g. edu_fineweb_train_000001.bin) are read unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace rdattn::data {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderBytes = 1024;
// Largest token count the int32 header can hold.
inline constexpr int64_t kShardMaxTokens = 2147483647;

// What the header of a shard says, after the checks that need no token scan: magic, version,
// a non-negative count and size == 1024 + 2 * N.
struct ShardInfo {
  std::string path;
  int64_t num_tokens = 0;
  int64_t file_bytes = 0;
};
// Reads and checks only the header and the file size (no token scan; cheap for long lists).
StatusOr<ShardInfo> ReadShardInfo(const std::string& path);

// A read-only memory-mapped shard (mmap; movable, not copyable). tokens()[i] is valid for
// i < size() while the Shard lives. Thread-safe for concurrent reads.
class Shard {
 public:
  // Validates magic, version, size == 1024 + 2N and (full scan) every token < vocab_size.
  // vocab_size must be in 1..65536 (65536 accepts every uint16). Errors name the file and the
  // problem, e.g. "x.bin: wrong magic 123 (expected 20240520)",
  // "x.bin: truncated: header says 10 tokens (1044 bytes) but file has 1030 bytes",
  // "x.bin: token 50300 at index 17 is >= vocab_size 50257".
  static StatusOr<Shard> Open(const std::string& path, uint32_t vocab_size);

  Shard(Shard&& other) noexcept;
  Shard& operator=(Shard&& other) noexcept;
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
  ~Shard();

  const uint16_t* tokens() const { return tokens_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // The largest token id in the shard (found by the validation scan); 0 for an empty shard.
  uint16_t max_token() const { return max_token_; }
  // The whole file as mapped (header and tokens): what the content digest covers.
  const void* file_data() const { return map_; }
  size_t file_bytes() const { return map_bytes_; }
  // The file's identity and times when it was opened (fstat of the descriptor that was mapped).
  // An in-place rewrite shows through the mapping (MAP_PRIVATE pages that were never written
  // follow the file), so the trainer compares this stamp with the path's later (shard_digest.h).
  struct Stamp {
    uint64_t dev = 0, ino = 0;
    int64_t size = 0;
    int64_t mtime_ns = 0, ctime_ns = 0;
    bool operator==(const Stamp& o) const {
      return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns &&
             ctime_ns == o.ctime_ns;
    }
  };
  const Stamp& stamp() const { return stamp_; }

 private:
  Shard() = default;
  void Release();

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t size_ = 0;
  uint16_t max_token_ = 0;
  Stamp stamp_;
};

// The stamp of `path` now (stat(2)); errors name the path.
StatusOr<Shard::Stamp> StampOf(const std::string& path);

// Expands a list of paths and glob(3) patterns (with ~ expansion) into one sorted,
// de-duplicated list. A plain path must exist; a pattern must match at least one file; an empty
// list is an error.
StatusOr<std::vector<std::string>> ExpandShardPaths(const std::vector<std::string>& patterns);

// Streams one shard to a temporary file in the destination's folder ("<path>.tmp.XXXXXX") and
// publishes it with rename(2), so readers never see a half-written shard. Typical use:
// Create, Append..., Commit. Finish() (header + fsync + close, still under the temporary name)
// lets a caller write several shards and publish them together only when all succeeded.
// A writer destroyed or Abandon()ed before Commit() removes its temporary file.
class ShardWriter {
 public:
  static StatusOr<ShardWriter> Create(const std::string& path);

  ShardWriter(ShardWriter&& other) noexcept;
  ShardWriter& operator=(ShardWriter&& other) noexcept;
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  ~ShardWriter();

  // Rejects ids > 65535 and totals above kShardMaxTokens (nothing of the call is appended).
  Status Append(const uint32_t* ids, size_t n);
  Status Append(const std::vector<uint32_t>& ids) { return Append(ids.data(), ids.size()); }
  int64_t size() const { return num_tokens_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_path_; }

  // Writes the header, flushes, fsyncs and closes. Idempotent.
  Status Finish();
  // Finish() if needed, then rename to path() and fsync the folder.
  Status Commit();
  // Removes the temporary file (no-op after Commit()).
  void Abandon();

 private:
  ShardWriter() = default;
  Status FlushBuffer();

  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  bool finished_ = false;
  bool committed_ = false;
  int64_t num_tokens_ = 0;
  std::vector<uint16_t> buf_;
};

// Writes one shard atomically (temporary file in the same folder, fsync, rename).
// Rejects ids > 65535 before creating any file.
Status WriteShard(const std::string& path, const std::vector<uint32_t>& tokens);

}  // namespace rdattn::data
