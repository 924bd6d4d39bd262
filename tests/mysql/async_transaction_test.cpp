// idem::mysql::AsyncTransaction and with_transaction for coroutines on the real MariaDB server:
// the claim commits with the business's writes and a duplicate that waited on the row replays;
// a body that throws or forgets its claim leaves nothing; the transaction as an object on the
// service's own handles (borrowed by AsyncConnection), ended as its claims say, rolled back
// when destroyed before it ended; and a consumer's failed attempts counted after the rollback,
// so that ConsumerPolicy::max_attempts holds in a coroutine transaction too.
#include <mysql.h>

#include <array>
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
#include "../support/mysql_async.hpp"
#include "../support/mysql_killer.hpp"
#include "../support/mysql_service.hpp"
#include "../support/workload.hpp"

using namespace std::chrono_literals;
namespace net = idem::async::net;
using idem::mysql::AsyncConnection;
using idem::mysql::AsyncTransaction;
using idem_test::insert_row;
using idem_test::run_on;
using Guard = idem::async::IdempotencyGuard<idem::mysql::AsyncBoundStore>;

namespace {

// @@in_transaction of the service's handle, read with its blocking API.
bool handle_in_transaction(MYSQL* m) {
  REQUIRE(mysql_query(m, "SELECT @@in_transaction") == 0);
  MYSQL_RES* res = mysql_store_result(m);
  REQUIRE(res != nullptr);
  const bool in = std::string(mysql_fetch_row(res)[0]) == "1";
  mysql_free_result(res);
  return in;
}

// A poison message consumed in `tx`: its business writes a row, then fails, every time.
net::awaitable<idem::Ack> consume_poison(AsyncTransaction& tx, const idem::mysql::AsyncStore& store,
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
    "async mysql: with_transaction commits the claim with the business writes, and its "
    "duplicates replay") {
  // claim_first: the duplicates wait on the claim's row lock. record_last: they run beside it,
  // their result's INSERT meets its row, and their transaction runs again and replays.
  const auto how = GENERATE(idem::BoundClaim::claim_first, idem::BoundClaim::record_last);
  idem_test::AsyncTable t(16, {.bound_claim = how});
  idem_test::BusinessTable biz(t.blocking.pool);
  net::io_context io;
  int ran = 0;
  int replayed = 0;
  std::vector<std::string> errors;
  // 20 coroutines deliver the same payment at once, each in a transaction of its own.
  for (int i = 0; i < 20; ++i) {
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          try {
            const int amount = co_await idem::mysql::with_transaction(
                *t.pool, [&](idem::mysql::AsyncTransaction& tx) -> net::awaitable<int> {
                  auto bound = tx.bind(t.store);
                  auto guard = co_await Guard::claim(bound, {"PAY", "TX-1"}, "fp");
                  if (!guard.acquired()) {
                    ++replayed;
                    co_return guard.replay<int>().value();
                  }
                  ++ran;
                  const std::vector<idem::mysql::Param> values{std::string_view("TX-1")};
                  co_await tx.connection().execute(
                      "INSERT INTO `" + biz.name + "` (trade_no) VALUES (?)", values);
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
    "async mysql: a with_transaction body that throws or forgets its claim leaves nothing "
    "behind") {
  idem_test::AsyncTable t;
  idem_test::BusinessTable biz(t.blocking.pool);
  net::io_context io;
  auto body = [&](bool forget) {
    return [&, forget](idem::mysql::AsyncTransaction& tx) -> net::awaitable<int> {
      auto bound = tx.bind(t.store);
      auto guard = co_await Guard::claim(bound, {"PAY", "TX-2"}, "fp");
      const std::vector<idem::mysql::Param> values{std::string_view("TX-2")};
      co_await tx.connection().execute("INSERT INTO `" + biz.name + "` (trade_no) VALUES (?)",
                                       values);
      if (forget) co_return 1;  // the guard's claim is left open: the commit is refused
      throw std::runtime_error("business failed");
    };
  };
  CHECK_THROWS_WITH(run_on(io, idem::mysql::with_transaction(*t.pool, body(false))),
                    "business failed");
  CHECK_THROWS_AS(run_on(io, idem::mysql::with_transaction(*t.pool, body(true))), idem::UsageError);
  CHECK(biz.rows() == 0);
  CHECK(t.count() == 0);
}

TEST_CASE("async mysql: an AsyncTransaction on the service's own handles runs a payment once") {
  constexpr int deliveries = 40;
  const auto how = GENERATE(idem::BoundClaim::claim_first, idem::BoundClaim::record_last);
  idem_test::AsyncTable t(16, {.bound_claim = how});
  idem_test::BusinessTable biz(t.blocking.pool);
  std::vector<std::unique_ptr<idem_test::ServiceHandle>> handles;
  for (int i = 0; i < deliveries; ++i)
    handles.push_back(std::make_unique<idem_test::ServiceHandle>());
  net::io_context io;
  int ran = 0;
  int replayed = 0;
  std::vector<std::string> errors;
  const auto deliver = [&](MYSQL* mysql) -> net::awaitable<void> {
    AsyncConnection c(mysql);
    for (int attempt = 0;; ++attempt) {  // the service's own retry of a transient failure
      try {
        auto tx = co_await AsyncTransaction::begin(c);
        auto bound = tx.bind(t.store);
        auto guard = co_await Guard::claim(bound, {"PAY", "OWN-1"}, "fp");
        if (guard.acquired()) {
          ++ran;
          co_await insert_row(c, biz.name, "OWN-1");
          co_await idem::async::sleep_for(2ms);
          co_await guard.commit(299);
        } else {
          CHECK(guard.replay<int>().value() == 299);
          ++replayed;
        }
        // (A co_await inside Catch's CHECK runs twice on GCC 12: named first.)
        const bool committed = co_await tx.commit();
        CHECK(committed);
        co_return;
      } catch (const idem::StoreError& e) {
        if (!e.retryable() || attempt == 5) {
          errors.push_back(e.what());
          co_return;
        }
      }
    }
  };
  for (auto& h : handles)
    net::co_spawn(io, deliver(h->mysql), net::detached);
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
  for (auto& h : handles) {
    CHECK_FALSE(handle_in_transaction(h->mysql));  // each transaction ended
    CHECK(mysql_ping(h->mysql) == 0);              // and the handle is the service's still
  }
}

TEST_CASE("async mysql: an AsyncTransaction destroyed before it ended rolls back") {
  idem_test::AsyncTable t;
  idem_test::BusinessTable biz(t.blocking.pool);
  idem_test::ServiceHandle service;
  net::io_context io;
  AsyncConnection c(service.mysql);
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
  CHECK_FALSE(handle_in_transaction(service.mysql));
  CHECK(biz.rows() == 0);
  CHECK(t.count() == 0);
  // The handle serves the next transaction.
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

TEST_CASE("async mysql: an AsyncTransaction ends as its claims say, once") {
  const auto how = GENERATE(idem::BoundClaim::claim_first, idem::BoundClaim::record_last);
  idem_test::AsyncTable t(8, {.bound_claim = how});
  idem_test::BusinessTable biz(t.blocking.pool);
  net::io_context io;
  auto c = run_on(io, t.pool->acquire(idem::backend::ConnectionPurpose::transaction));
  // (The bound store outlives the guard claimed through it.)
  const auto claimed = [&](idem::mysql::AsyncBoundStore& bound,
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
  SECTION("a transaction the caller began is the one it ends") {
    CHECK(run_on(io, [&]() -> net::awaitable<bool> {
      co_await c->begin_transaction();
      co_await insert_row(*c, biz.name, "BEFORE");
      auto tx = co_await AsyncTransaction::begin(*c);
      auto bound = tx.bind(t.store);
      auto guard = co_await claimed(bound, "MINE");
      co_await guard.commit(1);
      co_return co_await tx.commit();
    }()));
    CHECK(biz.rows() == 2);
    CHECK(t.count("status = 1") == 1);
  }
  CHECK_FALSE(c->in_transaction());
}

TEST_CASE(
    "async mysql: a record-last claim writes nothing before its result, and a duplicate that ran "
    "beside it is superseded, rolls back and replays") {
  idem_test::AsyncTable t(8, {.bound_claim = idem::BoundClaim::record_last});
  idem_test::BusinessTable biz(t.blocking.pool);
  net::io_context io;
  const idem::Key key{"PAY", "SPEC-1"};
  auto first = run_on(io, t.pool->acquire(idem::backend::ConnectionPurpose::transaction));
  auto second = run_on(io, t.pool->acquire(idem::backend::ConnectionPurpose::transaction));
  const std::string superseded = run_on(io, [&]() -> net::awaitable<std::string> {
    auto tx1 = co_await AsyncTransaction::begin(*first);
    auto bound1 = tx1.bind(t.store);
    auto guard1 = co_await Guard::claim(bound1, key, "fp");
    auto tx2 = co_await AsyncTransaction::begin(*second);
    auto bound2 = tx2.bind(t.store);
    auto guard2 = co_await Guard::claim(bound2, key, "fp");
    REQUIRE(guard1.acquired());
    REQUIRE(guard2.acquired());  // neither read a record: both run
    CHECK(t.count() == 0);       // and nothing is written yet
    const auto unwritten = co_await bound1.find(key);
    CHECK_FALSE(unwritten);

    co_await insert_row(*first, biz.name, key.id());
    co_await guard1.commit(1);  // INSERTs the finished record
    const bool committed = co_await tx1.commit();
    CHECK(committed);
    CHECK(t.count("status = 1") == 1);

    co_await insert_row(*second, biz.name, key.id());
    std::string what;
    try {
      co_await guard2.commit(2);  // its INSERT meets the first one's row
    } catch (const idem::StoreError& e) {
      CHECK(e.retryable());
      what = e.what();
    }
    bool run_again = false;
    try {
      (void)co_await tx2.commit();  // superseded: rolled back, to be run again
    } catch (const idem::StoreError& e) {
      run_again = e.retryable();
    }
    CHECK(run_again);
    // Run again, the duplicate replays the first one's result.
    auto tx3 = co_await AsyncTransaction::begin(*second);
    auto bound3 = tx3.bind(t.store);
    auto guard3 = co_await Guard::claim(bound3, key, "fp");
    CHECK(guard3.verdict() == idem::Verdict::replayed);
    CHECK(guard3.replay<int>().value() == 1);
    const bool replay_committed = co_await tx3.commit();
    CHECK(replay_committed);
    co_return what;
  }());
  CHECK_THAT(superseded, Catch::Contains("PAY/SPEC-1"));
  CHECK(biz.rows() == 1);  // the duplicate's row rolled back
  CHECK(t.count() == 1);
}

TEST_CASE(
    "async mysql: a poison message in a coroutine transaction is counted after each rollback, "
    "and dead-lettered on its last attempt") {
  const auto how = GENERATE(idem::BoundClaim::claim_first, idem::BoundClaim::record_last);
  // An AsyncTransaction on the service's handle, or with_transaction.
  const bool own_handle = GENERATE(false, true);
  idem_test::AsyncTable t(8, {.bound_claim = how});
  idem_test::BusinessTable biz(t.blocking.pool);
  idem_test::ServiceHandle service;
  AsyncConnection own(service.mysql);
  net::io_context io;
  const idem::Key key{"order.paid", "poison"};
  const idem::ConsumerPolicy policy{.max_attempts = 3};
  const idem::Options options{.consumer = &policy};
  int runs = 0;
  const auto consume_on = [&](AsyncTransaction& tx) {
    return consume_poison(tx, t.store, biz.name, key, options, runs);
  };
  const auto deliver = [&]() -> net::awaitable<idem::Ack> {
    if (!own_handle) co_return co_await idem::mysql::with_transaction(*t.pool, consume_on);
    auto tx = co_await AsyncTransaction::begin(own);
    idem::Ack ack = co_await consume_on(tx);
    const bool committed = co_await tx.commit();
    // A run rolls back, then its attempt is counted; a copy that replays commits nothing.
    CHECK(committed == (ack.verdict == idem::Verdict::replayed));
    co_return ack;
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
  if (own_handle) CHECK_FALSE(handle_in_transaction(service.mysql));
}

TEST_CASE("async mysql: copies of a poison message racing in coroutine transactions stop") {
  // As the blocking test of the same name (tests/mysql/committable_test.cpp): every run is
  // counted, so at most max_attempts + 2 * (copies - 1) runs.
  constexpr int copies = 8;
  constexpr std::uint32_t limit = 4;
  constexpr int deliveries_per_copy = 40;
  idem_test::AsyncTable t(copies);
  idem_test::BusinessTable biz(t.blocking.pool);
  const idem::Key key{"order.paid", "poison-race"};
  const idem::ConsumerPolicy policy{.max_attempts = limit, .first_delay = idem::Duration::zero()};
  const idem::Options options{.consumer = &policy};
  net::io_context io;
  int runs = 0;
  int stopped = 0;
  const auto apply_on = [&](AsyncTransaction& tx) {
    return consume_poison(tx, t.store, biz.name, key, options, runs);
  };
  const auto copy = [&]() -> net::awaitable<void> {
    for (int d = 0; d < deliveries_per_copy; ++d) {
      idem::Ack ack;
      try {
        ack = co_await idem::mysql::with_transaction(*t.pool, apply_on);
      } catch (const idem::StoreError&) {
        continue;  // not acknowledged: delivered again
      }
      if (ack != idem::Ack::retry_later) {
        ++stopped;
        co_return;
      }
    }
  };
  for (int i = 0; i < copies; ++i)
    net::co_spawn(io, copy(), net::detached);
  io.run();
  CHECK(stopped == copies);
  CHECK(runs >= static_cast<int>(limit));
  CHECK(runs <= static_cast<int>(limit) + 2 * (copies - 1));
  CHECK(biz.rows() == 0);
  const auto record = t.blocking.store.find(key);
  REQUIRE(record);
  CHECK(record->status == idem::Status::failed);
  CHECK_FALSE(record->retryable);
}

TEST_CASE(
    "async mysql: consumers in coroutine transactions with connections killed under load run "
    "each message's business once") {
  // 1,000 deliveries of 880 messages (12% redelivered), consumed by 32 coroutines on one loop
  // thread, each message in a with_transaction whose connection may be killed at any statement,
  // COMMIT included; a message whose consume failed is delivered again until acknowledged.
  const idem_test::KillableUser user("idem_kill_consume");
  idem_test::AsyncTable t(16, {}, user.params());
  idem_test::BusinessTable biz(t.blocking.pool);
  const auto storm = idem_test::storm_of(1000, 29);
  idem_test::ConnectionKiller killer(user, 7);
  net::io_context io;
  std::size_t next = 0;
  int failed_deliveries = 0;
  int acked = 0;
  std::vector<std::string> wrong_acks;
  const auto consume_one = [&](AsyncTransaction& tx, std::string id) -> net::awaitable<idem::Ack> {
    auto bound = tx.bind(t.store);
    AsyncConnection& c = tx.connection();
    const auto apply = [&c, &biz, id]() -> net::awaitable<void> {
      co_await insert_row(c, biz.name, id);
    };
    co_return co_await idem::async::consume(bound, idem::Key{"order.paid", id}, "fp", apply);
  };
  const auto consumer = [&]() -> net::awaitable<void> {
    while (next < storm.order.size()) {
      const std::string id = "K" + std::to_string(storm.order[next++]);
      for (;;) {
        try {
          const auto body = [&consume_one, id](AsyncTransaction& tx) {
            return consume_one(tx, id);
          };
          const idem::Ack ack = co_await idem::mysql::with_transaction(*t.pool, body);
          if (ack != idem::Ack::commit) wrong_acks.push_back(id + ": " + ack.reason);
          ++acked;
          break;
        } catch (const idem::StoreError&) {
          ++failed_deliveries;  // not acknowledged: the broker delivers it again
        }
      }
    }
  };
  for (int i = 0; i < 32; ++i)
    net::co_spawn(io, consumer(), net::detached);
  io.run();
  killer.stop();
  std::printf("async mysql consume kill: %d kills, %d deliveries failed and were redelivered\n",
              killer.kills(), failed_deliveries);
  INFO((wrong_acks.empty() ? std::string() : wrong_acks.front()));
  CHECK(wrong_acks.empty());
  CHECK(acked == static_cast<int>(storm.order.size()));
  CHECK(killer.kills() > 10);
  CHECK(biz.keys_executed_twice() == 0);
  CHECK(biz.distinct_keys() == storm.distinct);
  CHECK(biz.rows() == storm.distinct);
  CHECK(t.count("status = 1") == storm.distinct);
}

namespace {

// The service's own connection source, for coroutines: a few handles of its, lent one
// coroutine at a time (a coroutine that finds none free waits its turn), counted as they go
// out and come back.
struct ServiceLender {
  std::vector<std::unique_ptr<idem_test::ServiceHandle>> handles;
  std::vector<MYSQL*> free;
  int lent = 0;

  explicit ServiceLender(int n) {
    for (int i = 0; i < n; ++i) {
      handles.push_back(std::make_unique<idem_test::ServiceHandle>());
      free.push_back(handles.back()->mysql);
    }
  }

  // The lender with_transaction takes: lend(use) gets a free handle, co_awaits use(handle),
  // and gives the handle back however use ended.
  auto lender() {
    return [this](auto use) -> net::awaitable<void> {
      while (free.empty())
        co_await idem::async::sleep_for(1ms);
      MYSQL* mysql = free.back();
      free.pop_back();
      ++lent;
      std::exception_ptr failed;
      try {
        co_await use(mysql);
      } catch (...) {
        failed = std::current_exception();
      }
      free.push_back(mysql);
      if (failed) std::rethrow_exception(failed);
    };
  }
};

// What AsyncConnectionLender takes: a coroutine; not a lender that only forwards use's
// awaitable (it would give the handle back before the try ran on it), nor a blocking one.
constexpr auto coroutine_lender = [](auto use) -> net::awaitable<void> {
  co_await use(static_cast<MYSQL*>(nullptr));
};
constexpr auto forwarding_lender = [](auto use) { return use(static_cast<MYSQL*>(nullptr)); };
constexpr auto blocking_lender = [](auto&& use) { (void)use(static_cast<MYSQL*>(nullptr)); };
static_assert(idem::mysql::AsyncConnectionLender<decltype(coroutine_lender)>);
static_assert(!idem::mysql::AsyncConnectionLender<decltype(forwarding_lender)>);
static_assert(!idem::mysql::AsyncConnectionLender<decltype(blocking_lender)>);
static_assert(idem::mysql::ConnectionLender<decltype(blocking_lender)>);

// The UsageError with_transaction(lend, body) ends in ("not refused" if none).
template <class Lend, class Body>
net::awaitable<std::string> usage_error_of(Lend lend, Body& body) {
  try {
    (void)co_await idem::mysql::with_transaction(lend, body);
  } catch (const idem::UsageError& e) {
    co_return std::string(e.what());
  }
  co_return std::string("not refused");
}

}  // namespace

TEST_CASE(
    "async mysql: with_transaction on the service's own lender runs each payment once and gives "
    "every handle back") {
  constexpr int keys = 12;
  constexpr int copies = 3;  // each payment delivered three times at once
  const auto how = GENERATE(idem::BoundClaim::claim_first, idem::BoundClaim::record_last);
  idem_test::AsyncTable t(4, {.bound_claim = how});
  idem_test::BusinessTable biz(t.blocking.pool);
  ServiceLender service(6);  // fewer handles than deliveries: most wait for one
  auto lend = service.lender();
  net::io_context io;
  int ran = 0;
  int bodies = 0;
  int replayed = 0;
  std::vector<std::string> errors;
  const auto deliver = [&](std::string trade_no) -> net::awaitable<void> {
    auto body = [&](AsyncTransaction& tx) -> net::awaitable<int> {
      ++bodies;
      auto bound = tx.bind(t.store);
      const idem::Key key{"PAY", trade_no};
      auto guard = co_await Guard::claim(bound, key, "fp");
      if (!guard.acquired()) {
        ++replayed;
        co_return guard.replay<int>().value();
      }
      ++ran;
      co_await insert_row(tx.connection(), biz.name, trade_no);
      co_await idem::async::sleep_for(1ms);
      co_await guard.commit(299);
      co_return 299;
    };
    try {
      const int amount = co_await idem::mysql::with_transaction(lend, body);
      CHECK(amount == 299);
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
  };
  for (int c = 0; c < copies; ++c)
    for (int k = 0; k < keys; ++k)
      net::co_spawn(io, deliver("LEND-" + std::to_string(k)), net::detached);
  io.run();
  INFO((errors.empty() ? std::string() : errors.front()));
  CHECK(errors.empty());
  CHECK(biz.rows() == keys);  // each payment's business row once, whatever ran and rolled back
  CHECK(t.count("status = 1") == keys);
  CHECK(replayed == keys * (copies - 1));
  if (how == idem::BoundClaim::claim_first) {
    CHECK(ran == keys);
  } else {
    CHECK(ran >= keys);  // speculative runs, superseded ones rolled back and run again
  }
  CHECK(service.lent == bodies);  // one handle lent per try
  CHECK(service.free.size() == service.handles.size());
  for (auto& h : service.handles) {
    CHECK_FALSE(handle_in_transaction(h->mysql));  // each transaction ended
    CHECK(mysql_ping(h->mysql) == 0);              // and the handle is the service's still
  }
}

TEST_CASE(
    "async mysql: with_transaction refuses a lender that breaks its contract, changing "
    "nothing") {
  idem_test::AsyncTable t;
  idem_test::BusinessTable biz(t.blocking.pool);
  idem_test::ServiceHandle handle;
  net::io_context io;
  int bodies = 0;
  auto body = [&](AsyncTransaction& tx) -> net::awaitable<int> {
    ++bodies;
    auto bound = tx.bind(t.store);
    auto guard = co_await Guard::claim(bound, {"PAY", "LEND-BAD"}, "fp");
    co_await insert_row(tx.connection(), biz.name, "LEND-BAD");
    co_await guard.commit(1);
    co_return 1;
  };
  const auto refused = [&](auto lend, auto& with_body) {
    return run_on(io, usage_error_of(lend, with_body));
  };

  SECTION("a lender that never calls use") {
    const std::string why = refused([](auto) -> net::awaitable<void> { co_return; }, body);
    CHECK(why.find("returned without calling use") != std::string::npos);
    CHECK(bodies == 0);
  }
  SECTION("a lender that swallows use's exception") {
    auto failing = [&](AsyncTransaction& tx) -> net::awaitable<int> {
      ++bodies;
      co_await insert_row(tx.connection(), biz.name, "LEND-BAD");
      throw std::runtime_error("the business failed");
    };
    auto lend = [&](auto use) -> net::awaitable<void> {
      try {
        co_await use(handle.mysql);
      } catch (const std::exception&) {
      }
    };
    const std::string why = refused(lend, failing);
    CHECK(why.find("swallowed an exception of use") != std::string::npos);
    CHECK(bodies == 1);
    CHECK_FALSE(handle_in_transaction(handle.mysql));  // the try was rolled back
  }
  SECTION("a lender that throws before it lends") {
    auto lend = [](auto) -> net::awaitable<void> {
      throw std::runtime_error("the service's pool is closed");
      co_return;
    };
    CHECK_THROWS_WITH(run_on(io, usage_error_of(lend, body)), "the service's pool is closed");
    CHECK(bodies == 0);
  }
  SECTION("a lent handle with a transaction open") {
    REQUIRE(mysql_query(handle.mysql, "START TRANSACTION") == 0);
    const std::string why =
        refused([&](auto use) -> net::awaitable<void> { co_await use(handle.mysql); }, body);
    CHECK(why.find("already has a transaction open") != std::string::npos);
    CHECK(bodies == 0);
    CHECK(handle_in_transaction(handle.mysql));  // the service's transaction, left as it was
    REQUIRE(mysql_query(handle.mysql, "ROLLBACK") == 0);
  }
  CHECK(biz.rows() == 0);
  CHECK(t.count("1") == 0);
}

TEST_CASE(
    "async mysql: with_transaction runs a try that failed transiently again on the next handle "
    "lent, until its attempts run out") {
  idem_test::AsyncTable t;
  idem_test::BusinessTable biz(t.blocking.pool);
  ServiceLender service(2);
  net::io_context io;
  int bodies = 0;
  int failing_tries = 1;  // how many tries fail with a retryable StoreError before one goes on
  std::vector<std::size_t> free_at_try;  // handles free when each try began
  auto body = [&](AsyncTransaction& tx) -> net::awaitable<int> {
    ++bodies;
    free_at_try.push_back(service.free.size());
    auto bound = tx.bind(t.store);
    auto guard = co_await Guard::claim(bound, {"PAY", "LEND-RETRY"}, "fp");
    if (!guard.acquired()) co_return -1;
    co_await insert_row(tx.connection(), biz.name, "LEND-RETRY");
    if (bodies <= failing_tries) {
      throw idem::StoreError("Deadlock found when trying to get lock (simulated)", true);
    }
    co_await guard.commit(7);
    co_return 7;
  };

  SECTION("one failed try: the body runs again on another handle and commits once") {
    // The lender is a temporary: with_transaction keeps it until it completes.
    const int answer = run_on(io, idem::mysql::with_transaction(service.lender(), body));
    CHECK(answer == 7);
    CHECK(bodies == 2);
    CHECK(service.lent == 2);
    // One handle out at a time: the failed try's handle went back before the next was lent.
    CHECK(free_at_try == std::vector<std::size_t>{1, 1});
    CHECK(biz.rows() == 1);  // the failed try's row rolled back
    CHECK(t.count("status = 1") == 1);
  }
  SECTION("every try fails: the last error once max_attempts ran out, nothing written") {
    failing_tries = 100;
    idem::TransactionParams params;
    params.retry.max_attempts = 3;
    params.retry.backoff = std::chrono::milliseconds(1);
    CHECK_THROWS_AS(run_on(io, idem::mysql::with_transaction(service.lender(), body, params)),
                    idem::StoreError);
    CHECK(bodies == 3);
    CHECK(service.lent == 3);
    CHECK(biz.rows() == 0);
    CHECK(t.count("1") == 0);
  }
  CHECK(service.free.size() == service.handles.size());
  for (auto& h : service.handles)
    CHECK_FALSE(handle_in_transaction(h->mysql));
}

namespace {

// The session's count of the statements its client sent (Questions), read in a transaction of
// its own on the pool's one connection (the SHOW counts itself).
net::awaitable<long long> session_questions(idem::mysql::AsyncPool& pool) {
  co_return co_await idem::mysql::with_transaction(
      pool, [](AsyncTransaction& tx) -> net::awaitable<long long> {
        const auto rows =
            co_await tx.connection().select("SHOW SESSION STATUS LIKE 'Questions'", {});
        REQUIRE(rows.size() == 1);
        co_return std::stoll(rows.front().at(1).to_text().value());
      });
}

}  // namespace

TEST_CASE(
    "async mysql: in with_transaction a claim's result travels with the COMMIT, three "
    "statements for a fresh request") {
  const auto how = GENERATE(idem::BoundClaim::claim_first, idem::BoundClaim::record_last);
  idem_test::AsyncTable t(1, {.bound_claim = how});  // one connection: the tries' and the counts'
  idem_test::BusinessTable biz(t.blocking.pool);
  net::io_context io;
  auto pay = [&](std::string id) -> net::awaitable<idem::Verdict> {
    co_return co_await idem::mysql::with_transaction(
        *t.pool, [&](AsyncTransaction& tx) -> net::awaitable<idem::Verdict> {
          auto bound = tx.bind(t.store);
          const idem::Key key{"PAY", id};
          auto guard = co_await Guard::claim(bound, key, "fp");
          if (guard.acquired()) {
            co_await insert_row(tx.connection(), biz.name, id);
            co_await guard.commit(1);
          }
          co_return guard.verdict();
        });
  };
  REQUIRE(run_on(io, pay("warm-up")) == idem::Verdict::acquired);  // statements prepared once
  const long long before = run_on(io, session_questions(*t.pool));
  CHECK(run_on(io, pay("fresh")) == idem::Verdict::acquired);
  const long long after = run_on(io, session_questions(*t.pool));
  // The claim's statement (the read of record-last, the INSERT of claim-first), the business
  // INSERT, and the result with the COMMIT in one statement; then the SHOW of the count after
  // and, before it, the COMMIT of the count before.
  CHECK(after - before == 3 + 2);
  CHECK(t.count("idempotent_key = 'fresh' AND status = 1") == 1);
  CHECK(run_on(io, pay("fresh")) == idem::Verdict::replayed);
  CHECK(biz.rows("trade_no = 'fresh'") == 1);
}

TEST_CASE(
    "async mysql: in with_transaction a record-last claim's record met at the COMMIT "
    "supersedes it, and the run again replays") {
  idem_test::AsyncTable t(4, {.bound_claim = idem::BoundClaim::record_last});
  idem_test::BusinessTable biz(t.blocking.pool);
  net::io_context io;
  const idem::Key key{"PAY", "LATE"};
  bool first_finished = false;  // the first try's record waits for its COMMIT
  bool second_committed = false;
  int first_bodies = 0;
  // At most a few seconds: were the first's record written before its COMMIT, the second's
  // INSERT would wait on its row lock, and the first on the second.
  const auto wait_for = [](const bool& flag) -> net::awaitable<void> {
    for (int i = 0; i < 3000 && !flag; ++i)
      co_await idem::async::sleep_for(1ms);
  };
  auto request = [&](std::string answer, bool first) -> net::awaitable<std::string> {
    co_return co_await idem::mysql::with_transaction(
        *t.pool, [&](AsyncTransaction& tx) -> net::awaitable<std::string> {
          auto bound = tx.bind(t.store);
          auto guard = co_await Guard::claim(bound, key, "fp");
          if (!guard.acquired()) co_return "replayed " + guard.replay<std::string>().value();
          if (first) ++first_bodies;
          co_await insert_row(tx.connection(), biz.name, key.id());
          co_await guard.commit(answer);
          if (first && !first_finished) {
            first_finished = true;
            co_await wait_for(second_committed);
          }
          co_return answer;
        });
  };
  const std::string first_result = "first", second_result = "second";
  std::string first_answer, second_answer;
  net::co_spawn(
      io, [&]() -> net::awaitable<void> { first_answer = co_await request(first_result, true); },
      net::detached);
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        co_await wait_for(first_finished);
        second_answer = co_await request(second_result, false);
        second_committed = true;
      },
      net::detached);
  io.run();
  CHECK(second_answer == "second");
  CHECK(first_bodies == 1);  // the run again read the second's record and did not execute
  CHECK(first_answer == "replayed second");
  CHECK(biz.rows() == 1);  // the first's speculative row was rolled back
  CHECK(t.count("status = 1") == 1);
}

TEST_CASE(
    "async mysql: in with_transaction a waiting result is written before the next read of the "
    "bound store") {
  const auto how = GENERATE(idem::BoundClaim::claim_first, idem::BoundClaim::record_last);
  idem_test::AsyncTable t(2, {.bound_claim = how});
  net::io_context io;
  auto body = [&](AsyncTransaction& tx) -> net::awaitable<std::vector<idem::Verdict>> {
    auto bound = tx.bind(t.store);
    std::vector<idem::Verdict> seen;
    const std::array<const char*, 3> ids{"a", "a", "b"};  // (named: GCC 12 and braced lists)
    for (const char* id : ids) {
      const idem::Key key{"PAY", id};
      auto guard = co_await Guard::claim(bound, key, "fp");
      if (guard.acquired()) co_await guard.commit(1);
      seen.push_back(guard.verdict());
    }
    const idem::Key b{"PAY", "b"};
    const auto written = co_await bound.find(b);  // the result of b waited for the COMMIT
    REQUIRE(written);
    CHECK(written->status == idem::Status::succeeded);
    co_return seen;
  };
  const auto verdicts = run_on(io, idem::mysql::with_transaction(*t.pool, body));
  CHECK(verdicts ==
        std::vector{idem::Verdict::acquired, idem::Verdict::replayed, idem::Verdict::acquired});
  CHECK(t.count("status = 1") == 2);
}

TEST_CASE(
    "async mysql: in with_transaction a waiting result that fails when sent alone leaves the try "
    "uncommittable, even when the body catches the error") {
  idem_test::AsyncTable t(2, {.bound_claim = idem::BoundClaim::record_last});
  idem_test::BusinessTable biz(t.blocking.pool);
  const idem::Key key{"PAY", "HELD"};
  // Another transaction holds the key's row, uncommitted (a claim-first claim of its own).
  idem::mysql::Store holder_store(
      t.blocking.pool, {.table = t.blocking.name, .bound_claim = idem::BoundClaim::claim_first});
  auto holder = t.blocking.pool->acquire();
  holder->begin_transaction();
  auto held = holder_store.bind(*holder);
  REQUIRE(held.claim(key, "fp", idem::Options{}).verdict == idem::Verdict::acquired);

  net::io_context io;
  int bodies = 0;
  std::string swallowed;
  auto body = [&](AsyncTransaction& tx) -> net::awaitable<int> {
    ++bodies;
    co_await tx.connection().query("SET SESSION innodb_lock_wait_timeout = 1");
    auto bound = tx.bind(t.store);
    auto guard = co_await Guard::claim(bound, key, "fp");  // sees no committed row: runs
    REQUIRE(guard.acquired());
    co_await insert_row(tx.connection(), biz.name, key.id());
    co_await guard.commit(1);  // waits for the COMMIT
    try {
      // Sends the waiting INSERT first: it waits on the held row until the lock wait times out.
      const idem::Key other{"PAY", "OTHER"};
      auto next = co_await Guard::claim(bound, other, "fp");
    } catch (const idem::StoreError& e) {
      swallowed = e.what();
    }
    co_return 1;  // as if nothing had happened
  };
  CHECK_THROWS_AS(run_on(io, idem::mysql::with_transaction(*t.pool, body)), idem::UsageError);
  holder->query("ROLLBACK");
  INFO(swallowed);
  CHECK_FALSE(swallowed.empty());
  CHECK(bodies == 1);
  CHECK(biz.rows() == 0);  // the business row did not commit without the claim's result
  CHECK(t.count() == 0);
}

TEST_CASE(
    "async mysql: a with_transaction cancelled in its body (||, parallel_group, a signal) rolls "
    "back before the cancellation completes, on the pool's connection and on the service's own") {
  const bool own_handle = GENERATE(false, true);
  const auto way = GENERATE(idem_test::CancelWay::either_operator,
                            idem_test::CancelWay::parallel_group, idem_test::CancelWay::signal);
  INFO("own handle: " << own_handle << ", cancelled way " << static_cast<int>(way));
  idem_test::AsyncTable t(2);
  idem_test::BusinessTable biz(t.blocking.pool);
  ServiceLender service(1);
  idem_test::ServiceHandle observer;  // reads the server's transactions, blocking
  net::io_context io;
  const idem::Key key{"PAY", "CUT"};
  int ran = 0;
  unsigned long thread_id = 0;  // the server thread of the cancelled transaction
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
    thread_id = tx.connection().id();
    auto bound = tx.bind(t.store);
    auto guard = co_await Guard::claim(bound, key, "fp");
    REQUIRE(guard.acquired());
    co_await insert_row(tx.connection(), biz.name, key.id());
    reached = true;
    gate->cancel();
    co_await idem::async::sleep_for(10s);  // the gateway: cut by the cancellation
    co_await guard.commit(1);
  };
  const auto deliver = [&]() -> net::awaitable<void> {
    if (own_handle) {
      co_await idem::mysql::with_transaction(service.lender(), body);
    } else {
      co_await idem::mysql::with_transaction(*t.pool, body);
    }
  };
  // InnoDB's open transactions of that thread, read the moment the cancelled call completes.
  std::string open_at_completion;
  const auto race = [&]() -> net::awaitable<void> {
    gate.emplace(co_await net::this_coro::executor, 1h);
    const bool cut = co_await idem_test::cut_when(deliver(), opened(), way);
    CHECK(cut);  // the gate won: the delivery was cancelled
    const std::string sql =
        "SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = " +
        std::to_string(thread_id);
    REQUIRE(mysql_query(observer.mysql, sql.c_str()) == 0);
    MYSQL_RES* res = mysql_store_result(observer.mysql);
    REQUIRE(res != nullptr);
    open_at_completion = mysql_fetch_row(res)[0];
    mysql_free_result(res);
  };
  run_on(io, race());
  CHECK(ran == 1);
  CHECK(thread_id != 0);
  CHECK(open_at_completion == "0");
  CHECK_FALSE(handle_in_transaction(service.handles[0]->mysql));
  CHECK(t.count() == 0);
  CHECK(biz.rows() == 0);
}
