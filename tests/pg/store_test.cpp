// idem::pg::Store against the test server: the races (200 threads on one key, the retry storm),
// connections terminated at random under load (pg_terminate_backend), stores creating one table
// at once, two janitors on one table, and the inputs PostgreSQL cannot hold or would change.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <idem/pg.hpp>

#include "../support/pg_killer.hpp"
#include "../support/pg_server.hpp"
#include "../support/threads.hpp"
#include "../support/workload.hpp"

using namespace std::chrono_literals;

namespace {

// A business table with no unique key on purpose: a double execution shows up as two rows.
struct PgPayments {
  std::shared_ptr<idem::pg::Pool> pool;
  std::string name = idem_test::unique_pg_table("pay_order");

  explicit PgPayments(std::shared_ptr<idem::pg::Pool> p) : pool(std::move(p)) {
    pool->acquire()->query("CREATE TABLE " + name + " (trade_no text NOT NULL)");
  }
  PgPayments(const PgPayments&) = delete;
  PgPayments& operator=(const PgPayments&) = delete;
  ~PgPayments() {
    try {
      pool->acquire()->query("DROP TABLE IF EXISTS " + name);
    } catch (...) {
    }
  }
  void insert(const std::string& trade_no) {
    pool->acquire()->exec("INSERT INTO " + name + " (trade_no) VALUES ($1)", {trade_no});
  }
  long long rows() {
    const idem::pg::Result r = pool->acquire()->exec("SELECT count(*) FROM " + name, {});
    return *r.integer(0, 0);
  }
  long long max_per_key() {
    const idem::pg::Result r =
        pool->acquire()->exec("SELECT COALESCE(max(n), 0) FROM (SELECT count(*) AS n FROM " + name +
                                  " GROUP BY trade_no) AS per_key",
                              {});
    return *r.integer(0, 0);
  }
};

}  // namespace

TEST_CASE("200 threads over a 32-connection pool race one key - one execution, no errors") {
  idem_test::PgTable t(32);
  PgPayments pay(t.pool);
  idem_test::race_one_key(t.store, 200, [&](const std::string& trade_no) { pay.insert(trade_no); });
  CHECK(pay.rows() == 1);
}

