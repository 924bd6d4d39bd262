// idem::pg::with_transaction and idem::pg::Transaction (idem/pg/transaction.hpp) on a real
// PostgreSQL: what commits, what rolls back (a forgotten result, a retryable failure, a body
// that throws, a transaction the service's own SQL broke), the service's own PGconn* left as it
// was, and payments delivered several times crediting once.
#include <atomic>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

#include "../support/pg_server.hpp"
#include "../support/pg_service.hpp"
#include "../support/threads.hpp"

using idem_test::Errors;
using idem_test::PgBusiness;
using idem_test::PgTable;
using idem_test::ServiceConnection;
using idem_test::settings_set_by_session;

TEST_CASE("pg Transaction: begins on the service's connection - commits a finished claim") {
  PgTable t;
  PgBusiness biz(t.pool);
  ServiceConnection own;
  const idem::Key key{"PAY", "tx-ok"};
  {
    idem::pg::Transaction tx(t.store, own.conn);
    CHECK(PQtransactionStatus(own.conn) == PQTRANS_INTRANS);
    const auto out = idem::run_once(tx, key, "fp", [&] {
      biz.insert(own.conn, key.id());
      return 7;
    });
    CHECK(out.value() == 7);
    CHECK(t.count() == 0);  // not yet visible to others
    tx.commit();
    CHECK(tx.committed());
  }
  CHECK(PQtransactionStatus(own.conn) == PQTRANS_IDLE);
  CHECK(biz.rows(key.id()) == 1);
  CHECK(t.count("status = 1") == 1);
  CHECK(own.text(settings_set_by_session) == "0");
}

TEST_CASE("pg Transaction: a retryable failure or a forgotten result commits nothing") {
  PgTable t;
  PgBusiness biz(t.pool);
  ServiceConnection own;
  SECTION("a 5xx after the business wrote: rolled back, the key free for the redelivery") {
    const idem::Key key{"PAY", "tx-5xx"};
    idem::pg::Transaction tx(t.store, own.conn);
    idem::IdempotencyGuard g{tx, key, "fp"};
    REQUIRE(g.acquired());
    biz.insert(own.conn, key.id());
    g.fail("gateway 503", true);
    tx.commit();  // chooses the rollback
    CHECK_FALSE(tx.committed());
    CHECK(biz.rows(key.id()) == 0);
    CHECK(t.count() == 0);
  }
  SECTION("a guard destroyed without a result: UsageError, and nothing committed") {
    const idem::Key key{"PAY", "tx-forgot"};
    idem::pg::Transaction tx(t.store, own.conn);
    {
      idem::IdempotencyGuard g{tx, key, "fp"};
      REQUIRE(g.acquired());
      biz.insert(own.conn, key.id());
    }
    CHECK_THROWS_AS(tx.commit(), idem::UsageError);
    CHECK(biz.rows(key.id()) == 0);
    CHECK(t.count() == 0);
  }
  SECTION("a transaction never committed: the destructor rolls it back") {
    const idem::Key key{"PAY", "tx-never"};
    {
      idem::pg::Transaction tx(t.store, own.conn);
      idem::IdempotencyGuard g{tx, key, "fp"};
      biz.insert(own.conn, key.id());
      g.commit(1);
    }
    CHECK(PQtransactionStatus(own.conn) == PQTRANS_IDLE);
    CHECK(biz.rows(key.id()) == 0);
    CHECK(t.count() == 0);
  }
  CHECK(own.text(settings_set_by_session) == "0");
}

TEST_CASE(
    "pg Store without a pool: its table and transactions on the service's connection "
    "only") {
  ServiceConnection own;
  const std::string table = idem_test::unique_pg_table("poolless");
  idem::pg::Store store({.table = table});
  CHECK_FALSE(store.has_pool());
  CHECK_THROWS_AS(store.ensure_schema(), idem::UsageError);
  CHECK_THROWS_AS(store.claim(idem::Key{"PAY", "x"}, "fp", {}), idem::UsageError);
  (void)store.ensure_schema(own.conn);
  (void)store.check_schema(own.conn);
  {
    idem::pg::Transaction tx(store, own.conn);
    CHECK(idem::run_once(tx, idem::Key{"PAY", "poolless"}, "fp", [] { return 5; }).value() == 5);
    tx.commit();
  }
  CHECK(own.text(("SELECT count(*) FROM " + table + " WHERE status = 1").c_str()) == "1");
  own.text("BEGIN");
  CHECK_THROWS_AS(store.ensure_schema(own.conn), idem::UsageError);
  own.text("ROLLBACK");
  own.text(("DROP TABLE " + table).c_str());
}

TEST_CASE("pg with_transaction: a body that throws commits nothing - the redelivery runs it") {
  PgTable t;
  PgBusiness biz(t.pool);
  const idem::Key key{"ORDER", "throws"};
  auto run = [&](bool fail) {
    return idem::pg::with_transaction(t.store.pool(), [&](idem::pg::Connection& c) {
      auto tx = t.store.bind(c);
      return idem::run_once(tx, key, "fp", [&] {
        biz.insert(c, key.id());
        if (fail) throw std::runtime_error("the consumer failed");
        return 1;
      });
    });
  };
  CHECK_THROWS_WITH(run(true), "the consumer failed");
  CHECK(biz.rows() == 0);
  CHECK(t.count() == 0);
  CHECK(run(false).verdict() == idem::Verdict::acquired);
  CHECK(run(false).verdict() == idem::Verdict::replayed);
  CHECK(biz.rows() == 1);
}

