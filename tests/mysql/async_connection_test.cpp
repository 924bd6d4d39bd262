// idem::mysql::AsyncConnection borrowing the service's own handle, on the real MariaDB server:
// values inlined as the handle's session reads them (NO_BACKSLASH_ESCAPES, ANSI_QUOTES,
// latin1), the session left as it was, the handle never closed, and a call cancelled midway
// leaving the handle broken but the service's to close.
#include <fcntl.h>
#include <mysql.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <catch2/catch.hpp>

#include "../support/mysql_async.hpp"
#include "../support/mysql_service.hpp"

using namespace std::chrono_literals;
namespace net = idem::async::net;
using idem::mysql::AsyncConnection;
using idem::mysql::Param;
using idem_test::run_on;

namespace {

// The session settings the service chose, read with the blocking API.
std::string session_of(MYSQL* m) {
  const std::string sql =
      "SELECT CONCAT_WS('|', @@time_zone, @@autocommit, @@tx_isolation, @@sql_mode, "
      "@@character_set_client, @@collation_connection)";
  REQUIRE(mysql_query(m, sql.c_str()) == 0);
  MYSQL_RES* res = mysql_store_result(m);
  REQUIRE(res != nullptr);
  MYSQL_ROW row = mysql_fetch_row(res);
  std::string out = row != nullptr && row[0] != nullptr ? row[0] : "";
  mysql_free_result(res);
  return out;
}

// Every byte value, and the characters a careless quoting would trip on.
std::string awkward_bytes() {
  std::string s = "it's a \\ \"quoted\" `name` ? ";
  for (int b = 0; b < 256; ++b)
    s += static_cast<char>(b);
  return s;
}

}  // namespace

TEST_CASE("async mysql connection: a borrowed handle runs statements with its values inlined") {
  idem_test::ServiceHandle service;
  const std::string before = session_of(service.mysql);
  const std::string table = idem_test::unique_table("borrow");
  const std::string value = awkward_bytes();
  net::io_context io;
  {
    AsyncConnection c(service.mysql);
    CHECK(c.borrowed());
    CHECK(c.native() == service.mysql);
    CHECK(c.id() == mysql_thread_id(service.mysql));
    const auto rows = run_on(io, [&]() -> net::awaitable<std::vector<idem::mysql::Row>> {
      co_await c.query("CREATE TABLE `" + table +
                       "` (id BIGINT PRIMARY KEY, v VARBINARY(400), n BIGINT, u BIGINT UNSIGNED)");
      const std::vector<Param> values{std::int64_t{1}, std::string_view(value), std::int64_t{-42},
                                      std::uint64_t{18446744073709551615ULL}};
      const std::uint64_t inserted = co_await c.execute(
          "INSERT INTO `" + table + "` (id, v, n, u) VALUES (?, ?, ?, ?)", values);
      CHECK(inserted == 1);
      const std::vector<Param> key{std::int64_t{1}};
      co_return co_await c.select("SELECT v, n, u FROM `" + table + "` WHERE id = ?", key);
    }());
    REQUIRE(rows.size() == 1);
    CHECK(rows[0][0].text() == value);
    CHECK(rows[0][1].integer<std::int64_t>() == -42);
    CHECK(rows[0][2].integer<std::uint64_t>() == 18446744073709551615ULL);
    CHECK_THROWS_AS(
        run_on(io, c.execute("INSERT INTO `" + table + "` (id) VALUES (?, ?)", {std::int64_t{2}})),
        idem::UsageError);
  }
  // The handle is the service's: open, its session as it set it up, its blocking calls as
  // they were.
  CHECK(mysql_ping(service.mysql) == 0);
  CHECK(session_of(service.mysql) == before);
  CHECK(mysql_query(service.mysql, ("DROP TABLE `" + table + "`").c_str()) == 0);
}

TEST_CASE("async mysql connection: a borrowed handle's transaction begins and ends as asked") {
  idem_test::ServiceHandle service;
  net::io_context io;
  AsyncConnection c(service.mysql);
  CHECK(c.autocommit());
  run_on(io, [&]() -> net::awaitable<bool> {
    co_await c.begin_transaction();  // START TRANSACTION: the session's autocommit stays on
    CHECK(c.in_transaction());
    co_await c.query("ROLLBACK");
    co_await c.restore_autocommit();  // nothing to restore
    co_return true;
  }());
  CHECK_FALSE(c.in_transaction());
  CHECK(c.autocommit());
}

TEST_CASE("async mysql connection: a borrowed handle's call cancelled midway leaves it broken") {
  using namespace net::experimental::awaitable_operators;
  idem_test::ServiceHandle service;
  net::io_context io;
  AsyncConnection c(service.mysql);
  const auto slow = [&]() -> net::awaitable<bool> {
    (void)co_await c.select("SELECT SLEEP(2)", {});
    co_return true;
  };
  const auto soon = []() -> net::awaitable<bool> {
    co_await idem::async::sleep_for(20ms);
    co_return false;
  };
  const auto started = std::chrono::steady_clock::now();
  const auto first = run_on(io, [&]() -> net::awaitable<std::size_t> {
    auto either = co_await (slow() || soon());
    co_return either.index();
  }());
  CHECK(first == 1);
  CHECK(std::chrono::steady_clock::now() - started < 1s);
  CHECK(c.broken());
  CHECK_THROWS_AS(run_on(io, c.execute("SELECT 1", {})), idem::StoreError);
  // The handle is still the service's to close (ServiceHandle's destructor).
}

TEST_CASE(
    "async mysql connection: a connection outlives the loop it waited on and serves another") {
  // Its socket is registered with a loop for one wait at a time, so it is tied to none.
  auto first = std::make_unique<net::io_context>();
  std::unique_ptr<AsyncConnection> c = run_on(*first, AsyncConnection::open(idem_test::server()));
  CHECK(run_on(*first, c->select("SELECT 1", {})).size() == 1);
  first.reset();
  net::io_context second;
  for (int i = 0; i < 50; ++i) {
    REQUIRE(run_on(second, c->select("SELECT SLEEP(0.001)", {})).size() == 1);
  }
  CHECK_FALSE(c->broken());
}

TEST_CASE("async mysql connection: a borrowed handle's socket keeps its blocking mode") {
  idem_test::ServiceHandle service;
  const int fd = mysql_get_socket(service.mysql);
  const int before = ::fcntl(fd, F_GETFL);
  net::io_context io;
  AsyncConnection c(service.mysql);
  for (int i = 0; i < 3; ++i) {
    CHECK(run_on(io, c.select("SELECT SLEEP(0.01)", {})).size() == 1);  // waits on the socket
    CHECK(::fcntl(fd, F_GETFL) == before);  // back after each call, while still borrowed
  }
}
