#pragma once
// idem::mysql::Connection: one MYSQL* with its prepared statements, or one of yours, borrowed.
//
// - Values travel only as bound parameters (Param) of prepared statements (execute/select); SQL
// text
//   with no values goes through query() (BEGIN, COMMIT, DDL).
// - Statements are prepared once per connection and cached by their SQL text. After a
//   reconnect the cache is empty and each statement is prepared again on first use.
// - The session is left as the server set it up (no SET of time_zone, sql_mode, ...): idem's
//   SQL takes its times from UTC_TIMESTAMP(3), so the caller's own NOW() and DEFAULT
//   CURRENT_TIMESTAMP on the same connection mean what they mean on any other.
// - Connection(MYSQL*) borrows a handle of the caller's: it is never closed, reconnected or
//   reconfigured, and nothing is left on it. Its statements travel as SQL text with every
//   value written as a hexadecimal literal (X'...', read byte for byte whatever the
//   connection's character set or sql_mode), because a prepared statement cached on a handle
//   idem does not own would outlive the caller's next mysql_close() or mysql_change_user().
// - MYSQL_OPT_RECONNECT is never turned on: a silent reconnect in the middle of a transaction
//   would break its atomicity. A lost connection is marked broken(); the pool replaces it.
// - Results are rows of typed cells (Row, Cell: NULL, integer, text, time).
// - Not thread-safe: one thread uses a Connection at a time (the pool hands it out).
// - Works with MariaDB Connector/C and Oracle's libmysqlclient (my_bool vs bool).

#include <mysql.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/mysql/connection_params.hpp"
#include "idem/mysql/detail/bind.hpp"
#include "idem/mysql/detail/connect.hpp"
#include "idem/mysql/detail/driver_init.hpp"
#include "idem/mysql/detail/server_features.hpp"
#include "idem/mysql/detail/statement_cache.hpp"
#include "idem/mysql/detail/statement_run.hpp"
#include "idem/mysql/detail/text_protocol.hpp"
#include "idem/mysql/errors.hpp"
#include "idem/mysql/param.hpp"
#include "idem/mysql/row.hpp"

