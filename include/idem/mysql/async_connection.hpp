#pragma once
// idem::mysql::AsyncConnection: one MariaDB connection driven by a coroutine, without blocking
// the thread. It runs MariaDB Connector/C's non-blocking calls (MYSQL_OPT_NONBLOCK, the
// *_start / *_cont pairs): each call goes as far as the socket allows, and the coroutine waits
// for the socket's readiness on its Asio executor in between, so the loop thread serves other
// work during every round trip and lock wait.
//
// The rules of idem::mysql::Connection hold here too: values travel only as parameters of
// prepared statements, cached per connection; the session is left as the server set it up;
// never a silent reconnect (a lost connection is marked broken and the pool replaces it).
// In addition:
// - One operation at a time: Connector/C cannot start a call while another is suspended (it
//   would answer with the suspended call's result), and the pool hands a connection to one
//   coroutine at a time.
// - An operation interrupted by cancellation leaves the protocol in the middle of a
//   statement: the connection is marked broken and closed without a round trip. The server
//   may still run the statement; idem's stores account for that (docs/async.md).
// - AsyncConnection(MYSQL*) borrows the service's own open handle, as Connection(MYSQL*) does
//   (docs/mysql.md, "Your own connections"): never closed, reconnected or reconfigured, and
//   its statements travel as SQL text with every value a hexadecimal literal. It turns the
//   handle's MYSQL_OPT_NONBLOCK on, which leaves the service's own blocking calls on it as
//   they were, and gives the socket its blocking mode back after each call. A borrowed handle
//   whose call was cancelled midway is broken(): the service closes it.
// - What still blocks: the DNS lookup of ConnectionParams::host (give an IP address or a unix
//   socket) and closing a healthy connection (one small write).
// Needs MariaDB Connector/C (Debian's libmysqlclient is it); Oracle's libmysqlclient has a
// different non-blocking API.

#include <fcntl.h>
#include <mysql.h>
#include <sys/socket.h>

#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/async/detail/socket_wait.hpp"
#include "idem/async/net.hpp"
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

#if !defined(MARIADB_PACKAGE_VERSION)
#error "idem::mysql::AsyncConnection needs MariaDB Connector/C (its non-blocking API)"
#endif

namespace idem::mysql {

namespace net = idem::async::net;

namespace detail {

// (At namespace scope: GCC 12 cannot compile a class local to a coroutine.)

// Frees a statement's stored result on every way out.
struct FreeResult {
  MYSQL_STMT* stmt;
  ~FreeResult() { mysql_stmt_free_result(stmt); }
};

}  // namespace detail

class AsyncConnection {
 public:
  // Connects without blocking the thread (but see the DNS note above). Throws StoreError.
  static net::awaitable<std::unique_ptr<AsyncConnection>> open(ConnectionParams params) {
    std::unique_ptr<AsyncConnection> c(new AsyncConnection(std::move(params)));
    co_await c->connect();
    co_return c;
  }

  // Borrows the service's open handle (see the header comment); the service keeps owning it.
  // Throws InvalidArgument for a null handle, StoreError when Connector/C cannot give it a
  // non-blocking context (out of memory, or a call of an earlier borrow was cut midway and
  // left the handle broken).
  explicit AsyncConnection(MYSQL* borrowed) : mysql_(borrowed), borrowed_(true) {
    if (borrowed == nullptr) {
      throw InvalidArgument("idem::mysql::AsyncConnection: the handle is null");
    }
    detail::thread_init();
    if (mysql_options(mysql_, MYSQL_OPT_NONBLOCK, nullptr) != 0) {
      throw StoreError(
          "idem::mysql: the handle cannot be made non-blocking (out of memory, or an earlier "
          "call on it was cut midway: close it)",
          false);
    }
    returning_ = detail::server_has_returning(mysql_);
    socket_flags_ = ::fcntl(mysql_get_socket(mysql_), F_GETFL);
  }

  ~AsyncConnection() {
    if (!borrowed_) close();
  }
  AsyncConnection(const AsyncConnection&) = delete;
  AsyncConnection& operator=(const AsyncConnection&) = delete;

