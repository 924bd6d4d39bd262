// A record table of the first layout (idem before outcome_unknown, repairs and recovery points)
// upgraded in place by the store that opens it: the columns added at the end, old rows read as
// "no steps, never repaired", every operation working on them, and the upgrade racing other
// migrators and older binaries that keep claiming.
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/sqlite_file.hpp"

using namespace std::chrono_literals;
using idem::sqlite::Value;
using idem_test::ms;
using idem_test::TempDir;

namespace {

// The record table as idem created it before issue 26 ("version 1"), verbatim: the fixture
// every migration test starts from. Do not update it with the current DDL.
constexpr const char* v1_ddl = R"(CREATE TABLE IF NOT EXISTS "idempotent_record" (
  idempotent_key    TEXT COLLATE BINARY NOT NULL,  -- the business id of the action, byte-exact
  biz_type          TEXT COLLATE BINARY NOT NULL,  -- business domain: PAY, REFUND, ORDER, ...
  status            INTEGER NOT NULL DEFAULT 0,    -- 0 processing, 1 succeeded, 2 failed
  fence             INTEGER NOT NULL DEFAULT 1,    -- bumped by every claim and takeover
  owner_token       TEXT    NOT NULL,              -- random token of the current claim
  request_hash      TEXT    NOT NULL DEFAULT '',   -- request fingerprint; '' when opted out
  response_snapshot BLOB,                          -- JSON: the response or the error
  retryable         INTEGER NOT NULL DEFAULT 0,    -- failed records: may a duplicate run again
  attempts          INTEGER NOT NULL DEFAULT 1,    -- claims that ran the business
  lease_until       INTEGER NOT NULL,              -- ms since the Unix epoch, UTC
  created_at        INTEGER NOT NULL,              -- ms since the Unix epoch, UTC
  updated_at        INTEGER NOT NULL,              -- ms since the Unix epoch, UTC
  expire_at         INTEGER NOT NULL,              -- ms since the Unix epoch, UTC; purged after
  PRIMARY KEY (idempotent_key, biz_type)
);
CREATE INDEX IF NOT EXISTS "idempotent_record_idx_expire" ON "idempotent_record" (expire_at);
CREATE INDEX IF NOT EXISTS "idempotent_record_idx_stale" ON "idempotent_record" (status, lease_until);
)";

// The statements of a first-layout idem binary: its claim INSERT and its fenced finish.
constexpr const char* v1_insert =
    "INSERT INTO \"idempotent_record\" (idempotent_key, biz_type, status, fence, owner_token, "
    "request_hash, response_snapshot, retryable, attempts, lease_until, created_at, updated_at, "
    "expire_at) VALUES (?1, ?2, ?3, ?4, ?5, '', ?6, ?7, ?8, ?9, ?10, ?10, ?11)";
constexpr const char* v1_finish =
    "UPDATE \"idempotent_record\" SET status = 1, response_snapshot = ?1, updated_at = ?2 "
    "WHERE idempotent_key = ?3 AND biz_type = ?4 AND status = 0 AND fence = ?5 AND "
    "owner_token = ?6";

struct OldRow {
  std::string id;
  idem::Status status;
  std::string snapshot;  // empty: NULL
  bool retryable = false;
  std::int64_t lease_until = 0;
  std::int64_t expire_at = 0;
};

void insert_old_row(idem::sqlite::Connection& c, const OldRow& r, std::int64_t now) {
  c.execute(v1_insert, {r.id, "PAY", static_cast<int>(r.status), 1, "owner-" + r.id,
                        r.snapshot.empty() ? Value(nullptr) : Value::blob(r.snapshot), r.retryable,
                        1, r.lease_until, now, r.expire_at});
}

// "name type notnull default pk" for each column, in table order.
std::vector<std::string> layout(idem::sqlite::Connection& c, const std::string& table) {
  std::vector<std::string> columns;
  auto info = c.query("PRAGMA table_info(\"" + table + "\")");
  while (info.next()) {
    columns.push_back(info.text(1) + " " + info.text(2) + " " + std::to_string(info.integer(3)) +
                      " " + (info.is_null(4) ? "NULL" : info.text(4)) + " " +
                      std::to_string(info.integer(5)));
  }
  return columns;
}

