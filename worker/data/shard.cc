#include "worker/data/shard.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/file_util.h"

// Shards are little-endian on disk and are read in place through mmap.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "rdattn::data reads llm.c shards in place and needs a little-endian host");

namespace rdattn::data {
namespace {

std::string Errno(int err) { return std::strerror(err); }

Status OpenError(const std::string& path, int err) {
  return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kFailedPrecondition,
                path + ": cannot open: " + Errno(err));
}

// RAII file descriptor.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Reads exactly n bytes at offset, or fails.
bool PreadAll(int fd, void* buf, size_t n, off_t off) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    off += r;
  }
  return true;
}

// Checks the header against the file size. `fd` is open on `path`.
StatusOr<ShardInfo> CheckHeader(const std::string& path, int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return InternalError(path + ": fstat failed: " + Errno(errno));
  if (!S_ISREG(st.st_mode)) return FailedPreconditionError(path + ": not a regular file");
  const int64_t file_bytes = st.st_size;
  if (file_bytes < kShardHeaderBytes) {
    return DataLossError(path + ": truncated: file has " + std::to_string(file_bytes) +
                         " bytes, less than the " + std::to_string(kShardHeaderBytes) +
                         "-byte shard header");
  }
  int32_t header[3];
  if (!PreadAll(fd, header, sizeof(header), 0))
    return DataLossError(path + ": cannot read the header");
  if (header[0] != kShardMagic) {
    return InvalidArgumentError(path + ": wrong magic " + std::to_string(header[0]) +
                                " (expected " + std::to_string(kShardMagic) +
                                "); not an llm.c data shard");
  }
  if (header[1] != kShardVersion) {
    return InvalidArgumentError(path + ": unsupported version " + std::to_string(header[1]) +
                                " (expected " + std::to_string(kShardVersion) + ")");
  }
  const int64_t n = header[2];
  if (n < 0)
    return DataLossError(path + ": header says a negative token count " + std::to_string(n));
  const int64_t want = kShardHeaderBytes + 2 * n;
  if (file_bytes < want) {
    return DataLossError(path + ": truncated: header says " + std::to_string(n) + " tokens (" +
                         std::to_string(want) + " bytes) but file has " +
                         std::to_string(file_bytes) + " bytes");
  }
  if (file_bytes > want) {
    return DataLossError(path + ": size mismatch: header says " + std::to_string(n) + " tokens (" +
                         std::to_string(want) + " bytes) but file has " +
                         std::to_string(file_bytes) + " bytes (" +
                         std::to_string(file_bytes - want) + " extra)");
  }
  ShardInfo info;
  info.path = path;
  info.num_tokens = n;
  info.file_bytes = file_bytes;
  return info;
}

Shard::Stamp StampOfStat(const struct stat& st) {
  Shard::Stamp s;
  s.dev = static_cast<uint64_t>(st.st_dev);
  s.ino = static_cast<uint64_t>(st.st_ino);
  s.size = st.st_size;
  s.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  s.ctime_ns = int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec;
  return s;
}

bool HasGlobChars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

}  // namespace

// --------------------------------------------------------------------------------------------
// Reading

StatusOr<ShardInfo> ReadShardInfo(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) return OpenError(path, errno);
  return CheckHeader(path, fd.fd);
}

StatusOr<Shard::Stamp> StampOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return OpenError(path, errno);
  return StampOfStat(st);
}

