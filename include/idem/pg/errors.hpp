#pragma once
// How idem::pg reads PostgreSQL's errors. Every failure surfaces as idem::StoreError whose
// diagnostics() carry the SQLSTATE (diagnostics().sqlstate; code stays 0) and the server's or
// libpq's text; these helpers say what a SQLSTATE means for the caller and the connection.
//
// Your own SQL on the same connection can fail the same way (a serialization failure in the
// business UPDATE). Turn its errors into StoreError with the same rule, so that a retry runs
// the transaction again for exactly the errors idem itself retries:
//
//   PGresult* r = PQexec(conn, "UPDATE pay_order SET ...");
//   idem::pg::check(conn, r, "pay_order update");  // throws; clears r either way

#include <libpq-fe.h>

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/errors.hpp"

namespace idem::pg {

namespace sqlstate {
inline constexpr std::string_view unique_violation = "23505";
inline constexpr std::string_view serialization_failure = "40001";
inline constexpr std::string_view deadlock_detected = "40P01";
inline constexpr std::string_view statement_completion_unknown = "40003";
inline constexpr std::string_view lock_not_available = "55P03";
inline constexpr std::string_view query_canceled = "57014";
inline constexpr std::string_view admin_shutdown = "57P01";  // pg_terminate_backend, shutdown
inline constexpr std::string_view crash_shutdown = "57P02";
inline constexpr std::string_view cannot_connect_now = "57P03";  // starting up, recovering
inline constexpr std::string_view too_many_connections = "53300";
inline constexpr std::string_view read_only_transaction = "25006";  // a standby, or demoted
// What idem reports when libpq lost the connection without a SQLSTATE of the server's.
inline constexpr std::string_view connection_failure = "08006";
}  // namespace sqlstate

// The connection can no longer be used: it must be closed and a new one opened. A write that
// was sent on it has an unknown outcome. A server that became a standby (a failover demoted
// it) is left too, so that the next connection finds the new primary.
inline bool is_connection_lost(std::string_view state) noexcept {
  return state.starts_with("08") || state == sqlstate::admin_shutdown ||
         state == sqlstate::crash_shutdown || state == sqlstate::cannot_connect_now ||
         state == sqlstate::statement_completion_unknown ||
         state == sqlstate::read_only_transaction;
}

// Repeating the same statement (after a rollback) may succeed: the server rolled the
// transaction back on a serialization failure or a deadlock, a lock or statement timeout
// ended the statement, or the connection went away.
inline bool is_transient(std::string_view state) noexcept {
  return state == sqlstate::serialization_failure || state == sqlstate::deadlock_detected ||
         state == sqlstate::lock_not_available || state == sqlstate::query_canceled ||
         state == sqlstate::too_many_connections || is_connection_lost(state);
}

// A StoreError for SQLSTATE `state`: retryable() is is_transient(state), what() carries idem's
// context, the SQLSTATE and the server's or libpq's text, diagnostics() the same apart.
inline StoreError make_error(std::string_view context, std::string_view state,
                             std::string_view message, bool from_server) {
  std::string text(message);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  return StoreError(fmt::format("idem::pg: {} failed ({}{}{}{})", context, state,
                                is_connection_lost(state) ? ", connection lost" : "",
                                text.empty() ? "" : ": ", text),
                    is_transient(state), Diagnostics{0, std::string(state), text, from_server});
}

// The error of `result` (a failed command's, or null when libpq could not send it) on `conn`.
inline StoreError error_from(PGconn* conn, const PGresult* result, std::string_view context) {
  const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  const char* message = result != nullptr ? PQresultErrorMessage(result) : nullptr;
  if (message == nullptr || *message == '\0') message = PQerrorMessage(conn);
  if (state != nullptr && *state != '\0' && PQstatus(conn) == CONNECTION_OK) {
    return make_error(context, state, message != nullptr ? message : "", true);
  }
  // No SQLSTATE, or the connection broke: the reply was lost with it.
  return make_error(context,
                    state != nullptr && is_connection_lost(state) ? std::string_view(state)
                                                                  : sqlstate::connection_failure,
                    message != nullptr ? message : "", false);
}

// Throws error_from(conn, result, context) unless `result` is a successful command's; clears
// `result` either way.
inline void check(PGconn* conn, PGresult* result, std::string_view context) {
  const ExecStatusType status = result != nullptr ? PQresultStatus(result) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
    PQclear(result);
    return;
  }
  StoreError e = error_from(conn, result, context);
  PQclear(result);
  throw e;
}

}  // namespace idem::pg
