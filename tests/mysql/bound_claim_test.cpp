// The two ways a bound store claims inside the caller's transaction (idem::BoundClaim) on a
// real MariaDB: record_last (read, run, INSERT the finished record) and claim_first (INSERT a
// processing row, UPDATE it). Races over real connections count executions in business tables.
#include <atomic>
#include <chrono>
#include <latch>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <idem/metrics.hpp>
#include <idem/observers.hpp>

#include "../support/mysql_server.hpp"
#include "../support/session_status.hpp"
#include "../support/threads.hpp"

using namespace std::chrono_literals;
using idem::BoundClaim;
using idem_test::BusinessTable;
using idem_test::Errors;
using idem_test::run_threads;
using idem_test::session_count;
using idem_test::Table;

namespace {

const char* name_of(BoundClaim how) {
  return how == BoundClaim::record_last ? "record_last" : "claim_first";
}

// One account row that every execution adds 1 to: a non-idempotent UPDATE that serialises the
// bodies on its row lock, as an order or balance row does.
struct Account {
  std::shared_ptr<idem::mysql::Pool> pool;
  std::string name = idem_test::unique_table("acct");

  explicit Account(std::shared_ptr<idem::mysql::Pool> p) : pool(std::move(p)) {
    auto c = pool->acquire();
    c->query("CREATE TABLE `" + name +
             "` (id INT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB");
    c->query("INSERT INTO `" + name + "` VALUES (1, 0)");
  }
  ~Account() {
    try {
      pool->acquire()->query("DROP TABLE IF EXISTS `" + name + "`");
    } catch (...) {
    }
  }
  void add(idem::mysql::Connection& c) {
    c.execute("UPDATE `" + name + "` SET balance = balance + 1 WHERE id = 1", {});
  }
  long long balance() { return idem_test::scalar(*pool, "SELECT balance FROM `" + name + "`"); }
};

// Counts the tries with_transaction ran again because a record-last claim was superseded.
struct SupersededRetries final : idem::Observer {
  std::atomic<int> retries{0};
  void on_event(const idem::Event& e) noexcept override {
    if (e.kind == idem::EventKind::transaction_retried && e.error != nullptr &&
        std::string_view(e.error->what()).find("superseded") != std::string_view::npos)
      ++retries;
  }
};

}  // namespace

TEST_CASE("64 threads on one key in the caller's transaction: one execution, 64 equal answers") {
  const BoundClaim how = GENERATE(BoundClaim::record_last, BoundClaim::claim_first);
  INFO("bound_claim = " << name_of(how));
  Table t(64, {.bound_claim = how});
  BusinessTable biz(t.pool);
  Account account(t.pool);
  const idem::Key key{"PAY", "one-key-64"};
  idem::Metrics metrics;
  SupersededRetries superseded;
  idem::Observers observers{&metrics, &superseded};
  const idem::Options options{.observer = &observers};
  std::atomic<int> bodies{0}, answered{0}, tries{0};
  Errors failures;
  run_threads(64, [&](int) {
    try {
      const auto out = idem::mysql::with_transaction(*t.pool,
                                                     [&](idem::mysql::Connection& c) {
                                                       ++tries;
                                                       auto tx = t.store.bind(c);
                                                       return idem::run_once(
                                                           tx, key, "fp",
                                                           [&] {
                                                             ++bodies;
                                                             biz.insert(c, key.id());
                                                             account.add(c);
                                                             return std::string("paid");
                                                           },
                                                           options);
                                                     },
                                                     {.retry = {.max_attempts = 20}});
      if (out && out.value() == "paid") ++answered;
    } catch (const std::exception& e) {
      failures.add(e.what());
    }
  });
  INFO("first error: " << failures.first() << "; bodies run: " << bodies.load());
  CHECK(failures.size() == 0);
  CHECK(answered == 64);
  CHECK(biz.rows() == 1);  // every speculative run was rolled back
  CHECK(account.balance() == 1);
  CHECK(t.count("status = 1") == 1);
  // The metrics count what committed: each request answered once, by the try that ended;
  // every try rolled back and run again is a transaction_retried.
  using K = idem::EventKind;
  CHECK(metrics.count("PAY", K::acquired) + metrics.count("PAY", K::taken_over) == 1);
  CHECK(metrics.count("PAY", K::committed) == 1);
  CHECK(metrics.count("PAY", K::replayed) == 63);
  CHECK(metrics.count("PAY", K::transaction_retried) == static_cast<std::uint64_t>(tries - 64));
  CHECK(metrics.count("PAY", K::store_error) == 0);
  if (how == BoundClaim::record_last) {
    // A speculative run that met the winner's row at its COMMIT says so, once (a deadlock in
    // the business's own UPDATE ends a try as well, and is not the store's error).
    CHECK(metrics.count("PAY", K::transaction_error) ==
          static_cast<std::uint64_t>(superseded.retries.load()));
    CHECK(superseded.retries <= bodies - 1);
  }
}

