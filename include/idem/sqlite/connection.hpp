#pragma once
// idem::sqlite::Connection: one sqlite3* with its prepared statements.
//
// - Values travel only as bound parameters (execute / query); SQL text without values goes
//   through exec() (BEGIN, COMMIT, DDL, PRAGMA).
// - Statements are prepared once per connection and cached by their SQL text; SQLite
//   re-prepares them by itself after a schema change.
// - A connection idem opens runs in WAL mode with a busy timeout and the chosen synchronous
//   level (ConnectionParams). A borrowed connection (your own sqlite3*) is used as it is: its
//   settings are left alone and it is never closed here.
// - Not thread-safe: one thread uses a Connection at a time (the pool hands it out). Never
//   carry a Connection across fork(): open a new one in the child.

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/sqlite/connection_params.hpp"
#include "idem/sqlite/errors.hpp"
#include "idem/sqlite/value.hpp"

namespace idem::sqlite {

class Connection;

// The rows of a query, read one at a time. The statement goes back to the connection's cache
// (reset, bindings cleared) when this object is destroyed; destroy it before the connection.
class Rows {
 public:
  Rows(Rows&& other) noexcept
      : connection_(std::exchange(other.connection_, nullptr)),
        stmt_(std::exchange(other.stmt_, nullptr)),
        owned_(other.owned_) {}
  Rows& operator=(Rows&&) = delete;
  Rows(const Rows&) = delete;
  ~Rows() { release(); }

  // Steps to the next row: true when there is one. Throws StoreError.
  bool next();

  int columns() const noexcept { return sqlite3_column_count(stmt_); }
  // SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB or SQLITE_NULL.
  int type(int column) const noexcept { return sqlite3_column_type(stmt_, column); }
  bool is_null(int column) const noexcept { return type(column) == SQLITE_NULL; }
  std::int64_t integer(int column) const noexcept { return sqlite3_column_int64(stmt_, column); }
  double real(int column) const noexcept { return sqlite3_column_double(stmt_, column); }
  // Text or blob bytes, verbatim ("" for NULL).
  std::string text(int column) const {
    const void* p = type(column) == SQLITE_BLOB
                        ? sqlite3_column_blob(stmt_, column)
                        : static_cast<const void*>(sqlite3_column_text(stmt_, column));
    const int n = sqlite3_column_bytes(stmt_, column);
    if (p == nullptr || n <= 0) return {};
    return std::string(static_cast<const char*>(p), static_cast<std::size_t>(n));
  }

 private:
  friend class Connection;
  Rows(Connection* connection, sqlite3_stmt* stmt, bool owned) noexcept
      : connection_(connection), stmt_(stmt), owned_(owned) {}
  void release() noexcept {
    if (stmt_ == nullptr) return;
    if (owned_) {
      sqlite3_finalize(stmt_);
    } else {
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
    }
    stmt_ = nullptr;
  }

  Connection* connection_;
  sqlite3_stmt* stmt_;
  bool owned_;  // a one-off statement (the cached one was in use): finalized, not cached
};

// What try_execute() reports instead of throwing: SQLITE_OK, or the extended code of the
// constraint that refused the statement.
struct StepResult {
  int code = SQLITE_OK;
  std::int64_t changes = 0;
};

class Connection {
 public:
  // Opens the database file (creating it when missing) in WAL mode with the busy timeout and
  // synchronous level of `params`. Throws StoreError when the file cannot be opened, is not a
  // SQLite database, or cannot switch to WAL (e.g. on a network filesystem).
  explicit Connection(std::filesystem::path path, ConnectionParams params = {})
      : path_(path.string()), owned_(true) {
    if (params.busy_timeout < std::chrono::milliseconds::zero()) {
      throw InvalidArgument("idem::sqlite: busy_timeout must not be negative");
    }
    if (sqlite3_threadsafe() == 0) {
      throw StoreError(
          "idem::sqlite: the SQLite library was built with SQLITE_THREADSAFE=0; idem "
          "needs one that threads may share",
          false);
    }
    // NOMUTEX: a connection is used by one thread at a time (the pool sees to that).
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
#ifdef SQLITE_OPEN_EXRESCODE
    flags |= SQLITE_OPEN_EXRESCODE;
#endif
    sqlite3* db = nullptr;
    const int rc = sqlite3_open_v2(path_.c_str(), &db, flags, nullptr);
    if (rc != SQLITE_OK) {
      StoreError e = detail::make_error("open", db, rc, path_);
      sqlite3_close_v2(db);
      throw e;
    }
    db_ = db;
    if (sqlite3_db_readonly(db_, "main") == 1) {
      // SQLite falls back to read-only when it may not write the file; every claim would fail.
      close();
      throw StoreError(
          fmt::format("idem::sqlite: open failed on {}: the file can only be opened read-only "
                      "(permissions, an immutable file or a read-only filesystem) (SQLite result "
                      "code {})",
                      path_, SQLITE_READONLY),
          false, Diagnostics{SQLITE_READONLY, "", "attempt to write a readonly database", false});
    }
    sqlite3_extended_result_codes(db_, 1);
    const auto ms = std::min<std::chrono::milliseconds::rep>(params.busy_timeout.count(),
                                                             std::numeric_limits<int>::max());
    sqlite3_busy_timeout(db_, static_cast<int>(ms));
    try {
      // WAL: readers never wait for the writer nor the writer for readers, which is what many
      // threads and processes on one file need. The mode is stored in the file.
      std::string mode;
      {
        Rows rows = query("PRAGMA journal_mode=WAL");
        if (rows.next()) mode = rows.text(0);
      }
      if (mode != "wal") {
        throw StoreError(
            fmt::format("idem::sqlite: {} cannot use WAL mode (journal_mode stays \"{}\"); WAL "
                        "needs a local filesystem with shared memory, not NFS/SMB",
                        path_, mode),
            false, Diagnostics{0, "", "journal_mode=" + mode, false});
      }
      exec(params.synchronous == Synchronous::full ? "PRAGMA synchronous=FULL"
                                                   : "PRAGMA synchronous=NORMAL");
    } catch (...) {
      close();
      throw;
    }
  }

