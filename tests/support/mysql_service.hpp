#pragma once
// The service's own MariaDB handles, as a service would open them: raw MYSQL* set up far
// from idem's habits (a UTC+8 clock, ANSI_QUOTES and NO_BACKSLASH_ESCAPES, latin1, READ
// COMMITTED), for the tests of idem on connections it does not own.
#include <mysql.h>

#include <stdexcept>
#include <string>

#include "mysql_server.hpp"

namespace idem_test {

inline constexpr const char* service_session =
    "SET time_zone = '+08:00', sql_mode = 'ANSI_QUOTES,NO_BACKSLASH_ESCAPES,STRICT_ALL_TABLES', "
    "tx_isolation = 'READ-COMMITTED', innodb_lock_wait_timeout = 1";

// Opens a handle with the blocking API, as the service's own pool does. Throws
// std::runtime_error.
inline MYSQL* open_service_handle() {
  const auto params = server();
  MYSQL* m = mysql_init(nullptr);
  if (m == nullptr) throw std::runtime_error("mysql_init failed");
  mysql_options(m, MYSQL_SET_CHARSET_NAME, "latin1");
  mysql_options(m, MYSQL_INIT_COMMAND, service_session);
  if (mysql_real_connect(m, "localhost", params.user.c_str(), nullptr, params.database.c_str(), 0,
                         params.unix_socket.c_str(), 0) == nullptr) {
    const std::string why = mysql_error(m);
    mysql_close(m);
    throw std::runtime_error("service connection: " + why);
  }
  return m;
}

// One handle of the service's, closed by the service (this) when done.
struct ServiceHandle {
  MYSQL* mysql = open_service_handle();
  ServiceHandle() = default;
  ~ServiceHandle() { mysql_close(mysql); }
  ServiceHandle(const ServiceHandle&) = delete;
  ServiceHandle& operator=(const ServiceHandle&) = delete;
};

}  // namespace idem_test
