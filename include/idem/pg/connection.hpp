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

#include <charconv>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/errors.hpp"
#include "idem/pg/connection_params.hpp"
#include "idem/pg/errors.hpp"

namespace idem::pg {

// A statement parameter, sent as text. It owns its text, so a temporary string binds safely.
class Param {
 public:
  Param(std::nullptr_t) noexcept {}                              // NOLINT: SQL NULL
  Param(std::string_view text) : text_(text), null_(false) {}    // NOLINT
  Param(const std::string& text) : text_(text), null_(false) {}  // NOLINT
  Param(const char* text) : text_(text), null_(false) {}         // NOLINT
  template <std::integral I>
  requires(!std::same_as<I, bool>) Param(I value)
      : text_(std::to_string(value)), null_(false) {}  // NOLINT
  // The integer columns (retryable) take 1 and 0.
  Param(bool value) : text_(value ? "1" : "0"), null_(false) {}  // NOLINT

  // A time as milliseconds since the epoch (the statements turn them back into timestamptz).
  static Param time(TimePoint t) { return Param(t.time_since_epoch().count()); }
  static Param time_or_null(const std::optional<TimePoint>& t) {
    return t ? time(*t) : Param(nullptr);
  }
  // Optional text columns are NULL when empty, so that "" and NULL never both mean "none".
  static Param text_or_null(std::string_view text) {
    return text.empty() ? Param(nullptr) : Param(text);
  }

  bool is_null() const noexcept { return null_; }
  const std::string& text() const noexcept { return text_; }

 private:
  std::string text_;
  bool null_ = true;
};

// A command's result: its rows as text, or the rows it changed.
class Result {
 public:
  explicit Result(PGresult* result) noexcept : result_(result) {}
  Result(Result&& other) noexcept : result_(std::exchange(other.result_, nullptr)) {}
  Result& operator=(Result&& other) noexcept {
    std::swap(result_, other.result_);
    return *this;
  }
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;
  ~Result() { PQclear(result_); }

  int rows() const noexcept { return PQntuples(result_); }
  int columns() const noexcept { return PQnfields(result_); }
  bool is_null(int row, int column) const noexcept {
    return PQgetisnull(result_, row, column) != 0;
  }
  std::string_view text(int row, int column) const noexcept {
    return {PQgetvalue(result_, row, column),
            static_cast<std::size_t>(PQgetlength(result_, row, column))};
  }
  // An integer column's value; nullopt for NULL or anything but an integer.
  std::optional<std::int64_t> integer(int row, int column) const noexcept {
    if (is_null(row, column)) return std::nullopt;
    const std::string_view t = text(row, column);
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc{} || end != t.data() + t.size()) return std::nullopt;
    return v;
  }
  // The rows an INSERT, UPDATE or DELETE wrote.
  std::uint64_t affected() const noexcept {
    const std::string_view t = PQcmdTuples(result_);
    std::uint64_t n = 0;
    std::from_chars(t.data(), t.data() + t.size(), n);
    return n;
  }
  PGresult* native() const noexcept { return result_; }

