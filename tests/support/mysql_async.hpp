#pragma once
// Shared set-up of the async MySQL tests: a fresh record table (made and dropped by the
// blocking Table) with an AsyncStore on it, and a loop to run coroutines to their end.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <idem/mysql/async.hpp>

#include "loop.hpp"
#include "mysql_server.hpp"

namespace idem_test {

namespace net = idem::async::net;

struct AsyncTable {
  Table blocking;  // the same table, for set-up and counting
  std::shared_ptr<idem::mysql::AsyncPool> pool;
  idem::mysql::AsyncStore store;

  // `connect`: how the async pool logs in (the blocking table always as the test's root).
  explicit AsyncTable(std::size_t pool_size = 8, idem::mysql::StoreParams params = {},
                      idem::mysql::ConnectionParams connect = server())
      : blocking(2, params),
        pool(std::make_shared<idem::mysql::AsyncPool>(std::move(connect),
                                                      idem::mysql::PoolParams{.size = pool_size})),
        store(pool, with_table(std::move(params), blocking.name)) {}

  long long count(const std::string& where = "1") { return blocking.count(where); }

 private:
  static idem::mysql::StoreParams with_table(idem::mysql::StoreParams p, const std::string& t) {
    p.table = t;
    return p;
  }
};

// A business row (BusinessTable's) written on a coroutine connection, in whatever transaction
// is open there.
inline net::awaitable<void> insert_row(idem::mysql::AsyncConnection& c, const std::string& table,
                                       std::string trade_no) {
  const std::vector<idem::mysql::Param> values{std::string_view(trade_no)};
  co_await c.execute("INSERT INTO `" + table + "` (trade_no) VALUES (?)", values);
}

}  // namespace idem_test