  // Borrows your open handle. Statements are prepared and cached here and finalized when this
  // object is destroyed (do that before you close the handle); the handle stays yours.
  explicit Connection(sqlite3* borrowed) : db_(borrowed), owned_(false) {
    if (db_ == nullptr) throw InvalidArgument("idem::sqlite: the sqlite3* handle is null");
    const char* file = sqlite3_db_filename(db_, "main");
    path_ = file != nullptr && *file != '\0' ? file : "(temporary database)";
  }

  ~Connection() {
    close();
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs SQL text that carries no values (one or more statements). Throws StoreError.
  void exec(const std::string& sql) {
    char* message = nullptr;
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message);
    sqlite3_free(message);  // sqlite3_errmsg still holds the text
    if (rc != SQLITE_OK) throw error(fmt::format("statement \"{}\"", abbreviated(sql)), rc);
  }

  // Runs one statement to completion; returns the rows it changed. Throws StoreError.
  std::int64_t execute(const std::string& sql, std::initializer_list<Value> params = {}) {
    return run(sql, params.begin(), params.size(), false).changes;
  }
  std::int64_t execute(const std::string& sql, const std::vector<Value>& params) {
    return run(sql, params.data(), params.size(), false).changes;
  }

  // Like execute(), but a constraint violation comes back as its code instead of an exception
  // (the claim's INSERT expects SQLITE_CONSTRAINT_PRIMARYKEY). Other failures throw.
  StepResult try_execute(const std::string& sql, std::initializer_list<Value> params) {
    return run(sql, params.begin(), params.size(), true);
  }

  // Runs a query; read its rows with Rows::next(). Parameters are copied, so temporaries may
  // be passed. Throws StoreError.
  Rows query(const std::string& sql, std::initializer_list<Value> params = {}) {
    return query(sql, params.begin(), params.size());
  }
  Rows query(const std::string& sql, const std::vector<Value>& params) {
    return query(sql, params.data(), params.size());
  }

  // True while a transaction is open on the connection (BEGIN without COMMIT / ROLLBACK).
  bool in_transaction() const noexcept {
    return sqlite3_get_autocommit(db_) == 0;
  }
  // True once a failure left the connection unfit for reuse; the pool then closes it.
  bool broken() const noexcept {
    return broken_;
  }
  sqlite3* native() const noexcept {
    return db_;
  }
  const std::string& path() const noexcept {
    return path_;
  }

  // The StoreError for `rc` from a call on this connection; marks the connection broken when
  // the code says it should not be reused.
  StoreError error(std::string_view context, int rc) {
    StoreError e = detail::make_error(context, db_, rc, path_);
    if (is_fatal_to_connection(static_cast<int>(e.diagnostics().code))) broken_ = true;
    return e;
  }

 private:
  friend class Rows;

  static std::string abbreviated(std::string_view sql) {
    return sql.size() > 60 ? std::string(sql.substr(0, 57)) + "..." : std::string(sql);
  }

