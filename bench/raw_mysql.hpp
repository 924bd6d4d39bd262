#pragma once
// The raw baseline for MySQL / MariaDB: the bare C API (mysql_stmt_*), one connection per
// thread, statements prepared once and re-executed. No pool, no retries, no row decoding:
// the physical floor the library is compared with.

#include <mysql.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common.hpp"

namespace bench {

constexpr unsigned er_dup_entry = 1062;
constexpr unsigned er_lock_deadlock = 1213;

class RawConn {
 public:
  explicit RawConn(const Config& config) {
    mysql_thread_init();
    m_ = mysql_init(nullptr);
    if (m_ == nullptr) throw std::runtime_error("mysql_init failed");
    mysql_options(m_, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (mysql_real_connect(m_, "localhost", config.user.c_str(), config.password.c_str(),
                           config.database.c_str(), 0, config.socket.c_str(), 0) == nullptr) {
      const std::string e = mysql_error(m_);
      mysql_close(m_);
      throw std::runtime_error("raw connect to " + config.socket + ": " + e);
    }
  }
  ~RawConn() {
    if (m_ != nullptr) mysql_close(m_);
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  void query(const std::string& sql) {
    if (mysql_real_query(m_, sql.data(), sql.size()) != 0) {
      throw std::runtime_error(fmt::format("raw query failed ({}): {}: {}", mysql_errno(m_),
                                           mysql_error(m_), sql.substr(0, 80)));
    }
    if (MYSQL_RES* r = mysql_store_result(m_)) mysql_free_result(r);
  }

  MYSQL* native() { return m_; }

 private:
  MYSQL* m_ = nullptr;
};

// One prepared statement with its parameter slots; the caller sets the slots' values and
// executes. Results, if any, are fetched into fixed buffers and only counted.
class RawStmt {
 public:
  struct Slot {
    enum Kind { text, blob, int64, null } kind = text;
    std::string str;
    long long num = 0;
    unsigned long length = 0;
  };

  RawStmt(RawConn& conn, const std::string& sql, std::vector<Slot::Kind> kinds)
      : stmt_(mysql_stmt_init(conn.native())), slots_(kinds.size()), binds_(kinds.size()) {
    if (stmt_ == nullptr) throw std::runtime_error("mysql_stmt_init failed");
    if (mysql_stmt_prepare(stmt_, sql.data(), sql.size()) != 0) {
      const std::string e = mysql_stmt_error(stmt_);
      mysql_stmt_close(stmt_);
      throw std::runtime_error("raw prepare: " + e + ": " + sql.substr(0, 80));
    }
    // A statement that changed under the benchmark would read past the binds.
    if (mysql_stmt_param_count(stmt_) != kinds.size()) {
      const unsigned long takes = mysql_stmt_param_count(stmt_);
      mysql_stmt_close(stmt_);
      throw std::runtime_error(
          fmt::format("raw prepare: the statement takes {} parameters, {} given: {}", takes,
                      kinds.size(), sql.substr(0, 80)));
    }
    for (std::size_t i = 0; i < kinds.size(); ++i)
      slots_[i].kind = kinds[i];
  }
  ~RawStmt() { mysql_stmt_close(stmt_); }
  RawStmt(const RawStmt&) = delete;
  RawStmt& operator=(const RawStmt&) = delete;

  Slot& operator[](std::size_t i) { return slots_[i]; }

  // Executes; returns the affected rows, or throws. `dup_ok`: a duplicate-key error returns
  // -1 instead of throwing.
  long long execute(bool dup_ok = false) {
    bind();
    if (run() != 0) {
      if (dup_ok && mysql_stmt_errno(stmt_) == er_dup_entry) return -1;
      throw std::runtime_error(fmt::format("raw execute failed ({}): {}", mysql_stmt_errno(stmt_),
                                           mysql_stmt_error(stmt_)));
    }
    const auto n = static_cast<long long>(mysql_stmt_affected_rows(stmt_));
    if (mysql_stmt_field_count(stmt_) > 0) fetch_all();
    return n;
  }

  // Executes a statement that returns rows; returns how many (-1 on a duplicate key with dup_ok).
  long long query(bool dup_ok = false) {
    bind();
    if (run() != 0) {
      if (dup_ok && mysql_stmt_errno(stmt_) == er_dup_entry) return -1;
      throw std::runtime_error(fmt::format("raw execute failed ({}): {}", mysql_stmt_errno(stmt_),
                                           mysql_stmt_error(stmt_)));
    }
    return fetch_all();
  }

 private:
  // mysql_stmt_execute, again after a deadlock as any application (and the library) would: an
  // autocommit statement that lost a deadlock was rolled back whole. InnoDB's gap locks on the
  // record table's secondary indexes make rare deadlocks between single-row statements.
  int run() {
    for (int attempt = 1;; ++attempt) {
      const int rc = mysql_stmt_execute(stmt_);
      if (rc == 0 || mysql_stmt_errno(stmt_) != er_lock_deadlock || attempt == 8) return rc;
    }
  }

  void bind() {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      MYSQL_BIND& b = binds_[i];
      b = MYSQL_BIND{};
      if (s.kind == Slot::null) {
        b.buffer_type = MYSQL_TYPE_NULL;
      } else if (s.kind == Slot::int64) {
        b.buffer_type = MYSQL_TYPE_LONGLONG;
        b.buffer = &s.num;
      } else {
        b.buffer_type = s.kind == Slot::text ? MYSQL_TYPE_STRING : MYSQL_TYPE_BLOB;
        s.length = static_cast<unsigned long>(s.str.size());
        b.buffer = s.str.data();
        b.buffer_length = s.length;
        b.length = &s.length;
      }
    }
    if (!binds_.empty() && mysql_stmt_bind_param(stmt_, binds_.data())) {
      throw std::runtime_error(std::string("raw bind: ") + mysql_stmt_error(stmt_));
    }
  }

  long long fetch_all() {
    if (mysql_stmt_store_result(stmt_) != 0) {
      throw std::runtime_error(std::string("raw store_result: ") + mysql_stmt_error(stmt_));
    }
    const unsigned columns = mysql_stmt_field_count(stmt_);
    if (out_.size() != columns) {
      out_.assign(columns, MYSQL_BIND{});
      buffers_.resize(columns);
      lengths_.resize(columns);
      for (unsigned c = 0; c < columns; ++c) {
        out_[c].buffer_type = MYSQL_TYPE_STRING;
        out_[c].buffer = buffers_[c].data();
        out_[c].buffer_length = buffers_[c].size();
        out_[c].length = &lengths_[c];
      }
    }
    if (columns > 0 && mysql_stmt_bind_result(stmt_, out_.data())) {
      throw std::runtime_error(std::string("raw bind_result: ") + mysql_stmt_error(stmt_));
    }
    long long rows = 0;
    while (true) {
      const int rc = mysql_stmt_fetch(stmt_);
      if (rc == MYSQL_NO_DATA) break;
      if (rc == 1) throw std::runtime_error(std::string("raw fetch: ") + mysql_stmt_error(stmt_));
      ++rows;  // MYSQL_DATA_TRUNCATED is fine: only the first bytes are kept
    }
    mysql_stmt_free_result(stmt_);
    return rows;
  }

 public:
  // Column c of the last row fetched by query() (its first 256 bytes); empty for NULL.
  std::string_view column(unsigned c) const {
    return {buffers_[c].data(), std::min<std::size_t>(lengths_[c], buffers_[c].size())};
  }

 private:
  MYSQL_STMT* stmt_;
  std::vector<Slot> slots_;
  std::vector<MYSQL_BIND> binds_;
  std::vector<MYSQL_BIND> out_;
  std::vector<std::array<char, 256>> buffers_;
  std::vector<unsigned long> lengths_;
};

}  // namespace bench