TEST_CASE("12% duplicates over 32 connections in the caller's transaction: executions equal keys") {
  const BoundClaim how = GENERATE(BoundClaim::record_last, BoundClaim::claim_first);
  INFO("bound_claim = " << name_of(how));
  Table t(32, {.bound_claim = how});
  BusinessTable biz(t.pool);
  // 2,000 requests: each thread's stream repeats, 12% of the time, a key sent a little
  // earlier by itself or by another thread, so some duplicates race their original and some
  // arrive after it finished.
  constexpr int threads = 32, per_thread = 63;
  idem::Metrics metrics;
  const idem::Options options{.observer = &metrics};
  std::atomic<int> next_key{0}, wrong{0}, fresh{0};
  Errors failures;
  run_threads(threads, [&](int th) {
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
        const auto out = idem::mysql::with_transaction(*t.pool,
                                                       [&](idem::mysql::Connection& c) {
                                                         auto tx = t.store.bind(c);
                                                         return idem::run_once(
                                                             tx, idem::Key{"ORDER", id}, "fp",
                                                             [&] {
                                                               biz.insert(c, id);
                                                               return "order " + id;
                                                             },
                                                             options);
                                                       },
                                                       {.retry = {.max_attempts = 20}});
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
  // What the metrics say was committed is what was: one request each, one result per key.
  using K = idem::EventKind;
  CHECK(metrics.count("ORDER", K::committed) == static_cast<std::uint64_t>(biz.rows()));
  CHECK(metrics.count("ORDER", K::acquired) + metrics.count("ORDER", K::taken_over) ==
        static_cast<std::uint64_t>(keys));
  CHECK_THAT(metrics.render(),
             Catch::Contains(fmt::format("idem_requests_total{{biz_type=\"ORDER\"}} {}\n",
                                         threads * per_thread)));
}

TEST_CASE("record-last: a body that fails on the first request's writes replays its result") {
  Table t(4);
  REQUIRE(t.store.bind(*t.pool->acquire()).how() == BoundClaim::record_last);  // the default
  // A business table with a unique order number: the duplicate's INSERT waits for the first
  // transaction and then fails with a duplicate key, an error of the business's own.
  auto admin = t.pool->acquire();
  const std::string orders = idem_test::unique_table("orders");
  admin->query("CREATE TABLE `" + orders + "` (order_no VARBINARY(64) PRIMARY KEY) ENGINE=InnoDB");
  const idem::Key key{"ORDER", "o-1"};
  std::latch first_wrote(1);
  auto body_of = [&](const std::string& answer, bool first) {
    return [&, answer, first](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      return idem::run_once(tx, key, "", [&] {
        c.execute("INSERT INTO `" + orders + "` VALUES (?)", {key.id()});
        if (first) {
          first_wrote.count_down();
          std::this_thread::sleep_for(300ms);  // the duplicate now waits on this row
        }
        return answer;
      });
    };
  };
  std::optional<idem::Outcome<std::string>> second;
  std::thread duplicate([&] {
    first_wrote.wait();
    second = idem::mysql::with_transaction(*t.pool, body_of("second", false));
  });
  const auto first = idem::mysql::with_transaction(*t.pool, body_of("first", true));
  duplicate.join();
  CHECK(first.verdict() == idem::Verdict::acquired);
  REQUIRE(second);
  CHECK(second->verdict() == idem::Verdict::replayed);
  REQUIRE(*second);
  CHECK(second->value() == "first");
  CHECK(idem_test::scalar(*t.pool, "SELECT COUNT(*) FROM `" + orders + "`") == 1);
  admin->query("DROP TABLE `" + orders + "`");
}

TEST_CASE("record-last on the caller's own transactions: a superseded claim may not commit") {
  Table t(4);
  auto c1 = t.pool->acquire();
  auto c2 = t.pool->acquire();
  const idem::Key key{"PAY", "own-tx"};
  c1->query("START TRANSACTION");
  c2->query("START TRANSACTION");
  auto tx1 = t.store.bind(*c1);
  auto tx2 = t.store.bind(*c2);
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
  CHECK_THROWS_WITH(tx2.check_committable(), Catch::Contains("superseded"));
  c2->query("ROLLBACK");
  // Run again, it replays.
  c2->query("START TRANSACTION");
  auto again = t.store.bind(*c2);
  idem::IdempotencyGuard g3{again, key, "fp"};
  CHECK(g3.verdict() == idem::Verdict::replayed);
  CHECK(g3.replay<int>().value() == 1);
  c2->query("COMMIT");
  CHECK(t.count("status = 1 AND fence = 1") == 1);
}

TEST_CASE("record-last sends a read and one INSERT for a fresh request, and no UPDATE") {
  const BoundClaim how = GENERATE(BoundClaim::record_last, BoundClaim::claim_first);
  INFO("bound_claim = " << name_of(how));
  Table t(1, {.bound_claim = how});  // one connection: the transaction's and the counters'
  {
    auto c = t.pool->acquire();
    const long long inserts = session_count(*c, "Com_insert");
    const long long updates = session_count(*c, "Com_update");
    c->query("START TRANSACTION");
    {
      auto tx = t.store.bind(*c);
      idem::IdempotencyGuard guard{tx, idem::Key{"PAY", "count"}, "fp"};
      REQUIRE(guard.acquired());
      guard.commit(nlohmann::json{{"ok", true}});
      tx.check_committable();
    }
    c->query("COMMIT");
    CHECK(session_count(*c, "Com_insert") - inserts == 1);
    CHECK(session_count(*c, "Com_update") - updates == (how == BoundClaim::record_last ? 0 : 1));
  }
  const auto stored = t.store.find(idem::Key{"PAY", "count"});
  REQUIRE(stored);
  CHECK(stored->status == idem::Status::succeeded);
  CHECK(stored->ticket.fence == 1);
  CHECK(stored->attempts == 1);
  CHECK(stored->snapshot == R"({"ok":true})");
  CHECK(stored->expire_at > stored->created_at);
  CHECK(stored->updated_at >= stored->created_at);
}

TEST_CASE("record-last takes over a retryable failure under the row's lock, as claim-first") {
  Table t(4);
  const idem::Key key{"PAY", "retry-me"};
  {
    idem::IdempotencyGuard standalone{t.store, key, "fp"};
    REQUIRE(standalone.acquired());
    standalone.fail({{"error", "channel timeout"}}, true);
  }
  const auto out = idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
    auto tx = t.store.bind(c);
    return idem::run_once(tx, key, "fp", [] { return 42; });
  });
  CHECK(out.verdict() == idem::Verdict::acquired);
  REQUIRE(out.record());
  CHECK(out.record()->ticket.fence == 2);
  const auto stored = t.store.find(key);
  REQUIRE(stored);
  CHECK(stored->status == idem::Status::succeeded);
  CHECK(stored->attempts == 2);
  CHECK(stored->snapshot == "42");
}

