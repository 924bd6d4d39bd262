// The record table of an older idem (layout 1) upgraded in place by ensure_schema(), while
// claims go on: the ALTER is instant, nothing runs twice, the old rows decode and the
// migrated table is the one a fresh ensure_schema() creates.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "../support/mysql_server.hpp"
#include "../support/threads.hpp"
#include "layout1_table.hpp"

using namespace std::chrono_literals;
using idem_test::BusinessTable;
using idem_test::Errors;
using idem_test::Layout1Table;

namespace {

// SHOW CREATE TABLE with the table's name taken out, to compare two tables' definitions.
std::string definition(std::string text, const std::string& name) {
  const auto at = text.find(name);
  if (at != std::string::npos) text.erase(at, name.size());
  return text;
}

bool unknown_column(const idem::StoreError& e) {
  return e.diagnostics().code == 1054;  // ER_BAD_FIELD_ERROR: the table is not migrated yet
}

// The store's first-use check refused the table: it lacks the columns the migration adds.
bool not_migrated(const idem::StoreError& e) {
  const auto* mismatch = dynamic_cast<const idem::SchemaMismatch*>(&e);
  return mismatch != nullptr && !mismatch->problems().empty() &&
         std::string(e.what()).find("ensure_schema") != std::string::npos;
}

}  // namespace

