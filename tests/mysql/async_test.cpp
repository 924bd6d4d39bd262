// idem::mysql::AsyncStore on the real MariaDB server, from one loop thread: a request storm,
// the loop's responsiveness while claims are in flight, connections killed under load,
// cancelled requests, and the coroutine Janitor's round.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/async_scenarios.hpp"
#include "../support/mysql_async.hpp"
#include "../support/mysql_killer.hpp"
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
  const auto storm = idem_test::storm_of(1000, 17);
  idem_test::Executions executions;
  const auto start = std::chrono::steady_clock::now();
  const auto r = idem_test::async_storm(t.store, storm, executions);
  const auto took = std::chrono::steady_clock::now() - start;
  std::printf(
      "async mysql storm: 1000 requests on one thread in %lld ms\n",
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  idem_test::check_storm(r, storm, executions);
  CHECK(t.count("status = 1") == storm.distinct);
}

TEST_CASE("async mysql: a 1 ms timer on the loop keeps firing while 64 claims are in flight") {
  idem_test::AsyncTable t(64);
  const auto r = idem_test::ticks_while_claiming(t.store, 64, 640);
  std::printf(
      "async mysql: %d ticks of 1 ms (%d with claims in flight), latest by %lld us, "
      "up to %d claims in flight\n",
      r.ticks, r.ticks_in_flight, r.latest_us, r.most_in_flight);
  CHECK(r.done == 64);
  CHECK(t.count("status = 1") == 640);
  CHECK(r.most_in_flight > 1);   // the claims wait for the server side by side
  CHECK(r.ticks_in_flight > 0);  // and the loop serves its timer while they wait
}

TEST_CASE("async mysql: connections killed at random under load - nothing runs twice") {
  // The async pool logs in as a user of its own, so that the killer never touches the
  // connections of the tests running beside this one on the same server.
  const idem_test::KillableUser user("idem_kill");
  idem_test::AsyncTable t(16, {}, user.params());
  const auto storm = idem_test::storm_of(3000, 23);
  idem_test::Executions executions;
  idem_test::ConnectionKiller killer(user, 5);
  const auto r = idem_test::retrying_clients(t.store, storm, 64, executions);
  killer.stop();
  std::printf("async mysql kill: %d kills, %d failed calls (retried by the client)%s%s\n",
              killer.kills(), r.failed_calls, r.failed_calls > 0 ? ", first: " : "",
              r.first_failure.c_str());
  CHECK(killer.kills() > 10);
  CHECK(executions.max_per_key() == 1);
  CHECK(executions.total() == storm.distinct);
  CHECK(t.count("status = 1") == storm.distinct);
}

TEST_CASE("async mysql: a request cancelled at any point leaves no processing claim behind") {
  idem_test::AsyncTable t(16);
  const auto r = idem_test::cancel_at_random(t.store, 400, 11);
  std::printf(
      "async mysql cancel: %d of %d requests cancelled in %d rounds; retryable failures "
      "recorded: %lld by a claim's clean-up, %lld by the guard\n",
      r.cancelled, r.requests, r.rounds, t.count("response_snapshot LIKE '%idem.cancelled%'"),
      t.count("response_snapshot LIKE '%idem.abandoned%'"));
  CHECK(r.cancelled > 20);
  CHECK(r.finished > 0);
  CHECK(r.processing_after == 0);
  CHECK(t.count("status = 0") == 0);
  // Every cancelled request's key runs at once on its next duplicate (or replays).
  CHECK(idem_test::replayed_or_ran(t.store, r, 400) == r.requests);
}

TEST_CASE(
    "async mysql: claim_batch answers exactly what one claim after another answers, a chunk "
    "of keys per statement") {
  const bool returning = GENERATE(true, false);  // INSERT ... RETURNING, or a read after it
  INFO("insert_returning = " << returning);
  net::io_context io;
  idem_test::AsyncTable batched(1, {.insert_returning = returning});
  idem_test::Table single(2, {.insert_returning = returning});
  idem_test::check_batch_answers(batched.store, batched.blocking.store, single.store);

  // 300 fresh keys: 128 + 128 + 44 rows, an INSERT each (and a read each without RETURNING),
  // counted on the pool's one connection; the first batch prepares the statements.
  const auto statements = [&]() -> net::awaitable<long long> {
    auto c = co_await batched.pool->acquire();
    const std::vector<idem::mysql::Param> none;
    const auto rows = co_await c->select("SHOW SESSION STATUS LIKE 'Com_stmt_execute'", none);
    co_return std::stoll(rows.at(0).at(1).to_text().value());
  };
  const auto fresh = [](const std::string& prefix) {
    std::vector<idem::ClaimRequest> r;
    for (int i = 0; i < 300; ++i)
      r.push_back({{"FRESH", prefix + std::to_string(i)}, "fp"});
    return r;
  };
  const auto warm = fresh("w-");
  run_on(io, idem::async::claim_batch(batched.store, warm));
  const long long first = run_on(io, statements());
  const long long second = run_on(io, statements());  // what a count costs itself
  const auto requests = fresh("f-");
  const auto results = run_on(io, idem::async::claim_batch(batched.store, requests));
  const long long after = run_on(io, statements());
  CHECK(after - second - (second - first) == (returning ? 3 : 6));
  REQUIRE(results.size() == 300);
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("request " << i);
    CHECK(results[i].verdict == idem::Verdict::acquired);
    CHECK(results[i].record.key == requests[i].key);
  }
  CHECK(batched.count("biz_type = 'FRESH' AND status = 0") == 600);
}

TEST_CASE("async mysql: batches of a storm on one loop thread - every key runs once") {
  idem_test::AsyncTable t(16);
  const auto storm = idem_test::storm_of(1000, 41);
  idem_test::Executions executions;
  const auto r = idem_test::batch_storm(t.store, storm, 50, executions);
  idem_test::check_batch_storm("async mysql", r, storm, executions, t.count("status = 1"));
}

TEST_CASE("async mysql: batches while connections are killed at random - every key runs once") {
  const idem_test::KillableUser user("idem_kill_batch");
  idem_test::AsyncTable t(16, {}, user.params());
  const auto storm = idem_test::storm_of(2000, 43);
  idem_test::Executions executions;
  idem_test::ConnectionKiller killer(user, 7);
  const auto r = idem_test::batch_storm(t.store, storm, 50, executions);
  killer.stop();
  idem_test::check_batch_storm_killed("async mysql", r, storm, executions, killer.kills(), 10,
                                      t.count("status = 1"));
}

TEST_CASE("async mysql: a batch cancelled at any point leaves no processing claim behind") {
  idem_test::AsyncTable t(16);
  const auto r = idem_test::cancel_batches_at_random(t.store, 8, 150, 19);
  idem_test::check_cancelled_batches("async mysql", r, 8, t.count("status = 0"),
                                     t.count("response_snapshot LIKE '%idem.cancelled%'"),
                                     t.count("response_snapshot LIKE '%idem.abandoned%'"));
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

TEST_CASE("async mysql: the coroutine Janitor purges, resolves and releases on the loop") {
  static_assert(idem::async::ListingAsyncStore<idem::mysql::AsyncStore> &&
                idem::async::RepairingAsyncStore<idem::mysql::AsyncStore>);
  idem_test::AsyncTable t;
  idem_test::check_janitor_round(t.store, t.blocking.store);
  CHECK(t.count() == 4);
}
