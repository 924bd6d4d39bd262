#pragma once
// idem::mysql::Connection: one MYSQL* with its prepared statements, or one of yours, borrowed.
//
// - Values travel only as bound parameters of prepared statements (execute/select); SQL text
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
// - Not thread-safe: one thread uses a Connection at a time (the pool hands it out).
// - Works with MariaDB Connector/C and Oracle's libmysqlclient (my_bool vs bool).

#include <mysql.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/errors.hpp"
#include "idem/mysql/connection_params.hpp"
#include "idem/mysql/errors.hpp"

namespace idem::mysql {

// One value bound to a `?` placeholder.
class Param {
 public:
  enum class Kind { null, int64, uint64, text, blob, time };

  Param(std::nullptr_t) noexcept : kind_(Kind::null) {}  // NOLINT: implicit by design
  template <std::integral T>
  Param(T v) noexcept {  // NOLINT
    if constexpr (std::is_signed_v<T> || std::is_same_v<T, bool>) {
      kind_ = Kind::int64;
      i64_ = static_cast<std::int64_t>(v);
    } else {
      kind_ = Kind::uint64;
      u64_ = static_cast<std::uint64_t>(v);
    }
  }
  Param(std::string_view s) noexcept : kind_(Kind::text), text_(s) {}    // NOLINT
  Param(const std::string& s) noexcept : kind_(Kind::text), text_(s) {}  // NOLINT
  Param(const char* s) noexcept : kind_(Kind::text), text_(s) {}         // NOLINT
  static Param blob(std::string_view bytes) noexcept {
    Param p(bytes);
    p.kind_ = Kind::blob;
    return p;
  }

  // A DATETIME value in UTC, to the millisecond (what idem's time columns hold).
  static Param time(TimePoint t) noexcept {
    Param p(nullptr);
    p.kind_ = Kind::time;
    p.i64_ = static_cast<std::int64_t>(t.time_since_epoch().count());
    return p;
  }

  Kind kind() const noexcept { return kind_; }
  std::int64_t int64() const noexcept { return i64_; }
  std::uint64_t uint64() const noexcept { return u64_; }
  std::string_view text() const noexcept { return text_; }

