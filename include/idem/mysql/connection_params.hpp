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
  // The driver's timeouts (whole seconds; the driver may retry a read before giving up).
  std::chrono::seconds connect_timeout{5};
  std::chrono::seconds read_timeout{30};
  std::chrono::seconds write_timeout{30};
};

}  // namespace idem::mysql
