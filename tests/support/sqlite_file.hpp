#pragma once
// Shared set-up of the SQLite tests: a temporary directory per test, threads that start
// together, and a place for worker threads to report errors (Catch2 is not thread-safe).
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <idem/sqlite.hpp>

#include "temp_dir.hpp"
#include "threads.hpp"

namespace idem_test {

// The first integer of the first row of a query on the store's file.
inline std::int64_t scalar(idem::sqlite::Store& store, const std::string& sql,
                           std::initializer_list<idem::sqlite::Value> params = {}) {
  auto c = store.pool().acquire();
  auto rows = c->query(sql, params);
  return rows.next() ? rows.integer(0) : -1;
}

inline std::int64_t count(idem::sqlite::Store& store, const std::string& where = "1") {
  return scalar(store, "SELECT COUNT(*) FROM " + store.table() + " WHERE " + where);
}

// A business table with no unique key on purpose: a double execution shows up as two rows.
inline void create_business_table(idem::sqlite::Store& store, const std::string& name = "biz") {
  auto c = store.pool().acquire();
  c->exec("CREATE TABLE IF NOT EXISTS " + name +
          " (id INTEGER PRIMARY KEY, trade_no TEXT NOT NULL, pid INTEGER NOT NULL DEFAULT 0)");
}

// A handle the application opened itself (not through idem).
struct RawConnection {
  sqlite3* db = nullptr;
  explicit RawConnection(const std::filesystem::path& path) {
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK)
      throw std::runtime_error("cannot open " + path.string());
    sqlite3_busy_timeout(db, 5000);
  }
  ~RawConnection() {
    if (db != nullptr) sqlite3_close(db);
  }
  void exec(const std::string& sql) {
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
      throw std::runtime_error(sqlite3_errmsg(db));
  }
};

inline void insert_business_row(sqlite3* db, const std::string& trade_no) {
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "INSERT INTO biz (trade_no) VALUES (?)", -1, &stmt, nullptr);
  sqlite3_bind_text(stmt, 1, trade_no.c_str(), -1, SQLITE_TRANSIENT);
  const int rc = sqlite3_step(stmt);
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) throw std::runtime_error(sqlite3_errmsg(db));
}

// A time point as the SQLite table stores it: milliseconds since the epoch.
inline std::int64_t ms(idem::TimePoint t) {
  return t.time_since_epoch().count();
}

}  // namespace idem_test
