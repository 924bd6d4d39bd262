#pragma once
// How idem::mysql reads MySQL / MariaDB error numbers. Every failure surfaces as
// idem::StoreError whose diagnostics() carry the number, SQLSTATE and the server's or
// driver's text; these helpers say what a number means for the caller and the connection.
//
// Your own SQL on the same connection can fail the same way (a deadlock in the business
// UPDATE). Turn its errors into StoreError with the same rule, so that with_transaction runs
// the transaction again for exactly the errors idem itself retries:
//
//   if (mysql_query(db, "UPDATE pay_order SET ...") != 0)
//     throw idem::mysql::error_from(db, "pay_order update");
//   // or: idem::mysql::check(db, mysql_query(db, "UPDATE ..."), "pay_order update");

#include <mysql.h>

#include <string_view>

#include <fmt/format.h>

#include "idem/errors.hpp"

namespace idem::mysql {

namespace code {
inline constexpr unsigned dup_entry = 1062;          // ER_DUP_ENTRY
inline constexpr unsigned parse_error = 1064;        // ER_PARSE_ERROR
inline constexpr unsigned lock_wait_timeout = 1205;  // ER_LOCK_WAIT_TIMEOUT
inline constexpr unsigned table_def_changed = 1412;  // ER_TABLE_DEF_CHANGED: DDL since the snapshot
inline constexpr unsigned deadlock = 1213;  // ER_LOCK_DEADLOCK (also Galera certification failures)
inline constexpr unsigned query_interrupted = 1317;  // ER_QUERY_INTERRUPTED
inline constexpr unsigned signal_exception = 1644;   // ER_SIGNAL_EXCEPTION (SIGNAL in SQL)
inline constexpr unsigned server_shutdown = 1053;    // ER_SERVER_SHUTDOWN
inline constexpr unsigned connection_killed = 1927;  // ER_CONNECTION_KILLED (MariaDB)
inline constexpr unsigned wsrep_not_ready = 1047;    // ER_UNKNOWN_COM_ERROR: Galera node not ready
inline constexpr unsigned client_conn_error = 2002;  // CR_CONNECTION_ERROR
inline constexpr unsigned client_conn_host_error = 2003;  // CR_CONN_HOST_ERROR
inline constexpr unsigned server_gone = 2006;             // CR_SERVER_GONE_ERROR
inline constexpr unsigned server_lost = 2013;             // CR_SERVER_LOST
inline constexpr unsigned server_lost_extended = 2055;    // CR_SERVER_LOST_EXTENDED
inline constexpr unsigned client_disconnected = 4031;     // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8)
}  // namespace code

// The connection can no longer be used: it must be closed and a new one opened. A write
// that was sent on it has an unknown outcome.
constexpr bool is_connection_lost(unsigned n) noexcept {
  return n == code::server_gone || n == code::server_lost || n == code::server_lost_extended ||
         n == code::connection_killed || n == code::server_shutdown ||
         n == code::client_disconnected || n == code::client_conn_error ||
         n == code::client_conn_host_error;
}

// Repeating the same statement (after a rollback) may succeed. A transaction whose snapshot is
// older than an ALTER of a table it then reads (an online migration) is told to start again.
constexpr bool is_transient(unsigned n) noexcept {
  return n == code::deadlock || n == code::lock_wait_timeout || n == code::query_interrupted ||
         n == code::table_def_changed || n == code::wsrep_not_ready || is_connection_lost(n);
}

// The server rolled back the whole transaction (not only the statement). InnoDB does so on a
// deadlock; on a lock wait timeout only the statement is rolled back
// (innodb_rollback_on_timeout=OFF).
constexpr bool rolls_back_transaction(unsigned n) noexcept {
  return n == code::deadlock;
}

// A StoreError for error number n: retryable() is is_transient(n), what() carries idem's
// context, the number and the server's or driver's text, diagnostics() the same apart.
inline StoreError make_error(std::string_view context, unsigned n, const char* sqlstate,
                             const char* message) {
  // Client errors are CR_* numbers 2000-2999; everything else came from the server.
  const bool from_server = n < 2000 || n >= 3000;
  const std::string_view text = message != nullptr ? message : "";
  return StoreError(
      fmt::format("idem::mysql: {} failed ({}{}{}{})", context, n,
                  is_connection_lost(n) ? ", connection lost" : "", text.empty() ? "" : ": ", text),
      is_transient(n),
      Diagnostics{n, sqlstate != nullptr ? sqlstate : "", std::string(text), from_server});
}

// The last error on a connection (mysql_errno, mysql_sqlstate, mysql_error) as a StoreError.
inline StoreError error_from(MYSQL* mysql, std::string_view context) {
  return make_error(context, mysql_errno(mysql), mysql_sqlstate(mysql), mysql_error(mysql));
}

// The last error of a prepared statement as a StoreError.
inline StoreError error_from(MYSQL_STMT* stmt, std::string_view context) {
  return make_error(context, mysql_stmt_errno(stmt), mysql_stmt_sqlstate(stmt),
                    mysql_stmt_error(stmt));
}

// Throws error_from(mysql, context) when rc, the result of a C API call, is non-zero.
inline void check(MYSQL* mysql, int rc, std::string_view context) {
  if (rc != 0) throw error_from(mysql, context);
}

}  // namespace idem::mysql