  // Runs SQL text that carries no values, draining every result. Throws StoreError.
  net::awaitable<void> query(std::string sql) {
    require_usable();
    try {
      int rc = 0;
      co_await drive([&] { return mysql_real_query_start(&rc, mysql_, sql.data(), sql.size()); },
                     [&](int s) { return mysql_real_query_cont(&rc, mysql_, s); });
      if (rc != 0) throw error_from(mysql_, "query");
      while (true) {
        MYSQL_RES* res = nullptr;
        co_await drive([&] { return mysql_store_result_start(&res, mysql_); },
                       [&](int s) { return mysql_store_result_cont(&res, mysql_, s); });
        if (res != nullptr) mysql_free_result(res);
        int next = 0;
        co_await drive([&] { return mysql_next_result_start(&next, mysql_); },
                       [&](int s) { return mysql_next_result_cont(&next, mysql_, s); });
        if (next > 0) throw error_from(mysql_, "query");
        if (next != 0) break;
      }
    } catch (const StoreError& e) {
      note_loss(e);
      throw;
    }
  }

  // Executes a prepared statement; returns the affected rows. Throws StoreError.
  net::awaitable<std::uint64_t> execute(const std::string& sql, std::vector<Param> params) {
    require_usable();
    try {
      if (borrowed_) {
        MYSQL_RES* res = co_await send_text(sql, params);
        if (res != nullptr) mysql_free_result(res);
        co_return static_cast<std::uint64_t>(mysql_affected_rows(mysql_));
      }
      MYSQL_STMT* stmt = (co_await run(sql, params))->stmt;
      const auto affected = static_cast<std::uint64_t>(mysql_stmt_affected_rows(stmt));
      mysql_stmt_free_result(stmt);
      co_return affected;
    } catch (const StoreError& e) {
      note_loss(e);
      throw;
    }
  }

  // Executes a prepared query and returns every row. Throws StoreError.
  net::awaitable<std::vector<Row>> select(const std::string& sql, std::vector<Param> params) {
    require_usable();
    try {
      if (borrowed_) {
        MYSQL_RES* res = co_await send_text(sql, params);
        if (res == nullptr) co_return std::vector<Row>{};
        co_return detail::fetch_text_rows(mysql_, res);
      }
      detail::Prepared& p = *co_await run(sql, params);
      MYSQL_STMT* stmt = p.stmt;
      const detail::FreeResult free_result{stmt};
      int rc = 0;
      co_await drive([&] { return mysql_stmt_store_result_start(&rc, stmt); },
                     [&](int s) { return mysql_stmt_store_result_cont(&rc, stmt, s); });
      if (rc != 0) {
        StoreError e = error_from(stmt, "store_result");
        if (detail::reset_after_failed_result(e.diagnostics().code)) {
          my_bool failed = 0;
          co_await drive([&] { return mysql_stmt_reset_start(&failed, stmt); },
                         [&](int s) { return mysql_stmt_reset_cont(&failed, stmt, s); });
          if (failed) broken_ = true;
        }
        throw e;
      }
      co_return results_.fetch_all(stmt, detail::StatementCache::columns(p));
    } catch (const StoreError& e) {
      note_loss(e);
      throw;
    }
  }

  // A round trip to check the connection; marks it broken and answers false when it fails.
  net::awaitable<bool> ping() {
    if (broken()) co_return false;
    int rc = 0;
    co_await drive([&] { return mysql_ping_start(&rc, mysql_); },
                   [&](int s) { return mysql_ping_cont(&rc, mysql_, s); });
    if (rc != 0) broken_ = true;
    co_return rc == 0;
  }

  // As Connection::begin_transaction / restore_autocommit: on a borrowed handle, whose session
  // stays the service's, START TRANSACTION.
  net::awaitable<void> begin_transaction() {
    if (borrowed_) {
      co_await query("START TRANSACTION");
      co_return;
    }
    if (!autocommit()) co_return;
    co_await set_autocommit(false);
    autocommit_off_ = true;
  }
  net::awaitable<void> restore_autocommit() {
    if (!autocommit_off_) co_return;
    co_await set_autocommit(true);
    autocommit_off_ = false;
  }

  // Also while a call is under way, or after one whose coroutine was destroyed midway.
  bool broken() const noexcept { return mysql_ == nullptr || broken_ || mid_call_; }
  void mark_broken() noexcept { broken_ = true; }
  void require_usable() const {
    if (broken()) {
      throw StoreError("idem::mysql: the connection is broken; take another from the pool", true,
                       Diagnostics{code::server_gone, "HY000", "connection marked broken", false});
    }
  }
  bool in_transaction() const noexcept {
    return mysql_ != nullptr && (mysql_->server_status & SERVER_STATUS_IN_TRANS) != 0;
  }
  bool autocommit() const noexcept {
    return mysql_ != nullptr && (mysql_->server_status & SERVER_STATUS_AUTOCOMMIT) != 0;
  }
  bool supports_returning() const noexcept { return returning_; }
  bool in_galera_cluster() const noexcept { return galera_; }
  bool borrowed() const noexcept { return borrowed_; }
  unsigned long id() const noexcept { return mysql_ ? mysql_thread_id(mysql_) : 0; }
  MYSQL* native() noexcept { return mysql_; }
  const ConnectionParams& params() const noexcept { return params_; }

