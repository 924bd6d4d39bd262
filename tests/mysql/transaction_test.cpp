// idem/mysql/transaction.hpp. with_transaction on idem's pool: a transaction begins by turning
// autocommit off (once per connection; it stays off between transactions, so no START
// TRANSACTION round trip), and the pool hands every other user the session with autocommit on
// again. idem::mysql::Transaction: one transaction on the service's own MYSQL* as an object,
// committing only what a try of with_transaction would commit.
#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <idem/guard.hpp>
#include <idem/run_once.hpp>

#include "../support/mysql_server.hpp"
#include "../support/session_status.hpp"

using idem_test::BusinessTable;
using idem_test::session_count;
using idem_test::Table;

namespace {

// A connection of its own, outside the pool: sees only what was committed.
idem::mysql::Connection observer() {
  return idem::mysql::Connection(idem_test::server());
}

long long rows_seen(idem::mysql::Connection& c, const BusinessTable& t, const std::string& no) {
  const auto rows = c.select("SELECT COUNT(*) FROM `" + t.name + "` WHERE trade_no = ?", {no});
  return *rows.at(0).at(0).integer();
}

}  // namespace

TEST_CASE("with_transaction on the pool sends no START TRANSACTION after a connection's first") {
  Table t(1);
  BusinessTable biz(t.pool);
  long long begins_before = 0;
  long long autocommit_sets_before = 0;
  {
    auto c = t.pool->acquire();
    begins_before = session_count(*c, "Com_begin");
    autocommit_sets_before = session_count(*c, "Com_set_option");
  }
  for (int i = 0; i < 3; ++i) {
    idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      CHECK_FALSE(c.autocommit());
      biz.insert(c, "T-" + std::to_string(i));
    });
  }
  // The same connection (a pool of one) began three transactions: autocommit went off once,
  // and stayed off between them.
  idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
    CHECK(session_count(c, "Com_begin") == begins_before);
    CHECK(session_count(c, "Com_set_option") == autocommit_sets_before + 1);
  });
  CHECK(biz.rows() == 3);
}

TEST_CASE("after with_transaction the pool hands out a session that autocommits") {
  Table t(1);
  BusinessTable biz(t.pool);
  auto other = observer();
  idem::mysql::with_transaction(*t.pool,
                                [&](idem::mysql::Connection& c) { biz.insert(c, "in-tx"); });

  SECTION("a statement on an acquired connection commits on its own") {
    auto c = t.pool->acquire();
    CHECK(c->autocommit());
    biz.insert(*c, "plain");
    CHECK(rows_seen(other, biz, "plain") == 1);  // seen while the handle is still held
  }
  SECTION("the standalone store's claim on the same connection is committed at once") {
    const auto r = t.store.claim(idem::Key{"PAY", "after-tx"}, "fp", {});
    REQUIRE(r.verdict == idem::Verdict::acquired);
    const auto rows = other.select("SELECT COUNT(*) FROM " + t.store.table() +
                                       " WHERE idempotent_key = 'after-tx' AND status = 0",
                                   {});
    CHECK(*rows.at(0).at(0).integer() == 1);
  }
}

TEST_CASE(
    "with autocommit kept off, a transaction's writes stay invisible until COMMIT and a "
    "throwing body leaves none") {
  Table t(1);
  BusinessTable biz(t.pool);
  auto other = observer();
  idem::mysql::with_transaction(*t.pool,
                                [&](idem::mysql::Connection& c) { biz.insert(c, "first"); });

  idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
    biz.insert(c, "second");
    CHECK(rows_seen(other, biz, "second") == 0);
  });
  CHECK(rows_seen(other, biz, "second") == 1);

  CHECK_THROWS_AS(idem::mysql::with_transaction(*t.pool,
                                                [&](idem::mysql::Connection& c) {
                                                  biz.insert(c, "third");
                                                  throw std::runtime_error("business failed");
                                                }),
                  std::runtime_error);
  // The rolled-back write does not surface with the next transaction's COMMIT either.
  idem::mysql::with_transaction(*t.pool,
                                [&](idem::mysql::Connection& c) { biz.insert(c, "fourth"); });
  CHECK(rows_seen(other, biz, "third") == 0);
  CHECK(rows_seen(other, biz, "fourth") == 1);
}

TEST_CASE(
    "with_transaction on a lent handle begins with START TRANSACTION and leaves its "
    "autocommit as it was") {
  Table t(1);
  BusinessTable biz(t.pool);
  idem::mysql::Connection own(idem_test::server());
  const long long begins = session_count(own, "Com_begin");
  auto lend = [&](auto&& use) { return use(own.native()); };
  idem::mysql::with_transaction(lend, [&](idem::mysql::Connection& c) { biz.insert(c, "lent"); });
  CHECK(session_count(own, "Com_begin") == begins + 1);
  CHECK(own.autocommit());
  CHECK(biz.rows() == 1);
}

