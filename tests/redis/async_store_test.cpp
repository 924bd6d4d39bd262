// idem::redis::AsyncStore on the real redis-server, from one loop thread: many requests
// pipelined on one connection, a request storm, the loop's responsiveness while claims are in
// flight, connections killed under load, a server killed and started again, batches (their
// answers, a storm, kills, cancellations), cancelled requests, the layout check, a read
// timeout, and the coroutine Janitor (purge, resolvers, release).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/async_scenarios.hpp"
#include "../support/redis_async.hpp"
#include "../support/redis_killer.hpp"
#include "../support/workload.hpp"

using namespace std::chrono_literals;
namespace net = idem::async::net;
using idem_test::run_on;

TEST_CASE("async redis: run_once runs once and replays, the blocking store reads the same record") {
  net::io_context io;
  idem_test::RedisAsyncStore t(io.get_executor());
  const idem::Key key{"PAY", "AR-1"};
  int ran = 0;
  auto pay = [&]() -> net::awaitable<int> {
    ++ran;
    co_await idem::async::sleep_for(1ms);
    co_return 299;
  };
  const auto first = run_on(io, idem::async::run_once(t.store, key, "fp", pay));
  CHECK(first.acquired());
  CHECK(first.value() == 299);
  const auto again = run_on(io, idem::async::run_once(t.store, key, "fp", pay));
  CHECK(again.replayed());
  CHECK(again.value() == 299);
  CHECK(ran == 1);
  CHECK(t.blocking.find(key)->snapshot == "299");
}

