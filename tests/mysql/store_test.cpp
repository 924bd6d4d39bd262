// idem::mysql::Store on a real MariaDB: races over real connections, same-transaction mode,
// lease loss, killed connections, housekeeping and hostile names.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "../support/mysql_server.hpp"
#include "../support/paths.hpp"
#include "../support/session_status.hpp"
#include "../support/threads.hpp"
#include "../support/workload.hpp"

using idem_test::session_count;

using namespace std::chrono_literals;
using idem_test::BusinessTable;
using idem_test::Errors;
using idem_test::run_threads;
using idem_test::Table;

namespace {

// Catch2 assertions are not thread-safe: worker threads report here, the test thread checks.

}  // namespace

TEST_CASE("a server that cannot be reached is a StoreError with the driver's diagnostics") {
  idem::mysql::ConnectionParams p;
  p.unix_socket = "/nonexistent/idem.sock";
  try {
    idem::mysql::Connection c(p);
    FAIL("connected to a socket that does not exist");
  } catch (const idem::StoreError& e) {
    CHECK(e.diagnostics().code == 2002);
    CHECK_FALSE(e.diagnostics().from_server);
    CHECK_FALSE(e.diagnostics().message.empty());
    CHECK(std::string(e.what()).find("idem::mysql") != std::string::npos);
  }
}

TEST_CASE("server errors keep errno, SQLSTATE and the server's text apart from idem's") {
  auto pool = idem_test::make_pool(1);
  auto c = pool->acquire();
  try {
    c->execute("SELECT * FROM no_such_table_here WHERE x = ?", {1});
    FAIL("selected from a table that does not exist");
  } catch (const idem::StoreError& e) {
    CHECK(e.diagnostics().code == 1146);
    CHECK(e.diagnostics().sqlstate == "42S02");
    CHECK(e.diagnostics().from_server);
    CHECK(e.diagnostics().message.find("no_such_table_here") != std::string::npos);
    CHECK_FALSE(e.retryable());
  }
  CHECK_FALSE(c->broken());  // a statement error is not fatal to the connection
}

TEST_CASE("table names are validated and quoted") {
  auto pool = idem_test::make_pool(1);
  for (const char* bad : {"", "bad name", "t;DROP TABLE x", "t`", "a.b.c", "x-y", "tbl'"}) {
    INFO(bad);
    CHECK_THROWS_AS(idem::mysql::Store(pool, {.table = bad}), idem::InvalidArgument);
  }
  CHECK(idem::mysql::quote_identifier("idem_test.idempotent_record") ==
        "`idem_test`.`idempotent_record`");
  CHECK_THROWS_AS(idem::mysql::quote_identifier(std::string(65, 'x')), idem::InvalidArgument);
}

TEST_CASE("the schema stores keys byte-exactly and the DDL matches docs/schema.sql's shape") {
  Table t;
  auto c = t.pool->acquire();
  const auto rows = c->select(
      "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
      "DATABASE() AND TABLE_NAME = ? "
      "AND COLUMN_NAME IN ('idempotent_key', 'biz_type')",
      {t.name});
  REQUIRE(rows.size() == 2);
  for (const auto& r : rows)
    CHECK(r.at(1) == "varbinary");
  const auto keys = c->select(
      "SELECT INDEX_NAME, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) FROM "
      "information_schema.STATISTICS "
      "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? GROUP BY INDEX_NAME ORDER BY BINARY "
      "INDEX_NAME",
      {t.name});
  REQUIRE(keys.size() == 3);
  CHECK(keys[0][0] == "PRIMARY");
  CHECK(keys[0][1] == "idempotent_key,biz_type");
  CHECK(keys[1][0] == "idx_expire");
  CHECK(keys[2][0] == "idx_stale");
  t.store.ensure_schema();  // idempotent
}

TEST_CASE("200 threads over a 32-connection pool race one key - one execution, no errors") {
  Table t(32);
  BusinessTable biz(t.pool);
  idem_test::race_one_key(t.store, 200, [&](const std::string& trade_no) {
    auto c = t.pool->acquire();
    biz.insert(*c, trade_no);
  });
  CHECK(biz.rows() == 1);
}