// idem::mysql::Transaction: one transaction on the service's own MYSQL*, as an object.
namespace {

// The service's own handle, opened without idem's pool; business SQL goes through a
// Connection borrowing it.
struct ServiceHandle {
  idem::mysql::Connection owner{idem_test::server()};
  MYSQL* handle() { return owner.native(); }
};

void insert_on(MYSQL* m, const BusinessTable& biz, const std::string& trade_no) {
  idem::mysql::Connection borrowed(m);
  borrowed.execute("INSERT INTO `" + biz.name + "` (trade_no) VALUES (?)", {trade_no});
}

bool open_on(MYSQL* m) {
  return (m->server_status & SERVER_STATUS_IN_TRANS) != 0;
}

}  // namespace

TEST_CASE("mysql Transaction: begins on the service's handle - commits a finished claim") {
  Table t;
  BusinessTable biz(t.pool);
  ServiceHandle service;
  const idem::Key key{"PAY", "own-commit"};
  for (int delivery = 0; delivery < 3; ++delivery) {
    idem::mysql::Transaction tx(t.store, service.handle());
    const auto out = idem::run_once(tx, key, "", [&] {
      insert_on(service.handle(), biz, key.id());
      return delivery;
    });
    CHECK(out.value() == 0);  // the first delivery's response, replayed
    tx.commit();
    CHECK(tx.committed());
    CHECK_FALSE(open_on(service.handle()));
  }
  CHECK(biz.rows() == 1);
  CHECK(t.store.find(key)->status == idem::Status::succeeded);
}

TEST_CASE("mysql Transaction: a retryable failure or a forgotten result commits nothing") {
  Table t;
  BusinessTable biz(t.pool);
  ServiceHandle service;
  SECTION("failed retryably: commit() rolls back") {
    idem::mysql::Transaction tx(t.store, service.handle());
    idem::IdempotencyGuard guard{tx, idem::Key{"PAY", "own-503"}, ""};
    REQUIRE(guard.acquired());
    insert_on(service.handle(), biz, "own-503");
    guard.fail({{"error", "gateway 503"}}, true);
    tx.commit();
    CHECK_FALSE(tx.committed());
  }
  SECTION("abandoned: commit() rolls back and names the claim") {
    idem::mysql::Transaction tx(t.store, service.handle());
    {
      idem::IdempotencyGuard guard{tx, idem::Key{"PAY", "own-forgotten"}, ""};
      REQUIRE(guard.acquired());
      insert_on(service.handle(), biz, "own-forgotten");
    }
    CHECK_THROWS_WITH(tx.commit(), Catch::Contains("PAY/own-forgotten"));
  }
  SECTION("destroyed without commit") {
    idem::mysql::Transaction tx(t.store, service.handle());
    (void)idem::run_once(tx, idem::Key{"PAY", "own-dropped"}, "", [&] {
      insert_on(service.handle(), biz, "own-dropped");
      return 1;
    });
  }
  CHECK_FALSE(open_on(service.handle()));
  CHECK(biz.rows() == 0);
  CHECK(t.count() == 0);
}

TEST_CASE("mysql Transaction: 12 service threads deliver one payment 4 times each - one credit") {
  for (const idem::BoundClaim how :
       {idem::BoundClaim::record_last, idem::BoundClaim::claim_first}) {
    Table t(4, idem::mysql::StoreParams{.bound_claim = how});
    BusinessTable biz(t.pool);
    const idem::Key key{"PAY", "own-race"};
    std::atomic<int> committed_runs{0};
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int n = 0; n < 12; ++n) {
      threads.emplace_back([&] {
        ServiceHandle service;
        for (int delivery = 0; delivery < 4; ++delivery) {
          try {
            // The service's retry around its own transaction: a superseded record-last claim
            // or a deadlock leaves commit() as a retryable StoreError.
            idem::retry(
                idem::RetryPolicy{.max_attempts = 20}, "test", "refund",
                [&](int) {
                  idem::mysql::Transaction tx(t.store, service.handle());
                  bool ran = false;
                  (void)idem::run_once(tx, key, "", [&] {
                    ran = true;
                    insert_on(service.handle(), biz, key.id());
                    return 1;
                  });
                  tx.commit();
                  if (ran && tx.committed()) ++committed_runs;
                },
                [](const idem::StoreError& e, int) {
                  if (!e.retryable()) throw;
                });
          } catch (...) {
            ++failures;
          }
        }
      });
    }
    for (auto& th : threads)
      th.join();
    INFO("bound claim: " << (how == idem::BoundClaim::record_last ? "record_last" : "claim_first"));
    CHECK(failures == 0);
    CHECK(committed_runs == 1);
    CHECK(biz.rows() == 1);
    CHECK(t.count("status = 1") == 1);
  }
}