TEST_CASE("record-last answers a live standalone claim in_progress and a mismatch conflict") {
  Table t(4);
  const idem::Key key{"PAY", "busy"};
  idem::IdempotencyGuard running{t.store, key, "fp"};
  REQUIRE(running.acquired());
  auto verdict_for = [&](const std::string& fp) {
    return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      return idem::IdempotencyGuard{tx, key, fp}.verdict();
    });
  };
  CHECK(verdict_for("fp") == idem::Verdict::in_progress);
  CHECK(verdict_for("other") == idem::Verdict::conflict);
  running.commit(1);
  CHECK(verdict_for("fp") == idem::Verdict::replayed);
}

TEST_CASE(
    "record-last in with_transaction: the record travels with the COMMIT, three statements "
    "for a fresh request") {
  Table t(1);  // one connection: the transactions' and the counters'
  BusinessTable biz(t.pool);
  auto pay = [&](const std::string& id) {
    return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      return idem::run_once(tx, idem::Key{"PAY", id}, "fp", [&] {
        biz.insert(c, id);
        return id;
      });
    });
  };
  REQUIRE(pay("warm-up"));  // autocommit goes off once, on the connection's first transaction
  auto questions = [&] {
    return idem::mysql::with_transaction(
        *t.pool, [&](idem::mysql::Connection& c) { return session_count(c, "Questions"); });
  };
  const long long before = questions();
  const auto out = pay("fresh");
  // The read, the business INSERT, and the record's INSERT with the COMMIT in one statement;
  // then the SHOW of the next questions() and its COMMIT.
  CHECK(questions() - before == 3 + 2);
  REQUIRE(out.verdict() == idem::Verdict::acquired);
  CHECK(t.count("idempotent_key = 'fresh' AND status = 1") == 1);
  CHECK(pay("fresh").verdict() == idem::Verdict::replayed);
  CHECK(biz.rows("trade_no = 'fresh'") == 1);
}