TEST_CASE(
    "async redis: one loop thread, 1,000 concurrent requests at 12% duplicates pipelined "
    "on one connection - executions equal keys") {
  idem::redis::ConnectionParams params = idem_test::redis_server();
  params.client_name = idem_test::unique_prefix("pipelined");
  idem_test::RedisAsyncStore t(idem_test::test_loop().get_executor(), 1, {}, params);
  const auto storm = idem_test::storm_of(1000, 17);
  idem_test::Executions executions;
  const auto start = std::chrono::steady_clock::now();
  const auto r = idem_test::async_storm(t.store, storm, executions);
  const auto took = std::chrono::steady_clock::now() - start;
  std::printf(
      "async redis storm: 1000 requests on one thread, one connection, in %lld ms\n",
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  idem_test::check_storm(r, storm, executions);
  // All of it went over one connection.
  idem::redis::Connection admin(idem_test::redis_server());
  CHECK(idem_test::clients_named(admin, params.client_name).size() == 1);
}

TEST_CASE("async redis: a 1 ms timer on the loop keeps firing while 64 claims are in flight") {
  idem_test::RedisAsyncStore t(idem_test::test_loop().get_executor());
  const auto r = idem_test::ticks_while_claiming(t.store, 64, 2000);
  std::printf(
      "async redis: %d ticks of 1 ms (%d with claims in flight), latest by %lld us, "
      "up to %d claims in flight\n",
      r.ticks, r.ticks_in_flight, r.latest_us, r.most_in_flight);
  CHECK(r.done == 64);
  CHECK(r.most_in_flight > 1);   // the claims are out side by side, on one connection
  CHECK(r.ticks_in_flight > 0);  // and the loop serves its timer while they wait
}

TEST_CASE("async redis: connections killed at random under load - nothing runs twice") {
  idem::redis::ConnectionParams params = idem_test::redis_server();
  params.client_name = idem_test::unique_prefix("async-killed");
  // Enough tries that a call outlives the killer's aim at its connections, also in a sanitizer
  // build: a result that cannot be recorded is released and runs again, by design
  // (docs/reliability.md), and this test counts executions.
  idem_test::RedisAsyncStore t(idem_test::test_loop().get_executor(), 2,
                               {.retry = {.max_attempts = 100, .max_backoff = 50ms}}, params);
  const auto storm = idem_test::storm_of(5000, 29);
  idem_test::Executions executions;
  idem_test::RedisConnectionKiller killer(params.client_name, 5);
  const auto r = idem_test::retrying_clients(t.store, storm, 64, executions);
  killer.stop();
  std::printf("async redis kill: %ld kills, %d failed calls (retried by the client)%s%s\n",
              killer.kills(), r.failed_calls, r.failed_calls > 0 ? ", first: " : "",
              r.first_failure.c_str());
  CHECK(killer.kills() > 10);
  CHECK(executions.max_per_key() == 1);
  CHECK(executions.total() == storm.distinct);
}

TEST_CASE(
    "async redis: a server SIGKILLed under load and started again - the store reconnects, "
    "nothing runs twice") {
  // appendfsync always: the restarted server has every acknowledged write (docs/redis.md,
  // "Durability"), so nothing may run twice.
  idem_test::OwnRedis server("--appendonly yes --appendfsync always");
  idem::redis::ConnectionParams params = server.params();
  params.client_name = idem_test::unique_prefix("async-restart");
  auto pool = std::make_shared<idem::redis::AsyncPool>(idem_test::test_loop().get_executor(),
                                                       params, idem::redis::PoolParams{.size = 2});
  idem::redis::AsyncStore store(
      pool, idem_test::fresh_params({.retry = {.max_attempts = 40, .max_backoff = 100ms}}));
  const auto storm = idem_test::storm_of(6000, 61);
  idem_test::Executions executions;
  std::chrono::steady_clock::time_point resumed_at{};
  std::atomic<bool> over{false};  // the clients ended (before the kill only if they failed)
  bool killed = false;
  std::thread crasher([&] {
    while (executions.total() < storm.distinct / 3) {
      if (over) return;
      std::this_thread::sleep_for(1ms);
    }
    server.kill();
    killed = true;
    std::this_thread::sleep_for(200ms);
    server.resume();
    resumed_at = std::chrono::steady_clock::now();
  });
  const auto r = idem_test::retrying_clients(store, storm, 64, executions);
  const auto ended = std::chrono::steady_clock::now();
  over = true;
  crasher.join();
  std::printf("async redis restart: %d failed calls (retried by the client)%s%s\n", r.failed_calls,
              r.failed_calls > 0 ? ", first: " : "", r.first_failure.c_str());
  REQUIRE(killed);
  CHECK(ended > resumed_at);  // requests were still coming when the server was back
  CHECK(executions.max_per_key() == 1);
  CHECK(executions.total() == storm.distinct);
  // Every key recorded on the restarted server, through connections opened after the restart.
  int succeeded = 0;
  for (int k = 0; k < storm.distinct; ++k) {
    const idem::Key key{"PAY", "K-" + std::to_string(k)};
    const auto stored = run_on(idem_test::test_loop(), store.find(key));
    succeeded += stored && stored->status == idem::Status::succeeded ? 1 : 0;
  }
  CHECK(succeeded == storm.distinct);
  idem::redis::Connection admin(server.params());
  CHECK_FALSE(idem_test::clients_named(admin, params.client_name).empty());
}

TEST_CASE("async redis: a request cancelled at any point leaves no processing claim behind") {
  idem_test::RedisAsyncStore t(idem_test::test_loop().get_executor(), 2);
  const auto r = idem_test::cancel_at_random(t.store, 400, 11);
  std::printf("async redis cancel: %d of %d requests cancelled in %d rounds\n", r.cancelled,
              r.requests, r.rounds);
  CHECK(r.cancelled > 20);
  CHECK(r.finished > 0);
  CHECK(r.processing_after == 0);
  CHECK(idem_test::replayed_or_ran(t.store, r, 400) == r.requests);
}

TEST_CASE("async redis: claim_batch answers exactly what one claim after another answers") {
  idem_test::RedisAsyncStore batched(idem_test::test_loop().get_executor(), 2);
  idem_test::RedisStore single(2);
  idem_test::check_batch_answers(batched.store, batched.blocking, single.store);

  const auto fresh = idem_test::fresh_requests(300);
  const auto results =
      run_on(idem_test::test_loop(), idem::async::claim_batch(batched.store, fresh));
  idem_test::check_fresh_claims(results, fresh,
                                [&](const idem::Key& key) { return batched.blocking.find(key); });
}

// The keys of batch_storm recorded succeeded.
static long long batch_storm_succeeded(idem::redis::Store& store, const idem_test::Storm& storm) {
  return idem_test::count_succeeded(store, storm.distinct, idem_test::batch_storm_key);
}

TEST_CASE("async redis: batches of a storm on one loop thread - every key runs once") {
  idem_test::RedisAsyncStore t(idem_test::test_loop().get_executor(), 2);
  const auto storm = idem_test::storm_of(1000, 41);
  idem_test::Executions executions;
  const auto r = idem_test::batch_storm(t.store, storm, 50, executions);
  idem_test::check_batch_storm("async redis", r, storm, executions,
                               batch_storm_succeeded(t.blocking, storm));
}

TEST_CASE("async redis: batches while connections are killed at random - every key runs once") {
  idem::redis::ConnectionParams params = idem_test::redis_server();
  params.client_name = idem_test::unique_prefix("async-batch-killed");
  idem_test::RedisAsyncStore t(idem_test::test_loop().get_executor(), 2,
                               {.retry = {.max_attempts = 100, .max_backoff = 50ms}}, params);
  const auto storm = idem_test::storm_of(2000, 43);
  idem_test::Executions executions;
  idem_test::RedisConnectionKiller killer(params.client_name, 7);
  const auto r = idem_test::batch_storm(t.store, storm, 50, executions);
  killer.stop();
  idem_test::check_batch_storm_killed("async redis", r, storm, executions, killer.kills(), 5,
                                      batch_storm_succeeded(t.blocking, storm));
}

TEST_CASE("async redis: a batch cancelled at any point leaves no processing claim behind") {
  idem_test::RedisAsyncStore t(idem_test::test_loop().get_executor(), 2);
  const auto r = idem_test::cancel_batches_at_random(t.store, 8, 150, 29);
  const auto left = idem_test::batch_keys_left(t.store, r, 8, 150);
  idem_test::check_cancelled_batches("async redis", r, 8, left.processing, left.cut_off,
                                     left.made_before);
}

TEST_CASE("async redis: ensure_schema stamps the buckets and check_schema reads the layout") {
  net::io_context io;
  idem_test::RedisAsyncStore t(io.get_executor(), 1, {.buckets = 8});
  CHECK_FALSE(run_on(io, t.store.check_schema()).stamped);
  const auto done = run_on(io, t.store.ensure_schema());
  CHECK(done.stamped_buckets == 8);
  CHECK(done.layout.stamped);
  CHECK(run_on(io, t.store.ensure_schema()).stamped_buckets == 0);
  CHECK(t.blocking.check_schema().layout == done.layout.layout);
}

TEST_CASE(
    "async redis connection: a reply later than read_timeout breaks the connection, "
    "the store retries on a new one") {
  idem::redis::ConnectionParams params = idem_test::redis_server();
  params.read_timeout = 100ms;
  net::io_context io;
  auto c = run_on(io, idem::redis::AsyncConnection::open(params));
  const std::string list = idem_test::unique_prefix("list");
  const std::vector<std::string_view> blocked{"BLPOP", list, "1"};
  try {
    (void)run_on(io, c->command(blocked));
    FAIL("the command outlived read_timeout");
  } catch (const idem::StoreError& e) {
    CHECK(e.retryable());
    CHECK(idem::redis::is_connection_lost(e.diagnostics().code));
  }
  CHECK(c->broken());
  const std::vector<std::string_view> ping{"PING"};
  CHECK_THROWS_AS(run_on(io, c->command(ping)), idem::StoreError);

  // Through a pool, the next call opens a fresh connection.
  auto pool = std::make_shared<idem::redis::AsyncPool>(io.get_executor(), params);
  idem::redis::AsyncStore store(pool, idem_test::fresh_params());
  const auto out = run_on(io, idem::async::run_once(store, {"PAY", "RT"}, "fp",
                                                    []() -> net::awaitable<int> { co_return 1; }));
  CHECK(out.value() == 1);
}

TEST_CASE(
    "async redis connection: replies come back in order to each of many callers, error "
    "replies included") {
  net::io_context io;
  auto c = run_on(io, idem::redis::AsyncConnection::open(idem_test::redis_server()));
  const std::string prefix = idem_test::unique_prefix("order");
  int right = 0;
  int errors = 0;
  for (int i = 0; i < 200; ++i) {
    // (A lambda without captures: its coroutine outlives the lambda object.)
    net::co_spawn(
        io,
        [](std::shared_ptr<idem::redis::AsyncConnection> c, std::string key, std::string value,
           int& right, int& errors) -> net::awaitable<void> {
          const std::vector<std::string_view> set{"SET", key, value};
          const std::vector<std::string_view> get{"GET", key};
          const std::vector<std::string_view> wrong{"INCR", key, "extra"};
          const std::vector<idem::redis::AsyncConnection::Command> three{set, wrong, get};
          const auto replies = co_await c->commands(three);
          if (replies[1].is_error()) ++errors;
          if (replies[2].text() == value) ++right;
        }(c, prefix + ":" + std::to_string(i), std::to_string(i * 7), right, errors),
        net::detached);
  }
  io.restart();
  io.run();
  CHECK(right == 200);
  CHECK(errors == 200);
}

TEST_CASE("async redis: the coroutine Janitor purges, resolves and releases on the loop") {
  static_assert(idem::async::ListingAsyncStore<idem::redis::AsyncStore> &&
                idem::async::RepairingAsyncStore<idem::redis::AsyncStore>);
  idem_test::RedisAsyncStore t(idem_test::test_loop().get_executor());
  idem_test::check_janitor_round(t.store, t.blocking);
}