TEST_CASE("10,000 requests at 12% duplicates over 32 connections - executions equal keys") {
  Table t(32);
  BusinessTable biz(t.pool);
  const idem_test::Storm storm = idem_test::storm_of(10'000, 12);  // 8,800 keys, 1,200 duplicates
  idem_test::run_storm(t.store, 32, storm, [&](const std::string& id) {
    auto c = t.pool->acquire();
    biz.insert(*c, id);
  });
  // The business table and the store agree with the count: one row, one success per key.
  CHECK(biz.rows() == storm.distinct);
  CHECK(biz.max_per_key() == 1);
  CHECK(t.count("status = 1") == storm.distinct);
}

TEST_CASE("a SELECT-then-INSERT claim loses the same race (the test can catch the bug)") {
  Table t(32);
  BusinessTable biz(t.pool);
  // The naive claim of the articles: look, then insert; a duplicate-key error nobody catches
  // properly is taken for "created". The window between the two is where duplicates slip in.
  std::atomic<int> executed{0}, connected{0};
  run_threads(32, [&](int) {
    auto c = t.pool->acquire();
    ++connected;  // every caller holds its connection before anyone looks
    while (connected.load() < 32)
      std::this_thread::yield();
    const auto seen =
        c->select("SELECT 1 FROM " + t.store.table() + " WHERE idempotent_key = ? AND biz_type = ?",
                  {"naive-1", "PAY"});
    if (!seen.empty()) return;
    std::this_thread::sleep_for(20ms);
    try {
      c->execute(
          "INSERT INTO " + t.store.table() +
              " (idempotent_key, biz_type, owner_token, lease_until, created_at, updated_at, "
              "expire_at) "
              "VALUES (?, 'PAY', REPEAT('0', 32), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), "
              "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL 1 DAY)",
          {"naive-1"});
    } catch (const idem::StoreError&) {
      // swallowed, as in the incident
    }
    ++executed;
    biz.insert(*c, "naive-1");
  });
  CHECK(executed > 1);
  CHECK(biz.rows() > 1);
  CHECK(t.count() == 1);  // the unique key held; the business did not
}

TEST_CASE("same-transaction mode - a rollback leaves nothing, a commit replays") {
  Table t(4);
  BusinessTable biz(t.pool);
  const idem::Key key{"ORDER", "u42:0190f1c6-7a3b-7cc0-9a51-3f1e2d4c5b6a"};
  const auto fp = idem::fingerprint(nlohmann::json{{"sku", "A-1"}, {"qty", 2}});

  CHECK_THROWS_AS(idem::mysql::with_transaction(*t.pool,
                                                [&](idem::mysql::Connection& c) -> int {
                                                  auto tx = t.store.bind(c);
                                                  idem::IdempotencyGuard guard{tx, key, fp};
                                                  REQUIRE(guard.acquired());
                                                  biz.insert(c, key.id());
                                                  guard.commit(1);
                                                  throw std::runtime_error(
                                                      "business check failed after the write");
                                                }),
                  std::runtime_error);
  CHECK(t.count() == 0);
  CHECK(biz.rows() == 0);

  auto body = [&](idem::mysql::Connection& c) {
    auto tx = t.store.bind(c);
    return idem::run_once(tx, key, fp, [&] {
      biz.insert(c, key.id());
      return std::string("order-created");
    });
  };
  const auto first = idem::mysql::with_transaction(*t.pool, body);
  CHECK(first.verdict() == idem::Verdict::acquired);
  const auto second = idem::mysql::with_transaction(*t.pool, body);
  CHECK(second.verdict() == idem::Verdict::replayed);
  REQUIRE(second);
  CHECK(second.value() == "order-created");
  CHECK(biz.rows() == 1);
  CHECK(t.count("status = 1") == 1);
}

TEST_CASE("same-transaction duplicates wait on the row lock, then replay") {
  Table t(24);
  BusinessTable biz(t.pool);
  const idem::Key key{"ORDER", "tx-race"};
  std::atomic<int> executed{0}, replayed{0}, errors{0};
  Errors failures;
  run_threads(16, [&](int) {
    try {
      const auto out = idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
        auto tx = t.store.bind(c);
        return idem::run_once(tx, key, "", [&] {
          ++executed;
          biz.insert(c, key.id());
          std::this_thread::sleep_for(100ms);  // hold the row lock while duplicates arrive
          return 7;
        });
      });
      if (out.verdict() == idem::Verdict::replayed && out && out.value() == 7) ++replayed;
    } catch (const std::exception& e) {
      ++errors;
      failures.add(e.what());
    }
  });
  INFO("first error: " << failures.first());
  CHECK(errors == 0);
  CHECK(biz.rows() == 1);
  CHECK(replayed == 15);
  // executed counts runs of bodies that were later rolled back too; the table is the truth.
  CHECK(executed >= 1);
}