 private:
  explicit AsyncConnection(ConnectionParams params) : params_(std::move(params)) {}

  net::awaitable<void> connect() {
    detail::library_init();
    detail::thread_init();
    const detail::ConnectTarget to(params_);
    mysql_ = mysql_init(nullptr);
    if (mysql_ == nullptr) throw StoreError("idem::mysql: mysql_init failed (out of memory)", true);
    // Before any *_start call: without it Connector/C has no context to suspend in.
    mysql_options(mysql_, MYSQL_OPT_NONBLOCK, nullptr);
    detail::set_connect_options(mysql_, params_);
    MYSQL* connected = nullptr;
    co_await drive(
        [&] {
          return mysql_real_connect_start(&connected, mysql_, to.host, to.user, to.password,
                                          to.database, to.port, to.socket, 0);
        },
        [&](int s) { return mysql_real_connect_cont(&connected, mysql_, s); });
    if (connected == nullptr) throw detail::connect_error(mysql_, params_);
    returning_ = detail::server_has_returning(mysql_);
    if (returning_) {
      const std::string wsrep = co_await session_variable("wsrep_on");
      galera_ = wsrep == "ON";
    }
  }

  // As detail::session_variable, without blocking.
  net::awaitable<std::string> session_variable(std::string_view name) {
    const std::string sql = fmt::format("SHOW SESSION VARIABLES LIKE '{}'", name);
    MYSQL_RES* res = co_await query_and_store(sql, "SHOW VARIABLES");
    if (res == nullptr) throw error_from(mysql_, "SHOW VARIABLES");
    std::string value;
    if (MYSQL_ROW row = mysql_fetch_row(res); row != nullptr && row[1] != nullptr) value = row[1];
    mysql_free_result(res);
    co_return value;
  }

  net::awaitable<void> set_autocommit(bool on) {
    require_usable();
    try {
      my_bool failed = 0;
      co_await drive([&] { return mysql_autocommit_start(&failed, mysql_, on); },
                     [&](int s) { return mysql_autocommit_cont(&failed, mysql_, s); });
      if (failed) throw error_from(mysql_, "autocommit");
    } catch (const StoreError& e) {
      note_loss(e);
      throw;
    }
  }

  // A borrowed handle's statement, sent as text (detail::text_statement); its stored result,
  // null for a statement without one.
  net::awaitable<MYSQL_RES*> send_text(const std::string& sql, const std::vector<Param>& params) {
    const std::string text = detail::text_statement(mysql_, sql, params.data(), params.size());
    co_return co_await query_and_store(text, "query");
  }

  // One SQL text and its stored result, null for a statement without one (`what` names the
  // call in errors).
  net::awaitable<MYSQL_RES*> query_and_store(const std::string& text, std::string_view what) {
    int rc = 0;
    co_await drive([&] { return mysql_real_query_start(&rc, mysql_, text.data(), text.size()); },
                   [&](int s) { return mysql_real_query_cont(&rc, mysql_, s); });
    if (rc != 0) throw error_from(mysql_, what);
    MYSQL_RES* res = nullptr;
    co_await drive([&] { return mysql_store_result_start(&res, mysql_); },
                   [&](int s) { return mysql_store_result_cont(&res, mysql_, s); });
    if (res == nullptr && mysql_field_count(mysql_) != 0) throw error_from(mysql_, "store_result");
    co_return res;
  }

  // Binds and executes, as detail::StatementRun says.
  net::awaitable<detail::Prepared*> run(const std::string& sql, const std::vector<Param>& params) {
    detail::StatementRun steps(sql, params.data(), params.size(), param_binds_);
    for (;;) {
      detail::Prepared* p = co_await prepared(sql);
      MYSQL_STMT* stmt = p->stmt;
      steps.bind(stmt);
      int rc = 0;
      co_await drive([&] { return mysql_stmt_execute_start(&rc, stmt); },
                     [&](int s) { return mysql_stmt_execute_cont(&rc, stmt, s); });
      switch (steps.executed(rc, mysql_stmt_errno(stmt))) {
        case detail::StatementRun::Next::done:
          co_return p;
        case detail::StatementRun::Next::prepare_again:
          statements_.forget(sql);
          break;
        case detail::StatementRun::Next::fail:
          throw error_from(stmt, "execute");
      }
    }
  }

