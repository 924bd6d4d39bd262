// idem::pg::AsyncTransaction and with_transaction for coroutines (idem/pg/async_transaction.hpp)
// on the real PostgreSQL server: the claim commits with the business's writes and duplicates
// replay (from the pool and from the service's own connections); a body that throws or forgets
// its claim leaves nothing; the transaction as an object, ended as its claims say and rolled back
// when destroyed before it ended; the service's PGconn* left as it was (libpq's mode, no prepared
// statement, no setting); a transaction the service's own SQL broke; a consumer's failed
// attempts counted after the rollback; cancellation between statements; the tries run again
// (a serialization failure, a lost pooled connection) and not (the service's connection lost);
// and the finished record sent with the COMMIT in one round trip.
#include <libpq-fe.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <idem/async/consume.hpp>
#include <nlohmann/json.hpp>

#include "../support/async_scenarios.hpp"
#include "../support/pg_async.hpp"
#include "../support/pg_server.hpp"
#include "../support/pg_service.hpp"

using namespace std::chrono_literals;
namespace net = idem::async::net;
using idem::pg::AsyncConnection;
using idem::pg::AsyncTransaction;
using idem_test::run_on;
using idem_test::ServiceConnection;
using Guard = idem::async::IdempotencyGuard<idem::pg::AsyncBoundStore>;

namespace {

net::awaitable<void> insert_row(AsyncConnection& c, const std::string& table,
                                const std::string& trade_no) {
  const std::vector<idem::pg::Param> values{trade_no};
  co_await c.execute("INSERT INTO " + table + " (trade_no) VALUES ($1)", values);
}

// A poison message consumed in `tx`: its business writes a row, then fails, every time.
net::awaitable<idem::Ack> consume_poison(AsyncTransaction& tx, const idem::pg::AsyncStore& store,
                                         const std::string& table, const idem::Key& key,
                                         const idem::Options& options, int& runs) {
  auto bound = tx.bind(store);
  AsyncConnection& c = tx.connection();
  const auto apply = [&]() -> net::awaitable<void> {
    ++runs;
    co_await insert_row(c, table, key.id());
    throw std::runtime_error("the ledger rejects this payment");
  };
  co_return co_await idem::async::consume(bound, key, "fp", apply, options);
}

}  // namespace

TEST_CASE(
    "async pg: with_transaction commits the claim with the business writes, and its duplicates "
    "replay") {
  // claim_first: the duplicates wait on the claim's row lock. record_last: they run beside it,
  // their result's INSERT meets its row, and their transaction runs again and replays.
  const auto how = GENERATE(idem::BoundClaim::claim_first, idem::BoundClaim::record_last);
  idem_test::PgAsyncTable t(16, {.bound_claim = how});
  idem_test::PgBusiness biz(t.blocking.pool);
  net::io_context io;
  int ran = 0;
  int replayed = 0;
  std::vector<std::string> errors;
  for (int i = 0; i < 20; ++i) {
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          try {
            const int amount = co_await idem::pg::with_transaction(
                *t.pool, [&](AsyncTransaction& tx) -> net::awaitable<int> {
                  auto bound = tx.bind(t.store);
                  auto guard = co_await Guard::claim(bound, {"PAY", "TX-1"}, "fp");
                  if (!guard.acquired()) {
                    ++replayed;
                    co_return guard.replay<int>().value();
                  }
                  ++ran;
                  co_await insert_row(tx.connection(), biz.name, "TX-1");
                  co_await idem::async::sleep_for(2ms);
                  co_await guard.commit(299);
                  co_return 299;
                });
            CHECK(amount == 299);
          } catch (const std::exception& e) {
            errors.push_back(e.what());
          }
        },
        net::detached);
  }
  io.run();
  INFO((errors.empty() ? std::string() : errors.front()));
  CHECK(errors.empty());
  if (how == idem::BoundClaim::claim_first) {
    CHECK(ran == 1);
  } else {
    CHECK(ran >= 1);  // speculative runs, all but one rolled back
  }
  CHECK(replayed == 19);
  CHECK(biz.rows() == 1);
  CHECK(t.count("status = 1") == 1);
}