TEST_CASE(
    "record-last in with_transaction: a record met at the COMMIT supersedes the claim, "
    "and the run again replays") {
  Table t(4);
  BusinessTable biz(t.pool);
  const idem::Key key{"PAY", "late"};
  std::latch first_finished(1), second_committed(1);
  std::atomic<int> first_bodies{0};
  bool waited = false;
  std::optional<idem::Outcome<std::string>> second;
  std::thread other([&] {
    first_finished.wait();  // the first request's record now waits for its COMMIT
    second = idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      return idem::run_once(tx, key, "fp", [&] {
        biz.insert(c, key.id());
        return std::string("second");
      });
    });
    second_committed.count_down();
  });
  const auto first = idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
    auto tx = t.store.bind(c);
    auto out = idem::run_once(tx, key, "fp", [&] {
      ++first_bodies;
      biz.insert(c, key.id());
      return std::string("first");
    });
    if (!waited) {
      waited = true;
      first_finished.count_down();
      second_committed.wait();
    }
    return out;
  });
  other.join();
  REQUIRE(second);
  CHECK(second->verdict() == idem::Verdict::acquired);
  CHECK(first_bodies == 1);  // the run again read the second's record and did not execute
  CHECK(first.verdict() == idem::Verdict::replayed);
  REQUIRE(first);
  CHECK(first.value() == "second");
  CHECK(biz.rows() == 1);  // the first's speculative write was rolled back
  CHECK(t.count("status = 1") == 1);
}

TEST_CASE(
    "record-last in with_transaction: a second claim in the same transaction sees the "
    "first's record") {
  Table t(2);
  BusinessTable biz(t.pool);
  std::vector<idem::Verdict> verdicts;
  idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
    auto tx = t.store.bind(c);
    for (const char* id : {"a", "a", "b"}) {
      verdicts.push_back(idem::run_once(tx, idem::Key{"PAY", id}, "fp", [&] {
                           biz.insert(c, id);
                           return 1;
                         }).verdict());
    }
    REQUIRE(tx.find(idem::Key{"PAY", "b"}));  // a read of the store writes what waits first
  });
  CHECK(verdicts ==
        std::vector{idem::Verdict::acquired, idem::Verdict::replayed, idem::Verdict::acquired});
  CHECK(biz.rows() == 2);
  CHECK(t.count("status = 1") == 2);
}

TEST_CASE(
    "record-last in with_transaction: a retryable failure leaves no record and no "
    "business row") {
  Table t(2);
  BusinessTable biz(t.pool);
  const idem::Key key{"PAY", "flaky"};
  const auto out = idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
    auto tx = t.store.bind(c);
    idem::IdempotencyGuard guard{tx, key, "fp"};
    REQUIRE(guard.acquired());
    biz.insert(c, key.id());
    guard.fail({{"error", "gateway timeout"}}, true);
    return 503;
  });
  CHECK(out == 503);
  CHECK(t.count() == 0);
  CHECK(biz.rows() == 0);
}
