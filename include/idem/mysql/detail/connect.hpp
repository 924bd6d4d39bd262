#pragma once
// What the blocking and the non-blocking connection share when they open a session: the
// options set before connecting, and the error of a failed connect.

#include <mysql.h>

#include <string>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/mysql/connection_params.hpp"
#include "idem/mysql/errors.hpp"

namespace idem::mysql::detail {

// Timeouts and character set, on a handle from mysql_init.
inline void set_connect_options(MYSQL* mysql, const ConnectionParams& p) {
  const unsigned connect_timeout = static_cast<unsigned>(p.connect_timeout.count());
  const unsigned read_timeout = static_cast<unsigned>(p.read_timeout.count());
  const unsigned write_timeout = static_cast<unsigned>(p.write_timeout.count());
  mysql_options(mysql, MYSQL_OPT_CONNECT_TIMEOUT, &connect_timeout);
  mysql_options(mysql, MYSQL_OPT_READ_TIMEOUT, &read_timeout);
  mysql_options(mysql, MYSQL_OPT_WRITE_TIMEOUT, &write_timeout);
  mysql_options(mysql, MYSQL_SET_CHARSET_NAME, "utf8mb4");
}

// The arguments of mysql_real_connect: a unix socket, when set, wins over host and port.
struct ConnectTarget {
  const char* host;
  unsigned port;
  const char* socket;
  const char* database;

  explicit ConnectTarget(const ConnectionParams& p)
      : host(p.unix_socket.empty() ? p.host.c_str() : "localhost"),
        port(p.unix_socket.empty() ? p.port : 0),
        socket(p.unix_socket.empty() ? nullptr : p.unix_socket.c_str()),
        database(p.database.empty() ? nullptr : p.database.c_str()) {}
};

// The error of a failed connect. Refused logins and unknown databases will not heal by
// retrying; lost links may.
inline StoreError connect_error(MYSQL* mysql, const ConnectionParams& p) {
  const StoreError e =
      make_error(p.unix_socket.empty() ? fmt::format("connect to {}:{}", p.host, p.port)
                                       : fmt::format("connect to {}", p.unix_socket),
                 mysql_errno(mysql), mysql_sqlstate(mysql), mysql_error(mysql));
  return StoreError(e.what(), is_connection_lost(e.diagnostics().code), e.diagnostics());
}

}  // namespace idem::mysql::detail