 private:
  PGresult* result_;
};

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
    Values v(params);
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
    Values v(params);
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
  // Runs `sql` without parameters (it may hold several statements: BEGIN, DDL, COMMIT).
  void query(const std::string& sql, std::string_view context = "statement") {
    checked(Result(PQexec(conn_, sql.c_str())), context);
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
    statements_.clear();  // a new session has none of the old one's
  }

  PGconn* native() const noexcept { return conn_; }
  // Whether the connection is the service's (see Connection(PGconn*)).
  bool borrowed() const noexcept { return !owned_; }
  // The server process serving the connection (what pg_terminate_backend takes).
  unsigned long id() const noexcept { return static_cast<unsigned long>(PQbackendPID(conn_)); }

 private:
  // The parameters as libpq takes them: text pointers (NULL for SQL NULL) and lengths.
  class Values {
   public:
    explicit Values(const std::vector<Param>& params) {
      values_.reserve(params.size());
      lengths_.reserve(params.size());
      for (const Param& p : params) {
        values_.push_back(p.is_null() ? nullptr : p.text().c_str());
        lengths_.push_back(static_cast<int>(p.text().size()));
      }
    }
    int count() const noexcept { return static_cast<int>(values_.size()); }
    const char* const* values() const noexcept { return values_.data(); }
    const int* lengths() const noexcept { return lengths_.data(); }

   private:
    std::vector<const char*> values_;
    std::vector<int> lengths_;
  };

  static PGconn* open(const ConnectionParams& p) {
    // conninfo comes last, so that its own settings win (libpq's rule for expand_dbname).
    const std::string default_timeout = std::to_string(p.connect_timeout.count());
    const char* keys[] = {"connect_timeout", "application_name", "client_encoding", "dbname",
                          nullptr};
    const char* values[] = {default_timeout.c_str(), p.application_name.c_str(), "UTF8",
                            p.conninfo.c_str(), nullptr};
    PGconn* conn = PQconnectStartParams(keys, values, 1);
    if (conn == nullptr) {
      throw make_error("connect", sqlstate::connection_failure, "out of memory", false);
    }
    // Before the first byte arrives: libpq prints the server's notices (and the FATAL of a
    // session terminated as it starts) to stderr by default, and a library has no business
    // writing there; every failure that matters reaches the caller as a StoreError.
    PQsetNoticeProcessor(
        conn, [](void*, const char*) {}, nullptr);
    const std::chrono::seconds timeout = effective_connect_timeout(conn);
    if (const Connecting outcome = finish_connecting(conn, timeout); outcome != Connecting::made) {
      StoreError e = make_error(
          "connect", sqlstate::connection_failure,
          outcome == Connecting::timed_out
              ? fmt::format("no connection within connect_timeout ({} s)", timeout.count())
              : std::string(PQerrorMessage(conn)),
          false);
      PQfinish(conn);
      throw e;
    }
    if (p.statement_timeout.count() > 0) {
      PGresult* set = PQexec(
          conn, fmt::format("SET statement_timeout = {}", p.statement_timeout.count()).c_str());
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

  // The connect_timeout in effect (conninfo's own, or ConnectionParams'): libpq applies it
  // only to its blocking connect, so the polling loop below waits that long in all.
  static std::chrono::seconds effective_connect_timeout(PGconn* conn) {
    std::chrono::seconds timeout{0};
    if (PQconninfoOption* options = PQconninfo(conn)) {
      for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
        if (std::string_view(o->keyword) == "connect_timeout" && o->val != nullptr) {
          long long v = 0;
          const std::string_view text(o->val);
          std::from_chars(text.data(), text.data() + text.size(), v);
          timeout = std::chrono::seconds(v);
        }
      }
      PQconninfoFree(options);
    }
    // As libpq: 0 waits forever, and anything shorter than 2 s is 2 s.
    if (timeout > std::chrono::seconds::zero() && timeout < std::chrono::seconds(2)) {
      timeout = std::chrono::seconds(2);
    }
    return timeout;
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
  // borrowed connection, and once the cache is full (statements built per call, such as a
  // service's own through idem::pg::execute, then run unprepared).
  const std::string* prepared(const std::string& sql, int params, std::string_view context) {
    if (!owned_ || !params_.prepared_statements) return nullptr;
    if (const auto it = statements_.find(sql); it != statements_.end()) return &it->second;
    if (statements_.size() >= max_prepared) return nullptr;
    std::string name = fmt::format("idem_{}", statements_.size() + 1);
    checked(Result(PQprepare(conn_, name.c_str(), sql.c_str(), params, nullptr)), context);
    return &statements_.emplace(sql, std::move(name)).first->second;
  }

  Result checked(Result r, std::string_view context) {
    const ExecStatusType status =
        r.native() != nullptr ? PQresultStatus(r.native()) : PGRES_FATAL_ERROR;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return r;
    StoreError e = error_from(conn_, r.native(), context);
    if (is_connection_lost(e.diagnostics().sqlstate)) broken_ = true;
    throw e;
  }

  static constexpr std::size_t max_prepared = 256;

  ConnectionParams params_;
  PGconn* conn_ = nullptr;
  bool owned_;
  bool broken_ = false;
  std::unordered_map<std::string, std::string> statements_;  // SQL text -> prepared name
};

}  // namespace idem::pg
