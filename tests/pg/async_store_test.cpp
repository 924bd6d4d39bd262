// idem::pg::AsyncStore on the test server, from one loop thread: a request storm, the loop's
// responsiveness while claims are in flight, connections terminated under load, cancelled
// requests, and the table's check.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>

#include "../support/pg_async.hpp"
#include "../support/workload.hpp"

using namespace std::chrono_literals;

namespace {

namespace net = idem::async::net;
using idem_test::run_on;

net::awaitable<void> pg_pause(std::chrono::milliseconds d) {
  co_await idem::async::sleep_for(d);
}

}  // namespace

TEST_CASE("async pg: run_once runs once and replays - the blocking store sees the same record") {
  idem_test::PgAsyncTable t;
  net::io_context io;
  const idem::Key key{"PAY", "AP-1"};
  int ran = 0;
  auto pay = [&]() -> net::awaitable<int> {
    ++ran;
    co_await pg_pause(1ms);
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
  CHECK(t.blocking.store.find(key)->snapshot == "299");
}

TEST_CASE(
    "async pg: one loop thread serves 1,000 concurrent requests at 12% duplicates - "
    "executions equal keys") {
  idem_test::PgAsyncTable t(32);
  net::io_context io;
  const auto storm = idem_test::storm_of(1000, 29);
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
            co_await pg_pause(std::chrono::milliseconds(1 + k % 3));
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
  io.run();
  INFO((errors.empty() ? std::string() : errors.front()));
  CHECK(errors.empty());
  CHECK(answered + in_progress == 1000);
  CHECK(executions.total() == storm.distinct);
  CHECK(executions.max_per_key() == 1);
  CHECK(t.count("status = 1") == storm.distinct);
}

TEST_CASE("async pg: a 1 ms timer on the loop keeps firing while 64 claims are in flight") {
  // What a blocking store would break, without judging by the clock (a loaded sanitizer run
  // can be late by any amount): a claim that blocked the loop would hold it until its answer,
  // so no other claim could start meanwhile and the timer could not fire while one is out.
  idem_test::PgAsyncTable t(64);
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
  std::printf(
      "async pg: %d ticks of 1 ms (%d with claims in flight), latest by %lld us, up to %d claims "
      "in flight\n",
      ticks, ticks_in_flight,
      static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(worst).count()),
      most_in_flight);
  CHECK(done == 64);
  CHECK(t.count("status = 1") == requests);
  CHECK(most_in_flight > 1);   // the claims wait for the server side by side
  CHECK(ticks_in_flight > 0);  // and the loop serves its timer while they wait
}

TEST_CASE("async pg: connections terminated at random under load - nothing runs twice") {
  // The coroutine pool's connections carry an application_name of their own, so that the
  // killer never touches the connections of the tests running beside this one.
  const std::string app = idem_test::unique_pg_table("killed_async");
  idem_test::PgAsyncTable t(
      16, {.retry = {.max_attempts = 100, .max_backoff = 50ms}},
      idem::pg::ConnectionParams{.conninfo = idem_test::pg_conninfo(), .application_name = app});
  net::io_context io;
  const auto storm = idem_test::storm_of(3000, 31);
  idem_test::Executions executions;
  std::atomic<bool> stop{false};
  std::atomic<int> kills{0};
  std::vector<std::string> killer_errors;
  // Every 10-30 ms, as the blocking store's test (tests/pg/store_test.cpp) says why.
  std::thread killer([&] {
    std::mt19937 rng(5);
    try {
      auto admin = t.blocking.pool->acquire();
      while (!stop) {
        const idem::pg::Result r = admin->exec(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 "
            "ORDER BY random() LIMIT 1",
            {app});
        if (r.rows() == 1) ++kills;
        std::this_thread::sleep_for(std::chrono::milliseconds(10 + rng() % 21));
      }
    } catch (const std::exception& e) {
      killer_errors.push_back(e.what());
    }
  });
  int failed_calls = 0;
  std::string first_failure;
  // 64 clients on the loop, each sending its next request once it has the last one's answer:
  // with all 3,000 waiting for the pool at once, the last in line would wait longer than the
  // pool's acquire_timeout in a sanitizer build, where each replaced connection is slow to
  // open, and a result whose recording fails that way is run again by design
  // (docs/reliability.md, "What idem does not guarantee").
  std::size_t next = 0;
  for (int client = 0; client < 64; ++client) {
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          while (next < storm.order.size()) {
            const int k = storm.order[next++];
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
                if (out) break;
              } catch (const idem::StoreError& e) {
                if (failed_calls++ == 0) first_failure = e.what();
              }
              co_await pg_pause(5ms);
            }
          }
        },
        net::detached);
  }
  io.run();
  stop = true;
  killer.join();
  std::printf("async pg terminate: %d kills, %d failed calls (retried by the client)%s%s\n",
              kills.load(), failed_calls, failed_calls > 0 ? ", first: " : "",
              first_failure.c_str());
  INFO((killer_errors.empty() ? std::string() : killer_errors.front()));
  CHECK(killer_errors.empty());
  CHECK(kills > 20);
  CHECK(executions.max_per_key() == 1);
  CHECK(executions.total() == storm.distinct);
  CHECK(t.count("status = 1") == storm.distinct);
}