TEST_CASE(
    "async pg: a with_transaction body that throws or forgets its claim leaves nothing behind") {
  idem_test::PgAsyncTable t;
  idem_test::PgBusiness biz(t.blocking.pool);
  net::io_context io;
  auto body = [&](bool forget) {
    return [&, forget](AsyncTransaction& tx) -> net::awaitable<int> {
      auto bound = tx.bind(t.store);
      auto guard = co_await Guard::claim(bound, {"PAY", "TX-2"}, "fp");
      co_await insert_row(tx.connection(), biz.name, "TX-2");
      if (forget) co_return 1;  // the guard's claim is left open: the commit is refused
      throw std::runtime_error("business failed");
    };
  };
  CHECK_THROWS_WITH(run_on(io, idem::pg::with_transaction(*t.pool, body(false))),
                    "business failed");
  CHECK_THROWS_AS(run_on(io, idem::pg::with_transaction(*t.pool, body(true))), idem::UsageError);
  CHECK(biz.rows() == 0);
  CHECK(t.count() == 0);
}

TEST_CASE(
    "async pg: 40 deliveries on the service's own connections run a payment once and leave each "
    "connection as it was") {
  constexpr int deliveries = 40;
  const auto how = GENERATE(idem::BoundClaim::claim_first, idem::BoundClaim::record_last);
  // An AsyncTransaction on a borrowed AsyncConnection, or with_transaction(PGconn*, ...).
  const bool object = GENERATE(true, false);
  idem_test::PgAsyncTable t(4, {.bound_claim = how});
  idem_test::PgBusiness biz(t.blocking.pool);
  std::vector<std::unique_ptr<ServiceConnection>> service;
  for (int i = 0; i < deliveries; ++i)
    service.push_back(std::make_unique<ServiceConnection>());
  net::io_context io;
  int ran = 0;
  int replayed = 0;
  std::vector<std::string> errors;
  const auto pay = [&](AsyncTransaction& tx) -> net::awaitable<void> {
    auto bound = tx.bind(t.store);
    auto guard = co_await Guard::claim(bound, {"PAY", "OWN-1"}, "fp");
    if (guard.acquired()) {
      ++ran;
      co_await insert_row(tx.connection(), biz.name, "OWN-1");
      co_await idem::async::sleep_for(2ms);
      co_await guard.commit(299);
    } else {
      CHECK(guard.replay<int>().value() == 299);
      ++replayed;
    }
  };
  const auto deliver = [&](PGconn* conn) -> net::awaitable<void> {
    try {
      if (!object) {
        co_await idem::pg::with_transaction(conn, pay);
        co_return;
      }
      AsyncConnection c(conn);
      for (int attempt = 0;; ++attempt) {  // the service's own retry of a transient failure
        try {
          auto tx = co_await AsyncTransaction::begin(c);
          co_await pay(tx);
          // (A co_await inside Catch's CHECK runs twice on GCC 12: named first.)
          const bool committed = co_await tx.commit();
          CHECK(committed);
          co_return;
        } catch (const idem::StoreError& e) {
          if (!e.retryable() || attempt == 5) throw;
        }
      }
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
  };
  for (auto& s : service)
    net::co_spawn(io, deliver(s->conn), net::detached);
  io.run();
  INFO((errors.empty() ? std::string() : errors.front()));
  CHECK(errors.empty());
  if (how == idem::BoundClaim::claim_first) {
    CHECK(ran == 1);
  } else {
    CHECK(ran >= 1);  // speculative runs, all but one superseded and run again
  }
  CHECK(replayed == deliveries - 1);
  CHECK(biz.rows() == 1);
  CHECK(t.count("status = 1") == 1);
  for (const auto& each : service) {
    const ServiceConnection& s = *each;
    CHECK(s.idle());                      // each transaction ended
    CHECK(PQisnonblocking(s.conn) == 0);  // libpq's mode given back
    CHECK(s.text("SELECT count(*) FROM pg_prepared_statements") == "0");
    CHECK(s.text(idem_test::settings_set_by_session) == "0");
    CHECK(s.text("SELECT 'still the service''s'") == "still the service's");
  }
}

TEST_CASE("async pg: an AsyncTransaction destroyed before it ended rolls back") {
  idem_test::PgAsyncTable t;
  idem_test::PgBusiness biz(t.blocking.pool);
  ServiceConnection service;
  net::io_context io;
  AsyncConnection c(service.conn);
  // An exception passes through the coroutine holding the transaction.
  CHECK_THROWS_WITH(run_on(io,
                           [&]() -> net::awaitable<bool> {
                             auto tx = co_await AsyncTransaction::begin(c);
                             auto bound = tx.bind(t.store);
                             auto guard = co_await Guard::claim(bound, {"PAY", "GONE"}, "fp");
                             co_await insert_row(c, biz.name, "GONE");
                             throw std::runtime_error("the service gave up");
                           }()),
                    "the service gave up");
  CHECK(service.idle());
  CHECK(biz.rows() == 0);
  CHECK(t.count() == 0);
  // The connection serves the next transaction.
  CHECK(run_on(io, [&]() -> net::awaitable<bool> {
    auto tx = co_await AsyncTransaction::begin(c);
    auto bound = tx.bind(t.store);
    auto guard = co_await Guard::claim(bound, {"PAY", "GONE"}, "fp");
    co_await insert_row(c, biz.name, "GONE");
    co_await guard.commit(1);
    co_return co_await tx.commit();
  }()));
  CHECK(biz.rows() == 1);
  CHECK(t.count("status = 1") == 1);
}

TEST_CASE("async pg: an AsyncTransaction ends as its claims say, once") {
  const auto how = GENERATE(idem::BoundClaim::claim_first, idem::BoundClaim::record_last);
  idem_test::PgAsyncTable t(8, {.bound_claim = how});
  idem_test::PgBusiness biz(t.blocking.pool);
  net::io_context io;
  auto c = run_on(io, t.pool->acquire(idem::backend::ConnectionPurpose::transaction));
  // (The bound store outlives the guard claimed through it.)
  const auto claimed = [&](idem::pg::AsyncBoundStore& bound,
                           std::string id) -> net::awaitable<Guard> {
    auto guard = co_await Guard::claim(bound, {"PAY", id}, "fp");
    REQUIRE(guard.acquired());
    co_await insert_row(*c, biz.name, id);
    co_return guard;
  };

  SECTION("a retryable failure rolls back: commit() answers false") {
    CHECK_FALSE(run_on(io, [&]() -> net::awaitable<bool> {
      auto tx = co_await AsyncTransaction::begin(*c);
      auto bound = tx.bind(t.store);
      auto guard = co_await claimed(bound, "RETRY");
      const nlohmann::json error{{"error", "gateway busy"}};
      co_await guard.fail(error, true);
      const bool committed = co_await tx.commit();
      CHECK_FALSE(tx.committed());
      co_return committed;
    }()));
    CHECK(biz.rows() == 0);
    CHECK(t.count() == 0);
  }
  SECTION("a claim left open: UsageError naming it, after the rollback") {
    CHECK_THROWS_WITH(run_on(io,
                             [&]() -> net::awaitable<bool> {
                               auto tx = co_await AsyncTransaction::begin(*c);
                               auto bound = tx.bind(t.store);
                               auto guard = co_await claimed(bound, "OPEN");
                               co_return co_await tx.commit();
                             }()),
                      Catch::Contains("PAY/OPEN"));
    CHECK(biz.rows() == 0);
    CHECK(t.count() == 0);
  }
  SECTION("roll_back() whatever the claims say; a second end is a UsageError") {
    CHECK(run_on(io, [&]() -> net::awaitable<bool> {
      auto tx = co_await AsyncTransaction::begin(*c);
      auto bound = tx.bind(t.store);
      auto guard = co_await claimed(bound, "UNDONE");
      co_await guard.commit(1);
      co_await tx.roll_back();
      bool refused = false;
      try {
        (void)co_await tx.commit();
      } catch (const idem::UsageError&) {
        refused = true;
      }
      co_return refused;
    }()));
    CHECK(biz.rows() == 0);
    CHECK(t.count() == 0);
  }
  SECTION("a transaction the caller began (at another isolation level) is the one it ends") {
    CHECK(run_on(io, [&]() -> net::awaitable<bool> {
      co_await c->query("BEGIN ISOLATION LEVEL REPEATABLE READ");
      co_await insert_row(*c, biz.name, "BEFORE");
      auto tx = co_await AsyncTransaction::begin(*c);
      // Still the caller's transaction, not one begun again at the default level.
      const idem::pg::Result level = co_await c->exec("SHOW transaction_isolation", {});
      CHECK(level.text(0, 0) == "repeatable read");
      auto bound = tx.bind(t.store);
      auto guard = co_await claimed(bound, "MINE");
      co_await guard.commit(1);
      co_return co_await tx.commit();
    }()));
    CHECK(biz.rows() == 2);
    CHECK(t.count("status = 1") == 1);
  }
  SECTION("a claim outside any transaction is refused, and writes nothing") {
    auto bound = t.store.bind(*c);
    CHECK_THROWS_WITH(run_on(io, Guard::claim(bound, {"PAY", "LOOSE"}, "fp")),
                      Catch::Contains("no transaction is open") && Catch::Contains("BEGIN"));
    CHECK(t.count() == 0);
  }
  CHECK_FALSE(c->in_transaction());
}

TEST_CASE(
    "async pg: a transaction the service's own SQL broke commits nothing and says why, and a "
    "transaction already open on the service's connection is refused") {
  // claim_first: the result's UPDATE is written at guard.commit, and the COMMIT, answered as a
  // ROLLBACK, is the error. record_last: the finished record's INSERT waits for the COMMIT and
  // goes with it, and is refused first (25P02, the server's error), as the blocking store's.
  const auto how = GENERATE(idem::BoundClaim::claim_first, idem::BoundClaim::record_last);
  idem_test::PgAsyncTable t(8, {.bound_claim = how});
  idem_test::PgBusiness biz(t.blocking.pool);
  ServiceConnection service;
  net::io_context io;
  int ran = 0;
  // The service's own statement fails inside the transaction, and the body catches it: the
  // server rolls the whole transaction back at COMMIT, claim and all.
  const auto body = [&](AsyncTransaction& tx) -> net::awaitable<void> {
    ++ran;
    auto bound = tx.bind(t.store);
    auto guard = co_await Guard::claim(bound, {"PAY", "BROKEN"}, "fp");
    co_await insert_row(tx.connection(), biz.name, "BROKEN");
    co_await guard.commit(1);
    bool refused = false;
    try {
      co_await tx.connection().query("SELECT 1/0");
    } catch (const idem::StoreError&) {
      refused = true;
    }
    CHECK(refused);
  };
  try {
    run_on(io, idem::pg::with_transaction(service.conn, body));
    FAIL("the COMMIT was reported as committed");
  } catch (const idem::StoreError& e) {
    if (how == idem::BoundClaim::claim_first) {
      CHECK_THAT(e.what(), Catch::Contains("its COMMIT rolled it back"));
    } else {
      CHECK_THAT(e.what(), Catch::Contains("25P02"));
    }
    CHECK_FALSE(e.retryable());
  }
  CHECK(ran == 1);
  CHECK(service.idle());
  CHECK(PQisnonblocking(service.conn) == 0);  // given back after the server's refusal too
  CHECK(biz.rows() == 0);
  CHECK(t.count() == 0);

  CHECK(service.text("BEGIN; SELECT 'open'") == "open");
  const auto nothing = [&](AsyncTransaction&) -> net::awaitable<void> {
    ++ran;
    co_return;
  };
  CHECK_THROWS_AS(run_on(io, idem::pg::with_transaction(service.conn, nothing)), idem::UsageError);
  CHECK(ran == 1);
  CHECK(PQtransactionStatus(service.conn) == PQTRANS_INTRANS);  // the service's, untouched
  CHECK_THROWS_AS(run_on(io, idem::pg::with_transaction(static_cast<PGconn*>(nullptr), nothing)),
                  idem::InvalidArgument);
}

TEST_CASE(
    "async pg: a poison message in a coroutine transaction is counted after each rollback, and "
    "dead-lettered on its last attempt") {
  const auto how = GENERATE(idem::BoundClaim::claim_first, idem::BoundClaim::record_last);
  // with_transaction on the pool, or on the service's own connection.
  const bool own_connection = GENERATE(false, true);
  idem_test::PgAsyncTable t(8, {.bound_claim = how});
  idem_test::PgBusiness biz(t.blocking.pool);
  ServiceConnection service;
  net::io_context io;
  const idem::Key key{"order.paid", "poison"};
  const idem::ConsumerPolicy policy{.max_attempts = 3};
  const idem::Options options{.consumer = &policy};
  int runs = 0;
  const auto consume_on = [&](AsyncTransaction& tx) {
    return consume_poison(tx, t.store, biz.name, key, options, runs);
  };
  const auto deliver = [&]() -> net::awaitable<idem::Ack> {
    if (own_connection) co_return co_await idem::pg::with_transaction(service.conn, consume_on);
    co_return co_await idem::pg::with_transaction(*t.pool, consume_on);
  };
  for (std::uint32_t attempt = 1; attempt < 3; ++attempt) {
    const idem::Ack ack = run_on(io, deliver());
    CHECK(ack == idem::Ack::retry_later);
    CHECK(ack.delay == policy.delay_after(attempt));
    // Counted although the claim rolled back with the business's row.
    CHECK(t.count("attempts = " + std::to_string(attempt) + " AND retryable = 1") == 1);
    CHECK(biz.rows() == 0);
  }
  const idem::Ack last = run_on(io, deliver());
  CHECK(last == idem::Ack::dead_letter);
  CHECK_THAT(last.reason, Catch::Contains("gave up after 3 attempts"));
  const idem::Ack copy = run_on(io, deliver());
  CHECK(copy == idem::Ack::dead_letter);
  CHECK(copy.verdict == idem::Verdict::replayed);
  CHECK(runs == 3);
  CHECK(biz.rows() == 0);
  const auto record = t.blocking.store.find(key);
  REQUIRE(record);
  CHECK(record->status == idem::Status::failed);
  CHECK_FALSE(record->retryable);
  CHECK(record->attempts == 3);
  CHECK(nlohmann::json::parse(record->snapshot)["error"] == "idem.attempts_exhausted");
  CHECK(service.idle());
}

TEST_CASE(
    "async pg: a transaction cancelled between its statements (||, parallel_group, a signal) rolls "
    "back before the cancellation completes, on the service's connection and on the pool's") {
  const bool own_connection = GENERATE(true, false);
  const auto way = GENERATE(idem_test::CancelWay::either_operator,
                            idem_test::CancelWay::parallel_group, idem_test::CancelWay::signal);
  // Where the cancellation meets the transaction: in with_transaction's body (it waits for a
  // gateway), or before the object's commit() (which then throws before it starts, and the
  // object's destructor rolls back).
  const bool at_commit = GENERATE(false, true);
  INFO("own connection: " << own_connection << ", at commit: " << at_commit << ", cancelled way "
                          << static_cast<int>(way));
  idem_test::PgAsyncTable t(2);
  idem_test::PgBusiness biz(t.blocking.pool);
  ServiceConnection service;
  net::io_context io;
  const idem::Key key{"PAY", "CUT"};
  int ran = 0;
  unsigned long server_process = 0;  // the one serving the cancelled transaction
  // Opened when the transaction reaches its wait: the cancellation comes then (a fixed timer
  // could come first, while a slow build still connects or writes). `reached` also covers a
  // transaction that gets there before the gate's wait began (a server that answers before the
  // client reads finishes each call without suspending).
  std::optional<net::steady_timer> gate;
  bool reached = false;
  const auto opened = [&]() -> net::awaitable<void> {
    if (!reached) co_await gate->async_wait(net::as_tuple(net::use_awaitable));
  };
  const auto body = [&](AsyncTransaction& tx) -> net::awaitable<void> {
    ++ran;
    server_process = tx.connection().id();
    auto bound = tx.bind(t.store);
    auto guard = co_await Guard::claim(bound, key, "fp");
    REQUIRE(guard.acquired());
    co_await insert_row(tx.connection(), biz.name, key.id());
    reached = true;
    gate->cancel();
    co_await idem::async::sleep_for(10s);  // the gateway: cut by the cancellation
    co_await guard.commit(1);
  };
  const auto object_at_commit = [&](AsyncConnection& c) -> net::awaitable<void> {
    auto tx = co_await AsyncTransaction::begin(c);
    server_process = c.id();
    auto bound = tx.bind(t.store);
    auto guard = co_await Guard::claim(bound, key, "fp");
    co_await insert_row(c, biz.name, key.id());
    co_await guard.commit(1);
    ++ran;
    reached = true;
    gate->cancel();
    net::steady_timer pause(co_await net::this_coro::executor, 10s);
    bool cut = false;
    try {
      co_await pause.async_wait(net::use_awaitable);
    } catch (const boost::system::system_error&) {
      cut = true;  // the coroutine is cancelled: its next co_await throws at once
    }
    CHECK(cut);
    (void)co_await tx.commit();  // throws operation_aborted; the destructor rolls back
  };
  const auto deliver = [&]() -> net::awaitable<void> {
    if (at_commit && own_connection) {
      AsyncConnection c(service.conn);
      co_await object_at_commit(c);
    } else if (at_commit) {
      auto c = co_await t.pool->acquire(idem::backend::ConnectionPurpose::transaction);
      co_await object_at_commit(*c);
    } else if (own_connection) {
      co_await idem::pg::with_transaction(service.conn, body);
    } else {
      co_await idem::pg::with_transaction(*t.pool, body);
    }
  };
  // The server process of the cancelled transaction, read the moment the cancelled call
  // completes: idle, not idle in transaction (holding the claim's row and the business's).
  std::string state_at_completion;
  const auto race = [&]() -> net::awaitable<void> {
    gate.emplace(co_await net::this_coro::executor, 1h);
    const bool cut = co_await idem_test::cut_when(deliver(), opened(), way);
    CHECK(cut);  // the gate won: the delivery was cancelled
    const auto c = t.blocking.pool->acquire();
    const idem::pg::Result r = c->exec("SELECT state FROM pg_stat_activity WHERE pid = $1",
                                       {static_cast<std::int64_t>(server_process)});
    state_at_completion = r.rows() == 1 ? std::string(r.text(0, 0)) : "(gone)";
  };
  run_on(io, race());
  CHECK(ran == 1);
  CHECK(server_process != 0);
  CHECK(state_at_completion == "idle");
  CHECK(service.idle());
  CHECK(t.count() == 0);
  CHECK(biz.rows() == 0);
  CHECK(PQisnonblocking(service.conn) == 0);
  CHECK(service.text("SELECT 'still usable'") == "still usable");
  // The pool's connection was handed back with nothing open: the next transaction on it runs.
  const auto again = [&](AsyncTransaction& tx) -> net::awaitable<int> {
    auto bound = tx.bind(t.store);
    auto guard = co_await Guard::claim(bound, key, "fp");
    REQUIRE(guard.acquired());
    co_await insert_row(tx.connection(), biz.name, key.id());
    co_await guard.commit(2);
    co_return 2;
  };
  CHECK(run_on(io, idem::pg::with_transaction(*t.pool, again)) == 2);
  CHECK(biz.rows() == 1);
  CHECK(t.count("status = 1") == 1);
}

TEST_CASE(
    "async pg: with_transaction runs the body again after a serialization failure and after "
    "losing a pooled connection, and not after losing the service's") {
  idem_test::PgAsyncTable t(4);
  idem_test::PgBusiness biz(t.blocking.pool);
  net::io_context io;
  // Ends the server process serving `c` from another connection, as an operator would.
  const auto terminate = [&](AsyncConnection& c) {
    auto other = t.blocking.pool->acquire();
    other->exec("SELECT pg_terminate_backend($1)", {static_cast<std::int64_t>(c.id())});
  };

  SECTION("two SERIALIZABLE transactions on one row: one fails at its write and runs again") {
    {
      auto c = t.blocking.pool->acquire();
      c->query("CREATE TABLE " + biz.name + "_counter (n integer NOT NULL)");
      c->query("INSERT INTO " + biz.name + "_counter VALUES (0)");
    }
    int tries = 0;
    int done = 0;
    int reads = 0;
    const std::string read = "SELECT n FROM " + biz.name + "_counter";
    const std::string write = "UPDATE " + biz.name + "_counter SET n = n + 1";
    const std::vector<idem::pg::Param> none;  // (named: GCC 12 and a braced list in a co_await)
    const auto pay = [&](std::string id) -> net::awaitable<void> {
      // (Named before the co_await: GCC 12 destroys a lambda capturing by value inside one
      // twice.)
      const auto body = [&, id](AsyncTransaction& tx) -> net::awaitable<void> {
        ++tries;
        co_await tx.connection().query("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE");
        auto bound = tx.bind(t.store);
        auto guard = co_await Guard::claim(bound, {"PAY", id}, "fp");
        REQUIRE(guard.acquired());
        co_await tx.connection().exec(read, none);
        ++reads;
        for (int i = 0; reads < 2 && i < 2000; ++i)  // both have read before either writes
          co_await idem::async::sleep_for(5ms);
        co_await tx.connection().exec(write, none);
        co_await guard.commit(1);
      };
      co_await idem::pg::with_transaction(*t.pool, body);
      ++done;
    };
    net::co_spawn(io, pay("SER-1"), net::detached);
    net::co_spawn(io, pay("SER-2"), net::detached);
    io.run();
    CHECK(done == 2);
    // The one that lost the race ran again (SSI may also fail one on the record table's index
    // pages, hence at least).
    CHECK(tries >= 3);
    CHECK(
        t.blocking.pool->acquire()->exec("SELECT n FROM " + biz.name + "_counter", {}).text(0, 0) ==
        "2");
    CHECK(t.count("status = 1") == 2);
    t.blocking.pool->acquire()->query("DROP TABLE " + biz.name + "_counter");
  }
  SECTION("a pooled connection lost in the body: the next try runs on another and commits") {
    int tries = 0;
    const auto body = [&](AsyncTransaction& tx) -> net::awaitable<int> {
      ++tries;
      auto bound = tx.bind(t.store);
      auto guard = co_await Guard::claim(bound, {"PAY", "LOST"}, "fp");
      REQUIRE(guard.acquired());
      co_await insert_row(tx.connection(), biz.name, "LOST");
      if (tries == 1) terminate(tx.connection());
      co_await insert_row(tx.connection(), biz.name, "LOST-2");  // lost on the first try
      co_await guard.commit(5);
      co_return 5;
    };
    CHECK(run_on(io, idem::pg::with_transaction(*t.pool, body)) == 5);
    CHECK(tries == 2);
    CHECK(biz.rows() == 2);  // the first try's row rolled back with its connection
    CHECK(t.count("status = 1") == 1);
  }
  SECTION("the service's connection lost in the body: not run again on it") {
    ServiceConnection service;
    int tries = 0;
    const auto body = [&](AsyncTransaction& tx) -> net::awaitable<void> {
      ++tries;
      auto bound = tx.bind(t.store);
      auto guard = co_await Guard::claim(bound, {"PAY", "GONE"}, "fp");
      co_await insert_row(tx.connection(), biz.name, "GONE");
      terminate(tx.connection());
      co_await insert_row(tx.connection(), biz.name, "GONE-2");
      co_await guard.commit(1);
    };
    try {
      run_on(io, idem::pg::with_transaction(service.conn, body));
      FAIL("a lost connection was reported as committed");
    } catch (const idem::StoreError& e) {
      CHECK_THAT(e.what(), Catch::Contains("reconnect it and call again"));
      CHECK_FALSE(e.retryable());
    }
    CHECK(tries == 1);
    CHECK(PQstatus(service.conn) == CONNECTION_BAD);
    CHECK(biz.rows() == 0);
    CHECK(t.count() == 0);
  }
}

TEST_CASE(
    "async pg: inside with_transaction a record-last result goes with the COMMIT in one round "
    "trip, and one met there by another request's row is run again and replays") {
  idem_test::PgAsyncTable t(8, {.bound_claim = idem::BoundClaim::record_last});
  idem_test::PgBusiness biz(t.blocking.pool);
  ServiceConnection service;
  net::io_context io;
  int ran = 0;
  const auto pay = [&](AsyncTransaction& tx) -> net::awaitable<int> {
    auto bound = tx.bind(t.store);
    auto guard = co_await Guard::claim(bound, {"PAY", "ROUND"}, "fp");
    if (!guard.acquired()) co_return guard.replay<int>().value();
    ++ran;
    co_await insert_row(tx.connection(), biz.name, "ROUND");
    co_await guard.commit(7);
    co_return 7;
  };
  // libpq's trace of what the service's connection sent: each Sync (extended protocol) or
  // Query (simple protocol) ends one round trip.
  char path[] = "/tmp/idem-pg-trace-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  FILE* trace = fdopen(fd, "w+");
  REQUIRE(trace != nullptr);
  PQtrace(service.conn, trace);
  PQsetTraceFlags(service.conn, PQTRACE_SUPPRESS_TIMESTAMPS);
  CHECK(run_on(io, idem::pg::with_transaction(service.conn, pay)) == 7);
  PQuntrace(service.conn);
  std::rewind(trace);
  int round_trips = 0;
  for (char line[4096]; std::fgets(line, sizeof line, trace) != nullptr;) {
    const std::string l(line);
    if (l.rfind("F\t", 0) == 0 &&
        (l.find("\tSync") != std::string::npos || l.find("\tQuery\t") != std::string::npos)) {
      ++round_trips;
    }
  }
  std::fclose(trace);
  std::remove(path);
  // BEGIN, the claim's read, the business's INSERT, the finished record's INSERT with COMMIT.
  CHECK(round_trips == 4);
  CHECK(ran == 1);
  CHECK(t.count("status = 1") == 1);

  // Another request finished the key while this one ran: its INSERT meets the row at the
  // COMMIT, nothing commits, and the try runs again and replays.
  const idem::Key raced{"PAY", "RACED"};
  int tries = 0;
  const auto racing = [&](AsyncTransaction& tx) -> net::awaitable<int> {
    ++tries;
    auto bound = tx.bind(t.store);
    auto guard = co_await Guard::claim(bound, raced, "fp");
    if (!guard.acquired()) co_return guard.replay<int>().value();
    co_await insert_row(tx.connection(), biz.name, "RACED");
    if (tries == 1) {  // the other request, on the blocking store, finishes first
      CHECK(idem::run_once(t.blocking.store, raced, "fp", [] { return 8; }).value() == 8);
    }
    co_await guard.commit(9);
    co_return 9;
  };
  CHECK(run_on(io, idem::pg::with_transaction(*t.pool, racing)) == 8);
  CHECK(tries == 2);
  CHECK(biz.rows("RACED") == 0);
  CHECK(t.blocking.store.find(raced)->snapshot == "8");
}
