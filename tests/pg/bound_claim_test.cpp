// The two ways a bound store claims inside the service's transaction (idem::BoundClaim) on a
// real PostgreSQL, under READ COMMITTED and under SERIALIZABLE: record_last (read, run, INSERT
// the finished record) and claim_first (INSERT a processing row, UPDATE it). Races over real
// connections count executions in a business table.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <latch>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "../support/pg_server.hpp"
#include "../support/threads.hpp"

using namespace std::chrono_literals;
using idem::BoundClaim;
using idem_test::Errors;
using idem_test::PgBusiness;
using idem_test::PgTable;

namespace {

const char* name_of(BoundClaim how) {
  return how == BoundClaim::record_last ? "record_last" : "claim_first";
}

// The session setting of the isolation level under test ("" for the server's default).
std::string isolation_conninfo(bool serializable) {
  return serializable ? idem_test::pg_serializable : "";
}

}  // namespace

TEST_CASE(
    "pg: 12% duplicates over 16 connections in the service's transactions - executions "
    "equal keys") {
  const BoundClaim how = GENERATE(BoundClaim::record_last, BoundClaim::claim_first);
  const bool serializable = GENERATE(false, true);
  INFO("bound_claim = " << name_of(how) << ", serializable = " << serializable);
  PgTable t(16, {.bound_claim = how}, isolation_conninfo(serializable));
  PgBusiness biz(t.pool);
  constexpr int threads = 16, per_thread = 60;
  std::atomic<int> next_key{0}, wrong{0}, fresh{0};
  Errors failures;
  idem_test::run_threads(threads, [&](int th) {
    std::mt19937 rng(static_cast<unsigned>(th) * 7919u + 1);
    for (int i = 0; i < per_thread; ++i) {
      int k = next_key.load();
      if (rng() % 100 < 12 && k > 0) {
        k = std::max(0, k - 1 - static_cast<int>(rng() % 8));
      } else {
        k = next_key++;
      }
      const std::string id = "mix-" + std::to_string(k);
      try {
        const auto out = idem::pg::with_transaction(
            t.store.pool(),
            [&](idem::pg::Connection& c) {
              auto tx = t.store.bind(c);
              return idem::run_once(tx, idem::Key{"ORDER", id}, "fp", [&] {
                biz.insert(c, id);
                return "order " + id;
              });
            },
            {.retry = {.max_attempts = 50, .backoff = 1ms, .max_backoff = 20ms}});
        if (!out || out.value() != "order " + id) ++wrong;
        if (out.verdict() == idem::Verdict::acquired) ++fresh;
      } catch (const std::exception& e) {
        failures.add(e.what());
      }
    }
  });
  INFO("first error: " << failures.first());
  CHECK(failures.size() == 0);
  CHECK(wrong == 0);
  const long long keys = next_key.load();
  CHECK(keys < threads * per_thread);  // there were duplicates
  CHECK(biz.rows() == keys);
  CHECK(biz.keys_executed_twice() == 0);
  CHECK(fresh == keys);
  CHECK(t.count("status = 1") == keys);
}

TEST_CASE(
    "pg: 48 threads on one key in the service's transactions - one execution - 48 equal "
    "answers") {
  const BoundClaim how = GENERATE(BoundClaim::record_last, BoundClaim::claim_first);
  const bool serializable = GENERATE(false, true);
  INFO("bound_claim = " << name_of(how) << ", serializable = " << serializable);
  PgTable t(48, {.bound_claim = how}, isolation_conninfo(serializable));
  PgBusiness biz(t.pool);
  const idem::Key key{"PAY", "one-key"};
  std::atomic<int> wrong{0};
  Errors failures;
  idem_test::run_threads(48, [&](int th) {
    try {
      const auto out = idem::pg::with_transaction(
          t.store.pool(),
          [&](idem::pg::Connection& c) {
            auto tx = t.store.bind(c);
            return idem::run_once(tx, key, "fp", [&] {
              biz.insert(c, key.id());
              return std::string("paid by ") + std::to_string(th);
            });
          },
          {.retry = {.max_attempts = 100, .backoff = 1ms, .max_backoff = 20ms}});
      if (!out || out.value().rfind("paid by ", 0) != 0) ++wrong;
    } catch (const std::exception& e) {
      failures.add(e.what());
    }
  });
  INFO("first error: " << failures.first());
  CHECK(failures.size() == 0);
  CHECK(wrong == 0);
  CHECK(biz.rows() == 1);
  CHECK(t.count("status = 1") == 1);
}

