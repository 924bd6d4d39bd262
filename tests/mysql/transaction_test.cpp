// idem::mysql::with_transaction on idem's pool: a transaction begins by turning autocommit off
// (once per connection; it stays off between transactions, so no START TRANSACTION round
// trip), and the pool hands every other user the session with autocommit on again.
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

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
