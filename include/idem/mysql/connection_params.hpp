#pragma once
// idem::mysql::ConnectionParams: where and how to connect.

#include <chrono>
#include <string>

namespace idem::mysql {

struct ConnectionParams {
  std::string host = "127.0.0.1";
  unsigned port = 3306;
  // When set, the connection goes through this unix socket and host/port are ignored.
  std::string unix_socket;
  std::string user = "root";
  std::string password;
  std::string database;
  // The driver's timeouts (whole seconds). read_timeout must outlast the server's
  // innodb_lock_wait_timeout (50 s by default): a statement waiting on a row lock is silent,
  // and a read timeout would drop the connection while the server still waits.
  std::chrono::seconds connect_timeout{5};
  std::chrono::seconds read_timeout{60};
  std::chrono::seconds write_timeout{60};
  // A MySQL option file (my.cnf syntax, as the mysql client reads ~/.my.cnf) that
  // Connector/C reads when connecting: host, port, socket, user, password and database of
  // option_group (and Connector/C's own client groups) apply to the fields left empty here
  // (port 0); a field set here wins. Clear host, user and port to take them from the file
  // (their in-class defaults count as set). A file that cannot be read fails the connect.
  std::string option_file;
  std::string option_group = "client";
};

}  // namespace idem::mysql