  net::awaitable<detail::Prepared*> prepared(const std::string& sql) {
    if (detail::Prepared* p = statements_.find(sql)) co_return p;
    MYSQL_STMT* stmt = mysql_stmt_init(mysql_);
    if (stmt == nullptr) throw error_from(mysql_, "mysql_stmt_init");
    int rc = 0;
    try {
      co_await drive([&] { return mysql_stmt_prepare_start(&rc, stmt, sql.data(), sql.size()); },
                     [&](int s) { return mysql_stmt_prepare_cont(&rc, stmt, s); });
    } catch (...) {
      mysql_stmt_close(stmt);
      throw;
    }
    if (rc != 0) {
      StoreError e = error_from(stmt, "prepare");
      mysql_stmt_close(stmt);
      throw e;
    }
    co_return &statements_.adopt(sql, stmt);
  }

  // Runs one non-blocking call to its end: start() goes as far as it can and answers what it
  // waits for (0: done); cont(ready) goes on once the socket is ready or the timeout came.
  // mid_call_ stays set when the coroutine is destroyed without being resumed (its loop went
  // away mid-call): Connector/C's call is suspended halfway, and nothing may be sent on the
  // handle any more, not even a blocking ROLLBACK.
  template <class Start, class Cont>
  net::awaitable<void> drive(Start start, Cont cont) {
    mid_call_ = true;
    bool waited = false;
    for (int status = start(); status != 0; waited = true)
      status = cont(co_await wait(status));
    mid_call_ = false;
    if (waited && borrowed_) give_back_socket_mode();
  }

  // Asio's waits make a socket non-blocking; a borrowed handle's gets its mode back after each
  // call that waited, while the handle is surely the service's open one (Connector/C answers no
  // socket once it closed its own).
  void give_back_socket_mode() noexcept {
    const int fd = mysql_get_socket(mysql_);
    const bool was_blocking = socket_flags_ >= 0 && (socket_flags_ & O_NONBLOCK) == 0;
    if (was_blocking && fd >= 0) ::fcntl(fd, F_SETFL, socket_flags_);
  }

  // Waits on the calling coroutine's executor for what the driver asked.
  net::awaitable<int> wait(int status) {
    const bool write = (status & MYSQL_WAIT_WRITE) != 0;
    std::optional<std::chrono::milliseconds> timeout;
    if ((status & MYSQL_WAIT_TIMEOUT) != 0) {
      timeout = std::chrono::milliseconds(mysql_get_timeout_value_ms(mysql_));
    }
    try {
      const bool ready = co_await idem::async::detail::wait_for_socket(
          mysql_get_socket(mysql_),
          write ? idem::async::detail::SocketWait::wait_write
                : idem::async::detail::SocketWait::wait_read,
          timeout);
      co_return ready ? (write ? MYSQL_WAIT_WRITE : MYSQL_WAIT_READ) : MYSQL_WAIT_TIMEOUT;
    } catch (...) {
      // Cancelled (or the loop is going away) in the middle of a call: the protocol state is
      // lost with it.
      broken_ = true;
      throw;
    }
  }

  void note_loss(const StoreError& e) noexcept {
    if (detail::breaks_connection(e)) broken_ = true;
  }

  void close() noexcept {
    if (mysql_ == nullptr) return;
    // A broken connection may be in the middle of a call: shut the socket down so that the
    // goodbyes below fail at once instead of waiting for a peer that may not answer.
    if (broken()) ::shutdown(mysql_get_socket(mysql_), SHUT_RDWR);
    statements_.clear();
    mysql_close(mysql_);
    mysql_ = nullptr;
  }

  ConnectionParams params_;
  MYSQL* mysql_ = nullptr;
  bool borrowed_ = false;
  bool broken_ = false;
  bool mid_call_ = false;
  bool returning_ = false;
  bool galera_ = false;
  bool autocommit_off_ = false;
  int socket_flags_ = -1;  // a borrowed handle's socket's file status flags, as it came
  detail::StatementCache statements_;
  detail::ParamBinds param_binds_;
  detail::ResultBinds results_;
};

}  // namespace idem::mysql
