#pragma once
// Shared set-up of the Galera tests: the 3-node cluster that the CTest fixture 'galera.start'
// started with scripts/galera (its directory in IDEM_GALERA_DIR), a pool and a Store per node
// on one fresh record table, and the script's kill / rejoin for the crash test.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <idem/mysql.hpp>

#include "mysql_server.hpp"  // unique_table
#include "paths.hpp"
#include "threads.hpp"

namespace galera_test {

inline constexpr int nodes = 3;

inline std::string cluster_dir() {
  const char* dir = std::getenv("IDEM_GALERA_DIR");
  if (dir == nullptr || *dir == '\0') {
    throw std::runtime_error(
        "IDEM_GALERA_DIR is not set: the Galera tests run against the cluster that the CTest "
        "fixture 'galera.start' launches (run them through ctest -L galera or scripts/test)");
  }
  return dir;
}

// Node n (0-2) is scripts/galera's node n+1.
inline idem::mysql::ConnectionParams node(int n) {
  idem::mysql::ConnectionParams p;
  p.unix_socket = cluster_dir() + "/node" + std::to_string(n + 1) + "/mysqld.sock";
  p.user = "root";
  p.database = "idem_test";
  return p;
}

// Runs `scripts/galera <command> DIR [node+1]`; returns its exit status.
inline int script(const std::string& command, int n = -1) {
  std::string cmd = std::string(idem_test::paths::source_dir) + "/scripts/galera " + command +
                    " '" + cluster_dir() + "'";
  if (n >= 0) cmd += " " + std::to_string(n + 1);
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

// One value from a query on node n, read with wsrep_sync_wait so that it sees every write the
// cluster committed before the query (a plain read on another node may lag behind).
inline std::string scalar(int n, const std::string& sql) {
  idem::mysql::Connection c(node(n));
  c.query("SET SESSION wsrep_sync_wait = 1");
  const auto rows = c.select(sql, {});
  if (rows.empty() || rows.front().empty()) return "";
  return rows.front().front().to_text().value_or("");
}

inline long long count(int n, const std::string& sql) {
  return std::stoll(scalar(n, sql));
}

// Galera's counters of this node: local transactions that failed certification, and local
// transactions aborted by a replicated one (both reach the client as deadlock 1213).
inline long long conflicts(int n) {
  idem::mysql::Connection c(node(n));
  const auto rows = c.select(
      "SELECT SUM(VARIABLE_VALUE) FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN "
      "('WSREP_LOCAL_CERT_FAILURES', 'WSREP_LOCAL_BF_ABORTS')",
      {});
  return std::stoll(*rows.at(0).at(0).to_text());
}
inline long long conflicts() {
  long long total = 0;
  for (int n = 0; n < nodes; ++n)
    total += conflicts(n);
  return total;
}

// Sets a global server variable on every node for the life of the object (new connections
// pick it up; the pools are created after it).
struct GlobalSetting {
  std::string name;
  std::array<std::string, nodes> old;
  GlobalSetting(std::string variable, const std::string& value) : name(std::move(variable)) {
    for (int n = 0; n < nodes; ++n) {
      idem::mysql::Connection c(node(n));
      old[static_cast<std::size_t>(n)] =
          *c.select("SELECT @@GLOBAL." + name, {}).at(0).at(0).to_text();
      c.query("SET GLOBAL " + name + " = " + value);
    }
  }
  ~GlobalSetting() {
    for (int n = 0; n < nodes; ++n) {
      try {
        idem::mysql::Connection c(node(n));
        c.query("SET GLOBAL " + name + " = " + old[static_cast<std::size_t>(n)]);
      } catch (...) {
      }
    }
  }
};

// A pool and a Store per node on one fresh record table, dropped at the end of the test.
struct Cluster {
  std::string table = idem_test::unique_table("rec");
  std::array<std::shared_ptr<idem::mysql::Pool>, nodes> pools;
  std::vector<std::unique_ptr<idem::mysql::Store>> stores;

  explicit Cluster(std::size_t pool_size = 64, idem::mysql::StoreParams params = {}) {
    if (script("wait") != 0) throw std::runtime_error("the Galera cluster is not whole");
    params.table = table;
    for (int n = 0; n < nodes; ++n) {
      pools[static_cast<std::size_t>(n)] =
          std::make_shared<idem::mysql::Pool>(node(n), idem::mysql::PoolParams{.size = pool_size});
      stores.push_back(
          std::make_unique<idem::mysql::Store>(pools[static_cast<std::size_t>(n)], params));
    }
    // The DDL replicates in total order; running it on every node makes sure each node has
    // the table before its clients start.
    for (auto& s : stores)
      s->ensure_schema();
    // A node applies the others' DDL after they return; a test's first statements could meet
    // it there and be aborted by it. A causal read on each node waits until it has applied all.
    for (int n = 0; n < nodes; ++n)
      scalar(n, "SELECT 1");
  }
  ~Cluster() {
    try {
      auto c = pools[0]->acquire();
      c->query("DROP TABLE IF EXISTS " + stores[0]->table());
    } catch (...) {
    }
  }
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  idem::mysql::Store& store(int n) { return *stores[static_cast<std::size_t>(n)]; }
  idem::mysql::Pool& pool(int n) { return *pools[static_cast<std::size_t>(n)]; }
  long long count(const std::string& where = "1") {
    return galera_test::count(0, "SELECT COUNT(*) FROM " + stores[0]->table() + " WHERE " + where);
  }
};

// A business table with no unique key on purpose: a double execution shows up as two rows.
// It has a primary key (Galera replicates rows by their primary key).
struct BusinessTable {
  std::string name = idem_test::unique_table("biz");
  Cluster& cluster;

  explicit BusinessTable(Cluster& c) : cluster(c) {
    for (int n = 0; n < nodes; ++n) {
      auto h = c.pool(n).acquire();
      h->query("CREATE TABLE IF NOT EXISTS `" + name +
               "` (id BIGINT AUTO_INCREMENT PRIMARY KEY, trade_no VARBINARY(64) NOT NULL, node "
               "INT NOT NULL, KEY (trade_no)) ENGINE=InnoDB");
    }
  }
  ~BusinessTable() {
    try {
      auto h = cluster.pool(0).acquire();
      h->query("DROP TABLE IF EXISTS `" + name + "`");
    } catch (...) {
    }
  }
  void insert(idem::mysql::Connection& c, const std::string& trade_no, int n) {
    c.execute("INSERT INTO `" + name + "` (trade_no, node) VALUES (?, ?)", {trade_no, n});
  }
  long long rows(const std::string& where = "1") {
    return galera_test::count(0, "SELECT COUNT(*) FROM `" + name + "` WHERE " + where);
  }
  long long max_per_key() {
    return galera_test::count(0, "SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) n FROM `" +
                                     name + "` GROUP BY trade_no) t");
  }
};

using idem_test::Errors;
using idem_test::run_threads;

}  // namespace galera_test
