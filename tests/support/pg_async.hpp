#pragma once
// Shared set-up of the coroutine PostgreSQL tests: a fresh record table (made and dropped by the
// blocking PgTable) with an AsyncStore on it; run_on (loop.hpp) runs coroutines to their end.
#include <memory>
#include <string>
#include <utility>

#include <idem/pg/async.hpp>

#include "loop.hpp"
#include "pg_server.hpp"

namespace idem_test {

struct PgAsyncTable {
  PgTable blocking;  // the same table, for set-up and counting
  std::shared_ptr<idem::pg::AsyncPool> pool;
  idem::pg::AsyncStore store;

  // `connect`: how the coroutine pool connects (the blocking table always as the test's user).
  explicit PgAsyncTable(std::size_t pool_size = 8, idem::pg::StoreParams params = {},
                        idem::pg::ConnectionParams connect = {.conninfo = pg_conninfo()})
      : blocking(2, params),
        pool(std::make_shared<idem::pg::AsyncPool>(std::move(connect),
                                                   idem::pg::PoolParams{.size = pool_size})),
        store(pool, with_table(std::move(params), blocking.name)) {}

  long long count(const std::string& where = "true") { return blocking.count(where); }

 private:
  static idem::pg::StoreParams with_table(idem::pg::StoreParams p, const std::string& t) {
    p.table = t;
    return p;
  }
};

}  // namespace idem_test