const idem::sqlite::TableName v1_table = idem::sqlite::parse_table_name("idempotent_record");

}  // namespace

TEST_CASE(
    "a first-layout table is upgraded in place - old rows read with no steps and no repair, "
    "and claims, replays, repairs and steps work on them") {
  TempDir dir;
  const auto file = dir / "v1.db";
  idem::ManualClock clock;
  const std::int64_t now = ms(clock.now());
  {
    idem::sqlite::Connection c{file};
    c.exec(v1_ddl);
    insert_old_row(c, {"done", idem::Status::succeeded, R"("paid")", false, now, now + 3'600'000},
                   now);
    insert_old_row(
        c, {"retry", idem::Status::failed, R"({"error":"timeout"})", true, now, now + 3'600'000},
        now);
    insert_old_row(c, {"stale", idem::Status::processing, "", false, now - 1'000, now + 3'600'000},
                   now);
    insert_old_row(
        c, {"live", idem::Status::processing, "", false, now + 3'600'000, now + 7'200'000}, now);
    insert_old_row(
        c, {"expired", idem::Status::succeeded, R"("old")", false, now - 2'000, now - 1'000}, now);
  }

  idem::sqlite::Store store{file, {.clock = [&] { return clock.now(); }}};
  idem::sqlite::Store fresh{file, {.table = "fresh_record", .clock = [&] { return clock.now(); }}};
  {
    auto c = store.pool().acquire();
    // The columns of a new table, in the same order, with the same types and defaults.
    const auto migrated = layout(*c, "idempotent_record");
    CHECK(migrated == layout(*c, "fresh_record"));
    CHECK(migrated.size() == 16);
    CHECK(migrated.back() == "repaired_at INTEGER 0 NULL 0");
    // Idempotent: nothing more to add, and ensure_schema leaves the table as it is.
    CHECK(idem::sqlite::migrate_record_table(*c, v1_table) == 0);
  }
  store.ensure_schema();
  CHECK(idem_test::count(store) == 5);
  CHECK(idem_test::count(store,
                         "recovery_points IS NULL AND repair_reason IS NULL AND "
                         "repaired_at IS NULL") == 5);

  for (const char* id : {"done", "retry", "stale", "live", "expired"}) {
    const auto r = store.find(idem::Key{"PAY", id});
    REQUIRE(r.has_value());
    CHECK(r->recovery_points.empty());
    CHECK(r->repair_reason.empty());
    CHECK_FALSE(r->repaired_at.has_value());
  }
  const auto listed = store.list({.stale = true});
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].key.id() == "stale");

  // A replay of an old success.
  const auto replay =
      idem::run_once(store, idem::Key{"PAY", "done"}, "", [] { return std::string("again"); });
  CHECK(replay.verdict() == idem::Verdict::replayed);
  CHECK(replay.value() == "paid");
  // An old retryable failure runs again; an old stale claim is taken over after a crash and
  // keeps a step; an old expired record starts afresh.
  const auto retry = store.claim(idem::Key{"PAY", "retry"}, "", {});
  CHECK(retry.verdict == idem::Verdict::acquired);
  CHECK_FALSE(retry.after_crash);
  CHECK(retry.record.attempts == 2);
  const auto stale = store.claim(idem::Key{"PAY", "stale"}, "", {});
  REQUIRE(stale.verdict == idem::Verdict::acquired);
  CHECK(stale.after_crash);
  CHECK(store.record_step(stale.record.key, stale.record.ticket, "reserve", "7") ==
        R"({"reserve":7})");
  store.complete(stale.record.key, stale.record.ticket, R"("resumed")");
  const auto expired = store.claim(idem::Key{"PAY", "expired"}, "", {});
  CHECK(expired.verdict == idem::Verdict::acquired);
  CHECK(expired.record.attempts == 1);
  // An old live claim is repaired at its fence, and then holds the key as outcome_unknown.
  const auto live = store.find(idem::Key{"PAY", "live"});
  REQUIRE(live.has_value());
  CHECK(store.claim(live->key, "", {}).verdict == idem::Verdict::in_progress);
  const auto unknown = store.repair(live->key, {.action = idem::RepairAction::mark_unknown,
                                                .fence = live->ticket.fence,
                                                .reason = "worker of an older binary vanished"});
  CHECK(unknown.ticket.fence == 2);
  CHECK(store.find(live->key) == unknown);
  CHECK(store.claim(live->key, "", {}).verdict == idem::Verdict::outcome_unknown);
  const auto after = store.find(idem::Key{"PAY", "stale"});
  REQUIRE(after.has_value());
  CHECK(after->status == idem::Status::succeeded);
  CHECK(after->recovery_points == R"({"reserve":7})");
}

