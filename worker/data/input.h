// Reading corpus files in binary mode: plain files, or gzip (".gz" suffix; also dictzip, e.g.
// FOLDOC's .dict.dz, when named .gz) through zlib. Bytes are returned unchanged (no newline
// translation, no decoding).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace rdattn::data {

// True when the path ends in ".gz".
bool IsGzipPath(const std::string& path);

// The whole (decompressed) content of a file. Errors name the file (missing, unreadable,
// corrupt or truncated gzip).
StatusOr<std::string> ReadInputFile(const std::string& path);

// Reads a file (decompressed) in pieces, for documents too big to hold whole.
class ChunkReader {
 public:
  static StatusOr<std::unique_ptr<ChunkReader>> Open(const std::string& path);
  virtual ~ChunkReader() = default;
  // Appends up to n bytes to *out; returns how many (0 only at the end of the file). Errors name
  // the file.
  virtual StatusOr<size_t> ReadAppend(size_t n, std::string* out) = 0;
  // Bytes of the file itself (compressed for .gz) consumed so far, for progress reports.
  virtual int64_t raw_offset() const = 0;
};

// Reads a file (decompressed) line by line; lines exclude the '\n' (a trailing '\r' is kept).
class LineReader {
 public:
  static StatusOr<std::unique_ptr<LineReader>> Open(const std::string& path);
  virtual ~LineReader() = default;
  // Sets *line to the next line and returns true; false at the end of the file. The last line
  // need not end in '\n'. Errors name the file.
  virtual StatusOr<bool> Next(std::string* line) = 0;
  // 1-based number of the line last returned by Next().
  int64_t line_number() const { return line_number_; }
  // Bytes of the file itself (compressed for .gz) consumed so far, for progress reports.
  virtual int64_t raw_offset() const = 0;

 protected:
  int64_t line_number_ = 0;
};

}  // namespace rdattn::data