  // A prepared statement for `sql`: the cached one, or a one-off (owned) one when the cached
  // statement is still in use by an unfinished Rows.
  sqlite3_stmt* prepare(const std::string& sql, bool& owned) {
    auto it = cache_.find(sql);
    if (it != cache_.end() && sqlite3_stmt_busy(it->second) == 0) {
      owned = false;
      return it->second;
    }
    sqlite3_stmt* stmt = nullptr;
    const char* tail = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size() + 1),
                                      SQLITE_PREPARE_PERSISTENT, &stmt, &tail);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(stmt);
      throw error(fmt::format("preparing \"{}\"", abbreviated(sql)), rc);
    }
    if (stmt == nullptr) {
      throw InvalidArgument(fmt::format("idem::sqlite: \"{}\" holds no statement", sql));
    }
    if (tail != nullptr &&
        std::string_view(tail).find_first_not_of(" \t\r\n;") != std::string_view::npos) {
      sqlite3_finalize(stmt);
      throw InvalidArgument(
          fmt::format("idem::sqlite: \"{}\" holds more than one statement; use exec() for scripts",
                      abbreviated(sql)));
    }
    if (it == cache_.end()) {
      cache_.emplace(sql, stmt);
      owned = false;
    } else {
      owned = true;
    }
    return stmt;
  }

  void bind(sqlite3_stmt* stmt, const Value* params, std::size_t n, bool copy) {
    const int expected = sqlite3_bind_parameter_count(stmt);
    if (static_cast<std::size_t>(expected) != n) {
      throw InvalidArgument(
          fmt::format("idem::sqlite: the statement takes {} parameters, got {}", expected, n));
    }
    // SQLITE_TRANSIENT is the documented "copy it" destructor, (void(*)(void*))-1.
    const sqlite3_destructor_type lifetime = copy ? SQLITE_TRANSIENT : SQLITE_STATIC;
    for (std::size_t i = 0; i < n; ++i) {
      const int index = static_cast<int>(i + 1);
      const Value& v = params[i];
      int rc = SQLITE_OK;
      switch (v.kind()) {
        case Value::Kind::null:
          rc = sqlite3_bind_null(stmt, index);
          break;
        case Value::Kind::integer:
          rc = sqlite3_bind_int64(stmt, index, v.integer());
          break;
        case Value::Kind::real:
          rc = sqlite3_bind_double(stmt, index, v.real());
          break;
        case Value::Kind::text:
          rc = sqlite3_bind_text64(stmt, index, v.bytes().data(), v.bytes().size(), lifetime,
                                   SQLITE_UTF8);
          break;
        case Value::Kind::blob:
          // A zero-length blob needs a non-null pointer, or SQLite stores NULL.
          rc = sqlite3_bind_blob64(stmt, index, v.bytes().empty() ? "" : v.bytes().data(),
                                   v.bytes().size(), lifetime);
          break;
      }
      if (rc != SQLITE_OK) {
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
        throw error("binding a parameter", rc);
      }
    }
  }

  StepResult run(const std::string& sql, const Value* params, std::size_t n,
                 bool constraint_as_value) {
    bool owned = false;
    sqlite3_stmt* stmt = prepare(sql, owned);
    Rows guard(this, stmt, owned);  // resets (or finalizes) the statement on every path
    bind(stmt, params, n, false);
    int rc = SQLITE_ROW;
    while (rc == SQLITE_ROW)
      rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) return {SQLITE_OK, sqlite3_changes(db_)};
    if (constraint_as_value && is_constraint(rc)) {
      const int extended = sqlite3_extended_errcode(db_);
      return {is_constraint(extended) ? extended : rc, 0};
    }
    throw error(fmt::format("statement \"{}\"", abbreviated(sql)), rc);
  }

  Rows query(const std::string& sql, const Value* params, std::size_t n) {
    bool owned = false;
    sqlite3_stmt* stmt = prepare(sql, owned);
    Rows rows(this, stmt, owned);
    bind(stmt, params, n, true);
    return rows;
  }

  void close() noexcept {
    for (auto& [sql, stmt] : cache_)
      sqlite3_finalize(stmt);
    cache_.clear();
    if (owned_ && db_ != nullptr) sqlite3_close_v2(db_);
    db_ = nullptr;
  }

  std::string path_;
  sqlite3* db_ = nullptr;
  bool owned_;
  bool broken_ = false;
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

inline bool Rows::next() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw connection_->error("reading rows", rc);
}

}  // namespace idem::sqlite