TEST_CASE("a layout-1 table is migrated in place while 8 threads claim on it") {
  Layout1Table v1;
  // Rows of the old idem, and filler, so that the ALTER has rows it must not copy.
  v1.old_row("old-done", 1, R"({"paid":1})", 0, -60);
  v1.old_row("old-failed", 2, R"({"error":"timeout"})", 1, -60);
  v1.old_row("old-declined", 2, R"({"error":"declined"})", 0, -60);
  v1.old_row("old-stale", 0, nullptr, 0, -5);  // its worker died: lease ran out
  v1.old_row("old-live", 0, nullptr, 0, 3600);
  v1.pool->acquire()->query(
      "INSERT INTO " + v1.quoted +
      " SELECT CONCAT('filler-', seq), 'PAY', 1, 1, REPEAT('b', 32), '', '{\"ok\":1}', 0, 1, "
      "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL 1 DAY "
      "FROM seq_1_to_20000");

  idem::mysql::Store store{v1.pool, {.table = v1.name}};
  // Before the migration a new idem neither reads nor claims on the table: its first-use check
  // names the missing columns and the migration (not retried, nothing runs).
  try {
    store.find(idem::Key{"PAY", "old-done"});
    FAIL("read a layout-1 table without migrating it");
  } catch (const idem::StoreError& e) {
    INFO(e.what());
    CHECK(not_migrated(e));
    CHECK_FALSE(e.retryable());
  }

  // The claims go on through a store that does not check its table first, as a service still
  // running beside the upgrade would: its fresh claims fit the old table.
  idem::mysql::Store running{v1.pool, {.table = v1.name, .check_table = false}};
  BusinessTable biz(v1.pool);
  constexpr int threads = 8;
  constexpr int keys = 300;
  Errors errors;
  std::atomic<int> settled{0};
  std::atomic<int> refused_before{0};  // claims the unmigrated table refused
  std::atomic<bool> migrated{false};
  std::atomic<int> refused_after{0};  // the same after the migration (must stay 0)

  std::thread migration;
  idem::mysql::Migration done;
  idem_test::run_threads(threads, [&](int t) {
    if (t == 0) {
      migration = std::thread([&] {
        // Claims have settled and others were refused by the unmigrated table: the ALTER
        // runs in the middle of them.
        while (settled.load() < 20 || refused_before.load() < 8)
          std::this_thread::sleep_for(1ms);
        try {
          done = store.ensure_schema();
        } catch (const std::exception& e) {
          errors.add(std::string("migration: ") + e.what());
        }
        migrated = true;
      });
    }
    // Every thread walks every key, one step behind the next thread: each key is claimed by
    // all eight, most of them duplicates of a running or just finished claim. (Until the
    // migration only fresh claims get through: a duplicate's read names the new columns.)
    for (int i = 0; i < keys; ++i) {
      const std::string id = "k-" + std::to_string((i + t) % keys);
      for (;;) {
        const bool after = migrated.load();
        try {
          const auto out = idem::run_once(running, idem::Key{"PAY", id}, "fp", [&] {
            biz.insert(*v1.pool->acquire(), id);
            return id;
          });
          if (out) {
            if (out.value() != id) errors.add("wrong answer for " + id);
            ++settled;
            break;
          }
          if (out.verdict() != idem::Verdict::in_progress) {
            errors.add(fmt::format("{}: {}", id, idem::to_string(out.verdict())));
            break;
          }
        } catch (const idem::StoreError& e) {
          if (!unknown_column(e)) {
            errors.add(e.what());
            break;
          }
          ++(after ? refused_after : refused_before);
        }
        std::this_thread::sleep_for(1ms);
      }
    }
  });
  migration.join();

  INFO(errors.first());
  CHECK(errors.size() == 0);
  CHECK(refused_before.load() > 0);  // the migration did happen while claims were going on
  CHECK(refused_after.load() == 0);
  CHECK(done.added == std::vector<std::string>{"recovery_points", "repair_reason", "repaired_at"});
  CHECK(done.stamped);  // in the same ALTER
  // MariaDB 10.11: no copy of the rows and no lock beyond a moment's metadata lock, which is
  // what lets the claims above go on (how long they waited is the machine's, not asserted).
  CHECK(done.algorithm == "INSTANT");
  CHECK(settled.load() == threads * keys);
  // Nothing ran twice, every key ran once.
  CHECK(biz.keys_executed_twice() == 0);
  CHECK(biz.distinct_keys() == keys);
  CHECK(biz.rows() == keys);

  // The old rows decode, with no steps and no repair, and keep their meaning.
  const auto old_done = store.find(idem::Key{"PAY", "old-done"});
  REQUIRE(old_done);
  CHECK(old_done->status == idem::Status::succeeded);
  CHECK(old_done->snapshot == R"({"paid":1})");
  CHECK(old_done->recovery_points.empty());
  CHECK(old_done->repair_reason.empty());
  CHECK_FALSE(old_done->repaired_at.has_value());
  CHECK(store.claim(idem::Key{"PAY", "old-done"}, "fp", {}).verdict == idem::Verdict::replayed);
  CHECK(store.claim(idem::Key{"PAY", "old-declined"}, "fp", {}).verdict == idem::Verdict::replayed);
  CHECK(store.claim(idem::Key{"PAY", "old-live"}, "fp", {}).verdict == idem::Verdict::in_progress);
  const auto retry = store.claim(idem::Key{"PAY", "old-failed"}, "fp", {});
  CHECK(retry.verdict == idem::Verdict::acquired);
  CHECK_FALSE(retry.after_crash);
  CHECK(retry.record.attempts == 2);
  const auto stale = store.claim(idem::Key{"PAY", "old-stale"}, "fp", {});
  CHECK(stale.verdict == idem::Verdict::acquired);
  CHECK(stale.after_crash);  // the old worker died mid-flight
  CHECK(stale.record.ticket.fence == 2);
  CHECK(stale.record.recovery_points.empty());
  CHECK(store.list({.stale = false, .status = idem::Status::succeeded, .limit = 10}).size() == 10);

  // The migrated table is the one a fresh ensure_schema() creates; migrating again is free.
  idem_test::Table fresh;
  const std::string fresh_table =
      std::string(fresh.pool->acquire()
                      ->select("SHOW CREATE TABLE " + fresh.store.table(), {})
                      .at(0)
                      .at(1)
                      .text()
                      .value_or(""));
  CHECK(definition(v1.create_table(), v1.name) == definition(fresh_table, fresh.name));
  const auto again = store.ensure_schema();
  CHECK(again.added.empty());
  CHECK(again.algorithm.empty());
}

