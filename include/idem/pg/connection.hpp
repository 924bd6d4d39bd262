#pragma once
// idem::pg::Connection: one libpq connection, idem's own (opened from ConnectionParams) or the
// service's PGconn* (borrowed: idem never closes it, and changes no setting of its session).
// Parameters travel as text. On idem's own connections each statement is prepared once (its
// first run costs one more round trip) and then run by name, so the server neither parses nor
// plans it again; on the service's connection every statement goes out with PQexecParams, which
// leaves no prepared statement behind in a session that is not idem's. A connection whose socket
// broke is marked broken and reopened by the pool.

#include <libpq-fe.h>
#include <poll.h>

#include <cerrno>

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/errors.hpp"
#include "idem/pg/connection_params.hpp"
#include "idem/pg/detail/connect.hpp"
#include "idem/pg/detail/statements.hpp"
#include "idem/pg/errors.hpp"
#include "idem/pg/param.hpp"
#include "idem/pg/result.hpp"

namespace idem::pg {

class Connection {
 public:
  // Opens a connection. Throws StoreError (retryable: the server may be starting or failing
  // over) when it cannot.
  explicit Connection(ConnectionParams params) : params_(std::move(params)), owned_(true) {
    conn_ = open(params_);
  }
  // The caller's connection, borrowed: never closed, reset or reconfigured here.
  explicit Connection(PGconn* borrowed) noexcept : conn_(borrowed), owned_(false) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    if (owned_ && conn_ != nullptr) PQfinish(conn_);
  }

  // Runs one statement with `params` ($1, $2, ... in its text). Throws StoreError with
  // `context` in its message; a connection that broke is marked so.
  Result exec(const std::string& sql, const std::vector<Param>& params,
              std::string_view context = "statement") {
    detail::Values v(params);
    if (const std::string* name = prepared(sql, v.count(), context)) {
      return checked(Result(PQexecPrepared(conn_, name->c_str(), v.count(), v.values(), v.lengths(),
                                           nullptr, 0)),
                     context);
    }
    return checked(Result(PQexecParams(conn_, sql.c_str(), v.count(), nullptr, v.values(),
                                       v.lengths(), nullptr, 0)),
                   context);
  }

