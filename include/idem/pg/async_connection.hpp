#pragma once
// idem::pg::AsyncConnection: one libpq connection driven by a coroutine, without blocking the
// thread. It uses libpq's asynchronous API (PQconnectStartParams / PQconnectPoll,
// PQsendQueryPrepared / PQsendQueryParams, PQflush, PQconsumeInput, PQgetResult) on a
// non-blocking socket, and waits for the socket's readiness on the calling coroutine's Asio
// executor in between: the loop thread serves other work during every round trip and lock
// wait.
//
// The rules of idem::pg::Connection hold here too (detail/connect.hpp and
// detail/statements.hpp are both's): parameters as text, each statement prepared once per
// connection unless ConnectionParams::prepared_statements is false, the session's
// statement_timeout set when it opens, never a silent reconnect (a lost connection is marked
// broken and the pool replaces it). In addition:
// - One statement at a time: the pool hands a connection to one coroutine at a time.
// - An operation interrupted by cancellation leaves the protocol in the middle of a statement:
//   the connection is marked broken and closed. The server may still run the statement;
//   idem's stores account for that (docs/async.md).
// - What still blocks: libpq resolves a host name of conninfo synchronously (give hostaddr,
//   an IP address, or a unix socket directory).
//
// AsyncConnection(PGconn*) borrows the service's own connection, as Connection(PGconn*) does:
// never closed, reset or reconfigured, no statement prepared on it (its session keeps none of
// idem's). libpq's non-blocking mode is turned on for each call and given back after it, so the
// service's own blocking calls on the handle work as before. A call cut midway (cancelled, or
// the connection lost) leaves the handle in the middle of the protocol, and in non-blocking mode:
// the service must close it.

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/async/detail/socket_wait.hpp"
#include "idem/async/net.hpp"
#include "idem/errors.hpp"
#include "idem/pg/connection_params.hpp"
#include "idem/pg/detail/connect.hpp"
#include "idem/pg/detail/statements.hpp"
#include "idem/pg/errors.hpp"
#include "idem/pg/param.hpp"
#include "idem/pg/result.hpp"

namespace idem::pg {

namespace net = idem::async::net;

class AsyncConnection {
 public:
  // Connects without blocking the thread (but see the note above on host names). Throws
  // StoreError (retryable: the server may be starting or failing over) when it cannot.
  static net::awaitable<std::unique_ptr<AsyncConnection>> open(ConnectionParams params) {
    std::unique_ptr<AsyncConnection> c(new AsyncConnection(std::move(params)));
    co_await c->connect();
    co_return c;
  }

  // The service's connection, borrowed for as long as this object lives (see the header
  // comment). Throws InvalidArgument for a null handle.
  explicit AsyncConnection(PGconn* borrowed) : conn_(borrowed), borrowed_(true) {
    if (borrowed == nullptr) {
      throw InvalidArgument("idem::pg::AsyncConnection: the connection is null");
    }
  }

  ~AsyncConnection() {
    if (conn_ != nullptr && !borrowed_) PQfinish(conn_);
  }
  AsyncConnection(const AsyncConnection&) = delete;
  AsyncConnection& operator=(const AsyncConnection&) = delete;

  // Runs one statement with `params` ($1, $2, ... in its text). Throws StoreError with
  // `context` in its message; a connection that broke is marked so. `sql` must outlive the
  // call (co_await it in the expression that made it).
  net::awaitable<Result> exec(const std::string& sql, std::vector<Param> params,
                              std::string_view context = "statement") {
    require_usable(context);
    const NonBlocking mode(*this);
    const detail::Values v(params);
    const std::string* name = co_await prepared(sql, v.count(), context);
    const int sent = name != nullptr ? PQsendQueryPrepared(conn_, name->c_str(), v.count(),
                                                           v.values(), v.lengths(), nullptr, 0)
                                     : PQsendQueryParams(conn_, sql.c_str(), v.count(), nullptr,
                                                         v.values(), v.lengths(), nullptr, 0);
    if (sent != 1) throw lost(context);
    co_return checked(co_await result(context), context);
  }