TEST_CASE("a migration that cannot be instant runs online, and one that cannot be online fails") {
  // InnoDB adds no column instantly to a ROW_FORMAT=COMPRESSED table (a DBA's choice to save
  // disk): the migration then rebuilds the table in place with concurrent writes allowed
  // (INPLACE, LOCK=NONE). (Not a server setting: other tests share the server meanwhile.)
  {
    Layout1Table v1;
    v1.old_row("old-done", 1, R"({"paid":1})", 0, -60);
    v1.pool->acquire()->query("ALTER TABLE " + v1.quoted + " ROW_FORMAT=COMPRESSED");
    auto c = v1.pool->acquire();
    const auto done = idem::mysql::migrate_record_table(*c, v1.name);
    CHECK(done.added.size() == 3);
    CHECK(done.algorithm == "INPLACE, LOCK=NONE");
    idem::mysql::Store store{v1.pool, {.table = v1.name}};
    const auto row = store.find(idem::Key{"PAY", "old-done"});
    REQUIRE(row);
    CHECK(row->snapshot == R"({"paid":1})");
  }
  // A FULLTEXT index (a DBA's addition) allows neither: the migration refuses to copy the table
  // under a lock and says what to do; nothing was changed.
  {
    Layout1Table v1;
    v1.pool->acquire()->query(
        "ALTER TABLE " + v1.quoted +
        " ADD COLUMN note VARCHAR(100) NULL, ADD FULLTEXT KEY ft_note (note)");
    auto c = v1.pool->acquire();
    try {
      idem::mysql::migrate_record_table(*c, v1.name);
      FAIL("migrated a table that cannot be altered online");
    } catch (const idem::StoreError& e) {
      CHECK_FALSE(e.retryable());
      CHECK_THAT(e.what(), Catch::Contains("online") && Catch::Contains("docs/mysql.md"));
    }
    CHECK(v1.create_table().find("recovery_points") == std::string::npos);
  }
}