TEST_CASE("migrate_record_table: a column another migrator added first counts as added") {
  TempDir dir;
  const auto file = dir / "lost.db";
  idem::sqlite::Connection a{file};
  idem::sqlite::Connection b{file};
  a.exec(v1_ddl);

  // Between a's look at the table and its ALTER, b adds the first column: a's ALTER then meets
  // "duplicate column name", which is the table it wanted.
  struct Interloper {
    idem::sqlite::Connection* other;
    int alters = 0;
  } interloper{&b};
  const auto hook = [](void* ctx, int action, const char*, const char*, const char*,
                       const char*) -> int {
    auto* self = static_cast<Interloper*>(ctx);
    if (action == SQLITE_ALTER_TABLE && self->alters++ == 0) {
      self->other->exec("ALTER TABLE \"idempotent_record\" ADD COLUMN recovery_points BLOB");
    }
    return SQLITE_OK;
  };
  sqlite3_set_authorizer(a.native(), hook, &interloper);
  const int added = idem::sqlite::migrate_record_table(a, v1_table);
  sqlite3_set_authorizer(a.native(), nullptr, nullptr);
  CHECK(interloper.alters >= 3);
  CHECK(added == 2);  // the other migrator added recovery_points

  std::vector<std::string> names;
  for (const auto& column : layout(a, "idempotent_record"))
    names.push_back(column.substr(0, column.find(' ')));
  CHECK(names.size() == 16);
  CHECK(std::vector<std::string>(names.end() - 3, names.end()) ==
        std::vector<std::string>{"recovery_points", "repair_reason", "repaired_at"});
  CHECK(idem::sqlite::migrate_record_table(b, v1_table) == 0);
  CHECK_THROWS_AS(
      idem::sqlite::migrate_record_table(a, idem::sqlite::parse_table_name("no_such_table")),
      idem::UsageError);
}

TEST_CASE("a store made without create_schema on a first-layout table fails until it is migrated") {
  TempDir dir;
  const auto file = dir / "unmigrated.db";
  {
    idem::sqlite::Connection c{file};
    c.exec(v1_ddl);
  }
  idem::sqlite::Store store{file, {.create_schema = false}};
  // The store's first operation checks the table and names the migration, for a claim and for
  // a read alike; nothing was written.
  for (int i = 0; i < 2; ++i) {
    try {
      if (i == 0) store.claim(idem::Key{"PAY", "x"}, "", {});
      if (i == 1) store.find(idem::Key{"PAY", "x"});
      FAIL("used a table without the new columns");
    } catch (const idem::SchemaMismatch& e) {
      CHECK_FALSE(e.retryable());
      CHECK_THAT(e.what(), Catch::Contains("older idem") && Catch::Contains("ensure_schema"));
    }
  }
  {
    idem::sqlite::Connection c{file};
    auto rows = c.query("SELECT COUNT(*) FROM idempotent_record");
    REQUIRE(rows.next());
    CHECK(rows.integer(0) == 0);
  }
  // One that does not check its table first meets the missing column at the first statement
  // that names it (a store of an older binary's config, during an upgrade).
  idem::sqlite::Store unchecked{file, {.create_schema = false, .check_table = false}};
  try {
    unchecked.claim(idem::Key{"PAY", "x"}, "", {});
    FAIL("claimed on a table without the new columns");
  } catch (const idem::StoreError& e) {
    CHECK_FALSE(e.retryable());
    CHECK_THAT(e.diagnostics().message, Catch::Contains("recovery_points"));
  }
  store.ensure_schema();
  CHECK(store.claim(idem::Key{"PAY", "x"}, "", {}).verdict == idem::Verdict::acquired);
}