TEST_CASE("10,000 requests at 12% duplicates over 32 connections - executions equal keys") {
  idem_test::PgTable t(32);
  PgPayments pay(t.pool);
  const idem_test::Storm storm = idem_test::storm_of(10'000, 12);  // 8,800 keys, 1,200 duplicates
  idem_test::run_storm(t.store, 32, storm, [&](const std::string& id) { pay.insert(id); });
  // The business table and the store agree with the count: one row, one success per key.
  CHECK(pay.rows() == storm.distinct);
  CHECK(pay.max_per_key() == 1);
  CHECK(t.count("status = 1") == storm.distinct);
}

TEST_CASE(
    "connections terminated at random under load (pg_terminate_backend) - nothing runs twice, "
    "no call fails") {
  const std::string app = idem_test::unique_pg_table("killed");
  auto pool = std::make_shared<idem::pg::Pool>(
      idem::pg::ConnectionParams{.conninfo = idem_test::pg_conninfo(), .application_name = app},
      idem::pg::PoolParams{.size = 16});
  idem_test::PgTable t(2);
  // The store under fire runs on the pool whose connections are terminated; enough tries that
  // a call outlives the killer's aim at its connections (a try may lose a fresh connection
  // before its first statement).
  idem::pg::Store store(pool,
                        {.table = t.name, .retry = {.max_attempts = 100, .max_backoff = 50ms}});

  const idem_test::Storm storm = idem_test::storm_of(3'000, 41);
  idem_test::PgConnectionKiller killer(app, 7);
  const auto started = std::chrono::steady_clock::now();
  idem_test::run_storm(store, 16, storm, [](const std::string&) {});
  const auto lasted = std::chrono::steady_clock::now() - started;
  killer.stop();
  INFO("killer: " << killer.errors().first());
  CHECK(killer.errors().size() == 0);
  // The killer aims about every 20 ms, as long as the storm lasts (shorter on a fast build):
  // at least a third of those aims hit, and one at the least.
  const long aims = static_cast<long>(lasted / std::chrono::milliseconds(20));
  INFO("the storm lasted " << std::chrono::duration_cast<std::chrono::milliseconds>(lasted).count()
                           << " ms");
  CHECK(killer.kills() >= std::max(1L, aims / 3));
  WARN("pg_terminate_backend: " << killer.kills() << " connections terminated under load");
  CHECK(t.count("status = 1") == storm.distinct);
}

TEST_CASE("stores starting together create one table without an error") {
  auto pool = idem_test::make_pg_pool(8);
  const std::string table = idem_test::unique_pg_table("created_together");
  idem_test::Errors errors;
  idem_test::run_threads(8, [&](int) {
    try {
      idem::pg::Store(pool, {.table = table}).ensure_schema();
    } catch (const std::exception& e) {
      errors.add(e.what());
    }
  });
  INFO("first error: " << errors.first());
  CHECK(errors.size() == 0);
  const idem::pg::Result r =
      pool->acquire()->exec("SELECT count(*) FROM pg_indexes WHERE tablename = $1", {table});
  CHECK(*r.integer(0, 0) == 3);  // the primary key, expiry and stale indexes
  pool->acquire()->query("DROP TABLE " + table);
}

TEST_CASE("two janitors on one table release and purge each row once") {
  // Half of the claims completed, half left processing: those are stale once their leases ran
  // out, and everything is due for the purge once the ttl did.
  const auto fill = [](idem::pg::Store& store, const idem::Options& o) {
    for (int i = 0; i < 400; ++i) {
      const auto claim = store.claim(idem::Key{"PAY", "h-" + std::to_string(i)}, "", o);
      REQUIRE(claim.verdict == idem::Verdict::acquired);
      if (i % 2 == 0) store.complete(claim.record.key, claim.record.ticket, "{}");
    }
  };
  SECTION("release_stale") {
    idem_test::PgTable t(8);
    fill(t.store, {.lease = 100ms, .ttl = 1h});
    std::this_thread::sleep_for(150ms);
    std::atomic<std::size_t> released{0};
    idem_test::run_threads(2, [&](int) {
      for (std::size_t n; (n = t.store.release_stale(25)) > 0;)
        released += n;
    });
    CHECK(released == 200);
    CHECK(t.count("status = 2 AND retryable = 1") == 200);
  }
  SECTION("purge_expired") {
    idem_test::PgTable t(8);
    fill(t.store, {.lease = 50ms, .ttl = 100ms});
    std::this_thread::sleep_for(150ms);
    std::atomic<std::size_t> purged{0};
    idem_test::run_threads(2, [&](int) { purged += t.store.purge_expired(25, 100); });
    CHECK(purged == 400);
    CHECK(t.count() == 0);
  }
}

TEST_CASE("keys are stored byte for byte - case and quotes included") {
  idem_test::PgTable t;
  const std::vector<std::string> ids = {"Order-1", "order-1", "o'; DROP TABLE x; --", "ÜBER-1",
                                        "\"quoted\""};
  for (const std::string& id : ids) {
    const auto claim = t.store.claim(idem::Key{"PAY", id}, "", {});
    CHECK(claim.verdict == idem::Verdict::acquired);
  }
  CHECK(t.count() == static_cast<long long>(ids.size()));
  for (const std::string& id : ids) {
    const auto found = t.store.find(idem::Key{"PAY", id});
    REQUIRE(found);
    CHECK(found->key.id() == id);
  }
}

TEST_CASE("text PostgreSQL cannot hold is refused with InvalidArgument and changes nothing") {
  idem_test::PgTable t;
  const idem::Key key{"PAY", "bad-text"};
  const auto claim = t.store.claim(key, "", {});
  REQUIRE(claim.verdict == idem::Verdict::acquired);
  CHECK_THROWS_AS(t.store.complete(key, claim.record.ticket, std::string("{\"a\":\"\0\"}", 9)),
                  idem::InvalidArgument);
  CHECK_THROWS_AS(t.store.complete(key, claim.record.ticket, "\"\xff\xfe\""),
                  idem::InvalidArgument);
  const auto found = t.store.find(key);
  REQUIRE(found);
  CHECK(found->status == idem::Status::processing);
  // Line breaks and tabs are text: a pretty-printed response is stored as it is.
  t.store.complete(key, claim.record.ticket, "{\n\t\"ok\": true\n}");
  CHECK(t.store.find(key)->snapshot == "{\n\t\"ok\": true\n}");
}

TEST_CASE("table names PostgreSQL would change are refused") {
  auto pool = idem_test::make_pg_pool(1);
  CHECK_THROWS_AS(idem::pg::Store(pool, {.table = std::string(53, 'a')}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::pg::Store(pool, {.table = "bad-name"}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::pg::Store(pool, {.table = "a.b.c"}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::pg::Store(nullptr), idem::InvalidArgument);
  CHECK(idem::pg::Store(pool, {.table = "public.idem_ok"}).table() == "\"public\".\"idem_ok\"");
}
