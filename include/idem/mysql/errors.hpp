#pragma once
// How idem::mysql reads MySQL / MariaDB error numbers. Every failure surfaces as
// idem::StoreError whose diagnostics() carry the number, SQLSTATE and the server's or
// driver's text; these helpers say what a number means for the caller and the connection.

namespace idem::mysql {

namespace code {
inline constexpr unsigned dup_entry = 1062;          // ER_DUP_ENTRY
inline constexpr unsigned lock_wait_timeout = 1205;  // ER_LOCK_WAIT_TIMEOUT
inline constexpr unsigned deadlock = 1213;  // ER_LOCK_DEADLOCK (also Galera certification failures)
inline constexpr unsigned query_interrupted = 1317;  // ER_QUERY_INTERRUPTED
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

// Repeating the same statement (after a rollback) may succeed.
constexpr bool is_transient(unsigned n) noexcept {
  return n == code::deadlock || n == code::lock_wait_timeout || n == code::query_interrupted ||
         n == code::wsrep_not_ready || is_connection_lost(n);
}

// The server rolled back the whole transaction (not only the statement). InnoDB does so on a
// deadlock; on a lock wait timeout only the statement is rolled back
// (innodb_rollback_on_timeout=OFF).
constexpr bool rolls_back_transaction(unsigned n) noexcept {
  return n == code::deadlock;
}

}  // namespace idem::mysql
