// idem::sqlite::Pool (idem/sqlite/pool.hpp): PoolParams bound it as they bound the other
// backends' pools; a handle given back inside a transaction is rolled back.
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include <idem/sqlite.hpp>

#include "../support/sqlite_file.hpp"

using namespace std::chrono_literals;

TEST_CASE("sqlite Pool: PoolParams::size bounds the connections and acquire_timeout the wait") {
  idem_test::TempDir dir;
  idem::sqlite::Pool pool{dir / "pool.db", {}, {.size = 2, .acquire_timeout = 50ms}};
  auto first = pool.acquire();
  auto second = pool.acquire();
  CHECK(&*first != &*second);
  const auto began = std::chrono::steady_clock::now();
  try {
    auto third = pool.acquire();
    FAIL("a third handle from a pool of two");
  } catch (const idem::StoreError& e) {
    CHECK(e.retryable());
    CHECK_THAT(e.what(), Catch::Contains("idem::sqlite::Pool") && Catch::Contains("(size 2)"));
  }
  CHECK(std::chrono::steady_clock::now() - began >= 50ms);
}

TEST_CASE("sqlite Pool: a connection given back inside a transaction is rolled back") {
  idem_test::TempDir dir;
  idem::sqlite::Pool pool{dir / "pool.db", {}, {.size = 1}};
  {
    auto c = pool.acquire();
    c->exec("CREATE TABLE t (v INTEGER)");
    c->exec("BEGIN");
    c->execute("INSERT INTO t (v) VALUES (?)", {1});
  }
  auto c = pool.acquire();
  CHECK_FALSE(c->in_transaction());
  auto rows = c->query("SELECT COUNT(*) FROM t");
  REQUIRE(rows.next());
  CHECK(rows.integer(0) == 0);
}

TEST_CASE("sqlite Pool: bad PoolParams are refused before any connection opens") {
  idem_test::TempDir dir;
  CHECK_THROWS_AS(idem::sqlite::Pool(dir / "pool.db", {}, {.size = 0}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::sqlite::Pool(dir / "pool.db", {}, {.acquire_timeout = -1ms}),
                  idem::InvalidArgument);
  CHECK_FALSE(std::filesystem::exists(dir / "pool.db"));
}