  // As Connection::exec_and_commit: `sql` with `params` and then COMMIT, in one round trip
  // (libpq's pipeline mode), inside the transaction open on the connection. The COMMIT runs
  // only when the statement succeeded; a failure of either is thrown as StoreError (a failed
  // statement leaves the transaction failed, for the caller to roll back).
  net::awaitable<void> exec_and_commit(const std::string& sql, std::vector<Param> params,
                                       std::string_view context = "statement") {
    require_usable(context);
    const NonBlocking mode(*this);
    const detail::Values v(params);
    const std::string* name = co_await prepared(sql, v.count(), context);  // not in the pipeline
    if (PQenterPipelineMode(conn_) != 1) throw lost(context);
    const int sent = name != nullptr ? PQsendQueryPrepared(conn_, name->c_str(), v.count(),
                                                           v.values(), v.lengths(), nullptr, 0)
                                     : PQsendQueryParams(conn_, sql.c_str(), v.count(), nullptr,
                                                         v.values(), v.lengths(), nullptr, 0);
    if (sent != 1 ||
        PQsendQueryParams(conn_, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 0) != 1 ||
        PQpipelineSync(conn_) != 1) {
      throw lost(context);
    }
    // The statement's result, the COMMIT's (PGRES_PIPELINE_ABORTED after a failed statement):
    // the first failure is the one thrown.
    checked(co_await result(context, 2), context);
  }

  // The rows `sql` changed.
  net::awaitable<std::uint64_t> execute(const std::string& sql, std::vector<Param> params,
                                        std::string_view context = "statement") {
    co_return (co_await exec(sql, std::move(params), context)).affected();
  }

  // Runs `sql` without parameters (it may hold several statements: BEGIN, DDL, COMMIT).
  net::awaitable<Result> query(std::string sql, std::string_view context = "statement") {
    require_usable(context);
    const NonBlocking mode(*this);
    if (PQsendQuery(conn_, sql.c_str()) != 1) throw lost(context);
    co_return checked(co_await result(context), context);
  }

  // A round trip: false (and the connection marked broken) when the server does not answer.
  net::awaitable<bool> ping() {
    if (broken()) co_return false;
    try {
      co_await query("SELECT 1", "ping");
      co_return true;
    } catch (const StoreError&) {
      broken_ = true;
      co_return false;
    }
  }

  // Whether a transaction is open on the connection (or failed and waits for its ROLLBACK).
  bool in_transaction() const noexcept {
    const PGTransactionStatusType s = PQtransactionStatus(conn_);
    return s == PQTRANS_INTRANS || s == PQTRANS_INERROR;
  }
  // Also while a command is under way, or after one whose coroutine was destroyed midway (its
  // results still to come: a statement sent now would wait behind it).
  bool broken() const noexcept { return broken_ || !at_rest(); }
  void mark_broken() noexcept { broken_ = true; }
  // Whether the connection is the service's (AsyncConnection(PGconn*)).
  bool borrowed() const noexcept { return borrowed_; }
  PGconn* native() const noexcept { return conn_; }
  // The server process serving the connection (what pg_terminate_backend takes).
  unsigned long id() const noexcept { return static_cast<unsigned long>(PQbackendPID(conn_)); }
  const ConnectionParams& params() const noexcept { return params_; }

 private:
  using SocketWait = idem::async::detail::SocketWait;

  explicit AsyncConnection(ConnectionParams params) : params_(std::move(params)) {}

  // The connection is up and no command is under way on it.
  bool at_rest() const noexcept {
    return PQstatus(conn_) == CONNECTION_OK && PQtransactionStatus(conn_) != PQTRANS_ACTIVE;
  }

  // libpq's non-blocking mode for one call on a borrowed handle, given back when the call
  // ends with the protocol at rest (also after the server refused the statement; nothing is
  // left to send then, so giving it back cannot block). idem's own connections stay
  // non-blocking.
  class NonBlocking {
   public:
    explicit NonBlocking(AsyncConnection& c)
        : c_(c.borrowed_ && PQisnonblocking(c.conn_) == 0 ? &c : nullptr) {
      if (c_ != nullptr && PQsetnonblocking(c_->conn_, 1) != 0) throw c_->lost("statement");
    }
    ~NonBlocking() {
      if (c_ != nullptr && c_->at_rest()) PQsetnonblocking(c_->conn_, 0);
    }
    NonBlocking(const NonBlocking&) = delete;
    NonBlocking& operator=(const NonBlocking&) = delete;

   private:
    AsyncConnection* c_;
  };