TEST_CASE(
    "4 stores migrate one first-layout file at once while 4 threads of an older binary "
    "claim on it - nothing fails, every key runs once") {
  TempDir dir;
  const auto file = dir / "online.db";
  const idem::sqlite::StoreParams params{.synchronous = idem::sqlite::Synchronous::normal};
  const idem::sqlite::ConnectionParams connection{.synchronous = idem::sqlite::Synchronous::normal};
  {
    idem::sqlite::Connection c{file, connection};
    c.exec(v1_ddl);
    c.exec("CREATE TABLE biz (id INTEGER PRIMARY KEY, trade_no TEXT NOT NULL, pid INTEGER)");
  }
  // Keys [0, 100): the older binary alone, before any migration. [100, 400): everybody, while
  // the newer stores migrate the table. Then [400, 450): the older binary alone once every
  // store has migrated, and [450, 500): the newer stores alone.
  constexpr int keys = 500;
  constexpr int old_threads = 4;
  constexpr int new_threads = 4;
  std::atomic<int> old_done_first{0}, old_executed{0}, old_after_migration{0}, new_executed{0},
      migrated{0};
  idem_test::Errors errors;

  idem_test::run_threads(old_threads + new_threads, [&](int t) {
    // Each thread walks a range from its own offset, so each key is claimed by every thread
    // that walks its range.
    const auto walk = [&](int from, int to, auto&& claim) {
      for (int i = 0; i < to - from; ++i)
        claim("order-" + std::to_string(from + (i + t * 37) % (to - from)));
    };
    try {
      if (t < old_threads) {
        idem::sqlite::Connection c{file, connection};
        const auto claim = [&](const std::string& id) {
          const std::string owner = "old-" + std::to_string(t) + "-" + id;
          const std::int64_t now = ms(idem::system_now());
          const bool after = migrated.load() > 0;
          const auto claimed = c.try_execute(v1_insert, {id, "ORDER", 0, 1, owner, nullptr, 0, 1,
                                                         now + 60'000, now, now + 3'600'000});
          if (claimed.code == SQLITE_CONSTRAINT_PRIMARYKEY) return;  // a duplicate
          if (claimed.code != SQLITE_OK) throw std::runtime_error("old claim failed");
          c.execute("INSERT INTO biz (trade_no, pid) VALUES (?, ?)", {id, t});
          if (c.execute(v1_finish, {Value::blob("\"" + id + "\""), now, id, "ORDER", 1, owner}) !=
              1) {
            throw std::runtime_error("old finish lost " + id);
          }
          ++old_executed;
          if (after) ++old_after_migration;
        };
        walk(0, 100, claim);
        ++old_done_first;
        walk(100, 400, claim);
        while (migrated.load() < new_threads)
          std::this_thread::yield();
        walk(400, 450, claim);
        return;
      }
      while (old_done_first.load() < old_threads)
        std::this_thread::yield();
      idem::sqlite::Store store{file, params};  // migrates (or finds it migrated)
      ++migrated;
      const auto claim = [&](const std::string& id) {
        const auto out = idem::run_once(store, idem::Key{"ORDER", id}, "", [&] {
          store.pool().acquire()->execute("INSERT INTO biz (trade_no, pid) VALUES (?, ?)", {id, t});
          ++new_executed;
          return id;
        });
        if (out.verdict() == idem::Verdict::replayed && out.value() != id) {
          throw std::runtime_error("wrong replay for " + id);
        }
      };
      walk(0, 400, claim);  // [0, 100) only replays
      walk(450, 500, claim);
    } catch (const std::exception& e) {
      errors.add(e.what());
    }
  });
  INFO("first error: " << errors.first());
  CHECK(errors.size() == 0);
  CHECK(migrated == new_threads);
  CHECK(old_executed + new_executed == keys);
  CHECK(old_after_migration >= 50);  // the older binary kept claiming on the migrated table
  CHECK(new_executed >= 50);

  idem::sqlite::Store store{file, params};
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == keys);
  CHECK(idem_test::scalar(store, "SELECT COUNT(DISTINCT trade_no) FROM biz") == keys);
  CHECK(idem_test::count(store, "status = 1 AND fence = 1") == keys);
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM pragma_table_info('idempotent_record')") ==
        16);
  // Stamped once, by the first store that migrated it.
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM idem_schema") == 1);
  CHECK(store.check_schema().stamped);
  // Every record, whichever binary wrote it, decodes and replays.
  for (int k = 0; k < keys; ++k) {
    const std::string id = "order-" + std::to_string(k);
    const auto r = store.claim(idem::Key{"ORDER", id}, "", {});
    CHECK(r.verdict == idem::Verdict::replayed);
  }
}