StatusOr<Shard> Shard::Open(const std::string& path, uint32_t vocab_size) {
  if (vocab_size == 0 || vocab_size > 65536) {
    return InvalidArgumentError(path + ": vocab_size " + std::to_string(vocab_size) +
                                " is outside 1..65536 (shard tokens are uint16)");
  }
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) return OpenError(path, errno);
  RDATTN_ASSIGN_OR_RETURN(ShardInfo info, CheckHeader(path, fd.fd));

  Shard shard;
  shard.path_ = path;
  shard.size_ = info.num_tokens;
  shard.map_bytes_ = static_cast<size_t>(info.file_bytes);
  void* map = ::mmap(nullptr, shard.map_bytes_, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (map == MAP_FAILED) return InternalError(path + ": mmap failed: " + Errno(errno));
  shard.map_ = map;
  {
    struct stat st;
    if (::fstat(fd.fd, &st) != 0) return InternalError(path + ": fstat failed: " + Errno(errno));
    shard.stamp_ = StampOfStat(st);
  }
  shard.tokens_ =
      reinterpret_cast<const uint16_t*>(static_cast<const char*>(map) + kShardHeaderBytes);

  // Full scan: the maximum first (a branch-free loop the compiler vectorises), then the
  // position of the first offender only when there is one.
  const uint16_t* t = shard.tokens_;
  const int64_t n = shard.size_;
  ::madvise(map, shard.map_bytes_, MADV_SEQUENTIAL);
  uint16_t mx = 0;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, t[i]);
  ::madvise(map, shard.map_bytes_, MADV_NORMAL);
  if (uint32_t{mx} >= vocab_size) {
    for (int64_t i = 0; i < n; ++i) {
      if (uint32_t{t[i]} >= vocab_size) {
        return InvalidArgumentError(path + ": token " + std::to_string(t[i]) + " at index " +
                                    std::to_string(i) + " is >= vocab_size " +
                                    std::to_string(vocab_size));
      }
    }
  }
  shard.max_token_ = mx;
  return shard;
}

Shard::Shard(Shard&& other) noexcept { *this = std::move(other); }

Shard& Shard::operator=(Shard&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    size_ = std::exchange(other.size_, 0);
    max_token_ = std::exchange(other.max_token_, 0);
    stamp_ = std::exchange(other.stamp_, Stamp{});
  }
  return *this;
}

Shard::~Shard() { Release(); }

void Shard::Release() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
  size_ = 0;
}

StatusOr<std::vector<std::string>> ExpandShardPaths(const std::vector<std::string>& patterns) {
  if (patterns.empty()) return InvalidArgumentError("no shard paths or patterns given");
  std::vector<std::string> out;
  for (const std::string& pattern : patterns) {
    if (pattern.empty()) return InvalidArgumentError("empty shard path");
    if (!HasGlobChars(pattern) && pattern[0] != '~') {
      struct stat st;
      if (::stat(pattern.c_str(), &st) != 0) return OpenError(pattern, errno);
      out.push_back(pattern);
      continue;
    }
    glob_t g;
    std::memset(&g, 0, sizeof(g));
    const int rc = ::glob(pattern.c_str(), GLOB_TILDE | GLOB_ERR, nullptr, &g);
    if (rc == GLOB_NOMATCH) {
      ::globfree(&g);
      return NotFoundError("shard pattern '" + pattern + "' matches no files");
    }
    if (rc != 0) {
      ::globfree(&g);
      return FailedPreconditionError("shard pattern '" + pattern + "': glob failed (" +
                                     (rc == GLOB_ABORTED ? "read error" : "out of memory") + ")");
    }
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// --------------------------------------------------------------------------------------------
// Writing

namespace {
constexpr size_t kWriteBufferTokens = size_t{1} << 20;

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status CheckIds(const std::string& path, const uint32_t* ids, size_t n, int64_t first_index) {
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] > 65535) {
      return InvalidArgumentError(path + ": token id " + std::to_string(ids[i]) + " at index " +
                                  std::to_string(first_index + static_cast<int64_t>(i)) +
                                  " does not fit in uint16 (max 65535)");
    }
  }
  return Status::Ok();
}
}  // namespace

StatusOr<ShardWriter> ShardWriter::Create(const std::string& path) {
  if (path.empty()) return InvalidArgumentError("empty shard path");
  ShardWriter w;
  w.path_ = path;
  std::string tmpl = path + ".tmp.XXXXXX";
  w.fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (w.fd_ < 0) {
    return FailedPreconditionError(path + ": cannot create temporary file " + tmpl + ": " +
                                   Errno(errno));
  }
  w.tmp_path_ = tmpl;
  ::fchmod(w.fd_, 0644);
  const std::vector<char> zeros(kShardHeaderBytes, 0);
  if (!WriteAll(w.fd_, zeros.data(), zeros.size())) {
    const int err = errno;
    w.Abandon();
    return DataLossError(path + ": write failed: " + Errno(err));
  }
  w.buf_.reserve(kWriteBufferTokens);
  return w;
}

