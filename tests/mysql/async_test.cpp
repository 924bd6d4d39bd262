// idem::mysql::AsyncStore on the real MariaDB server, from one loop thread: a request storm,
// the loop's responsiveness while claims are in flight, connections killed under load, and
// cancelled requests.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>

#include "../support/mysql_async.hpp"
#include "../support/workload.hpp"

using namespace std::chrono_literals;
namespace net = idem::async::net;
using idem_test::run_on;

namespace {

net::awaitable<void> pause(std::chrono::milliseconds d) {
  co_await idem::async::sleep_for(d);
}

}  // namespace

TEST_CASE("async mysql: run_once runs once and replays, a lost claim's next owner is fenced") {
  idem_test::AsyncTable t;
  net::io_context io;
  const idem::Key key{"PAY", "AM-1"};
  int ran = 0;
  auto pay = [&]() -> net::awaitable<int> {
    ++ran;
    co_await pause(1ms);
    co_return 299;
  };
  const auto first = run_on(io, idem::async::run_once(t.store, key, "fp", pay));
  CHECK(first.acquired());
  CHECK(first.value() == 299);
  const auto again = run_on(io, idem::async::run_once(t.store, key, "fp", pay));
  CHECK(again.replayed());
  CHECK(again.value() == 299);
  CHECK(ran == 1);
  CHECK(t.count("status = 1") == 1);
  // The blocking store on the same table sees the same record.
  CHECK(t.blocking.store.find(key)->snapshot == "299");
}

TEST_CASE(
    "async mysql: one loop thread serves 1,000 concurrent requests at 12% duplicates - "
    "executions equal keys") {
  idem_test::AsyncTable t(32);
  net::io_context io;
  const auto storm = idem_test::storm_of(1000, 17);
  idem_test::Executions executions;
  int answered = 0;
  int in_progress = 0;
  std::vector<std::string> errors;
  for (int k : storm.order) {
    net::co_spawn(
        io,
        [&, k]() -> net::awaitable<void> {
          const std::string id = "S-" + std::to_string(k);
          auto body = [&]() -> net::awaitable<int> {
            executions.executed(id);
            co_await pause(std::chrono::milliseconds(1 + k % 3));
            co_return k;
          };
          try {
            const auto out =
                co_await idem::async::run_once(t.store, {"PAY", id}, "fp", body, {.wait = 10s});
            if (out && out.value() == k) ++answered;
            if (out.verdict() == idem::Verdict::in_progress) ++in_progress;
          } catch (const std::exception& e) {
            errors.push_back(e.what());
          }
        },
        net::detached);
  }
  const auto start = std::chrono::steady_clock::now();
  io.run();
  const auto took = std::chrono::steady_clock::now() - start;
  std::printf(
      "async mysql storm: 1000 requests on one thread in %lld ms\n",
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  INFO((errors.empty() ? std::string() : errors.front()));
  CHECK(errors.empty());
  CHECK(answered + in_progress == 1000);
  CHECK(executions.total() == storm.distinct);
  CHECK(executions.max_per_key() == 1);
  CHECK(t.count("status = 1") == storm.distinct);
}

TEST_CASE("async mysql: a 1 ms timer on the loop keeps firing while 64 claims are in flight") {
  // What a blocking store would break, without judging by the clock (a loaded sanitizer run
  // can be late by any amount): a claim that blocked the loop would hold it until its answer,
  // so no other claim could start meanwhile and the timer could not fire while one is out.
  idem_test::AsyncTable t(64);
  net::io_context io;
  int done = 0;
  int in_flight = 0;
  int most_in_flight = 0;
  int ticks = 0;
  int ticks_in_flight = 0;
  std::chrono::nanoseconds worst{0};
  constexpr int requests = 640;
  for (int i = 0; i < 64; ++i) {
    net::co_spawn(
        io,
        [&, i]() -> net::awaitable<void> {
          for (int r = i; r < requests; r += 64) {
            auto body = [&]() -> net::awaitable<int> { co_return r; };
            most_in_flight = std::max(most_in_flight, ++in_flight);
            co_await idem::async::run_once(t.store, {"TICK", std::to_string(r)}, "fp", body);
            --in_flight;
          }
          ++done;
        },
        net::detached);
  }
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        net::steady_timer timer(co_await net::this_coro::executor);
        while (done < 64) {
          const auto due = std::chrono::steady_clock::now() + 1ms;
          timer.expires_at(due);
          co_await timer.async_wait(net::use_awaitable);
          worst = std::max(worst, std::chrono::steady_clock::now() - due);
          ++ticks;
          if (in_flight > 0) ++ticks_in_flight;
        }
      },
      net::detached);
  io.run();
  const auto worst_us = std::chrono::duration_cast<std::chrono::microseconds>(worst).count();
  std::printf(
      "async mysql: %d ticks of 1 ms (%d with claims in flight), latest by %lld us, "
      "up to %d claims in flight\n",
      ticks, ticks_in_flight, static_cast<long long>(worst_us), most_in_flight);
  CHECK(done == 64);
  CHECK(t.count("status = 1") == requests);
  CHECK(most_in_flight > 1);   // the claims wait for the server side by side
  CHECK(ticks_in_flight > 0);  // and the loop serves its timer while they wait
}

