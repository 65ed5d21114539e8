#include "worker/data/input.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace rdattn::data {
namespace {

constexpr size_t kChunk = size_t{1} << 20;

Status OpenError(const std::string& path, int err) {
  return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kFailedPrecondition,
                path + ": cannot open: " + std::strerror(err));
}

// A byte source: plain stdio or zlib's gzFile.
class Source {
 public:
  static StatusOr<std::unique_ptr<Source>> Open(const std::string& path) {
    std::unique_ptr<Source> s(new Source());
    s->path_ = path;
    // fopen first so that a missing file gives the same message for both kinds.
    s->file_ = std::fopen(path.c_str(), "rb");
    if (s->file_ == nullptr) return OpenError(path, errno);
    if (IsGzipPath(path)) {
      const int fd = ::dup(::fileno(s->file_));
      std::fclose(s->file_);
      s->file_ = nullptr;
      if (fd < 0) return OpenError(path, errno);
      s->gz_ = gzdopen(fd, "rb");
      if (s->gz_ == nullptr) {
        ::close(fd);
        return InternalError(path + ": gzdopen failed");
      }
      gzbuffer(s->gz_, 256 * 1024);
    }
    return s;
  }
  ~Source() {
    if (file_ != nullptr) std::fclose(file_);
    if (gz_ != nullptr) gzclose_r(gz_);
  }
  // Bytes read into buf (0 at end of file).
  StatusOr<size_t> Read(char* buf, size_t n) {
    if (gz_ != nullptr) {
      const int r = gzread(gz_, buf, static_cast<unsigned>(n));
      if (r < 0) {
        int errnum = 0;
        const char* msg = gzerror(gz_, &errnum);
        return DataLossError(path_ + ": gzip read error: " + (msg != nullptr ? msg : "?"));
      }
      if (r == 0) {
        // zlib reports a stream that stops mid-way only here, as Z_BUF_ERROR.
        int errnum = 0;
        const char* msg = gzerror(gz_, &errnum);
        if (errnum != Z_OK && errnum != Z_STREAM_END) {
          return DataLossError(path_ + ": gzip read error: " + (msg != nullptr ? msg : "?"));
        }
        gz_offset_ = static_cast<int64_t>(std::max<z_off_t>(0, gzoffset(gz_)));
        const int rc = gzclose_r(gz_);
        gz_ = nullptr;
        if (rc != Z_OK) {
          return DataLossError(path_ + (rc == Z_BUF_ERROR
                                            ? ": truncated gzip file (ends inside a stream)"
                                            : ": gzip close error"));
        }
      }
      return static_cast<size_t>(r);
    }
    if (file_ == nullptr) return size_t{0};  // gz stream already closed at its end
    const size_t r = std::fread(buf, 1, n, file_);
    if (r < n && std::ferror(file_)) return DataLossError(path_ + ": read error");
    plain_offset_ += static_cast<int64_t>(r);
    return r;
  }
  // Compressed bytes consumed for gzip (zlib's read-ahead included), else bytes read.
  int64_t raw_offset() const {
    if (gz_ != nullptr) {
      const z_off_t off = gzoffset(gz_);
      return off < 0 ? gz_offset_ : static_cast<int64_t>(off);
    }
    return std::max(plain_offset_, gz_offset_);
  }

 private:
  Source() = default;
  std::string path_;
  FILE* file_ = nullptr;
  gzFile gz_ = nullptr;
  int64_t plain_offset_ = 0;
  int64_t gz_offset_ = 0;  // the compressed size, once the gzip stream is closed
};

class ChunkReaderImpl final : public ChunkReader {
 public:
  explicit ChunkReaderImpl(std::unique_ptr<Source> src) : src_(std::move(src)) {}
  StatusOr<size_t> ReadAppend(size_t n, std::string* out) override {
    const size_t old = out->size();
    out->resize(old + n);
    StatusOr<size_t> r = src_->Read(out->data() + old, n);
    out->resize(old + (r.ok() ? *r : 0));
    return r;
  }
  int64_t raw_offset() const override { return src_->raw_offset(); }

 private:
  std::unique_ptr<Source> src_;
};

class LineReaderImpl final : public LineReader {
 public:
  explicit LineReaderImpl(std::unique_ptr<Source> src) : src_(std::move(src)), buf_(kChunk) {}
  int64_t raw_offset() const override { return src_->raw_offset(); }

  StatusOr<bool> Next(std::string* line) override {
    line->clear();
    while (true) {
      if (pos_ < len_) {
        const char* start = buf_.data() + pos_;
        const void* nl = std::memchr(start, '\n', len_ - pos_);
        if (nl != nullptr) {
          const size_t k = static_cast<size_t>(static_cast<const char*>(nl) - start);
          line->append(start, k);
          pos_ += k + 1;
          ++line_number_;
          return true;
        }
        line->append(start, len_ - pos_);
        pos_ = len_;
      }
      if (eof_) {
        if (line->empty()) return false;  // "...\n" at the end adds no empty last line
        ++line_number_;
        return true;
      }
      RDATTN_ASSIGN_OR_RETURN(const size_t r, src_->Read(buf_.data(), buf_.size()));
      pos_ = 0;
      len_ = r;
      if (r == 0) eof_ = true;
    }
  }

 private:
  std::unique_ptr<Source> src_;
  std::vector<char> buf_;
  size_t pos_ = 0, len_ = 0;
  bool eof_ = false;
};

}  // namespace

bool IsGzipPath(const std::string& path) {
  return path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

StatusOr<std::string> ReadInputFile(const std::string& path) {
  RDATTN_ASSIGN_OR_RETURN(std::unique_ptr<Source> src, Source::Open(path));
  std::string out;
  std::vector<char> buf(kChunk);
  while (true) {
    RDATTN_ASSIGN_OR_RETURN(const size_t r, src->Read(buf.data(), buf.size()));
    if (r == 0) break;
    out.append(buf.data(), r);
  }
  return out;
}

StatusOr<std::unique_ptr<ChunkReader>> ChunkReader::Open(const std::string& path) {
  RDATTN_ASSIGN_OR_RETURN(std::unique_ptr<Source> src, Source::Open(path));
  return std::unique_ptr<ChunkReader>(new ChunkReaderImpl(std::move(src)));
}

StatusOr<std::unique_ptr<LineReader>> LineReader::Open(const std::string& path) {
  RDATTN_ASSIGN_OR_RETURN(std::unique_ptr<Source> src, Source::Open(path));
  return std::unique_ptr<LineReader>(new LineReaderImpl(std::move(src)));
}

}  // namespace rdattn::data