TEST_CASE("a migration behind a long transaction gives up after its wait, and claims go on") {
  Layout1Table v1;
  // A service still running beside the upgrade (its store does not check the table first).
  idem::mysql::Store store{v1.pool, {.table = v1.name, .check_table = false}};
  // A console left in a transaction that read the table: it holds the metadata lock.
  auto console = v1.pool->acquire();
  console->query("START TRANSACTION");
  console->select("SELECT COUNT(*) FROM " + v1.quoted, {});

  // Fresh claims (which read no new column) go on beside the waiting ALTER.
  std::atomic<bool> stop{false};
  std::atomic<long long> slowest_ms{0};
  std::atomic<int> claimed{0};
  Errors errors;
  std::thread claimer([&] {
    for (int i = 0; !stop.load(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      try {
        const auto out = idem::run_once(store, idem::Key{"PAY", "fresh-" + std::to_string(i)}, "fp",
                                        [] { return 1; });
        if (!out) errors.add("not acquired");
        ++claimed;
      } catch (const std::exception& e) {
        errors.add(e.what());
      }
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count();
      if (ms > slowest_ms.load()) slowest_ms = ms;
      std::this_thread::sleep_for(5ms);
    }
  });
  std::this_thread::sleep_for(100ms);
  const auto start = std::chrono::steady_clock::now();
  try {
    auto c = v1.pool->acquire();
    idem::mysql::migrate_record_table(*c, v1.name);
    FAIL("the ALTER got the metadata lock under an open transaction");
  } catch (const idem::StoreError& e) {
    CHECK(e.diagnostics().code == idem::mysql::code::lock_wait_timeout);
    CHECK(e.retryable());  // ensure_schema() tries again
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= 1900ms);
  CHECK(waited < 4s);
  const int before = claimed.load();
  std::this_thread::sleep_for(100ms);
  CHECK(claimed.load() > before);  // claims run again once the ALTER gave up
  stop = true;
  claimer.join();
  INFO(errors.first());
  CHECK(errors.size() == 0);
  CHECK(slowest_ms.load() < 3000);  // stalled at most for the ALTER's wait

  console->query("ROLLBACK");
  auto c = v1.pool->acquire();
  CHECK(idem::mysql::migrate_record_table(*c, v1.name).added.size() == 3);
}

TEST_CASE("a partly migrated table gets only the columns it lacks") {
  Layout1Table v1;
  v1.pool->acquire()->query("ALTER TABLE " + v1.quoted +
                            " ADD COLUMN recovery_points MEDIUMBLOB NULL");
  auto c = v1.pool->acquire();
  const auto done = idem::mysql::migrate_record_table(*c, v1.name);
  CHECK(done.added == std::vector<std::string>{"repair_reason", "repaired_at"});
  // Under a schema-qualified name too, and then there is nothing left to do.
  const auto again = idem::mysql::migrate_record_table(*c, "idem_test." + v1.name);
  CHECK(again.added.empty());
}

namespace {

std::string table_comment(idem::mysql::Pool& pool, const std::string& table) {
  auto c = pool.acquire();
  const auto rows = c->select(
      "SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND "
      "TABLE_NAME = ?",
      {idem::mysql::Param(table)});
  return rows.empty() ? "<no table>" : std::string(rows.front().at(0).text().value_or(""));
}

bool same_layout(const idem::TableLayout& a, const idem::TableLayout& b) {
  return a.layout == b.layout && a.oldest_reader == b.oldest_reader && a.stamped == b.stamped;
}

}  // namespace

TEST_CASE("the layout is stamped in the table's comment by the DDL and by every migration") {
  const idem::TableLayout stamped{2, 2, true};
  SECTION("a table ensure_schema creates") {
    idem_test::Table t;
    CHECK(table_comment(*t.pool, t.name) == "idem layout=2 oldest_reader=2");
    CHECK(same_layout(t.store.check_schema(), stamped));
  }
  SECTION("a layout-1 table, migrated") {
    Layout1Table v1;
    auto c = v1.pool->acquire();
    const auto done = idem::mysql::migrate_record_table(*c, v1.name);
    CHECK(done.added.size() == 3);
    CHECK(done.stamped);
    CHECK(table_comment(*v1.pool, v1.name) == "idem layout=2 oldest_reader=2");
    idem::mysql::Store store{v1.pool, {.table = v1.name}};
    CHECK(same_layout(store.check_schema(), stamped));
  }
  SECTION("a layout-2 table of an idem before stamps: used as it is, stamped instantly") {
    idem_test::Table t;
    t.pool->acquire()->query("ALTER TABLE " + t.store.table() + " COMMENT=''");
    idem::mysql::Store store{t.pool, {.table = t.name}};
    CHECK(same_layout(store.check_schema(), idem::TableLayout{2, 2, false}));
    CHECK(idem::run_once(store, idem::Key{"PAY", "before-stamp"}, "fp", [] { return 1; }));
    auto c = t.pool->acquire();
    const auto done = idem::mysql::migrate_record_table(*c, t.name);
    CHECK(done.added.empty());
    CHECK(done.stamped);
    CHECK(done.algorithm == "INSTANT");  // a comment is metadata: no row is copied
    CHECK(table_comment(*t.pool, t.name) == "idem layout=2 oldest_reader=2");
    const auto again = idem::mysql::migrate_record_table(*c, t.name);
    CHECK_FALSE(again.stamped);
    CHECK(again.algorithm.empty());
    CHECK(t.count() == 1);
  }
  SECTION("a DBA's own comment counts as no stamp, and the migration replaces it") {
    idem_test::Table t;
    t.pool->acquire()->query("ALTER TABLE " + t.store.table() + " COMMENT='payments dedup'");
    CHECK(same_layout(t.store.check_schema(), idem::TableLayout{2, 2, false}));
    CHECK(t.store.ensure_schema().stamped);
    CHECK(table_comment(*t.pool, t.name) == "idem layout=2 oldest_reader=2");
  }
}

TEST_CASE("a table a newer idem migrated beyond this one's reach is refused before any claim") {
  idem_test::Table t;
  t.pool->acquire()->query("ALTER TABLE " + t.store.table() +
                           " COMMENT='idem layout=3 oldest_reader=3'");
  std::atomic<int> runs{0};
  idem::mysql::Store store{t.pool, {.table = t.name}};
  try {
    (void)idem::run_once(store, idem::Key{"PAY", "newer"}, "fp", [&] { return ++runs; });
    FAIL("claimed on a table of layout 3");
  } catch (const idem::SchemaMismatch& e) {
    CHECK_FALSE(e.retryable());
    CHECK_THAT(e.what(), Catch::Contains("layout 3") && Catch::Contains("knows layout 2"));
  }
  CHECK(runs == 0);
  CHECK(t.count() == 0);
  // The migration refuses too, and leaves the newer stamp alone.
  auto c = t.pool->acquire();
  CHECK_THROWS_AS(idem::mysql::migrate_record_table(*c, t.name), idem::SchemaMismatch);
  CHECK(table_comment(*t.pool, t.name) == "idem layout=3 oldest_reader=3");

  // A newer layout that this idem may still use (it only added what older code ignores).
  c->query("ALTER TABLE " + t.store.table() + " COMMENT='idem layout=3 oldest_reader=2'");
  idem::mysql::Store compatible{t.pool, {.table = t.name}};
  CHECK(idem::run_once(compatible, idem::Key{"PAY", "newer"}, "fp", [&] { return ++runs; }));
  CHECK(runs == 1);
  CHECK(same_layout(compatible.check_schema(), idem::TableLayout{3, 2, true}));
  const auto done = compatible.ensure_schema();
  CHECK_FALSE(done.stamped);  // never written back to an older layout
  CHECK(table_comment(*t.pool, t.name) == "idem layout=3 oldest_reader=2");
}