TEST_CASE("a late commit after the lease was taken over throws LeaseLost") {
  Table t;
  const idem::Key key{"PAY", "late"};
  const idem::Options short_lease{.lease = 300ms, .ttl = 1h};
  idem::IdempotencyGuard slow{t.store, key, "", short_lease};
  REQUIRE(slow.acquired());
  std::this_thread::sleep_for(400ms);
  idem::IdempotencyGuard fast{t.store, key, "", short_lease};
  REQUIRE(fast.acquired());
  fast.commit(std::string("new owner"));
  CHECK_THROWS_AS(slow.commit(std::string("old owner")), idem::LeaseLost);
  const auto r = t.store.find(key);
  REQUIRE(r);
  CHECK(r->snapshot == R"("new owner")");
  CHECK(r->ticket.fence == 2);
}

namespace {

// Waits until a statement matching `like` runs on the server, then kills its connection.
// Returns false if it never showed up (checked by the test thread).
bool kill_when_running(idem::mysql::Pool& pool, const std::string& like) {
  auto admin = pool.acquire();
  for (int i = 0; i < 500; ++i) {
    const auto rows = admin->select(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE ? AND ID <> CONNECTION_ID()",
        {like});
    if (!rows.empty()) {
      admin->query("KILL CONNECTION " + *rows.front().at(0).to_text());
      return true;
    }
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

}  // namespace

TEST_CASE("KILL CONNECTION during complete - the outcome is reconciled, nothing runs twice") {
  Table t(4);
  const idem::Key key{"PAY", "killed-complete"};
  const auto claim = t.store.claim(key, "", {});
  REQUIRE(claim.verdict == idem::Verdict::acquired);

  // Another session holds the row lock, so complete's UPDATE is sent and then waits.
  auto locker = t.pool->acquire();
  locker->query("START TRANSACTION");
  locker->select("SELECT fence FROM " + t.store.table() +
                     " WHERE idempotent_key = ? AND biz_type = ? FOR UPDATE",
                 {key.id(), key.biz_type()});
  bool killed = false;
  std::thread killer([&] {
    killed =
        kill_when_running(*t.pool, "UPDATE " + t.store.table() +
                                       " FORCE INDEX (PRIMARY) SET status = ?, response_snapshot%");
    std::this_thread::sleep_for(50ms);
    locker->query("COMMIT");
  });
  t.store.complete(key, claim.record.ticket, R"({"receipt":"R-77"})");  // survives the kill
  killer.join();
  CHECK(killed);

  const auto r = t.store.find(key);
  REQUIRE(r);
  CHECK(r->status == idem::Status::succeeded);
  CHECK(r->snapshot == R"({"receipt":"R-77"})");
  CHECK(t.store.claim(key, "", {}).verdict == idem::Verdict::replayed);
}

TEST_CASE("KILL CONNECTION during a claim - the retry recognises its own row") {
  Table t(4);
  const idem::Key key{"PAY", "killed-claim"};
  // Take the row lock on the key's gap by inserting it in an open transaction.
  auto blocker = t.pool->acquire();
  blocker->query("START TRANSACTION");
  blocker->execute("INSERT INTO " + t.store.table() +
                       " (idempotent_key, biz_type, owner_token, lease_until, created_at, "
                       "updated_at, expire_at) "
                       "VALUES (?, ?, REPEAT('b', 32), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), "
                       "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))",
                   {key.id(), key.biz_type()});
  bool killed = false;
  std::thread killer([&] {
    killed = kill_when_running(*t.pool, "INSERT %INTO " + t.store.table() + " (idempotent_key%");
    std::this_thread::sleep_for(50ms);
    blocker->query("ROLLBACK");  // the key is free again
  });
  const auto c = t.store.claim(key, "", {});
  killer.join();
  CHECK(killed);
  CHECK(c.verdict == idem::Verdict::acquired);
  CHECK(c.record.ticket.fence == 1);
  CHECK(t.count() == 1);
}

TEST_CASE("a batch statement that fails is tried again at half its rows") {
  Table t(4, {.retry = {.backoff = 1ms, .max_backoff = 1ms}});
  constexpr int keys = 300;
  std::vector<idem::ClaimRequest> batch;
  for (int i = 0; i < keys; ++i) {
    batch.push_back({idem::Key{"MSG", fmt::format("half-{:03}", i)}, ""});
  }
  // The first key in primary key order is inserted by an open transaction: every batch
  // statement that includes it waits for that lock, and is killed while it waits.
  auto blocker = t.pool->acquire();
  blocker->query("START TRANSACTION");
  blocker->execute("INSERT INTO " + t.store.table() +
                       " (idempotent_key, biz_type, owner_token, lease_until, created_at, "
                       "updated_at, expire_at) "
                       "VALUES ('half-000', 'MSG', REPEAT('b', 32), UTC_TIMESTAMP(3), "
                       "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))",
                   {});
  std::vector<std::size_t> killed_rows;  // rows of each killed statement
  std::thread killer([&] {
    auto admin = t.pool->acquire();
    std::vector<std::string> killed;
    for (int i = 0; i < 500 && killed.size() < 3; ++i) {
      const auto rows = admin->select(
          "SELECT ID, INFO FROM information_schema.PROCESSLIST WHERE INFO LIKE ? AND ID <> "
          "CONNECTION_ID()",
          {"INSERT IGNORE INTO " + t.store.table() + " %"});
      for (const auto& row : rows) {
        const std::string id = *row.at(0).to_text();
        if (std::find(killed.begin(), killed.end(), id) != killed.end()) continue;
        const std::string sql = *row.at(1).to_text();
        std::size_t tuples = 0;
        for (auto at = sql.find("(?, ?, 0, 1"); at != std::string::npos;
             at = sql.find("(?, ?, 0, 1", at + 1))
          ++tuples;
        admin->query("KILL CONNECTION " + id);
        killed.push_back(id);
        killed_rows.push_back(tuples);
      }
      std::this_thread::sleep_for(5ms);
    }
    blocker->query("ROLLBACK");  // the key is free again
  });
  const auto results = idem::claim_batch(t.store, batch, {});
  killer.join();
  // 128 rows (the widest statement), then 64 and 32; the fourth try, 16 rows, gets through.
  CHECK(killed_rows == std::vector<std::size_t>{128, 64, 32});
  REQUIRE(results.size() == batch.size());
  for (const auto& r : results) {
    CHECK(r.verdict == idem::Verdict::acquired);
    CHECK(r.record.ticket.fence == 1);
  }
  CHECK(t.count() == keys);
  CHECK(t.count("owner_token = REPEAT('b', 32)") == 0);
}

TEST_CASE("the pool replaces a killed idle connection") {
  auto pool = std::make_shared<idem::mysql::Pool>(
      idem_test::server(), idem::mysql::PoolParams{.size = 1, .ping_after_idle = 0ms});
  unsigned long first_id = 0;
  {
    auto c = pool->acquire();
    first_id = c->id();
  }
  {
    auto admin = std::make_unique<idem::mysql::Connection>(idem_test::server());
    admin->query("KILL CONNECTION " + std::to_string(first_id));
  }
  std::this_thread::sleep_for(50ms);
  auto c = pool->acquire();
  CHECK(c->id() != first_id);
  CHECK(c->select("SELECT 1", {}).size() == 1);
}

TEST_CASE("a fresh claim is one statement with INSERT ... RETURNING, two with a read-back") {
  const bool returning = GENERATE(true, false);
  INFO("insert_returning = " << returning);
  Table t(1, {.insert_returning = returning});  // one connection: the store's and ours
  {
    auto c = t.pool->acquire();
    REQUIRE(c->supports_returning());  // the suite's server is MariaDB 10.5 or later
    REQUIRE(!c->in_galera_cluster());
  }
  struct Count {
    long long executed = 0, resets = 0;
  };
  auto counted = [&](auto&& op) {
    Count before;
    {
      auto c = t.pool->acquire();
      before = {session_count(*c, "Com_stmt_execute"), session_count(*c, "Com_stmt_reset")};
    }
    op();
    auto c = t.pool->acquire();
    return Count{session_count(*c, "Com_stmt_execute") - before.executed,
                 session_count(*c, "Com_stmt_reset") - before.resets};
  };
  std::optional<idem::ClaimResult> claimed;
  const Count fresh_claim = counted([&] {
    claimed = t.store.claim(idem::Key{"PAY", "one"}, "fp", {});
  });
  CHECK(fresh_claim.executed == (returning ? 1 : 2));
  REQUIRE(claimed);
  const idem::ClaimResult& fresh = *claimed;
  REQUIRE(fresh.verdict == idem::Verdict::acquired);
  CHECK(fresh.record.ticket.fence == 1);
  CHECK(fresh.record.fingerprint == "fp");
  CHECK(fresh.record.lease_until > fresh.record.created_at);
  CHECK(t.store.find(idem::Key{"PAY", "one"}) == fresh.record);  // what was answered is stored
  // A duplicate costs the INSERT and the read either way, and no statement reset: with
  // RETURNING the INSERT IGNORE answers "no row" rather than failing after its column list.
  const Count duplicate = counted([&] {
    CHECK(t.store.claim(idem::Key{"PAY", "one"}, "fp", {}).verdict == idem::Verdict::in_progress);
  });
  CHECK(duplicate.executed == 2);
  CHECK(duplicate.resets == 0);
  // A batch of fresh keys: one statement with RETURNING, INSERT + read without.
  std::vector<idem::ClaimRequest> batch;
  for (int i = 0; i < 20; ++i)
    batch.push_back({idem::Key{"PAY", "batch-" + std::to_string(i)}, "fp"});
  CHECK(counted([&] { idem::claim_batch(t.store, batch, {}); }).executed == (returning ? 1 : 2));
}

TEST_CASE("a duplicate key reported after RETURNING's column list leaves the connection usable") {
  // Connector/C waits forever on the statement's next execute unless the failed result is
  // reset; a read timeout turns such a hang into a failure here instead of a stuck test.
  auto params = idem_test::server();
  params.read_timeout = std::chrono::seconds{5};
  idem::mysql::Connection c(params);
  const std::string table = idem_test::unique_table();
  c.query("CREATE TABLE " + table + " (id INT NOT NULL PRIMARY KEY) ENGINE=InnoDB");
  const std::string insert = "INSERT INTO " + table + " (id) VALUES (?) RETURNING id";
  const unsigned long id = c.id();
  CHECK(c.select(insert, {1}).size() == 1);
  for (int i = 0; i < 3; ++i) {  // the same prepared statement fails, then works again
    try {
      c.select(insert, {1});
      FAIL("a duplicate key was not reported");
    } catch (const idem::StoreError& e) {
      CHECK(e.diagnostics().code == idem::mysql::code::dup_entry);
    }
    CHECK(c.select(insert, {10 + i}).size() == 1);
  }
  CHECK_FALSE(c.broken());
  CHECK(c.id() == id);
  c.query("DROP TABLE " + table);
}

TEST_CASE(
    "select() types DATETIME, TIMESTAMP and integer cells, written as the text protocol does") {
  idem::mysql::Connection c(idem_test::server());
  const std::string table = idem_test::unique_table();
  c.query("CREATE TABLE " + table +
          " (id INT NOT NULL PRIMARY KEY, d0 DATETIME NULL, d3 DATETIME(3) NULL, d6 DATETIME(6) "
          "NULL, t2 TIMESTAMP(2) NULL, day DATE NULL, n BIGINT NULL, s VARCHAR(80) NULL) "
          "ENGINE=InnoDB");
  c.query("INSERT INTO " + table +
          " VALUES (1, '2026-12-01 01:02:03', '2026-12-01 01:02:03.004', "
          "'1999-01-31 23:59:59.999999', '2038-01-19 03:14:07.50', '2026-02-28', -42, 'x'), "
          "(2, '1000-01-01 00:00:00', '9999-12-31 23:59:59.999', '2026-12-01 00:00:00.000500', "
          "'1970-01-02 00:00:00.01', NULL, NULL, NULL), (3, NULL, NULL, NULL, NULL, NULL, NULL, "
          "NULL)");
  const std::string columns =
      "id, d0, d3, d6, t2, day, n, s, UTC_TIMESTAMP(3), UTC_TIMESTAMP(6), UTC_TIMESTAMP()";
  // The same rows through the text protocol, where the server writes every value itself.
  std::vector<std::vector<std::optional<std::string>>> expected;
  {
    MYSQL* m = c.native();
    c.query("SET TIMESTAMP = 1764550923.123456");  // the clock stays this for the session
    const std::string sql = "SELECT " + columns + " FROM " + table + " ORDER BY id";
    REQUIRE(mysql_real_query(m, sql.data(), sql.size()) == 0);
    MYSQL_RES* res = mysql_store_result(m);
    REQUIRE(res != nullptr);
    const unsigned n = mysql_num_fields(res);
    while (MYSQL_ROW r = mysql_fetch_row(res)) {
      const unsigned long* lengths = mysql_fetch_lengths(res);
      std::vector<std::optional<std::string>> row(n);
      for (unsigned i = 0; i < n; ++i)
        if (r[i] != nullptr) row[i].emplace(r[i], lengths[i]);
      expected.push_back(std::move(row));
    }
    mysql_free_result(res);
  }
  const auto got = c.select("SELECT " + columns + " FROM " + table + " ORDER BY id", {});
  REQUIRE(got.size() == 3);
  std::vector<std::vector<std::optional<std::string>>> got_text;
  for (const auto& row : got) {
    got_text.emplace_back();
    for (const auto& cell : row)
      got_text.back().push_back(cell.to_text());
  }
  CHECK(got_text == expected);
  using Kind = idem::mysql::Cell::Kind;
  CHECK(got[0][0].integer() == 1);
  CHECK(got[0][2].time() ==
        idem::TimePoint{std::chrono::sys_days{std::chrono::year{2026} / 12 / 1}} + 1h + 2min + 3s +
            4ms);
  CHECK(got[0][3].time() ==
        idem::TimePoint{std::chrono::sys_days{std::chrono::year{1999} / 1 / 31}} + 23h + 59min +
            59s + 999ms);  // microseconds round down
  CHECK(got[0][4].kind() == Kind::time);
  CHECK(got[0][5].kind() == Kind::text);  // DATE stays text
  CHECK(got[0][6].integer() == -42);
  CHECK(got[0][7].text() == "x");
  // A borrowed handle reads the same cells through the text protocol.
  idem::mysql::Connection borrowed(c.native());
  const auto text_rows =
      borrowed.select("SELECT " + columns + " FROM " + table + " ORDER BY id", {});
  REQUIRE(text_rows.size() == got.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    for (std::size_t j = 0; j < got[i].size(); ++j) {
      INFO("row " << i << ", column " << j << ": " << got[i][j].to_text().value_or("NULL"));
      CHECK(text_rows[i].at(j).kind() == got[i][j].kind());
      CHECK(text_rows[i].at(j) == got[i][j]);
    }
  }
  CHECK(got[0][2] == "2026-12-01 01:02:03.004");
  CHECK(got[1][3] == "2026-12-01 00:00:00.000500");
  CHECK(got[0][8] == "2025-12-01 01:02:03.123");  // UTC_TIMESTAMP(3) under SET TIMESTAMP
  CHECK(got[2][1].is_null());
  c.query("DROP TABLE " + table);
}

TEST_CASE("duplicate claims leave the store's one connection usable") {
  auto params = idem_test::server();
  params.read_timeout = std::chrono::seconds{5};
  auto pool = std::make_shared<idem::mysql::Pool>(params, idem::mysql::PoolParams{.size = 1});
  // One try: a timed-out statement must fail the test, not be retried on a new connection.
  idem::mysql::Store store(pool,
                           {.table = idem_test::unique_table(), .retry = {.max_attempts = 1}});
  store.ensure_schema();
  unsigned long id = 0;
  {
    auto c = pool->acquire();
    id = c->id();
  }
  const idem::Key a{"PAY", "a"}, b{"PAY", "b"};
  const auto first = store.claim(a, "fp", {});
  CHECK(first.verdict == idem::Verdict::acquired);
  for (int i = 0; i < 3; ++i)  // the same prepared INSERT skips a duplicate, then inserts
    CHECK(store.claim(a, "fp", {}).verdict == idem::Verdict::in_progress);
  const auto second = store.claim(b, "fp", {});
  CHECK(second.verdict == idem::Verdict::acquired);
  store.complete(a, first.record.ticket, "1");
  CHECK(store.claim(a, "fp", {}).verdict == idem::Verdict::replayed);
  auto c = pool->acquire();
  CHECK(c->id() == id);  // never reconnected
  c->query("DROP TABLE " + store.table());
}

TEST_CASE(
    "purge_expired and release_stale work in batches, the Janitor runs them and stops promptly") {
  Table t;
  const idem::Options brief{.lease = 200ms, .ttl = 200ms};
  for (int i = 0; i < 30; ++i)
    t.store.claim(idem::Key{"OLD", "k" + std::to_string(i)}, "", brief);
  const auto stale =
      t.store.claim(idem::Key{"STALE", "s"}, "", idem::Options{.lease = 200ms, .ttl = 1h});
  t.store.claim(idem::Key{"LIVE", "l"}, "", {});
  std::this_thread::sleep_for(300ms);

  CHECK(t.store.purge_expired(7, 2) == 14);
  {
    idem::mysql::Janitor janitor(
        t.store,
        {.interval = 20ms, .purge_batch = 5, .purge_max_batches = 100, .purge_pause = 1ms});
    // A round purges, then releases: wait for both (a round cut short between them would
    // leave the stale claim unreleased).
    auto released = [&] {
      const auto r = t.store.find(idem::Key{"STALE", "s"});
      return r && r->status == idem::Status::failed;
    };
    for (int i = 0; i < 200 && (t.count() > 2 || !released()); ++i)
      std::this_thread::sleep_for(10ms);
  }
  CHECK(t.count() == 2);
  const auto s = t.store.find(idem::Key{"STALE", "s"});
  REQUIRE(s);
  CHECK(s->status == idem::Status::failed);
  CHECK(s->retryable);
  CHECK_THROWS_AS(t.store.complete(stale.record.key, stale.record.ticket, "1"), idem::LeaseLost);

  const auto t0 = std::chrono::steady_clock::now();
  { idem::mysql::Janitor janitor(t.store, {.interval = std::chrono::hours{1}}); }
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
}

TEST_CASE("hostile keys are stored verbatim and never alter the table") {
  Table t;
  const std::vector<std::string> ids = {"'; DROP TABLE " + t.name + "; --",
                                        "\" OR 1=1 --",
                                        "\\x00",
                                        "a`b",
                                        "%_",
                                        "Robert'); --",
                                        "ABC",
                                        "abc",
                                        "abc ",
                                        " abc"};
  for (const auto& id : ids) {
    const auto c = t.store.claim(idem::Key{"PAY", id}, "", {});
    CHECK(c.verdict == idem::Verdict::acquired);
    CHECK(c.record.key.id() == id);
  }
  CHECK(t.count() == static_cast<long long>(ids.size()));
  for (const auto& id : ids)
    CHECK(t.store.find(idem::Key{"PAY", id})->key.id() == id);
}

TEST_CASE("a connection returned with a transaction open is rolled back, not handed on") {
  Table t(1);
  {
    auto c = t.pool->acquire();
    c->query("START TRANSACTION");
    c->execute("INSERT INTO " + t.store.table() +
                   " (idempotent_key, biz_type, owner_token, lease_until, created_at, updated_at, "
                   "expire_at) "
                   "VALUES ('left-open', 'PAY', REPEAT('x', 32), UTC_TIMESTAMP(3), "
                   "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + "
                   "INTERVAL 1 DAY)",
               {});
    REQUIRE(c->in_transaction());
  }  // returned without COMMIT or ROLLBACK
  {
    auto c = t.pool->acquire();
    CHECK_FALSE(c->in_transaction());
  }
  CHECK(t.count() == 0);
}

TEST_CASE(
    "same-transaction claims never wait on in-progress rows (they would hold the lock they wait "
    "for)") {
  Table t(2);
  const idem::Key key{"PAY", "bound-no-wait"};
  const auto holder = t.store.claim(key, "", {});  // a committed processing claim (standalone)
  REQUIRE(holder.verdict == idem::Verdict::acquired);
  const auto t0 = std::chrono::steady_clock::now();
  const auto verdict = idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
    auto tx = t.store.bind(c);
    idem::IdempotencyGuard guard{tx, key, "", idem::Options{.wait = 5s}};
    return guard.verdict();
  });
  CHECK(verdict == idem::Verdict::in_progress);
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  t.store.complete(key, holder.record.ticket, "1");
}