TEST_CASE("async mysql: connections killed at random under load - nothing runs twice") {
  // The async pool logs in as a user of its own, so that the killer never touches the
  // connections of the tests running beside this one on the same server.
  idem::mysql::Connection admin(idem_test::server());
  const std::string user = "idem_kill_" + std::to_string(::getpid());
  admin.query("CREATE USER IF NOT EXISTS '" + user + "'@'localhost'");
  admin.query("GRANT ALL ON idem_test.* TO '" + user + "'@'localhost'");
  idem::mysql::ConnectionParams as_user = idem_test::server();
  as_user.user = user;
  idem_test::AsyncTable t(16, {}, as_user);
  net::io_context io;
  const auto storm = idem_test::storm_of(3000, 23);
  idem_test::Executions executions;
  std::atomic<bool> stop{false};
  std::atomic<int> kills{0};
  // The killer: a connection of its own that kills the pool's connections in the middle of
  // a statement.
  std::thread killer([&] {
    idem::mysql::Connection c(idem_test::server());
    std::mt19937 rng(5);
    while (!stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1 + rng() % 3));
      try {
        const auto rows = c.select(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ? "
            "AND COMMAND NOT IN ('Sleep', 'Killed')",
            {user});
        if (rows.empty()) continue;
        const auto victim = rows[rng() % rows.size()].at(0).to_text().value();
        c.query("KILL CONNECTION " + victim);
        ++kills;
      } catch (const idem::StoreError&) {
        // The victim ended meanwhile: pick again.
      }
    }
  });
  int failed_calls = 0;
  for (int k : storm.order) {
    net::co_spawn(
        io,
        [&, k]() -> net::awaitable<void> {
          const std::string id = "K-" + std::to_string(k);
          auto body = [&]() -> net::awaitable<int> {
            executions.executed(id);
            co_return k;
          };
          // A client retries until it has an answer, as a gateway would.
          for (int attempt = 0; attempt < 50; ++attempt) {
            try {
              const auto out =
                  co_await idem::async::run_once(t.store, {"PAY", id}, "fp", body, {.wait = 10s});
              if (out) co_return;
            } catch (const idem::StoreError&) {
              ++failed_calls;
            }
            co_await pause(5ms);
          }
        },
        net::detached);
  }
  io.run();
  stop = true;
  killer.join();
  std::printf("async mysql kill: %d kills, %d failed calls (retried by the client)\n", kills.load(),
              failed_calls);
  CHECK(kills > 10);
  CHECK(executions.max_per_key() == 1);
  CHECK(executions.total() == storm.distinct);
  CHECK(t.count("status = 1") == storm.distinct);
  admin.query("DROP USER IF EXISTS '" + user + "'@'localhost'");
}

