// A PostgreSQL server SIGKILLed under load and started again on its data (crash recovery), on
// a server of the test's own (scripts/postgres in a temporary directory, stopped also when the
// test fails): the pool follows the server without the process restarting, nothing
// acknowledged is lost, and nothing runs twice.

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <idem/metrics.hpp>

#include "../support/pg_private_server.hpp"
#include "../support/pg_server.hpp"
#include "../support/threads.hpp"

using namespace std::chrono_literals;

using idem_test::PrivatePgServer;

TEST_CASE(
    "pg restart: a SIGKILLed server under same-transaction load - nothing acknowledged "
    "lost - nothing runs twice") {
  PrivatePgServer server("restart");
  auto pool = std::make_shared<idem::pg::Pool>(
      idem::pg::ConnectionParams{.conninfo = server.conninfo()}, idem::pg::PoolParams{.size = 8});
  idem::pg::Store store(pool, {.table = "restart_record"});
  store.ensure_schema();
  pool->acquire()->query(
      "CREATE TABLE restart_biz (id bigserial PRIMARY KEY, trade_no text NOT NULL)");

  constexpr int threads = 8, per_thread = 150;
  std::atomic<int> next_key{0}, done{0}, acknowledged{0};
  idem_test::Errors failures;
  idem::Metrics metrics;  // counts the tries the crash rolled back and ran again
  std::thread killer([&] {
    while (done.load() < threads * per_thread / 3)
      std::this_thread::sleep_for(5ms);
    const auto killed = server.script("kill");
    std::this_thread::sleep_for(500ms);  // requests fail and back off meanwhile
    const auto resumed = server.script("resume");
    if (killed.status != 0 || resumed.status != 0)
      failures.add("kill/resume failed: " + killed.err + resumed.err);
  });
  idem_test::run_threads(threads, [&](int th) {
    std::mt19937 rng(static_cast<unsigned>(th) + 5u);
    for (int i = 0; i < per_thread; ++i, ++done) {
      int k = next_key.load();
      k = rng() % 100 < 12 && k > 0 ? std::max(0, k - 1 - static_cast<int>(rng() % 8)) : next_key++;
      const std::string id = "restart-" + std::to_string(k);
      try {
        const auto out = idem::pg::with_transaction(
            *pool,
            [&](idem::pg::Connection& c) {
              auto tx = store.bind(c);
              return idem::run_once(tx, idem::Key{"PAY", id}, "fp",
                                    [&] {
                                      c.execute("INSERT INTO restart_biz (trade_no) VALUES ($1)",
                                                {id});
                                      return id;
                                    },
                                    {.observer = &metrics});
            },
            {.retry = {.max_attempts = 60, .backoff = 20ms, .max_backoff = 500ms}});
        if (out && out.value() == id) ++acknowledged;
      } catch (const std::exception& e) {
        failures.add(e.what());
      }
    }
  });
  killer.join();
  INFO("first error: " << failures.first());
  CHECK(failures.size() == 0);
  CHECK(acknowledged == threads * per_thread);
  CHECK(metrics.count("PAY", idem::EventKind::transaction_retried) > 0);  // the crash hit tries
  const auto count = [&](const std::string& sql) {
    return *pool->acquire()->exec(sql, {}).integer(0, 0);
  };
  const long long keys = next_key.load();
  // Every key ran once: its business row and its record committed together, or neither did
  // and a retry ran it afresh.
  CHECK(count("SELECT count(*) FROM restart_biz") == keys);
  CHECK(count("SELECT count(DISTINCT trade_no) FROM restart_biz") == keys);
  CHECK(count("SELECT count(*) FROM restart_record WHERE status = 1") == keys);
}

TEST_CASE("pg restart: acknowledged standalone results replay after the server's crash") {
  PrivatePgServer server("restart");
  auto pool = std::make_shared<idem::pg::Pool>(
      idem::pg::ConnectionParams{.conninfo = server.conninfo()}, idem::pg::PoolParams{.size = 4});
  idem::pg::Store store(pool, {.table = "restart_record"});
  store.ensure_schema();
  std::atomic<int> executions{0};
  auto pay = [&](int k) {
    return idem::run_once(store, idem::Key{"PAY", "s-" + std::to_string(k)}, "fp", [&] {
      ++executions;
      return k;
    });
  };
  for (int k = 0; k < 200; ++k)
    REQUIRE(pay(k).value() == k);
  REQUIRE(server.script("kill").status == 0);
  REQUIRE(server.script("resume").status == 0);
  // The pool's connections died with the server: it opens new ones, and every result replays.
  for (int k = 0; k < 200; ++k) {
    const auto again = pay(k);
    CHECK(again.verdict() == idem::Verdict::replayed);
    CHECK(again.value() == k);
  }
  CHECK(executions == 200);
}
