#pragma once
// Shared set-up of the MySQL tests: the throwaway MariaDB server that the CTest fixture
// started (its socket in IDEM_MYSQL_SOCKET), and a fresh table per test.
#include <unistd.h>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include <idem/mysql.hpp>

namespace idem_test {

inline idem::mysql::ConnectionParams server() {
  const char* socket = std::getenv("IDEM_MYSQL_SOCKET");
  if (socket == nullptr || *socket == '\0') {
    throw std::runtime_error(
        "IDEM_MYSQL_SOCKET is not set: the MySQL tests run against the MariaDB server that the "
        "CTest "
        "fixture 'mariadb.start' launches (run them through ctest or scripts/test)");
  }
  idem::mysql::ConnectionParams p;
  p.unix_socket = socket;
  p.user = "root";
  p.database = "idem_test";
  return p;
}

inline std::shared_ptr<idem::mysql::Pool> make_pool(std::size_t size = 8) {
  return std::make_shared<idem::mysql::Pool>(server(), idem::mysql::PoolParams{.size = size});
}

// A table name no other test (or test process) uses.
inline std::string unique_table(const std::string& stem = "rec") {
  static std::atomic<int> counter{0};
  return stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
}

// A fresh record table, dropped again at the end of the test.
struct Table {
  std::shared_ptr<idem::mysql::Pool> pool;
  std::string name;
  idem::mysql::Store store;

  explicit Table(std::size_t pool_size = 8, idem::mysql::StoreParams params = {})
      : pool(make_pool(pool_size)), name(unique_table()), store(pool, with_table(params, name)) {
    store.ensure_schema();
  }
  ~Table() {
    try {
      auto c = pool->acquire();
      c->query("DROP TABLE IF EXISTS " + store.table());
    } catch (...) {
    }
  }

  long long count(const std::string& where = "1") {
    auto c = pool->acquire();
    const auto rows = c->select("SELECT COUNT(*) FROM " + store.table() + " WHERE " + where, {});
    return rows.at(0).at(0).integer().value();
  }

 private:
  static idem::mysql::StoreParams with_table(idem::mysql::StoreParams p, const std::string& table) {
    p.table = table;
    return p;
  }
};

// The first column of the first row of a query, as a number.
inline long long scalar(idem::mysql::Pool& pool, const std::string& sql) {
  auto c = pool.acquire();
  const auto rows = c->select(sql, {});
  return rows.empty() || rows.front().at(0).is_null() ? -1
                                                      : std::stoll(*rows.front().at(0).to_text());
}

// A business table with no unique key on purpose: a double execution shows up as two rows.
struct BusinessTable {
  std::shared_ptr<idem::mysql::Pool> pool;
  std::string name = unique_table("biz");

  explicit BusinessTable(std::shared_ptr<idem::mysql::Pool> p) : pool(std::move(p)) {
    auto c = pool->acquire();
    c->query("CREATE TABLE `" + name +
             "` (id BIGINT AUTO_INCREMENT PRIMARY KEY, trade_no VARBINARY(64) NOT NULL, KEY "
             "(trade_no)) ENGINE=InnoDB");
  }
  ~BusinessTable() {
    try {
      auto c = pool->acquire();
      c->query("DROP TABLE IF EXISTS `" + name + "`");
    } catch (...) {
    }
  }
  BusinessTable(const BusinessTable&) = delete;
  BusinessTable& operator=(const BusinessTable&) = delete;

  void insert(idem::mysql::Connection& c, const std::string& trade_no) {
    c.execute("INSERT INTO `" + name + "` (trade_no) VALUES (?)", {trade_no});
  }
  long long rows(const std::string& where = "1") {
    return scalar(*pool, "SELECT COUNT(*) FROM `" + name + "` WHERE " + where);
  }
  long long distinct_keys() {
    return scalar(*pool, "SELECT COUNT(DISTINCT trade_no) FROM `" + name + "`");
  }
  long long max_per_key() {
    return scalar(*pool, "SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) n FROM `" + name +
                             "` GROUP BY trade_no) t");
  }
  // Keys whose business ran more than once.
  long long keys_executed_twice() {
    return scalar(*pool, "SELECT COUNT(*) FROM (SELECT trade_no FROM `" + name +
                             "` GROUP BY trade_no HAVING COUNT(*) > 1) t");
  }
};

}  // namespace idem_test
