// idem::pg::AsyncConnection and AsyncPool (idem/pg/async_connection.hpp, async_pool.hpp) on the
// test server: the blocking connection's rules (prepared statements, statement_timeout, typed
// errors) hold, a terminated connection is replaced, a transaction left open is rolled back.
#include <chrono>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "../support/pg_async.hpp"

namespace {

namespace net = idem::async::net;
using idem_test::run_on;

net::awaitable<long long> prepared_on(idem::pg::AsyncConnection& c) {
  co_return *(co_await c.exec("SELECT count(*) FROM pg_prepared_statements", {})).integer(0, 0);
}

const std::string pg_async_probe_sql = "SELECT $1::int8 + 1";

}  // namespace

TEST_CASE(
    "pg AsyncConnection: prepares each statement once - prepared_statements = false prepares "
    "nothing") {
  net::io_context io;
  for (const bool prepare : {true, false}) {
    auto c = run_on(io, idem::pg::AsyncConnection::open({.conninfo = idem_test::pg_conninfo(),
                                                         .prepared_statements = prepare}));
    for (int i = 0; i < 3; ++i) {
      CHECK(run_on(io, c->exec(pg_async_probe_sql, {i})).integer(0, 0) == i + 1);
    }
    // The count's own statement is prepared too when statements are.
    CHECK(run_on(io, prepared_on(*c)) == (prepare ? 2 : 0));
  }
}

TEST_CASE(
    "pg AsyncConnection: statement_timeout is set when it opens, and a failed statement is a "
    "typed error that leaves it usable") {
  net::io_context io;
  auto c = run_on(io, idem::pg::AsyncConnection::open({.conninfo = idem_test::pg_conninfo()}));
  CHECK(run_on(io, c->exec("SHOW statement_timeout", {})).text(0, 0) == "30s");
  try {
    (void)run_on(io, c->exec("SELEC 1", {}));
    FAIL("a syntax error passed");
  } catch (const idem::StoreError& e) {
    CHECK(e.diagnostics().sqlstate == "42601");
    CHECK_FALSE(e.retryable());
  }
  CHECK_FALSE(c->broken());
  CHECK(run_on(io, c->exec("SELECT 7", {})).integer(0, 0) == 7);

  auto bounded = run_on(
      io, idem::pg::AsyncConnection::open({.conninfo = idem_test::pg_conninfo(),
                                           .statement_timeout = std::chrono::milliseconds{200}}));
  try {
    (void)run_on(io, bounded->exec("SELECT pg_sleep(5)", {}));
    FAIL("a 5 s statement ran under a 200 ms statement_timeout");
  } catch (const idem::StoreError& e) {
    CHECK(e.diagnostics().sqlstate == "57014");
    CHECK(e.retryable());
  }
  CHECK(run_on(io, bounded->exec("SELECT 1", {})).integer(0, 0) == 1);
}

TEST_CASE("pg AsyncConnection: a server that is not there is a retryable connection failure") {
  net::io_context io;
  try {
    (void)run_on(io, idem::pg::AsyncConnection::open(
                         {.conninfo = "host=/nonexistent-idem-socket-dir dbname=idem"}));
    FAIL("connected to nothing");
  } catch (const idem::StoreError& e) {
    CHECK(e.diagnostics().sqlstate == "08006");
    CHECK(e.retryable());
  }
}

TEST_CASE(
    "pg AsyncPool: a terminated connection fails its statement as lost and is replaced - a "
    "transaction left open is rolled back") {
  idem_test::PgTable t;
  net::io_context io;
  idem::pg::AsyncPool pool({.conninfo = idem_test::pg_conninfo()}, {.size = 1});
  auto pid_of = [&]() -> net::awaitable<unsigned long> {
    auto c = co_await pool.acquire();
    co_return c->id();
  };
  const unsigned long first = run_on(io, pid_of());
  CHECK(t.scalar("SELECT count(*) FROM pg_terminate_backend(" + std::to_string(first) + ")") == 1);
  auto lost = [&]() -> net::awaitable<int> {
    auto c = co_await pool.acquire();
    try {
      co_await c->exec("SELECT 1", {});
      co_return 0;
    } catch (const idem::StoreError& e) {
      CHECK(e.retryable());
      CHECK(c->broken());
      co_return 1;
    }
  };
  // The terminated session is noticed when it is used (or pinged after ping_after_idle).
  CHECK(run_on(io, lost()) == 1);
  const unsigned long second = run_on(io, pid_of());
  CHECK(second != first);

  const std::string insert = "INSERT INTO " + t.store.table() +
                             " (idempotent_key, biz_type, owner_token, lease_until, created_at, "
                             "updated_at, expire_at) VALUES ('left', 'T', 'o', now(), now(), "
                             "now(), now())";
  auto leave_open = [&]() -> net::awaitable<bool> {
    auto c = co_await pool.acquire();
    co_await c->query("BEGIN");
    co_await c->query(insert);
    co_return c->in_transaction();
  };
  CHECK(run_on(io, leave_open()));
  auto in_transaction = [&]() -> net::awaitable<bool> {
    auto c = co_await pool.acquire();
    co_return c->in_transaction();
  };
  CHECK_FALSE(run_on(io, in_transaction()));
  CHECK(t.count() == 0);
  CHECK(run_on(io, pid_of()) == second);  // the same connection, rolled back, not replaced
}