namespace idem::mysql {

class Connection {
 public:
  explicit Connection(ConnectionParams params) : params_(std::move(params)) { connect(); }
  // Borrows the caller's open handle (see the header comment); the caller keeps owning it.
  explicit Connection(MYSQL* borrowed) : mysql_(borrowed), borrowed_(true) {
    if (borrowed == nullptr) throw InvalidArgument("idem::mysql::Connection: the handle is null");
    detail::thread_init();
    returning_ = detail::server_has_returning(mysql_);
  }
  ~Connection() {
    if (!borrowed_) close();
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs SQL text that carries no values. Throws StoreError.
  void query(std::string_view sql) {
    noting_loss([&] {
      if (mysql_real_query(mysql_, sql.data(), static_cast<unsigned long>(sql.size())) != 0)
        throw error_from(mysql_, "query");
      // Drain any result so the connection stays usable.
      while (true) {
        if (MYSQL_RES* res = mysql_store_result(mysql_)) mysql_free_result(res);
        const int next = mysql_next_result(mysql_);
        if (next > 0) throw error_from(mysql_, "query");
        if (next != 0) break;
      }
    });
  }

  // Executes a prepared statement; returns the affected rows. Throws StoreError.
  std::uint64_t execute(const std::string& sql, std::initializer_list<Param> params) {
    return execute(sql, params.begin(), params.size());
  }
  std::uint64_t execute(const std::string& sql, const std::vector<Param>& params) {
    return execute(sql, params.data(), params.size());
  }

  // Executes a prepared query and returns every row. Throws StoreError.
  std::vector<Row> select(const std::string& sql, std::initializer_list<Param> params) {
    return select(sql, params.begin(), params.size());
  }
  std::vector<Row> select(const std::string& sql, const std::vector<Param>& params) {
    return select(sql, params.data(), params.size());
  }

  // True once a failure made the connection unusable; the pool then opens a new one.
  bool broken() const noexcept { return mysql_ == nullptr || broken_; }
  void mark_broken() noexcept { broken_ = true; }

  // Nothing is sent on a connection known to be lost: its next user opens a new one.
  void require_usable() const {
    if (broken()) {
      throw StoreError(
          "idem::mysql: the connection is broken; take another (from the pool, or a new handle)",
          true, Diagnostics{code::server_gone, "HY000", "connection marked broken", false});
    }
  }

  // Closes and opens the connection again; every cached statement will be prepared anew.
  void reconnect() {
    if (borrowed_) throw UsageError("idem::mysql::Connection: a borrowed handle is not reopened");
    close();
    connect();
  }

  // A round trip to check the connection; marks it broken and returns false when it fails.
  bool ping() noexcept {
    if (broken()) return false;
    if (mysql_ping(mysql_) != 0) {
      broken_ = true;
      return false;
    }
    return true;
  }

  // True while a transaction is open on this connection (the server's status flag).
  bool in_transaction() const noexcept {
    return mysql_ != nullptr && (mysql_->server_status & SERVER_STATUS_IN_TRANS) != 0;
  }

  // Whether a statement outside a transaction commits on its own (the server's status flag,
  // known without a round trip).
  bool autocommit() const noexcept {
    return mysql_ != nullptr && (mysql_->server_status & SERVER_STATUS_AUTOCOMMIT) != 0;
  }

  // Begins a transaction (what with_transaction does). On one of idem's connections by turning
  // autocommit off, once: it stays off between transactions, so each later transaction begins
  // with its first statement and costs no START TRANSACTION round trip. restore_autocommit()
  // (the pool's acquire, for anything but with_transaction) turns it back on. On a borrowed
  // handle, whose session stays the caller's: START TRANSACTION. Throws StoreError.
  void begin_transaction() {
    if (borrowed_) return query("START TRANSACTION");
    if (!autocommit()) return;  // off already: the next statement begins the transaction
    set_autocommit(false);
    autocommit_off_ = true;
  }
  // Turns autocommit back on where begin_transaction turned it off (a round trip only then).
  void restore_autocommit() {
    if (!autocommit_off_) return;
    set_autocommit(true);
    autocommit_off_ = false;
  }

  // Whether the server runs INSERT ... RETURNING (MariaDB 10.5 and later): a claim then gets
  // its row back from the INSERT itself instead of reading it in a second round trip.
  bool supports_returning() const noexcept { return returning_; }

  // Whether this session's writes replicate through Galera (wsrep_on, read once when the
  // connection opens; always false on servers without RETURNING, which never need to know,
  // and on a borrowed handle, whose bound store never claims in batches).
  // A multi-row INSERT ... RETURNING that loses a certification conflict there can leave the
  // client waiting for the rest of its answer until read_timeout, so batch claims read back.
  bool in_galera_cluster() const noexcept { return galera_; }

  // The server's id for this connection (what KILL CONNECTION takes).
  unsigned long id() const noexcept { return mysql_ ? mysql_thread_id(mysql_) : 0; }
  MYSQL* native() noexcept { return mysql_; }
  const ConnectionParams& params() const noexcept { return params_; }
  bool borrowed() const noexcept { return borrowed_; }

 private:
  void connect() {
    detail::library_init();
    detail::thread_init();
    broken_ = false;
    autocommit_off_ = false;  // a new session starts as the server sets it up
    const detail::ConnectTarget to(params_);
    mysql_ = mysql_init(nullptr);
    if (mysql_ == nullptr) throw StoreError("idem::mysql: mysql_init failed (out of memory)", true);
    detail::set_connect_options(mysql_, params_);
    if (mysql_real_connect(mysql_, to.host, to.user, to.password, to.database, to.port, to.socket,
                           0) == nullptr) {
      const StoreError e = detail::connect_error(mysql_, params_);
      mysql_close(mysql_);
      mysql_ = nullptr;
      throw e;
    }
    try {
      returning_ = detail::server_has_returning(mysql_);
      galera_ = returning_ && detail::in_galera_cluster(mysql_);
    } catch (...) {
      close();  // a constructor that throws runs no destructor
      throw;
    }
  }

  void close() noexcept {
    statements_.clear();
    if (mysql_ != nullptr) mysql_close(mysql_);
    mysql_ = nullptr;
  }

  void set_autocommit(bool on) {
    require_usable();
    noting_loss([&] {
      if (mysql_autocommit(mysql_, on) != 0) throw error_from(mysql_, "autocommit");
    });
  }

  // Runs f; a StoreError that says the connection was lost marks it broken on its way out
  // (the one place that rule lives: the layers below only throw).
  template <class F>
  std::invoke_result_t<F&> noting_loss(F&& f) {
    try {
      return f();
    } catch (const StoreError& e) {
      if (detail::breaks_connection(e)) broken_ = true;
      throw;
    }
  }

  // Binds and executes, as detail::StatementRun says.
  detail::Prepared& run(const std::string& sql, const Param* params, std::size_t n) {
    detail::StatementRun steps(sql, params, n, param_binds_);
    for (;;) {
      detail::Prepared& p = statements_.get(mysql_, sql);
      steps.bind(p.stmt);
      const int rc = mysql_stmt_execute(p.stmt);
      switch (steps.executed(rc, mysql_stmt_errno(p.stmt))) {
        case detail::StatementRun::Next::done:
          return p;
        case detail::StatementRun::Next::prepare_again:
          statements_.forget(sql);
          break;
        case detail::StatementRun::Next::fail:
          throw error_from(p.stmt, "execute");
      }
    }
  }

  std::uint64_t execute(const std::string& sql, const Param* params, std::size_t n) {
    require_usable();
    return noting_loss([&] {
      if (borrowed_) {
        if (MYSQL_RES* res = detail::send_text(mysql_, sql, params, n)) mysql_free_result(res);
        return static_cast<std::uint64_t>(mysql_affected_rows(mysql_));
      }
      MYSQL_STMT* stmt = run(sql, params, n).stmt;
      const auto affected = static_cast<std::uint64_t>(mysql_stmt_affected_rows(stmt));
      mysql_stmt_free_result(stmt);
      return affected;
    });
  }

  std::vector<Row> select(const std::string& sql, const Param* params, std::size_t n) {
    require_usable();
    return noting_loss([&] {
      if (borrowed_) {
        MYSQL_RES* res = detail::send_text(mysql_, sql, params, n);
        return res == nullptr ? std::vector<Row>{} : detail::fetch_text_rows(mysql_, res);
      }
      detail::Prepared& p = run(sql, params, n);
      MYSQL_STMT* stmt = p.stmt;
      struct FreeResult {
        MYSQL_STMT* s;
        ~FreeResult() { mysql_stmt_free_result(s); }
      } free_result{stmt};
      if (mysql_stmt_store_result(stmt) != 0) {
        StoreError e = error_from(stmt, "store_result");
        if (detail::reset_after_failed_result(e.diagnostics().code) && mysql_stmt_reset(stmt) != 0)
          broken_ = true;
        throw e;
      }
      return results_.fetch_all(stmt, detail::StatementCache::columns(p));
    });
  }

  ConnectionParams params_;  // unused when borrowed
  MYSQL* mysql_ = nullptr;
  bool borrowed_ = false;
  bool broken_ = false;
  bool returning_ = false;
  bool galera_ = false;
  bool autocommit_off_ = false;  // by begin_transaction, on a session opened with autocommit on
  detail::StatementCache statements_;
  detail::ParamBinds param_binds_;  // scratch reused across calls
  detail::ResultBinds results_;
};

}  // namespace idem::mysql
