#pragma once
// What the server behind a connection can do, asked once when the connection opens.

#include <mysql.h>

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/mysql/errors.hpp"

namespace idem::mysql::detail {

// Whether the server is MariaDB (which says so in its version string), not MySQL.
inline bool server_is_mariadb(MYSQL* mysql) {
  const char* info = mysql_get_server_info(mysql);
  return info != nullptr && std::string_view(info).find("MariaDB") != std::string_view::npos;
}

// INSERT ... RETURNING: MariaDB 10.5 and later (MySQL has none).
inline bool server_has_returning(MYSQL* mysql) {
  return server_is_mariadb(mysql) && mysql_get_server_version(mysql) >= 100500;
}

// A session variable's value through the text protocol; empty when the server has no such
// variable (a build without wsrep has no wsrep_on). Throws StoreError.
inline std::string session_variable(MYSQL* mysql, std::string_view name) {
  const std::string sql = fmt::format("SHOW SESSION VARIABLES LIKE '{}'", name);
  if (mysql_real_query(mysql, sql.data(), static_cast<unsigned long>(sql.size())) != 0)
    throw error_from(mysql, "SHOW VARIABLES");
  MYSQL_RES* res = mysql_store_result(mysql);
  if (res == nullptr) throw error_from(mysql, "SHOW VARIABLES");
  std::string value;
  if (MYSQL_ROW row = mysql_fetch_row(res); row != nullptr && row[1] != nullptr) value = row[1];
  mysql_free_result(res);
  return value;
}

// Whether this session's writes replicate through Galera.
inline bool in_galera_cluster(MYSQL* mysql) {
  return session_variable(mysql, "wsrep_on") == "ON";
}

}  // namespace idem::mysql::detail
