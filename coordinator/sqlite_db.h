// A thin RAII layer over the SQLite C API for store.cc: one connection, cached prepared
// statements, typed binds and reads, errors as Status. Not thread-safe: the owner serializes.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rdattn::coordinator {

class SqliteDb;

// A prepared statement borrowed from the connection's cache; reset and unbound on destruction.
class SqliteStmt {
 public:
  SqliteStmt(SqliteDb* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  ~SqliteStmt();
  SqliteStmt(SqliteStmt&& other) noexcept : db_(other.db_), stmt_(other.stmt_) {
    other.stmt_ = nullptr;
  }
  SqliteStmt(const SqliteStmt&) = delete;
  SqliteStmt& operator=(const SqliteStmt&) = delete;
  SqliteStmt& operator=(SqliteStmt&&) = delete;

  // Binds are 1-based, as in SQLite. They return *this for chaining.
  SqliteStmt& Bind(int index, int64_t value);
  SqliteStmt& Bind(int index, int value) { return Bind(index, static_cast<int64_t>(value)); }
  SqliteStmt& Bind(int index, double value);
  SqliteStmt& Bind(int index, std::string_view text);
  SqliteStmt& Bind(int index, const std::string& text) {
    return Bind(index, std::string_view(text));
  }
  SqliteStmt& Bind(int index, const char* text) { return Bind(index, std::string_view(text)); }
  SqliteStmt& BindBlob(int index, std::string_view bytes);
  SqliteStmt& BindNull(int index);

  // One step: true when a row is available, false when done.
  StatusOr<bool> Step();
  // Steps until done (for statements that return no rows).
  Status Run();

  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) const { return sqlite3_column_double(stmt_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string Text(int col) const;
  std::string Blob(int col) const;
  // The index of the result column named `name`, or -1.
  int ColumnIndex(std::string_view name) const;

 private:
  SqliteDb* db_;
  sqlite3_stmt* stmt_;  // never null while in use; owned by the cache
  Status bind_error_;
};

class SqliteDb {
 public:
  // Opens (creating) the file. ":memory:" works too.
  static StatusOr<std::unique_ptr<SqliteDb>> Open(const std::string& path);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  // Runs one or more statements without results (schema, pragmas, BEGIN/COMMIT).
  Status Exec(std::string_view sql);
  // A cached statement for `sql`; prepared on first use.
  StatusOr<SqliteStmt> Prepare(const std::string& sql);
  // The first column of the first row of `sql` as text ("" when no row).
  StatusOr<std::string> QueryText(const std::string& sql);

  int64_t LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }
  int Changes() const { return sqlite3_changes(db_); }
  // "context: <sqlite message>" with a code that says whether to retry (busy -> UNAVAILABLE).
  Status Error(std::string_view context, int rc) const;

 private:
  explicit SqliteDb(sqlite3* db) : db_(db) {}
  sqlite3* db_;  // never null
  std::map<std::string, sqlite3_stmt*> cache_;
};

// What CheckWal found in a `-wal` file, read before SQLite opens the database (SQLite's own
// recovery silently drops everything from the first bad frame on).
struct WalCheck {
  bool exists = false;
  int64_t bytes = 0;
  int64_t frames = 0;   // valid frames of the current generation (salts of the header)
  int64_t commits = 0;  // of them, commit frames (transactions SQLite will recover)
  // Non-empty: acknowledged writes may have been lost. Says what was found, e.g. "the WAL ends
  // mid-frame: frame 12 (offset 49464) has 1200 of its 4120 bytes".
  std::string damage;
};

// Reads the WAL at `wal_path` (https://www.sqlite.org/fileformat2.html#walformat): the 32-byte
// header (magic, version, page size, salts, checksum) and then the frames of the current
// generation with their cumulative checksums. Damage: a header cut short or failing its magic
// or checksum, the current generation ending mid-frame, or a frame with the current salts that
// fails the checksum chain and is followed by more bytes. A WAL cut exactly at a frame boundary
// looks like a shorter, valid WAL: that cannot be seen here. Only I/O errors are errors.
StatusOr<WalCheck> CheckWal(const std::string& wal_path);

// An exclusive lock (flock) on `path`, held until destruction (the process's lifetime). The
// file holds `holder` (pid, host, start time). Held elsewhere: FAILED_PRECONDITION naming the
// lock file and what its holder wrote.
class FileLock {
 public:
  static StatusOr<std::unique_ptr<FileLock>> Acquire(const std::string& path,
                                                     const std::string& holder);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace rdattn::coordinator
