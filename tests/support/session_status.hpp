#pragma once
// Reading a session's status counters in the MySQL-backed tests of every suite.
#include <string>

#include <catch2/catch.hpp>
#include <idem/mysql/connection.hpp>

namespace idem_test {

// A session status counter (Com_stmt_execute, Com_select, ...), read with a text query,
// which the prepared-statement counters do not see.
inline long long session_count(idem::mysql::Connection& c, const std::string& name) {
  MYSQL* m = c.native();
  const std::string sql = "SHOW SESSION STATUS LIKE '" + name + "'";
  REQUIRE(mysql_query(m, sql.c_str()) == 0);
  MYSQL_RES* res = mysql_store_result(m);
  REQUIRE(res != nullptr);
  MYSQL_ROW row = mysql_fetch_row(res);
  const long long n = row != nullptr ? std::stoll(row[1]) : -1;
  mysql_free_result(res);
  return n;
}

}  // namespace idem_test
