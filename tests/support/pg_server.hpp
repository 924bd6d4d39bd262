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

inline std::shared_ptr<idem::pg::Pool> make_pg_pool(std::size_t size = 8) {
  return std::make_shared<idem::pg::Pool>(idem::pg::ConnectionParams{.conninfo = pg_conninfo()},
                                          idem::pg::PoolParams{.size = size});
}

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

  explicit PgTable(std::size_t pool_size = 8, idem::pg::StoreParams params = {})
      : pool(make_pg_pool(pool_size)), store(pool, with_table(std::move(params), name)) {
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

}  // namespace idem_test
