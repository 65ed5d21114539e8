// SQLite RAII helpers for the store.
#include "coordinator/sqlite_db.h"

#include <utility>

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

}  // namespace rdattn::coordinator