  // Runs one statement and then COMMIT in a single round trip (libpq's pipeline mode), inside
  // the transaction open on the connection. The COMMIT runs only when the statement succeeded:
  // a failed statement leaves the transaction failed, for the caller to roll back, and is
  // thrown as StoreError; so is a failed COMMIT. Returns the statement's result.
  Result exec_and_commit(const std::string& sql, const std::vector<Param>& params,
                         std::string_view context = "statement") {
    detail::Values v(params);
    const std::string* name = prepared(sql, v.count(), context);  // not inside the pipeline
    if (PQenterPipelineMode(conn_) != 1) {
      Result r = exec(sql, params, context);
      query("COMMIT", context);
      return r;
    }
    const bool sent =
        (name != nullptr ? PQsendQueryPrepared(conn_, name->c_str(), v.count(), v.values(),
                                               v.lengths(), nullptr, 0)
                         : PQsendQueryParams(conn_, sql.c_str(), v.count(), nullptr, v.values(),
                                             v.lengths(), nullptr, 0)) == 1 &&
        PQsendQueryParams(conn_, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 0) == 1 &&
        PQpipelineSync(conn_) == 1;
    // The statement's result, the COMMIT's (PGRES_PIPELINE_ABORTED after a failed statement),
    // then the sync's; a NULL ends each command's results.
    std::vector<Result> results;
    for (int nulls = 0; sent && nulls < 2;) {
      PGresult* r = PQgetResult(conn_);
      if (r == nullptr) {
        ++nulls;
        continue;
      }
      nulls = 0;
      if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
        PQclear(r);
        break;
      }
      results.emplace_back(r);
    }
    if (PQexitPipelineMode(conn_) != 1 || results.size() != 2) {
      broken_ = true;  // results unread or missing: the session's state is unknown
      if (!results.empty()) checked(std::move(results.front()), context);
      throw make_error(context, sqlstate::connection_failure, PQerrorMessage(conn_), false);
    }
    Result r = checked(std::move(results[0]), context);
    checked(std::move(results[1]), context);
    return r;
  }

  // The rows `sql` changed.
  std::uint64_t execute(const std::string& sql, const std::vector<Param>& params,
                        std::string_view context = "statement") {
    return exec(sql, params, context).affected();
  }
  // Runs `sql` without parameters (it may hold several statements: BEGIN, DDL, COMMIT) and
  // answers the last one's result (its PQcmdStatus says what a COMMIT did).
  Result query(const std::string& sql, std::string_view context = "statement") {
    return checked(Result(PQexec(conn_, sql.c_str())), context);
  }

  // Whether a transaction is open on the connection (or failed and waits for its ROLLBACK).
  bool in_transaction() const noexcept {
    const PGTransactionStatusType s = PQtransactionStatus(conn_);
    return s == PQTRANS_INTRANS || s == PQTRANS_INERROR;
  }
  bool broken() const noexcept { return broken_ || PQstatus(conn_) != CONNECTION_OK; }
  void mark_broken() noexcept { broken_ = true; }
  // A round trip: false when the server does not answer.
  bool ping() noexcept {
    try {
      query("SELECT 1", "ping");
      return true;
    } catch (const StoreError&) {
      return false;
    }
  }
  // Closes an own connection and opens a new one (a failover's new primary, a restarted
  // server). Throws StoreError when it cannot.
  void reconnect() {
    if (!owned_) throw UsageError("idem::pg::Connection: a borrowed connection is not reopened");
    PGconn* fresh = open(params_);
    PQfinish(conn_);
    conn_ = fresh;
    broken_ = false;
    statements_.clear();
  }

  PGconn* native() const noexcept { return conn_; }
  // Whether the connection is the service's (see Connection(PGconn*)).
  bool borrowed() const noexcept { return !owned_; }
  // The server process serving the connection (what pg_terminate_backend takes).
  unsigned long id() const noexcept { return static_cast<unsigned long>(PQbackendPID(conn_)); }

 private:
  static PGconn* open(const ConnectionParams& p) {
    PGconn* conn = detail::start_connecting(p);
    const std::chrono::seconds timeout = detail::effective_connect_timeout(conn);
    if (const Connecting outcome = finish_connecting(conn, timeout); outcome != Connecting::made) {
      StoreError e = detail::connect_error(conn, outcome == Connecting::timed_out, timeout);
      PQfinish(conn);
      throw e;
    }
    if (const std::string setup = detail::session_setup_sql(p); !setup.empty()) {
      PGresult* set = PQexec(conn, setup.c_str());
      if (PQresultStatus(set) != PGRES_COMMAND_OK) {
        StoreError e = error_from(conn, set, "connect");
        PQclear(set);
        PQfinish(conn);
        throw e;
      }
      PQclear(set);
    }
    return conn;
  }

  enum class Connecting { made, failed, timed_out };

  // Drives PQconnectPoll until the connection is made, has failed or is out of time.
  static Connecting finish_connecting(PGconn* conn, std::chrono::seconds timeout) {
    using steady = std::chrono::steady_clock;
    const auto deadline = steady::now() + timeout;
    PostgresPollingStatusType state = PGRES_POLLING_WRITING;
    while (state != PGRES_POLLING_OK) {
      if (state == PGRES_POLLING_FAILED || PQstatus(conn) == CONNECTION_BAD) {
        return Connecting::failed;
      }
      pollfd fd{PQsocket(conn),
                static_cast<short>(state == PGRES_POLLING_READING ? POLLIN : POLLOUT), 0};
      int wait_ms = -1;
      if (timeout > std::chrono::seconds::zero()) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
        if (left <= std::chrono::milliseconds::zero()) return Connecting::timed_out;
        wait_ms = static_cast<int>(left.count());
      }
      const int ready = ::poll(&fd, 1, wait_ms);
      if (ready == 0) return Connecting::timed_out;
      if (ready < 0 && errno != EINTR) return Connecting::failed;
      state = PQconnectPoll(conn);
    }
    return Connecting::made;
  }

  // The name `sql` is prepared under on this connection, preparing it first; nullptr on a
  // borrowed connection, and once the cache is full.
  const std::string* prepared(const std::string& sql, int params, std::string_view context) {
    if (!owned_ || !params_.prepared_statements) return nullptr;
    if (const std::string* name = statements_.find(sql)) return name;
    if (statements_.full()) return nullptr;
    std::string name = statements_.next_name();
    checked(Result(PQprepare(conn_, name.c_str(), sql.c_str(), params, nullptr)), context);
    return &statements_.prepared(sql, std::move(name));
  }

  Result checked(Result r, std::string_view context) {
    return detail::checked(conn_, std::move(r), context, broken_);
  }

  ConnectionParams params_;
  PGconn* conn_ = nullptr;
  bool owned_;
  bool broken_ = false;
  detail::PreparedNames statements_;
};

}  // namespace idem::pg
