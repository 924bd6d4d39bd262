#pragma once
// Opening a libpq connection the way both idem::pg::Connection (blocking) and
// idem::pg::AsyncConnection (on an Asio executor) do: PQconnectStartParams with idem's defaults
// under the caller's conninfo, the server's notices kept off stderr, one deadline for all of
// conninfo's hosts, and the session's statement_timeout. Each driver only waits for the socket
// its own way between PQconnectPoll calls.

#include <libpq-fe.h>

#include <charconv>
#include <chrono>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/pg/connection_params.hpp"
#include "idem/pg/errors.hpp"

namespace idem::pg::detail {

// Starts connecting without blocking; the caller drives PQconnectPoll (its first wait is for
// the socket to be writable). Throws StoreError when libpq cannot even start.
inline PGconn* start_connecting(const ConnectionParams& p) {
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
  return conn;
}

// The connect_timeout in effect (conninfo's own, or ConnectionParams'): libpq applies it only
// to its blocking connect, so a polling driver waits that long in all; zero: no limit.
inline std::chrono::seconds effective_connect_timeout(PGconn* conn) {
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

// The error of a connection attempt that failed or ran out of time; the caller frees `conn`.
inline StoreError connect_error(PGconn* conn, bool timed_out, std::chrono::seconds timeout) {
  return make_error(
      "connect", sqlstate::connection_failure,
      timed_out ? fmt::format("no connection within connect_timeout ({} s)", timeout.count())
                : std::string(PQerrorMessage(conn)),
      false);
}

// What runs once a connection is made (empty: nothing): the session's statement_timeout.
inline std::string session_setup_sql(const ConnectionParams& p) {
  if (p.statement_timeout.count() <= 0) return {};
  return fmt::format("SET statement_timeout = {}", p.statement_timeout.count());
}

}  // namespace idem::pg::detail
