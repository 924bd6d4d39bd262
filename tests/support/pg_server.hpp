#pragma once
// Shared set-up of the PostgreSQL tests: the throwaway server that the CTest fixture
// pg.start launched (scripts/postgres; its socket directory in IDEM_PG_SOCKET_DIR), and a
// fresh record table per test.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include <idem/pg.hpp>

namespace idem_test {

// The connection string of the test server's database.
inline std::string pg_conninfo() {
  const char* dir = std::getenv("IDEM_PG_SOCKET_DIR");
  if (dir == nullptr || *dir == '\0') {
    throw std::runtime_error(
        "IDEM_PG_SOCKET_DIR is not set: the PostgreSQL tests run against the server that the "
        "CTest fixture 'pg.start' launches (run them through ctest or scripts/test)");
  }
  return std::string("host=") + dir + " user=idem dbname=idem";
}

inline std::shared_ptr<idem::pg::Pool> make_pg_pool(std::size_t size = 8,
                                                    const std::string& extra_conninfo = "") {
  return std::make_shared<idem::pg::Pool>(
      idem::pg::ConnectionParams{.conninfo = pg_conninfo() + " " + extra_conninfo},
      idem::pg::PoolParams{.size = size});
}

// A conninfo fragment that makes every transaction of the session SERIALIZABLE (the service's
// choice, set when it connects; idem sets nothing).
inline constexpr const char* pg_serializable =
    "options='-c default_transaction_isolation=serializable'";

// A table name no other test (or test process) uses.
inline std::string unique_pg_table(const std::string& stem = "idem_t") {
  static std::atomic<int> counter{0};
  return stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
}

// A fresh record table, dropped again at the end of the test.
struct PgTable {
  std::shared_ptr<idem::pg::Pool> pool;
  std::string name = unique_pg_table();  // unquoted
  idem::pg::Store store;

  explicit PgTable(std::size_t pool_size = 8, idem::pg::StoreParams params = {},
                   const std::string& extra_conninfo = "")
      : pool(make_pg_pool(pool_size, extra_conninfo)),
        store(pool, with_table(std::move(params), name)) {
    store.ensure_schema();
  }
  PgTable(const PgTable&) = delete;
  PgTable& operator=(const PgTable&) = delete;
  ~PgTable() {
    try {
      auto c = pool->acquire();
      c->query("DROP TABLE IF EXISTS " + store.table());
    } catch (...) {
    }
  }

  // A number the statement answers (its first column of its first row).
  long long scalar(const std::string& sql) {
    auto c = pool->acquire();
    const idem::pg::Result r = c->exec(sql, {});
    return r.rows() == 0 || r.is_null(0, 0) ? -1 : *r.integer(0, 0);
  }
  long long count(const std::string& where = "true") {
    return scalar("SELECT count(*) FROM " + store.table() + " WHERE " + where);
  }

 private:
  static idem::pg::StoreParams with_table(idem::pg::StoreParams p, const std::string& table) {
    p.table = table;
    return p;
  }
};

// A business table that a body appends one row per execution to: the count per key says how
// often the business ran, whatever idem's records say.
struct PgBusiness {
  std::shared_ptr<idem::pg::Pool> pool;
  std::string name = unique_pg_table("biz");

  explicit PgBusiness(std::shared_ptr<idem::pg::Pool> p) : pool(std::move(p)) {
    pool->acquire()->query("CREATE TABLE " + name +
                           " (id bigserial PRIMARY KEY, trade_no text NOT NULL)");
  }
  ~PgBusiness() {
    try {
      pool->acquire()->query("DROP TABLE IF EXISTS " + name);
    } catch (...) {
    }
  }
  PgBusiness(const PgBusiness&) = delete;
  PgBusiness& operator=(const PgBusiness&) = delete;

  void insert(idem::pg::Connection& c, const std::string& trade_no) {
    c.execute("INSERT INTO " + name + " (trade_no) VALUES ($1)", {trade_no});
  }
  void insert(PGconn* conn, const std::string& trade_no) {
    idem::pg::Connection c(conn);
    insert(c, trade_no);
  }
  long long scalar(const std::string& sql) {
    auto c = pool->acquire();
    const idem::pg::Result r = c->exec(sql, {});
    return r.rows() == 0 || r.is_null(0, 0) ? -1 : *r.integer(0, 0);
  }
  long long rows(const std::string& trade_no) {
    auto c = pool->acquire();
    const idem::pg::Result r =
        c->exec("SELECT count(*) FROM " + name + " WHERE trade_no = $1", {trade_no});
    return *r.integer(0, 0);
  }
  long long rows() { return scalar("SELECT count(*) FROM " + name); }
  // Keys whose business ran more than once.
  long long keys_executed_twice() {
    return scalar("SELECT count(*) FROM (SELECT trade_no FROM " + name +
                  " GROUP BY trade_no HAVING count(*) > 1) AS t");
  }
};

}  // namespace idem_test