ShardWriter::ShardWriter(ShardWriter&& other) noexcept { *this = std::move(other); }

ShardWriter& ShardWriter::operator=(ShardWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    tmp_path_ = std::move(other.tmp_path_);
    fd_ = std::exchange(other.fd_, -1);
    finished_ = std::exchange(other.finished_, false);
    committed_ = std::exchange(other.committed_, false);
    num_tokens_ = std::exchange(other.num_tokens_, 0);
    buf_ = std::move(other.buf_);
    other.tmp_path_.clear();
  }
  return *this;
}

ShardWriter::~ShardWriter() { Abandon(); }

void ShardWriter::Abandon() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_ && !tmp_path_.empty()) ::unlink(tmp_path_.c_str());
  tmp_path_.clear();
  buf_.clear();
}

Status ShardWriter::FlushBuffer() {
  if (buf_.empty()) return Status::Ok();
  if (!WriteAll(fd_, buf_.data(), buf_.size() * sizeof(uint16_t))) {
    return DataLossError(path_ + ": write failed: " + Errno(errno));
  }
  buf_.clear();
  return Status::Ok();
}

Status ShardWriter::Append(const uint32_t* ids, size_t n) {
  if (fd_ < 0 || finished_) return FailedPreconditionError(path_ + ": Append after Finish/Abandon");
  RDATTN_RETURN_IF_ERROR(CheckIds(path_, ids, n, num_tokens_));
  if (static_cast<int64_t>(n) > kShardMaxTokens - num_tokens_) {
    return InvalidArgumentError(path_ + ": more than " + std::to_string(kShardMaxTokens) +
                                " tokens do not fit in one shard (int32 header)");
  }
  for (size_t i = 0; i < n; ++i) {
    buf_.push_back(static_cast<uint16_t>(ids[i]));
    if (buf_.size() == kWriteBufferTokens) RDATTN_RETURN_IF_ERROR(FlushBuffer());
  }
  num_tokens_ += static_cast<int64_t>(n);
  return Status::Ok();
}

Status ShardWriter::Finish() {
  if (finished_) return Status::Ok();
  if (fd_ < 0) return FailedPreconditionError(path_ + ": Finish after Abandon");
  RDATTN_RETURN_IF_ERROR(FlushBuffer());
  int32_t header[256] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(num_tokens_);
  if (::pwrite(fd_, header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    return DataLossError(path_ + ": header write failed: " + Errno(errno));
  }
  if (::fsync(fd_) != 0) return DataLossError(path_ + ": fsync failed: " + Errno(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    return DataLossError(path_ + ": close failed: " + Errno(errno));
  }
  fd_ = -1;
  finished_ = true;
  return Status::Ok();
}

Status ShardWriter::Commit() {
  if (committed_) return Status::Ok();
  RDATTN_RETURN_IF_ERROR(Finish());
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    return FailedPreconditionError(path_ + ": cannot rename " + tmp_path_ +
                                   " into place: " + Errno(errno));
  }
  committed_ = true;
  tmp_path_.clear();
  const std::string dir = DirOf(path_);
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.fd >= 0 && ::fsync(dfd.fd) != 0 && errno != EINVAL) {
    return DataLossError(path_ + ": fsync of folder " + dir + " failed: " + Errno(errno));
  }
  return Status::Ok();
}

Status WriteShard(const std::string& path, const std::vector<uint32_t>& tokens) {
  RDATTN_RETURN_IF_ERROR(CheckIds(path, tokens.data(), tokens.size(), 0));
  RDATTN_ASSIGN_OR_RETURN(ShardWriter w, ShardWriter::Create(path));
  RDATTN_RETURN_IF_ERROR(w.Append(tokens));
  return w.Commit();
}

}  // namespace rdattn::data
