// SQLite RAII helpers for the store.
#include "coordinator/sqlite_db.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

namespace rdattn::coordinator {

SqliteStmt::~SqliteStmt() {
  if (stmt_ != nullptr) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
}

namespace {
Status BindStatus(int rc, int index) {
  if (rc == SQLITE_OK) return Status::Ok();
  return InternalError("sqlite bind of parameter " + std::to_string(index) +
                       " failed: " + sqlite3_errstr(rc));
}
}  // namespace

SqliteStmt& SqliteStmt::Bind(int index, int64_t value) {
  if (bind_error_.ok()) bind_error_ = BindStatus(sqlite3_bind_int64(stmt_, index, value), index);
  return *this;
}

SqliteStmt& SqliteStmt::Bind(int index, double value) {
  if (bind_error_.ok()) bind_error_ = BindStatus(sqlite3_bind_double(stmt_, index, value), index);
  return *this;
}

SqliteStmt& SqliteStmt::Bind(int index, std::string_view text) {
  if (bind_error_.ok()) {
    bind_error_ = BindStatus(
        sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
        index);
  }
  return *this;
}

SqliteStmt& SqliteStmt::BindBlob(int index, std::string_view bytes) {
  if (bind_error_.ok()) {
    // A zero-length blob must not be bound as NULL: give SQLite a valid pointer.
    const char* data = bytes.empty() ? "" : bytes.data();
    bind_error_ =
        BindStatus(sqlite3_bind_blob64(stmt_, index, data, bytes.size(), SQLITE_TRANSIENT), index);
  }
  return *this;
}

SqliteStmt& SqliteStmt::BindNull(int index) {
  if (bind_error_.ok()) bind_error_ = BindStatus(sqlite3_bind_null(stmt_, index), index);
  return *this;
}

StatusOr<bool> SqliteStmt::Step() {
  if (!bind_error_.ok()) return bind_error_;
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(sqlite3_sql(stmt_), rc);
}

Status SqliteStmt::Run() {
  while (true) {
    RDATTN_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

std::string SqliteStmt::Text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  if (p == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(p),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

std::string SqliteStmt::Blob(int col) const {
  const void* p = sqlite3_column_blob(stmt_, col);
  if (p == nullptr) return "";
  return std::string(static_cast<const char*>(p),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

int SqliteStmt::ColumnIndex(std::string_view name) const {
  const int n = sqlite3_column_count(stmt_);
  for (int i = 0; i < n; ++i) {
    const char* col = sqlite3_column_name(stmt_, i);
    if (col != nullptr && name == col) return i;
  }
  return -1;
}

StatusOr<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path) {
  sqlite3* raw = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
    sqlite3_close(raw);
    return UnavailableError("cannot open database " + path + ": " + msg);
  }
  sqlite3_extended_result_codes(raw, 1);
  return std::unique_ptr<SqliteDb>(new SqliteDb(raw));
}

SqliteDb::~SqliteDb() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

Status SqliteDb::Exec(std::string_view sql) {
  const std::string copy(sql);
  const int rc = sqlite3_exec(db_, copy.c_str(), nullptr, nullptr, nullptr);
  if (rc == SQLITE_OK) return Status::Ok();
  return Error(copy.substr(0, 60), rc);
}

StatusOr<SqliteStmt> SqliteDb::Prepare(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return Error("prepare " + sql, rc);
    it = cache_.emplace(sql, stmt).first;
  }
  return SqliteStmt(this, it->second);
}

StatusOr<std::string> SqliteDb::QueryText(const std::string& sql) {
  RDATTN_ASSIGN_OR_RETURN(SqliteStmt stmt, Prepare(sql));
  RDATTN_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::string();
  return stmt.Text(0);
}

Status SqliteDb::Error(std::string_view context, int rc) const {
  std::string msg = "sqlite: " + std::string(context) + ": " + sqlite3_errmsg(db_);
  const int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return UnavailableError(msg);
  if (primary == SQLITE_CONSTRAINT) return Status(StatusCode::kAlreadyExists, msg);
  if (primary == SQLITE_FULL || primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN) {
    return UnavailableError(msg);
  }
  if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) return DataLossError(msg);
  return InternalError(msg);
}

// --- WAL check ------------------------------------------------------------------------------

namespace {
uint32_t Be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
uint32_t Le32(const unsigned char* p) {
  return (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | uint32_t{p[0]};
}
// SQLite's WAL checksum over `n` bytes (a multiple of 8), continuing from s[0], s[1].
void WalChecksum(bool big_endian, const unsigned char* p, size_t n, uint32_t s[2]) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint32_t x0 = big_endian ? Be32(p + i) : Le32(p + i);
    const uint32_t x1 = big_endian ? Be32(p + i + 4) : Le32(p + i + 4);
    s[0] += x0 + s[1];
    s[1] += x1 + s[0];
  }
}
}  // namespace

StatusOr<WalCheck> CheckWal(const std::string& wal_path) {
  WalCheck out;
  std::ifstream in(wal_path, std::ios::binary);
  if (!in) {
    struct stat st;
    if (::stat(wal_path.c_str(), &st) != 0 && errno == ENOENT) return out;
    return UnavailableError("cannot read " + wal_path + ": " + std::strerror(errno));
  }
  out.exists = true;
  const std::vector<unsigned char> data((std::istreambuf_iterator<char>(in)),
                                        std::istreambuf_iterator<char>());
  if (in.bad()) return UnavailableError("cannot read " + wal_path + ": read failed");
  const size_t size = data.size();
  out.bytes = static_cast<int64_t>(size);
  if (size == 0) return out;  // reset by a checkpoint: nothing to recover
  if (size < 32) {
    out.damage = "the WAL header is cut short (" + std::to_string(size) + " of 32 bytes)";
    return out;
  }
  const unsigned char* h = data.data();
  const uint32_t magic = Be32(h);
  if (magic != 0x377f0682 && magic != 0x377f0683) {
    out.damage = "the WAL header has no WAL magic number";
    return out;
  }
  const bool big_endian = (magic & 1) != 0;
  uint32_t page_size = Be32(h + 8);
  if (page_size == 1) page_size = 65536;
  if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) != 0) {
    out.damage = "the WAL header's page size " + std::to_string(page_size) + " is not valid";
    return out;
  }
  uint32_t sum[2] = {0, 0};
  WalChecksum(big_endian, h, 24, sum);
  if (sum[0] != Be32(h + 24) || sum[1] != Be32(h + 28)) {
    out.damage = "the WAL header fails its checksum";
    return out;
  }
  const uint32_t salt1 = Be32(h + 16), salt2 = Be32(h + 20);
  const size_t frame_size = 24 + page_size;
  size_t off = 32;
  for (int64_t frame = 1; off < size; ++frame) {
    const size_t left = size - off;
    const std::string where =
        "frame " + std::to_string(frame) + " (offset " + std::to_string(off) + ")";
    if (left < 24) {
      // Cut inside a frame header: its salts, when they are there, say whose frame it was.
      const unsigned char* f = data.data() + off;
      if (left >= 16 && (Be32(f + 8) != salt1 || Be32(f + 12) != salt2)) return out;
      out.damage = "the WAL ends mid-frame: " + where + " has " + std::to_string(left) +
                   " of its " + std::to_string(frame_size) + " bytes (not even its header)";
      return out;
    }
    const unsigned char* f = data.data() + off;
    if (Be32(f + 8) != salt1 || Be32(f + 12) != salt2) return out;  // an older generation: done
    if (left < frame_size) {
      out.damage = "the WAL ends mid-frame: " + where + " has " + std::to_string(left) +
                   " of its " + std::to_string(frame_size) + " bytes";
      return out;
    }
    uint32_t next[2] = {sum[0], sum[1]};
    WalChecksum(big_endian, f, 8, next);
    WalChecksum(big_endian, f + 24, page_size, next);
    if (next[0] != Be32(f + 16) || next[1] != Be32(f + 20)) {
      const size_t after = left - frame_size;
      if (after > 0) {
        out.damage = where + " has the current salts but fails the checksum chain, and " +
                     std::to_string(after) + " more bytes follow it";
      }
      return out;  // a torn last frame: a transaction that never committed
    }
    sum[0] = next[0];
    sum[1] = next[1];
    ++out.frames;
    if (Be32(f + 4) != 0) ++out.commits;
    off += frame_size;
  }
  return out;
}

// --- lock ------------------------------------------------------------------------------------

StatusOr<std::unique_ptr<FileLock>> FileLock::Acquire(const std::string& path,
                                                      const std::string& holder) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return UnavailableError("cannot open lock file " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string held;
    char buf[512];
    ssize_t n = 0;
    while ((n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(held.size()))) > 0 &&
           held.size() < 4096) {
      held.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    while (!held.empty() && (held.back() == '\n' || held.back() == ' ')) held.pop_back();
    for (char& c : held) {
      if (c == '\n') c = ',';
    }
    if (err == EWOULDBLOCK) {
      return FailedPreconditionError(
          "the store is in use by another coordinator (" +
          (held.empty() ? std::string("its holder has not written its name yet") : held) +
          "; lock file " + path + "): one coordinator per store; stop that one first");
    }
    return UnavailableError("cannot lock " + path + ": " + std::strerror(err));
  }
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
    const int err = errno;
    ::close(fd);
    return UnavailableError("cannot write lock file " + path + ": " + std::strerror(err));
  }
  return std::unique_ptr<FileLock>(new FileLock(fd));
}

FileLock::~FileLock() { ::close(fd_); }

}  // namespace rdattn::coordinator