namespace {

// The stamp row of idempotent_record: "layout oldest_reader", or "none".
std::string stamp_row(const std::filesystem::path& file) {
  idem::sqlite::Connection c{file};
  auto exists = c.query("SELECT COUNT(*) FROM sqlite_master WHERE name = 'idem_schema'");
  REQUIRE(exists.next());
  if (exists.integer(0) == 0) return "none";
  auto row = c.query(
      "SELECT layout, oldest_reader FROM idem_schema WHERE record_table = 'idempotent_record'");
  return row.next() ? std::to_string(row.integer(0)) + " " + std::to_string(row.integer(1))
                    : "none";
}

bool layout_is(const idem::TableLayout& t, int layout, int oldest_reader, bool stamped) {
  return t.layout == layout && t.oldest_reader == oldest_reader && t.stamped == stamped;
}

}  // namespace

TEST_CASE("the layout is stamped in idem_schema when a table is created or migrated") {
  TempDir dir;
  SECTION("a new table") {
    const auto file = dir / "new.db";
    idem::sqlite::Store store{file};
    CHECK(stamp_row(file) == "2 2");
    CHECK(layout_is(store.check_schema(), 2, 2, true));
  }
  SECTION("a first-layout table, migrated") {
    const auto file = dir / "v1.db";
    {
      idem::sqlite::Connection c{file};
      c.exec(v1_ddl);
    }
    idem::sqlite::Store unmigrated{file, {.create_schema = false, .check_table = false}};
    CHECK_THROWS_AS(unmigrated.check_schema(), idem::SchemaMismatch);
    idem::sqlite::Store store{file};
    CHECK(stamp_row(file) == "2 2");
    CHECK(layout_is(store.check_schema(), 2, 2, true));
  }
  SECTION("a table of an idem before stamps: used as it is, stamped by ensure_schema") {
    const auto file = dir / "unstamped.db";
    {
      idem::sqlite::Store made{file};
      made.pool().acquire()->exec("DROP TABLE idem_schema");
    }
    idem::sqlite::Store store{file, {.create_schema = false}};
    CHECK(layout_is(store.check_schema(), 2, 2, false));
    CHECK(idem::run_once(store, idem::Key{"PAY", "before-stamp"}, "", [] { return 1; }));
    store.ensure_schema();
    CHECK(stamp_row(file) == "2 2");
    CHECK(idem_test::count(store) == 1);
  }
}

TEST_CASE("a table a newer idem migrated beyond this one's reach is refused, and left alone") {
  TempDir dir;
  const auto file = dir / "newer.db";
  {
    idem::sqlite::Store made{file};
    made.pool().acquire()->exec("UPDATE idem_schema SET layout = 3, oldest_reader = 3");
  }
  // Opening with create_schema migrates, which refuses; a store that only checks refuses its
  // first claim. Nothing is written either way.
  try {
    idem::sqlite::Store store{file};
    FAIL("opened a table of layout 3");
  } catch (const idem::SchemaMismatch& e) {
    CHECK_FALSE(e.retryable());
    CHECK_THAT(e.what(), Catch::Contains("layout 3") && Catch::Contains("knows layout 2"));
  }
  std::atomic<int> runs{0};
  idem::sqlite::Store checking{file, {.create_schema = false}};
  CHECK_THROWS_AS(idem::run_once(checking, idem::Key{"PAY", "newer"}, "", [&] { return ++runs; }),
                  idem::SchemaMismatch);
  CHECK(runs == 0);
  CHECK(stamp_row(file) == "3 3");
  CHECK(idem_test::scalar(checking, "SELECT COUNT(*) FROM idempotent_record") == 0);

  // A newer layout that this idem may still use: it runs, and its stamp stays.
  checking.pool().acquire()->exec("UPDATE idem_schema SET oldest_reader = 2");
  idem::sqlite::Store compatible{file};
  CHECK(idem::run_once(compatible, idem::Key{"PAY", "newer"}, "", [&] { return ++runs; }));
  CHECK(runs == 1);
  CHECK(layout_is(compatible.check_schema(), 3, 2, true));
  CHECK(stamp_row(file) == "3 2");
}