  net::awaitable<void> connect() {
    conn_ = detail::start_connecting(params_);
    const std::chrono::seconds timeout = detail::effective_connect_timeout(conn_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    // PQconnectPoll's first wait is for a writable socket; the socket may change between
    // calls (another address or host of conninfo), so each wait asks for it anew.
    for (PostgresPollingStatusType state = PGRES_POLLING_WRITING; state != PGRES_POLLING_OK;) {
      if (state == PGRES_POLLING_FAILED || PQstatus(conn_) == CONNECTION_BAD) {
        throw detail::connect_error(conn_, false, timeout);
      }
      std::optional<std::chrono::milliseconds> left;
      if (timeout > std::chrono::seconds::zero()) {
        left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (*left <= std::chrono::milliseconds::zero()) {
          throw detail::connect_error(conn_, true, timeout);
        }
      }
      const SocketWait what =
          state == PGRES_POLLING_READING ? SocketWait::wait_read : SocketWait::wait_write;
      if (!co_await idem::async::detail::wait_for_socket(PQsocket(conn_), what, left)) {
        throw detail::connect_error(conn_, true, timeout);
      }
      state = PQconnectPoll(conn_);
    }
    // Sends never block the thread: what the socket does not take stays in libpq's buffer,
    // and result() flushes it as the socket allows.
    if (PQsetnonblocking(conn_, 1) != 0) throw detail::connect_error(conn_, false, timeout);
    if (const std::string setup = detail::session_setup_sql(params_); !setup.empty()) {
      co_await query(setup, "connect");
    }
  }

  // The name `sql` is prepared under on this connection, preparing it first; nullptr when
  // statements are sent with their text.
  net::awaitable<const std::string*> prepared(const std::string& sql, int params,
                                              std::string_view context) {
    if (borrowed_ || !params_.prepared_statements) co_return nullptr;
    if (const std::string* name = statements_.find(sql)) co_return name;
    if (statements_.full()) co_return nullptr;
    std::string name = statements_.next_name();
    if (PQsendPrepare(conn_, name.c_str(), sql.c_str(), params, nullptr) != 1) {
      throw lost(context);
    }
    checked(co_await result(context), context);
    co_return &statements_.prepared(sql, std::move(name));
  }

  // Sends what libpq holds and collects the command's results: the first failure, or else
  // the last result (as PQexec answers). `pipelined`: the number of commands sent in pipeline
  // mode, whose results are read up to the sync that ends them (one result each, or the
  // connection is lost).
  net::awaitable<Result> result(std::string_view context, int pipelined = 0) {
    try {
      for (int flushed = PQflush(conn_); flushed != 0; flushed = PQflush(conn_)) {
        if (flushed < 0) throw lost(context);
        co_await idem::async::detail::wait_for_socket(PQsocket(conn_), SocketWait::wait_write,
                                                      std::nullopt);
      }
      const bool pipeline = pipelined > 0;
      std::optional<Result> kept;
      int results = 0;
      for (int ends = 0;;) {
        while (PQisBusy(conn_) == 1) {
          co_await idem::async::detail::wait_for_socket(PQsocket(conn_), SocketWait::wait_read,
                                                        std::nullopt);
          if (PQconsumeInput(conn_) != 1) throw lost(context);
        }
        PGresult* r = PQgetResult(conn_);
        if (r == nullptr) {
          // The end of one command's results; in a pipeline, two in a row: no sync is coming.
          if (!pipeline) break;
          if (++ends == 2) throw lost(context);
          continue;
        }
        ends = 0;
        if (pipeline && PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
          PQclear(r);
          if (results != pipelined || PQexitPipelineMode(conn_) != 1) throw lost(context);
          break;
        }
        ++results;
        if (kept && !succeeded(*kept)) {
          PQclear(r);  // the first failure is the one to report
        } else {
          kept.emplace(r);
        }
      }
      if (!kept) throw lost(context);
      co_return std::move(*kept);
    } catch (...) {
      // Cancelled, or the socket failed, in the middle of a command: the protocol's state is
      // lost with it.
      broken_ = true;
      throw;
    }
  }

  static bool succeeded(const Result& r) noexcept {  // (PGRES_PIPELINE_ABORTED is not)
    const ExecStatusType status = PQresultStatus(r.native());
    return status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
  }

  void require_usable(std::string_view context) const {
    if (broken()) {
      throw make_error(context, sqlstate::connection_failure,
                       "the connection is broken; take another from the pool", false);
    }
  }

  // libpq lost the connection: its own text, as a lost connection's error.
  StoreError lost(std::string_view context) {
    broken_ = true;
    return make_error(context, sqlstate::connection_failure, PQerrorMessage(conn_), false);
  }

  Result checked(Result r, std::string_view context) {
    return detail::checked(conn_, std::move(r), context, broken_);
  }

  ConnectionParams params_;
  PGconn* conn_ = nullptr;
  bool borrowed_ = false;
  bool broken_ = false;
  detail::PreparedNames statements_;
};

}  // namespace idem::pg