TEST_CASE("pg record-last on the service's own transactions: a superseded claim may not commit") {
  PgTable t(4);
  auto c1 = t.pool->acquire();
  auto c2 = t.pool->acquire();
  const idem::Key key{"PAY", "own-tx"};
  c1->query("BEGIN");
  c2->query("BEGIN");
  auto tx1 = t.store.bind(*c1);
  auto tx2 = t.store.bind(*c2);
  REQUIRE(tx1.how() == BoundClaim::record_last);  // the default
  idem::IdempotencyGuard g1{tx1, key, "fp"};
  idem::IdempotencyGuard g2{tx2, key, "fp"};
  REQUIRE(g1.acquired());
  REQUIRE(g2.acquired());  // neither transaction has written anything yet
  CHECK(t.count() == 0);
  CHECK(!tx1.find(key));  // a record-last claim has no row until its result
  g1.commit(1);
  tx1.check_committable();
  c1->query("COMMIT");
  try {
    g2.commit(2);
    FAIL("the second commit went through");
  } catch (const idem::StoreError& e) {
    CHECK(e.retryable());
    CHECK_THAT(e.what(), Catch::Contains("superseded"));
  }
  CHECK(!tx2.committable());
  c2->query("ROLLBACK");
  // Run again, it replays.
  c2->query("BEGIN");
  auto again = t.store.bind(*c2);
  idem::IdempotencyGuard g3{again, key, "fp"};
  CHECK(g3.verdict() == idem::Verdict::replayed);
  CHECK(g3.replay<int>().value() == 1);
  c2->query("COMMIT");
  CHECK(t.count("status = 1 AND fence = 1") == 1);
}

TEST_CASE("pg claim-first: a duplicate waits on the first transaction's row - then replays it") {
  PgTable t(4, {.bound_claim = BoundClaim::claim_first});
  PgBusiness biz(t.pool);
  const idem::Key key{"ORDER", "o-1"};
  std::latch first_claimed(1);
  std::optional<idem::Outcome<std::string>> second;
  std::thread duplicate([&] {
    first_claimed.wait();
    second = idem::pg::with_transaction(t.store.pool(), [&](idem::pg::Connection& c) {
      auto tx = t.store.bind(c);
      return idem::run_once(tx, key, "", [&] {
        biz.insert(c, key.id());
        return std::string("second");
      });
    });
  });
  const auto first = idem::pg::with_transaction(t.store.pool(), [&](idem::pg::Connection& c) {
    auto tx = t.store.bind(c);
    return idem::run_once(tx, key, "", [&] {
      biz.insert(c, key.id());
      first_claimed.count_down();
      std::this_thread::sleep_for(300ms);  // the duplicate now waits on the claimed row
      return std::string("first");
    });
  });
  duplicate.join();
  CHECK(first.verdict() == idem::Verdict::acquired);
  REQUIRE(second);
  CHECK(second->verdict() == idem::Verdict::replayed);
  REQUIRE(*second);
  CHECK(second->value() == "first");
  CHECK(biz.rows() == 1);
}

TEST_CASE(
    "pg record-last: a speculative duplicate meets the first's record at its INSERT - rolls "
    "back - replays it") {
  PgTable t(4);
  PgBusiness biz(t.pool);
  const idem::Key key{"ORDER", "speculative"};
  std::latch second_may_finish(1);
  std::latch first_committed(1);
  std::atomic<int> tries{0};
  std::optional<idem::Outcome<std::string>> second;
  std::thread duplicate([&] {
    second = idem::pg::with_transaction(t.store.pool(), [&](idem::pg::Connection& c) {
      const bool first_try = tries++ == 0;
      auto tx = t.store.bind(c);
      return idem::run_once(tx, key, "", [&] {
        biz.insert(c, key.id());
        if (first_try) second_may_finish.count_down();  // it read no record: speculative
        if (first_try) first_committed.wait();
        return std::string("second");
      });
    });
  });
  second_may_finish.wait();
  const auto first = idem::pg::with_transaction(t.store.pool(), [&](idem::pg::Connection& c) {
    auto tx = t.store.bind(c);
    return idem::run_once(tx, key, "", [&] {
      biz.insert(c, key.id());
      return std::string("first");
    });
  });
  first_committed.count_down();
  duplicate.join();
  CHECK(first.verdict() == idem::Verdict::acquired);
  REQUIRE(second);
  CHECK(second->verdict() == idem::Verdict::replayed);  // on its second try
  CHECK(second->value() == "first");
  CHECK(tries == 2);
  CHECK(biz.rows() == 1);  // the speculative body's write was rolled back with its try
  CHECK(t.count("status = 1") == 1);
}
