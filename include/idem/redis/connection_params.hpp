#pragma once
// idem::redis::ConnectionParams: where and how to connect to one Redis server.

#include <chrono>
#include <string>
#include <vector>

namespace idem::redis {

struct ConnectionParams {
  std::string host = "127.0.0.1";
  unsigned port = 6379;
  // When set, the connection goes through this unix socket and host/port are ignored.
  std::string unix_socket;
  // AUTH: an ACL user (Redis 6 and later; empty: the default user) and its password (empty:
  // no AUTH at all).
  std::string user;
  std::string password;
  // SELECT: the logical database (0-15 on a default server; a cluster has only 0).
  int database = 0;
  // CLIENT SETNAME on every connection (empty: none), so that CLIENT LIST tells idem's
  // connections apart.
  std::string client_name;
  // A Redis Cluster: some of its nodes as "host:port" (one that answers is enough; the others
  // are found with CLUSTER SLOTS). When set, host, port, unix_socket and database are not used:
  // a cluster has only database 0.
  std::vector<std::string> cluster_nodes;
  std::chrono::milliseconds connect_timeout{2'000};
  // How long a command may wait for its reply (and for the socket to take it) before the
  // connection is given up as lost. idem's scripts are short: a reply this late means a
  // server or network in trouble.
  std::chrono::milliseconds read_timeout{5'000};
};

}  // namespace idem::redis