 private:
  friend class Connection;
  Kind kind_ = Kind::null;
  std::int64_t i64_ = 0;
  std::uint64_t u64_ = 0;
  std::string_view text_;
  mutable unsigned long length_ = 0;  // MYSQL_BIND points here during execute
  mutable MYSQL_TIME time_{};         // ... and here, for a time
};

// One result row: each column as text (numbers and DATETIMEs as the server formats them), or
// nullopt for SQL NULL.
using Row = std::vector<std::optional<std::string>>;

namespace detail {

// A UTC time as the client library's MYSQL_TIME (a DATETIME to the millisecond).
inline MYSQL_TIME to_mysql_time(TimePoint t) noexcept {
  const auto day = std::chrono::floor<std::chrono::days>(t);
  const std::chrono::year_month_day ymd{day};
  const std::chrono::hh_mm_ss<Duration> tod{t - day};
  MYSQL_TIME m{};
  m.year = static_cast<unsigned>(static_cast<int>(ymd.year()));
  m.month = static_cast<unsigned>(ymd.month());
  m.day = static_cast<unsigned>(ymd.day());
  m.hour = static_cast<unsigned>(tod.hours().count());
  m.minute = static_cast<unsigned>(tod.minutes().count());
  m.second = static_cast<unsigned>(tod.seconds().count());
  m.second_part = static_cast<unsigned long>(tod.subseconds().count()) * 1000;
  m.time_type = MYSQL_TIMESTAMP_DATETIME;
  return m;
}

// my_bool in MariaDB Connector/C and older libmysqlclient, bool in MySQL 8.
using driver_flag = std::remove_pointer_t<decltype(MYSQL_BIND::is_null)>;

inline void library_init() {
  static std::once_flag once;
  static int rc = 0;
  std::call_once(once, [] { rc = mysql_library_init(0, nullptr, nullptr); });
  if (rc != 0) throw StoreError("idem::mysql: mysql_library_init failed", false);
}

// Per-thread driver state: set up before the thread's first connection, freed at thread exit.
inline void thread_init() {
  struct ThreadState {
    ThreadState() { mysql_thread_init(); }
    ~ThreadState() { mysql_thread_end(); }
  };
  thread_local ThreadState state;
  (void)state;
}

}  // namespace detail

class Connection {
 public:
  explicit Connection(ConnectionParams params) : params_(std::move(params)) { connect(); }
  // Borrows the caller's open handle (see the header comment); the caller keeps owning it.
  explicit Connection(MYSQL* borrowed) : mysql_(borrowed), borrowed_(true) {
    if (borrowed == nullptr) throw InvalidArgument("idem::mysql::Connection: the handle is null");
    detail::thread_init();
    returning_ = server_has_returning();
  }
  ~Connection() {
    if (!borrowed_) close();
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs SQL text that carries no values. Throws StoreError.
  void query(std::string_view sql) {
    if (mysql_real_query(mysql_, sql.data(), static_cast<unsigned long>(sql.size())) != 0) {
      throw fail_connection("query");
    }
    // Drain any result so the connection stays usable.
    while (true) {
      if (MYSQL_RES* res = mysql_store_result(mysql_)) mysql_free_result(res);
      const int next = mysql_next_result(mysql_);
      if (next > 0) throw fail_connection("query");
      if (next != 0) break;
    }
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
    mysql_ = mysql_init(nullptr);
    if (mysql_ == nullptr) throw StoreError("idem::mysql: mysql_init failed (out of memory)", true);
    const unsigned connect_timeout = static_cast<unsigned>(params_.connect_timeout.count());
    const unsigned read_timeout = static_cast<unsigned>(params_.read_timeout.count());
    const unsigned write_timeout = static_cast<unsigned>(params_.write_timeout.count());
    mysql_options(mysql_, MYSQL_OPT_CONNECT_TIMEOUT, &connect_timeout);
    mysql_options(mysql_, MYSQL_OPT_READ_TIMEOUT, &read_timeout);
    mysql_options(mysql_, MYSQL_OPT_WRITE_TIMEOUT, &write_timeout);
    mysql_options(mysql_, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    const bool socket = !params_.unix_socket.empty();
    if (mysql_real_connect(mysql_, socket ? "localhost" : params_.host.c_str(),
                           params_.user.c_str(), params_.password.c_str(),
                           params_.database.empty() ? nullptr : params_.database.c_str(),
                           socket ? 0 : params_.port,
                           socket ? params_.unix_socket.c_str() : nullptr, 0) == nullptr) {
      const StoreError e =
          make_error(socket ? fmt::format("connect to {}", params_.unix_socket)
                            : fmt::format("connect to {}:{}", params_.host, params_.port),
                     mysql_errno(mysql_), mysql_sqlstate(mysql_), mysql_error(mysql_));
      mysql_close(mysql_);
      mysql_ = nullptr;
      // Refused logins and unknown databases will not heal by retrying; lost links may.
      throw StoreError(e.what(), is_connection_lost(e.diagnostics().code), e.diagnostics());
    }
    try {
      returning_ = server_has_returning();
      galera_ = returning_ && variable("wsrep_on") == "ON";
    } catch (...) {
      close();  // a constructor that throws runs no destructor
      throw;
    }
  }

  bool server_has_returning() const {
    const char* info = mysql_get_server_info(mysql_);
    return info != nullptr && std::string_view(info).find("MariaDB") != std::string_view::npos &&
           mysql_get_server_version(mysql_) >= 100500;
  }

  // A session variable's value through the text protocol; empty when the server has no such
  // variable (a build without wsrep has no wsrep_on).
  std::string variable(std::string_view name) {
    const std::string sql = fmt::format("SHOW SESSION VARIABLES LIKE '{}'", name);
    if (mysql_real_query(mysql_, sql.data(), static_cast<unsigned long>(sql.size())) != 0) {
      throw fail_connection("SHOW VARIABLES");
    }
    MYSQL_RES* res = mysql_store_result(mysql_);
    if (res == nullptr) throw fail_connection("SHOW VARIABLES");
    std::string value;
    if (MYSQL_ROW row = mysql_fetch_row(res); row != nullptr && row[1] != nullptr) value = row[1];
    mysql_free_result(res);
    return value;
  }

  void close() noexcept {
    for (auto& [sql, prepared] : statements_)
      mysql_stmt_close(prepared.stmt);
    statements_.clear();
    if (mysql_ != nullptr) mysql_close(mysql_);
    mysql_ = nullptr;
  }

  StoreError fail_connection(std::string_view context) {
    const unsigned n = mysql_errno(mysql_);
    if (is_connection_lost(n)) broken_ = true;
    return make_error(context, n, mysql_sqlstate(mysql_), mysql_error(mysql_));
  }

  StoreError fail_statement(MYSQL_STMT* stmt, std::string_view context) {
    const unsigned n = mysql_stmt_errno(stmt);
    if (is_connection_lost(n)) broken_ = true;
    return make_error(context, n, mysql_stmt_sqlstate(stmt), mysql_stmt_error(stmt));
  }

  // A prepared statement and what select() needs to know about its result columns.
  struct Prepared {
    MYSQL_STMT* stmt = nullptr;
    // Per result column: the fraction digits of a DATETIME/TIMESTAMP column (0-6), or
    // not_datetime. Read once from the statement's metadata; empty until then.
    std::vector<unsigned char> datetime_digits;
    bool columns_known = false;
  };
  static constexpr unsigned char not_datetime = 255;

  // Nothing is sent on a connection known to be lost: its next user opens a new one.
  void require_usable() const {
    if (broken()) {
      throw StoreError(
          "idem::mysql: the connection is broken; take another (from the pool, or a new handle)",
          true, Diagnostics{code::server_gone, "HY000", "connection marked broken", false});
    }
  }

  Prepared& prepared(const std::string& sql) {
    require_usable();
    if (auto it = statements_.find(sql); it != statements_.end()) return it->second;
    MYSQL_STMT* stmt = mysql_stmt_init(mysql_);
    if (stmt == nullptr) throw fail_connection("mysql_stmt_init");
    if (mysql_stmt_prepare(stmt, sql.data(), static_cast<unsigned long>(sql.size())) != 0) {
      StoreError e = fail_statement(stmt, "prepare");
      mysql_stmt_close(stmt);
      throw e;
    }
    return statements_.emplace(sql, Prepared{stmt, {}, false}).first->second;
  }

  void forget(const std::string& sql) noexcept {
    if (auto it = statements_.find(sql); it != statements_.end()) {
      mysql_stmt_close(it->second.stmt);
      statements_.erase(it);
    }
  }

  // Binds and executes; re-prepares once when the server says the table changed under it.
  Prepared& run(const std::string& sql, const Param* params, std::size_t n) {
    for (int attempt = 0;; ++attempt) {
      Prepared& p = prepared(sql);
      MYSQL_STMT* stmt = p.stmt;
      if (mysql_stmt_param_count(stmt) != n) {
        throw UsageError(fmt::format("idem::mysql: statement takes {} parameters, {} given: {}",
                                     mysql_stmt_param_count(stmt), n, sql));
      }
      constexpr std::size_t inline_binds = 16;
      std::array<MYSQL_BIND, inline_binds> small{};
      std::vector<MYSQL_BIND> large;
      MYSQL_BIND* binds = small.data();
      if (n > inline_binds) {
        large.resize(n);
        binds = large.data();
      }
      for (std::size_t i = 0; i < n; ++i)
        bind(binds[i], params[i]);
      if (n > 0 && mysql_stmt_bind_param(stmt, binds)) throw fail_statement(stmt, "bind");
      if (mysql_stmt_execute(stmt) == 0) return p;
      constexpr unsigned need_reprepare = 1615;  // ER_NEED_REPREPARE
      if (mysql_stmt_errno(stmt) == need_reprepare && attempt == 0) {
        forget(sql);
        continue;
      }
      throw fail_statement(stmt, "execute");
    }
  }

  static void bind(MYSQL_BIND& b, const Param& p) {
    b = MYSQL_BIND{};
    switch (p.kind_) {
      case Param::Kind::null:
        b.buffer_type = MYSQL_TYPE_NULL;
        break;
      case Param::Kind::int64:
        b.buffer_type = MYSQL_TYPE_LONGLONG;
        b.buffer = const_cast<std::int64_t*>(&p.i64_);
        break;
      case Param::Kind::uint64:
        b.buffer_type = MYSQL_TYPE_LONGLONG;
        b.buffer = const_cast<std::uint64_t*>(&p.u64_);
        b.is_unsigned = 1;
        break;
      case Param::Kind::text:
      case Param::Kind::blob:
        b.buffer_type = p.kind_ == Param::Kind::text ? MYSQL_TYPE_STRING : MYSQL_TYPE_BLOB;
        p.length_ = static_cast<unsigned long>(p.text_.size());
        b.buffer = const_cast<char*>(p.text_.data());
        b.buffer_length = p.length_;
        b.length = &p.length_;
        break;
      case Param::Kind::time:
        p.time_ = detail::to_mysql_time(TimePoint{Duration{p.i64_}});
        b.buffer_type = MYSQL_TYPE_DATETIME;
        b.buffer = &p.time_;
        break;
    }
  }

  // The statement as SQL text with every `?` placeholder replaced by its value as a literal;
  // a `?` inside '...', "..." or `...` is text, not a placeholder (a backslash escapes the
  // next character in quotes unless the session's sql_mode has NO_BACKSLASH_ESCAPES, as the
  // server reads it). Text and blobs become
  // X'<hex>', never a quoted string, so no character set, sql_mode (NO_BACKSLASH_ESCAPES,
  // ANSI_QUOTES) or byte can change them.
  std::string inline_params(const std::string& sql, const Param* params, std::size_t n) const {
    const bool backslash_escapes =
        (mysql_->server_status & SERVER_STATUS_NO_BACKSLASH_ESCAPES) == 0;
    std::string out;
    out.reserve(sql.size() + 32 * n);
    std::size_t placeholders = 0;
    char quote = 0;  // the quote of the literal or identifier being copied, if any
    for (std::size_t i = 0; i < sql.size(); ++i) {
      const char c = sql[i];
      if (quote != 0) {
        out += c;
        if (c == '\\' && backslash_escapes && quote != '`' && i + 1 < sql.size()) {
          out += sql[++i];  // an escaped character, the closing quote included
        } else if (c == quote) {
          quote = 0;  // a doubled quote closes and reopens: the same text either way
        }
        continue;
      }
      if (c == '\'' || c == '"' || c == '`') quote = c;
      if (c != '?') {
        out += c;
        continue;
      }
      if (placeholders++ >= n) continue;  // counted, and refused below
      const Param& p = params[placeholders - 1];
      switch (p.kind_) {
        case Param::Kind::null:
          out += "NULL";
          break;
        case Param::Kind::int64:
          out += fmt::format_int(p.i64_).c_str();
          break;
        case Param::Kind::uint64:
          out += fmt::format_int(p.u64_).c_str();
          break;
        case Param::Kind::text:
        case Param::Kind::blob: {
          constexpr char digits[] = "0123456789ABCDEF";
          out += "X'";
          for (const char byte : p.text_) {
            const auto b = static_cast<unsigned char>(byte);
            out += digits[b >> 4];
            out += digits[b & 0xF];
          }
          out += '\'';
          break;
        }
        case Param::Kind::time:
          out += "TIMESTAMP'";
          out += datetime_text(detail::to_mysql_time(TimePoint{Duration{p.i64_}}), 3);
          out += '\'';
          break;
      }
    }
    if (placeholders != n) {
      throw UsageError(fmt::format("idem::mysql: statement takes {} parameters, {} given: {}",
                                   placeholders, n, sql));
    }
    return out;
  }

  // Sends a statement as text and stores its result (null for a statement without one).
  MYSQL_RES* run_text(const std::string& sql, const Param* params, std::size_t n) {
    require_usable();
    const std::string text = inline_params(sql, params, n);
    if (mysql_real_query(mysql_, text.data(), static_cast<unsigned long>(text.size())) != 0) {
      throw fail_connection("query");
    }
    MYSQL_RES* res = mysql_store_result(mysql_);
    if (res == nullptr && mysql_field_count(mysql_) != 0) throw fail_connection("store_result");
    return res;
  }

  std::uint64_t execute(const std::string& sql, const Param* params, std::size_t n) {
    if (borrowed_) {
      if (MYSQL_RES* res = run_text(sql, params, n)) mysql_free_result(res);
      return static_cast<std::uint64_t>(mysql_affected_rows(mysql_));
    }
    MYSQL_STMT* stmt = run(sql, params, n).stmt;
    const auto affected = static_cast<std::uint64_t>(mysql_stmt_affected_rows(stmt));
    mysql_stmt_free_result(stmt);
    return affected;
  }

  // Which result columns are DATETIME/TIMESTAMP, and their fraction digits: those are fetched
  // as MYSQL_TIME and written out here, because the driver's own conversion to text goes
  // through sprintf, which profiling showed as the largest client cost of a claim.
  const std::vector<unsigned char>& datetime_digits(Prepared& p) {
    if (p.columns_known) return p.datetime_digits;
    p.datetime_digits.clear();
    if (MYSQL_RES* meta = mysql_stmt_result_metadata(p.stmt)) {
      const unsigned n = mysql_num_fields(meta);
      const MYSQL_FIELD* fields = mysql_fetch_fields(meta);
      for (unsigned c = 0; c < n; ++c) {
        const bool dt =
            fields[c].type == MYSQL_TYPE_DATETIME || fields[c].type == MYSQL_TYPE_TIMESTAMP;
        p.datetime_digits.push_back(dt && fields[c].decimals <= 6
                                        ? static_cast<unsigned char>(fields[c].decimals)
                                        : not_datetime);
      }
      mysql_free_result(meta);
    }
    p.columns_known = true;
    return p.datetime_digits;
  }

  // "YYYY-MM-DD HH:MM:SS[.f...]" with `digits` fraction digits: the server's text form.
  static std::string datetime_text(const MYSQL_TIME& t, unsigned digits) {
    char out[26];
    auto put = [&](std::size_t at, unsigned long v, std::size_t width) {
      for (std::size_t i = width; i-- > 0; v /= 10)
        out[at + i] = static_cast<char>('0' + v % 10);
    };
    put(0, t.year, 4);
    out[4] = '-';
    put(5, t.month, 2);
    out[7] = '-';
    put(8, t.day, 2);
    out[10] = ' ';
    put(11, t.hour, 2);
    out[13] = ':';
    put(14, t.minute, 2);
    out[16] = ':';
    put(17, t.second, 2);
    std::size_t size = 19;
    if (digits > 0) {
      unsigned long fraction = t.second_part;
      for (unsigned i = digits; i < 6; ++i)
        fraction /= 10;
      out[19] = '.';
      put(20, fraction, digits);
      size = 20 + digits;
    }
    return std::string(out, size);
  }

  std::vector<Row> select_text(const std::string& sql, const Param* params, std::size_t n) {
    MYSQL_RES* res = run_text(sql, params, n);
    std::vector<Row> rows;
    if (res == nullptr) return rows;
    const unsigned columns = mysql_num_fields(res);
    while (MYSQL_ROW r = mysql_fetch_row(res)) {
      const unsigned long* lengths = mysql_fetch_lengths(res);
      Row row(columns);
      for (unsigned c = 0; c < columns; ++c) {
        if (r[c] != nullptr) row[c].emplace(r[c], lengths[c]);
      }
      rows.push_back(std::move(row));
    }
    const bool failed = mysql_errno(mysql_) != 0;  // fetch_row ends on errors too
    mysql_free_result(res);
    if (failed) throw fail_connection("fetch_row");
    return rows;
  }

  std::vector<Row> select(const std::string& sql, const Param* params, std::size_t n) {
    if (borrowed_) return select_text(sql, params, n);
    Prepared& p = run(sql, params, n);
    MYSQL_STMT* stmt = p.stmt;
    struct FreeResult {
      MYSQL_STMT* s;
      ~FreeResult() { mysql_stmt_free_result(s); }
    } free_result{stmt};
    if (mysql_stmt_store_result(stmt) != 0) {
      // An error after the result's metadata (a duplicate key of INSERT ... RETURNING) leaves
      // the statement mid-result: without a reset, Connector/C's next execute waits forever
      // for rows that never come.
      StoreError e = fail_statement(stmt, "store_result");
      if (!broken_ && mysql_stmt_reset(stmt) != 0) broken_ = true;
      throw e;
    }
    const unsigned columns = mysql_stmt_field_count(stmt);
    const std::vector<unsigned char>& digits = datetime_digits(p);
    const bool typed = digits.size() == columns;  // else every column is fetched as text
    // Scratch reused across calls: a select allocates only the rows it returns.
    Scratch& w = scratch_;
    w.binds.assign(columns, MYSQL_BIND{});
    w.buffers.resize(columns);
    w.times.resize(columns);
    w.lengths.assign(columns, 0);
    w.nulls.assign(columns, 0);
    w.errors.assign(columns, 0);
    for (unsigned c = 0; c < columns; ++c) {
      MYSQL_BIND& b = w.binds[c];
      if (typed && digits[c] != not_datetime) {
        b.buffer_type = MYSQL_TYPE_DATETIME;
        b.buffer = &w.times[c];
        b.buffer_length = sizeof(MYSQL_TIME);
      } else {
        b.buffer_type = MYSQL_TYPE_STRING;
        b.buffer = w.buffers[c].data();
        b.buffer_length = Scratch::initial;
      }
      b.length = &w.lengths[c];
      b.is_null = &w.nulls[c];
      b.error = &w.errors[c];
    }
    if (columns > 0 && mysql_stmt_bind_result(stmt, w.binds.data()))
      throw fail_statement(stmt, "bind_result");
    std::vector<Row> rows;
    while (true) {
      const int rc = mysql_stmt_fetch(stmt);
      if (rc == MYSQL_NO_DATA) break;
      if (rc == 1) throw fail_statement(stmt, "fetch");
      Row row(columns);
      for (unsigned c = 0; c < columns; ++c) {
        if (w.nulls[c]) continue;
        if (w.binds[c].buffer_type == MYSQL_TYPE_DATETIME) {
          row[c].emplace(datetime_text(w.times[c], digits[c]));
          continue;
        }
        if (w.lengths[c] <= Scratch::initial) {
          row[c].emplace(w.buffers[c].data(), w.lengths[c]);
          continue;
        }
        std::string big(w.lengths[c], '\0');
        MYSQL_BIND again{};
        unsigned long got = 0;
        again.buffer_type = MYSQL_TYPE_STRING;
        again.buffer = big.data();
        again.buffer_length = w.lengths[c];
        again.length = &got;
        if (mysql_stmt_fetch_column(stmt, &again, c, 0) != 0)
          throw fail_statement(stmt, "fetch_column");
        big.resize(got);
        row[c].emplace(std::move(big));
      }
      rows.push_back(std::move(row));
    }
    return rows;
  }

  ConnectionParams params_;  // unused when borrowed
  MYSQL* mysql_ = nullptr;
  bool borrowed_ = false;
  bool broken_ = false;
  bool returning_ = false;
  bool galera_ = false;
  std::unordered_map<std::string, Prepared> statements_;  // node-based: references stay valid
  struct Scratch {
    static constexpr std::size_t initial = 64;  // numbers fit; longer text is fetched again
    std::vector<MYSQL_BIND> binds;
    std::vector<std::array<char, initial>> buffers;
    std::vector<MYSQL_TIME> times;
    std::vector<unsigned long> lengths;
    std::vector<detail::driver_flag> nulls;
    std::vector<detail::driver_flag> errors;
  } scratch_;
};

}  // namespace idem::mysql