TEST_CASE("async pg: a request cancelled at any point leaves no processing claim behind") {
  idem_test::PgAsyncTable t(16);
  net::io_context io;
  std::mt19937 rng(13);
  constexpr int requests = 400;
  // Two first rounds on other keys: the first opens the pool's connections, the second
  // measures how long a round takes here (a sanitizer build is several times slower). The
  // timeouts are spread over one and a half times that, so that they fall on every step of a
  // request. Each cancelled statement costs its connection, and a new PostgreSQL connection
  // is a new server process: a round with cancellations runs slower than the calibration, so
  // the spread doubles for another round (on new keys) until some requests finish too.
  auto round = std::chrono::microseconds{0};
  for (const char* biz_type : {"WARM_UP", "CALIBRATE"}) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < requests; ++i) {
      net::co_spawn(
          io,
          [&, i, biz_type]() -> net::awaitable<void> {
            auto body = [&]() -> net::awaitable<int> {
              co_await pg_pause(1ms);
              co_return i;
            };
            co_await idem::async::run_once(t.store, {biz_type, std::to_string(i)}, "fp", body);
          },
          net::detached);
    }
    io.restart();
    io.run();
    round = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                  start);
  }
  int cancelled = 0;
  int finished = 0;
  int rounds = 0;
  auto spread = static_cast<unsigned>(round.count() * 3 / 2) + 1;
  for (; rounds < 6 && (cancelled <= 20 || finished == 0); ++rounds, spread *= 2) {
    const std::string biz_type = "CANCEL_" + std::to_string(rounds);
    for (int i = 0; i < requests; ++i) {
      const auto timeout = std::chrono::microseconds(rng() % spread);
      net::co_spawn(
          io,
          [&, i, timeout, biz_type]() -> net::awaitable<void> {
            using namespace net::experimental::awaitable_operators;
            auto body = [&]() -> net::awaitable<int> {
              co_await pg_pause(1ms);
              co_return i;
            };
            net::steady_timer timer(co_await net::this_coro::executor, timeout);
            const auto first = co_await (
                idem::async::run_once(t.store, {biz_type, std::to_string(i)}, "fp", body) ||
                timer.async_wait(net::use_awaitable));
            ++(first.index() == 1 ? cancelled : finished);
          },
          net::detached);
    }
    io.restart();
    io.run();  // also runs the clean-ups the cancelled claims started
  }
  const long long in_claim = t.count("response_snapshot LIKE '%idem.cancelled%'");
  const long long in_body = t.count("response_snapshot LIKE '%idem.abandoned%'");
  std::printf(
      "async pg cancel: %d of %d requests cancelled in %d rounds; retryable failures recorded: "
      "%lld by a claim's clean-up, %lld by the guard\n",
      cancelled, rounds * requests, rounds, in_claim, in_body);
  CHECK(cancelled > 20);
  CHECK(finished > 0);
  CHECK(t.count("status = 0") == 0);
  // Every cancelled request's key runs at once on its next duplicate (or replays).
  int acquired_or_replayed = 0;
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < requests; ++i) {
      auto body = [&]() -> net::awaitable<int> { co_return i; };
      const auto out =
          run_on(io, idem::async::run_once(
                         t.store, {"CANCEL_" + std::to_string(r), std::to_string(i)}, "fp", body));
      if (out && out.value() == i) ++acquired_or_replayed;
    }
  }
  CHECK(acquired_or_replayed == rounds * requests);
}

TEST_CASE("async pg: a store checks its table on its first operation") {
  idem_test::PgAsyncTable t;
  t.blocking.pool->acquire()->query("ALTER TABLE " + t.store.table() +
                                    " ALTER COLUMN idempotent_key TYPE text COLLATE \"default\"");
  net::io_context io;
  auto claim = [&]() -> net::awaitable<int> {
    co_await t.store.claim(idem::Key{"PAY", "first-use"}, "fp", {});
    co_return 0;
  };
  std::string fix;
  try {
    run_on(io, claim());
    FAIL("claimed on a key column that does not compare bytes");
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

TEST_CASE("async pg: ensure_schema creates the table once and check_schema names what is wrong") {
  idem_test::PgAsyncTable t;
  const std::string name = idem_test::unique_pg_table("async_schema");
  idem::pg::AsyncStore fresh(t.pool, {.table = name});
  net::io_context io;
  CHECK(run_on(io, fresh.ensure_schema()).layout == idem::pg::record_table_layout);
  CHECK(run_on(io, fresh.ensure_schema()).layout == idem::pg::record_table_layout);
  CHECK(run_on(io, fresh.check_schema()).layout == idem::pg::record_table_layout);
  t.blocking.pool->acquire()->query("DROP INDEX \"" + name + "_idx_stale\"");
  try {
    (void)run_on(io, fresh.check_schema());
    FAIL("a table without its stale index passed");
  } catch (const idem::SchemaMismatch& e) {
    REQUIRE(e.problems().size() == 1);
    CHECK_THAT(e.problems()[0].what, Catch::Contains("lease_until"));
  }
  t.blocking.pool->acquire()->query("DROP TABLE " + name);
}