TEST_CASE(
    "pg with_transaction on the service's connection: checks - commits - leaves the session "
    "as it was") {
  PgTable t;
  PgBusiness biz(t.pool);
  ServiceConnection own;
  const std::string isolation = own.text("SHOW transaction_isolation");
  const auto out = idem::pg::with_transaction(own.conn, [&](PGconn* conn) {
    auto tx = t.store.bind(conn);
    return idem::run_once(tx, idem::Key{"PAY", "own"}, "fp", [&] {
      biz.insert(conn, "own");
      return std::string("paid");
    });
  });
  CHECK(out.value() == "paid");
  CHECK(biz.rows("own") == 1);
  CHECK(PQtransactionStatus(own.conn) == PQTRANS_IDLE);
  CHECK(own.text(settings_set_by_session) == "0");
  CHECK(own.text("SHOW transaction_isolation") == isolation);

  CHECK_THROWS_AS(idem::pg::with_transaction(nullptr, [](PGconn*) { return 1; }),
                  idem::InvalidArgument);
  own.text("BEGIN");
  CHECK_THROWS_WITH(idem::pg::with_transaction(own.conn, [](PGconn*) { return 1; }),
                    Catch::Contains("already open"));
  own.text("ROLLBACK");
  CHECK_THROWS_AS(t.store.bind(static_cast<PGconn*>(nullptr)), idem::InvalidArgument);
  // A claim outside any transaction would commit on its own: refused.
  auto loose = t.store.bind(own.conn);
  CHECK_THROWS_WITH(loose.claim(idem::Key{"PAY", "loose"}, "fp", {}),
                    Catch::Contains("no transaction is open"));
  CHECK(t.count("idempotent_key = 'loose'") == 0);
}

TEST_CASE("pg: a transaction the service's own SQL broke commits nothing - and says why") {
  PgTable t;
  PgBusiness biz(t.pool);
  SECTION("broken before the result is recorded: the record's write names the server's error") {
    const idem::Key key{"ORDER", "broken-early"};
    CHECK_THROWS_WITH(idem::pg::with_transaction(t.store.pool(),
                                                 [&](idem::pg::Connection& c) {
                                                   auto tx = t.store.bind(c);
                                                   return idem::run_once(tx, key, "fp", [&] {
                                                     biz.insert(c, key.id());
                                                     try {  // refused, and swallowed
                                                       c.query("SELECT 1/0");
                                                     } catch (const idem::StoreError&) {
                                                     }
                                                     return 1;
                                                   });
                                                 }),
                      Catch::Contains("25P02"));
  }
  SECTION("broken after the result is recorded: the COMMIT, answered as a ROLLBACK, is an error") {
    ServiceConnection own;
    idem::pg::Transaction tx(t.store, own.conn);
    const auto out = idem::run_once(tx, idem::Key{"ORDER", "broken-late"}, "fp", [&] {
      biz.insert(own.conn, "broken-late");
      return 1;
    });
    REQUIRE(out.value() == 1);
    own.text("SELECT 1/0");  // refused: the transaction is now aborted
    CHECK_THROWS_WITH(tx.commit(), Catch::Contains("rolled it back"));
    CHECK_FALSE(tx.committed());
  }
  CHECK(biz.rows() == 0);
  CHECK(t.count() == 0);
}

TEST_CASE("pg Transaction: 12 service threads deliver one payment 4 times each - one credit") {
  const idem::BoundClaim how =
      GENERATE(idem::BoundClaim::record_last, idem::BoundClaim::claim_first);
  INFO("bound claim: " << (how == idem::BoundClaim::record_last ? "record_last" : "claim_first"));
  PgTable t(4, {.bound_claim = how});
  PgBusiness credits(t.pool);
  Errors failures;
  std::atomic<int> committed_runs{0};
  idem_test::run_threads(12, [&](int) {
    ServiceConnection own;
    for (int delivery = 0; delivery < 4; ++delivery) {
      try {
        // The service's retry around its own transaction: a superseded record-last claim or
        // a serialization failure leaves commit() as a retryable StoreError.
        idem::retry(idem::RetryPolicy{.max_attempts = 50}, "test", "credit", [&](int) {
          idem::pg::Transaction tx(t.store, own.conn);
          bool ran = false;
          (void)idem::run_once(tx, idem::Key{"PAY", "pay-1"}, "fp", [&] {
            ran = true;
            credits.insert(own.conn, "pay-1");
            return 100;
          });
          tx.commit();
          if (ran && tx.committed()) ++committed_runs;
        });
      } catch (const std::exception& e) {
        failures.add(e.what());
      }
    }
  });
  INFO("first error: " << failures.first());
  CHECK(failures.size() == 0);
  CHECK(committed_runs == 1);
  CHECK(credits.rows() == 1);
  CHECK(t.count("status = 1") == 1);
}