TEST_CASE("async mysql: a request cancelled at any point leaves no processing claim behind") {
  idem_test::AsyncTable t(16);
  net::io_context io;
  std::mt19937 rng(11);
  int cancelled = 0;
  constexpr int requests = 400;
  // Two first rounds of the same requests on other keys: the first opens the pool's
  // connections, the second measures how long a round takes here (a sanitizer build is
  // several times slower; timing the first would count the connections' opening too, and
  // under TSan leave too few timeouts short enough to cancel). The timeouts below are spread
  // over one and a half times that, so that they fall on every step of a request and some
  // requests finish.
  auto round = std::chrono::microseconds{0};
  for (const char* biz_type : {"WARM_UP", "CALIBRATE"}) {
    const auto calibration_start = std::chrono::steady_clock::now();
    for (int i = 0; i < requests; ++i) {
      net::co_spawn(
          io,
          [&, i, biz_type]() -> net::awaitable<void> {
            auto body = [&]() -> net::awaitable<int> {
              co_await pause(1ms);
              co_return i;
            };
            co_await idem::async::run_once(t.store, {biz_type, std::to_string(i)}, "fp", body);
          },
          net::detached);
    }
    io.restart();
    io.run();
    round = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                  calibration_start);
  }
  const auto spread = static_cast<unsigned>(round.count() * 3 / 2) + 1;
  for (int i = 0; i < requests; ++i) {
    const auto timeout = std::chrono::microseconds(rng() % spread);
    net::co_spawn(
        io,
        [&, i, timeout]() -> net::awaitable<void> {
          using namespace net::experimental::awaitable_operators;
          auto body = [&]() -> net::awaitable<int> {
            co_await pause(1ms);
            co_return i;
          };
          net::steady_timer timer(co_await net::this_coro::executor, timeout);
          const auto first =
              co_await (idem::async::run_once(t.store, {"CANCEL", std::to_string(i)}, "fp", body) ||
                        timer.async_wait(net::use_awaitable));
          if (first.index() == 1) ++cancelled;
        },
        net::detached);
  }
  io.restart();  // the calibration's run stopped the loop
  io.run();      // also runs the clean-ups the cancelled claims started
  const long long in_claim = t.count("response_snapshot LIKE '%idem.cancelled%'");
  const long long in_body = t.count("response_snapshot LIKE '%idem.abandoned%'");
  std::printf(
      "async mysql cancel: %d of %d requests cancelled; retryable failures recorded: %lld "
      "by a claim's clean-up, %lld by the guard\n",
      cancelled, requests, in_claim, in_body);
  CHECK(cancelled > 20);
  CHECK(cancelled < requests);
  CHECK(t.count("status = 0") == 0);
  // Every cancelled request's key runs at once on its next duplicate (or replays).
  int acquired_or_replayed = 0;
  for (int i = 0; i < requests; ++i) {
    auto body = [&]() -> net::awaitable<int> { co_return i; };
    const auto out =
        run_on(io, idem::async::run_once(t.store, {"CANCEL", std::to_string(i)}, "fp", body));
    if (out && out.value() == i) ++acquired_or_replayed;
  }
  CHECK(acquired_or_replayed == requests);
}

TEST_CASE(
    "async mysql: with_transaction commits the claim with the business writes, and a "
    "duplicate that waited on the row replays") {
  idem_test::AsyncTable t(16);
  idem_test::BusinessTable biz(t.blocking.pool);
  net::io_context io;
  using Guard = idem::async::IdempotencyGuard<idem::mysql::AsyncBoundStore>;
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
                  co_await pause(2ms);
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
  CHECK(ran == 1);
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
  using Guard = idem::async::IdempotencyGuard<idem::mysql::AsyncBoundStore>;
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

TEST_CASE("async mysql: a store checks its table on its first operation") {
  idem_test::AsyncTable t;
  t.blocking.pool->acquire()->query("ALTER TABLE " + t.store.table() +
                                    " MODIFY idempotent_key VARCHAR(64) CHARACTER SET utf8mb4 "
                                    "COLLATE utf8mb4_general_ci NOT NULL");
  net::io_context io;
  auto claim = [&]() -> net::awaitable<int> {
    co_await t.store.claim(idem::Key{"PAY", "first-use"}, "fp", {});
    co_return 0;
  };
  std::string fix;
  try {
    run_on(io, claim());
    FAIL("claimed on a key column that compares case-insensitively");
  } catch (const idem::SchemaMismatch& e) {
    REQUIRE(e.problems().size() == 1);
    CHECK_THAT(e.problems()[0].what, Catch::Contains("idempotent_key"));
    fix = e.problems()[0].fix;
  }
  CHECK(t.count() == 0);
  // The printed fix repairs the table; the same store then checks again and claims.
  t.blocking.pool->acquire()->query(fix);
  CHECK(run_on(io, claim()) == 0);
  CHECK(t.count() == 1);
}

TEST_CASE("async mysql: check_schema and ensure_schema name a table that is not idem's") {
  idem_test::AsyncTable t;
  net::io_context io;
  auto check = [&]() -> net::awaitable<int> {
    co_await t.store.check_schema();
    co_return 0;
  };
  CHECK_NOTHROW(run_on(io, check()));
  t.blocking.pool->acquire()->query("ALTER TABLE " + t.store.table() + " DROP KEY idx_stale");
  for (int i = 0; i < 2; ++i) {
    try {
      if (i == 0) {
        run_on(io, check());
      } else {
        (void)run_on(io, t.store.ensure_schema());
      }
      FAIL("a table without idx_stale passed");
    } catch (const idem::SchemaMismatch& e) {
      REQUIRE(e.problems().size() == 1);
      CHECK_THAT(e.problems()[0].what, Catch::Contains("(status, lease_until)"));
    }
  }
}
