// idem::pg::AsyncStore on the test server, from one loop thread: a request storm, the loop's
// responsiveness while claims are in flight, connections terminated under load, cancelled
// requests, and the table's check.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/async_scenarios.hpp"
#include "../support/pg_async.hpp"
#include "../support/pg_killer.hpp"
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
  const auto storm = idem_test::storm_of(1000, 29);
  idem_test::Executions executions;
  const auto r = idem_test::async_storm(t.store, storm, executions);
  idem_test::check_storm(r, storm, executions);
  CHECK(t.count("status = 1") == storm.distinct);
}

TEST_CASE("async pg: a 1 ms timer on the loop keeps firing while 64 claims are in flight") {
  idem_test::PgAsyncTable t(64);
  const auto r = idem_test::ticks_while_claiming(t.store, 64, 640);
  std::printf(
      "async pg: %d ticks of 1 ms (%d with claims in flight), latest by %lld us, up to %d claims "
      "in flight\n",
      r.ticks, r.ticks_in_flight, r.latest_us, r.most_in_flight);
  CHECK(r.done == 64);
  CHECK(t.count("status = 1") == 640);
  CHECK(r.most_in_flight > 1);   // the claims wait for the server side by side
  CHECK(r.ticks_in_flight > 0);  // and the loop serves its timer while they wait
}

TEST_CASE("async pg: connections terminated at random under load - nothing runs twice") {
  // The coroutine pool's connections carry an application_name of their own, so that the
  // killer never touches the connections of the tests running beside this one.
  const std::string app = idem_test::unique_pg_table("killed_async");
  idem_test::PgAsyncTable t(
      16, {.retry = {.max_attempts = 100, .max_backoff = 50ms}},
      idem::pg::ConnectionParams{.conninfo = idem_test::pg_conninfo(), .application_name = app});
  const auto storm = idem_test::storm_of(3000, 31);
  idem_test::Executions executions;
  idem_test::PgConnectionKiller killer(app, 5, &executions);
  const auto r = idem_test::retrying_clients(t.store, storm, 64, executions);
  killer.stop();
  std::printf("async pg terminate: %d kills, %d failed calls (retried by the client)%s%s\n",
              killer.kills(), r.failed_calls, r.failed_calls > 0 ? ", first: " : "",
              r.first_failure.c_str());
  INFO("killer: " << killer.errors().first());
  CHECK(killer.errors().size() == 0);
  CHECK(killer.kills() > 20);
  CHECK(executions.max_per_key() == 1);
  CHECK(executions.total() == storm.distinct);
  CHECK(t.count("status = 1") == storm.distinct);
}

TEST_CASE("async pg: a request cancelled at any point leaves no processing claim behind") {
  idem_test::PgAsyncTable t(16);
  const auto r = idem_test::cancel_at_random(t.store, 400, 13);
  std::printf(
      "async pg cancel: %d of %d requests cancelled in %d rounds; retryable failures recorded: "
      "%lld by a claim's clean-up, %lld by the guard\n",
      r.cancelled, r.requests, r.rounds, t.count("response_snapshot LIKE '%idem.cancelled%'"),
      t.count("response_snapshot LIKE '%idem.abandoned%'"));
  CHECK(r.cancelled > 20);
  CHECK(r.finished > 0);
  CHECK(r.processing_after == 0);
  CHECK(t.count("status = 0") == 0);
  // Every cancelled request's key runs at once on its next duplicate (or replays).
  CHECK(idem_test::replayed_or_ran(t.store, r, 400) == r.requests);
}

TEST_CASE("async pg: claim_batch answers exactly what one claim after another answers") {
  idem::async::net::io_context io;
  idem_test::PgAsyncTable batched(2);
  idem_test::PgTable single(2);
  idem_test::check_batch_answers(batched.store, batched.blocking.store, single.store);

  std::vector<idem::ClaimRequest> fresh;  // 128 + 128 + 44 rows
  for (int i = 0; i < 300; ++i)
    fresh.push_back({{"FRESH", std::to_string(i)}, "fp"});
  const auto results = idem_test::run_on(io, idem::async::claim_batch(batched.store, fresh));
  REQUIRE(results.size() == 300);
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("request " << i);
    CHECK(results[i].verdict == idem::Verdict::acquired);
    CHECK(results[i].record.key == fresh[i].key);
  }
  CHECK(batched.count("biz_type = 'FRESH' AND status = 0") == 300);
}

TEST_CASE("async pg: batches of a storm on one loop thread - every key runs once") {
  idem_test::PgAsyncTable t(16);
  const auto storm = idem_test::storm_of(1000, 47);
  idem_test::Executions executions;
  const auto r = idem_test::batch_storm(t.store, storm, 50, executions);
  idem_test::check_batch_storm("async pg", r, storm, executions, t.count("status = 1"));
}

TEST_CASE("async pg: batches while connections are terminated at random - every key runs once") {
  const std::string app = idem_test::unique_pg_table("killed_async_batch");
  idem_test::PgAsyncTable t(
      16, {.retry = {.max_attempts = 100, .max_backoff = 50ms}},
      idem::pg::ConnectionParams{.conninfo = idem_test::pg_conninfo(), .application_name = app});
  const auto storm = idem_test::storm_of(2000, 43);
  idem_test::Executions executions;
  idem_test::PgConnectionKiller killer(app, 9, &executions);
  const auto r = idem_test::batch_storm(t.store, storm, 50, executions);
  killer.stop();
  INFO("killer: " << killer.errors().first());
  CHECK(killer.errors().size() == 0);
  idem_test::check_batch_storm_killed("async pg", r, storm, executions, killer.kills(), 10,
                                      t.count("status = 1"));
}

TEST_CASE("async pg: a batch cancelled at any point leaves no processing claim behind") {
  idem_test::PgAsyncTable t(16);
  const auto r = idem_test::cancel_batches_at_random(t.store, 8, 150, 23);
  idem_test::check_cancelled_batches("async pg", r, 8, t.count("status = 0"),
                                     t.count("response_snapshot LIKE '%idem.cancelled%'"),
                                     t.count("response_snapshot LIKE '%idem.abandoned%'"));
}

TEST_CASE("async pg: the coroutine Janitor purges, resolves and releases on the loop") {
  idem_test::PgAsyncTable t;
  idem_test::check_janitor_round(t.store, t.blocking.store);
  CHECK(t.count() == 4);
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
