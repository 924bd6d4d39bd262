#pragma once
// What the blocking and the non-blocking connection share when they open a session: the
// options set before connecting, and the error of a failed connect.

#include <mysql.h>

#include <fstream>
#include <string>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/mysql/connection_params.hpp"
#include "idem/mysql/errors.hpp"

namespace idem::mysql::detail {

// Timeouts, character set and the option file, on a handle from mysql_init.
inline void set_connect_options(MYSQL* mysql, const ConnectionParams& p) {
  if (!p.option_file.empty()) {
    mysql_options(mysql, MYSQL_READ_DEFAULT_FILE, p.option_file.c_str());
    mysql_options(mysql, MYSQL_READ_DEFAULT_GROUP, p.option_group.c_str());
  }
  const unsigned connect_timeout = static_cast<unsigned>(p.connect_timeout.count());
  const unsigned read_timeout = static_cast<unsigned>(p.read_timeout.count());
  const unsigned write_timeout = static_cast<unsigned>(p.write_timeout.count());
  mysql_options(mysql, MYSQL_OPT_CONNECT_TIMEOUT, &connect_timeout);
  mysql_options(mysql, MYSQL_OPT_READ_TIMEOUT, &read_timeout);
  mysql_options(mysql, MYSQL_OPT_WRITE_TIMEOUT, &write_timeout);
  mysql_options(mysql, MYSQL_SET_CHARSET_NAME, "utf8mb4");
}

// The arguments of mysql_real_connect: a unix socket, when set, wins over host and port. With
// an option file, an empty field is passed as NULL (port 0), which lets the file's value
// apply. Throws StoreError when the option file cannot be read: Connector/C would connect
// without it, and fail later with a misleading login error.
struct ConnectTarget {
  const char* host;
  unsigned port;
  const char* socket;
  const char* database;
  const char* user;
  const char* password;

  explicit ConnectTarget(const ConnectionParams& p)
      : host(p.unix_socket.empty() ? or_file(p, p.host) : "localhost"),
        port(p.unix_socket.empty() ? p.port : 0),
        socket(p.unix_socket.empty() ? nullptr : p.unix_socket.c_str()),
        database(p.database.empty() ? nullptr : p.database.c_str()),
        user(or_file(p, p.user)),
        password(or_file(p, p.password)) {
    if (!p.option_file.empty() && !std::ifstream(p.option_file)) {
      throw StoreError(fmt::format("idem::mysql: cannot read the option file {}", p.option_file),
                       false);
    }
  }

 private:
  static const char* or_file(const ConnectionParams& p, const std::string& value) {
    return value.empty() && !p.option_file.empty() ? nullptr : value.c_str();
  }
};

// The error of a failed connect. Refused logins and unknown databases will not heal by
// retrying; lost links may.
inline StoreError connect_error(MYSQL* mysql, const ConnectionParams& p) {
  const std::string where = !p.unix_socket.empty() ? p.unix_socket
                            : !p.host.empty()      ? fmt::format("{}:{}", p.host, p.port)
                                              : fmt::format("the server of option file {} [{}]",
                                                            p.option_file, p.option_group);
  const StoreError e = make_error(fmt::format("connect to {}", where), mysql_errno(mysql),
                                  mysql_sqlstate(mysql), mysql_error(mysql));
  return StoreError(e.what(), is_connection_lost(e.diagnostics().code), e.diagnostics());
}

}  // namespace idem::mysql::detail