TEST_CASE("store parameters are validated") {
  auto pool = idem_test::make_pool(1);
  CHECK_THROWS_AS(idem::mysql::Store(nullptr), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::mysql::Store(pool, {.retry = {.max_attempts = 0}}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::mysql::Store(pool, {.retry = {.backoff = 0ms}}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::mysql::Store(pool, {.retry = {.backoff = 10ms, .max_backoff = 5ms}}),
                  idem::InvalidArgument);
  CHECK_THROWS_AS(idem::mysql::Pool(idem_test::server(), {.size = 0}), idem::InvalidArgument);
}

TEST_CASE("docs/schema.sql holds the DDL that ensure_schema() runs") {
  std::ifstream in(std::string(idem_test::paths::source_dir) + "/docs/schema.sql");
  REQUIRE(in);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto start = text.find("CREATE TABLE");
  REQUIRE(start != std::string::npos);
  CHECK(text.substr(start) == idem::mysql::record_table_ddl("`idempotent_record`") + ";\n");

  // The upgrade's ALTER in its comment is the one migrate_record_table() sends to MariaDB for
  // a layout-1 table (spaces aside).
  const auto squeeze = [](const std::string& s) {
    std::string out;
    for (const char c : s) {
      if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
      out += c;
    }
    return out;
  };
  std::string alter;
  std::istringstream lines(text.substr(0, start));
  for (std::string line; std::getline(lines, line);) {
    if (line.find("ALTER TABLE") != std::string::npos || !alter.empty()) {
      alter += line.substr(line.find_first_not_of("- ")) + " ";
    }
    if (!alter.empty() && line.back() == ';') break;
  }
  const auto statements = idem::mysql::detail::migration_statements(
      "`idempotent_record`", {"recovery_points", "repair_reason", "repaired_at"}, true, true);
  REQUIRE_FALSE(statements.empty());
  CHECK(squeeze(alter) == squeeze(statements.front().sql + "; "));
}

TEST_CASE("an exhausted pool is reported at once by the store and not retried") {
  auto pool = std::make_shared<idem::mysql::Pool>(
      idem_test::server(), idem::mysql::PoolParams{.size = 1, .acquire_timeout = 50ms});
  idem::mysql::Store store{pool, {.table = idem_test::unique_table()}};
  store.ensure_schema();
  {
    auto held = pool->acquire();  // the only connection
    try {
      store.claim(idem::Key{"PAY", "no-connection"}, "", {});
      FAIL("claimed without a connection");
    } catch (const idem::StoreError& e) {
      CHECK(e.retryable());
      CHECK_THAT(e.what(), Catch::Contains("no connection free") &&
                               !Catch::Contains("gave up after"));  // one try, no retry loop
    }
    held->query("DROP TABLE " + store.table());
  }
}

TEST_CASE("every guarded single-row write of the record table goes by the primary key") {
  Table t;
  // A finished record and none processing: the optimizer's estimate for idx_stale's
  // `status = 0` range is then one row, which it preferred to the primary key.
  const idem::Key done{"PAY", "explained"};
  const auto claim = t.store.claim(done, "fp", {});
  t.store.complete(done, claim.record.ticket, "1");
  const auto& sql = t.store.ops().sql();
  auto c = t.pool->acquire();
  for (const std::string* statement :
       {&sql.finish, &sql.points, &sql.repair, &sql.take_over_retry, &sql.take_over_expired}) {
    INFO(*statement);
    // EXPLAIN of the prepared statement, every placeholder bound to the same text.
    const auto placeholders =
        static_cast<std::size_t>(std::count(statement->begin(), statement->end(), '?'));
    const std::vector<idem::mysql::Param> values(placeholders, idem::mysql::Param("0"));
    const auto rows = c->select("EXPLAIN " + *statement, values);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].at(5).to_text().value_or("NULL") == "PRIMARY");  // the `key` column
  }
}
