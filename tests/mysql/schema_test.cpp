// The record table's shape on MySQL (idem/mysql/schema.hpp, schema_check.hpp): a table whose
// key columns a DBA changed to compare case-insensitively never makes one key replay another
// key's response, and check_schema() names every difference from the expected table with its
// fix.
#include <atomic>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/mysql_server.hpp"

namespace {

bool corrupt_record(const idem::StoreError& e) {
  return dynamic_cast<const idem::CorruptRecord*>(&e) != nullptr;
}

}  // namespace

TEST_CASE("a key column changed to a case-insensitive collation never replays another key") {
  idem_test::Table t;
  {
    auto c = t.pool->acquire();
    // What a DBA's "utf8mb4 everywhere" migration does to the key column.
    c->query("ALTER TABLE " + t.store.table() +
             " MODIFY idempotent_key VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci "
             "NOT NULL");
  }
  std::atomic<int> runs{0};
  const auto pay = [&](const std::string& order) {
    return [&runs, order] {
      ++runs;
      return nlohmann::json{{"order", order}};
    };
  };
  const idem::Key lower{"PAY", "order-abc"};
  const idem::Key upper{"PAY", "ORDER-ABC"};
  auto first = idem::run_once(t.store, lower, "fp", pay("abc"));
  REQUIRE(first.acquired());
  REQUIRE(runs == 1);

  // The other key's claim meets the row of `lower`: an error, not its response.
  try {
    (void)idem::run_once(t.store, upper, "fp", pay("ABC"));
    FAIL("ORDER-ABC answered with the record of order-abc");
  } catch (const idem::StoreError& e) {
    CHECK(corrupt_record(e));
    CHECK_FALSE(e.retryable());
    CHECK_THAT(e.what(), Catch::Contains("ORDER-ABC") && Catch::Contains("order-abc"));
  }
  CHECK(runs == 1);
  try {
    (void)t.store.find(upper);
    FAIL("find(ORDER-ABC) answered the record of order-abc");
  } catch (const idem::StoreError& e) {
    CHECK(corrupt_record(e));
  }
  // The key asked for exactly still reads and replays as before, and nothing was changed.
  const auto again = idem::run_once(t.store, lower, "fp", pay("abc"));
  CHECK(again.replayed());
  CHECK(again.value() == nlohmann::json{{"order", "abc"}});
  CHECK(runs == 1);
  CHECK(t.count() == 1);
  CHECK(t.count("status = 1 AND fence = 1") == 1);
}

TEST_CASE("check_schema: the table ensure_schema creates passes, and so do a DBA's additions") {
  idem_test::Table t;
  CHECK_NOTHROW(t.store.check_schema());
  auto c = t.pool->acquire();
  c->query("ALTER TABLE " + t.store.table() +
           " ADD COLUMN note VARCHAR(20) NULL, ADD KEY by_type (biz_type), ADD KEY "
           "expire_and_more (expire_at, status)");
  CHECK_NOTHROW(t.store.check_schema());
  CHECK_NOTHROW(t.store.check_schema(c->native()));
  CHECK_NOTHROW(t.store.ensure_schema());  // and ensure_schema checks too
}

TEST_CASE("check_schema: each problem names the column or index and the statement that fixes it") {
  idem_test::Table t;
  const std::string table = t.store.table();
  auto alter_and_check = [&](const std::string& alter) {
    auto c = t.pool->acquire();
    c->query("ALTER TABLE " + table + " " + alter);
    try {
      t.store.check_schema();
      FAIL("check_schema accepted the table after: " << alter);
      return std::vector<idem::SchemaMismatch::Problem>{};
    } catch (const idem::SchemaMismatch& e) {
      CHECK_FALSE(e.retryable());
      CHECK_THAT(e.what(), Catch::Contains(table));
      return e.problems();
    }
  };
  auto fix = [&](const idem::SchemaMismatch::Problem& p) { t.pool->acquire()->query(p.fix); };

  SECTION("status as VARCHAR(16): named as such, not as a corrupt record at the first replay") {
    auto problems = alter_and_check("MODIFY status VARCHAR(16) NOT NULL DEFAULT '0'");
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].what == "column status is varchar(16), idem expects tinyint");
    CHECK(problems[0].fix == "ALTER TABLE " + table +
                                 " MODIFY status TINYINT NOT NULL DEFAULT 0 COMMENT '0 "
                                 "processing, 1 succeeded, 2 failed, 3 outcome unknown'");
    fix(problems[0]);
  }
  SECTION("a key column that compares case-insensitively") {
    auto problems = alter_and_check(
        "MODIFY idempotent_key VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT "
        "NULL");
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0].what, Catch::Contains("idempotent_key") &&
                                     Catch::Contains("utf8mb4_general_ci") &&
                                     Catch::Contains("byte for byte"));
    fix(problems[0]);
  }
  SECTION("a token column with a case-insensitive collation") {
    auto problems = alter_and_check(
        "MODIFY owner_token CHAR(32) CHARACTER SET ascii COLLATE ascii_general_ci NOT NULL");
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].what ==
          "column owner_token has collation ascii_general_ci, idem expects ascii_bin");
    fix(problems[0]);
  }
  SECTION("a dropped column") {
    auto problems = alter_and_check("DROP COLUMN attempts");
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].what == "column attempts is missing");
    CHECK_THAT(problems[0].fix, Catch::StartsWith("ALTER TABLE " + table + " ADD COLUMN attempts"));
    fix(problems[0]);
  }
  SECTION("a nullable column that must not be") {
    auto problems = alter_and_check("MODIFY fence BIGINT UNSIGNED NULL DEFAULT 1");
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].what == "column fence is NULL, idem expects NOT NULL");
    fix(problems[0]);
  }
  SECTION("dropped indexes: both named, with what a missing one costs") {
    auto problems = alter_and_check("DROP KEY idx_expire, DROP KEY idx_stale");
    REQUIRE(problems.size() == 2);
    CHECK_THAT(problems[0].what, Catch::Contains("(expire_at)") && Catch::Contains("purge"));
    CHECK_THAT(problems[1].what,
               Catch::Contains("(status, lease_until)") && Catch::Contains("release_stale"));
    fix(problems[0]);
    fix(problems[1]);
  }
  SECTION("another primary key") {
    auto problems = alter_and_check("DROP PRIMARY KEY, ADD PRIMARY KEY (idempotent_key)");
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0].what, Catch::Contains("primary key is (idempotent_key)"));
    fix(problems[0]);
  }
  // Each fix, as printed, made the table pass again.
  CHECK_NOTHROW(t.store.check_schema());
}

TEST_CASE("a store checks its table on its first operation: a wrong one fails before any claim") {
  idem_test::Table t;
  t.pool->acquire()->query("ALTER TABLE " + t.store.table() + " DROP COLUMN attempts");
  // A new store on the changed table (a service starting): the claim, the read, the listing
  // each fail with the problem and its fix, and write nothing.
  idem::mysql::Store store{t.pool, {.table = t.name}};
  const idem::Key key{"PAY", "first-use"};
  for (int i = 0; i < 3; ++i) {
    try {
      if (i == 0) store.claim(key, "fp", {});
      if (i == 1) store.find(key);
      if (i == 2) store.list({.limit = 5});
      FAIL("used a table without the attempts column");
    } catch (const idem::SchemaMismatch& e) {
      CHECK_FALSE(e.retryable());
      REQUIRE(e.problems().size() == 1);
      CHECK_THAT(e.problems()[0].what, Catch::Contains("attempts"));
      CHECK_THAT(e.problems()[0].fix, Catch::Contains("ADD COLUMN"));
    }
  }
  CHECK(t.count() == 0);
  // Without the check the same claim meets the server's error for the missing column, the
  // failure the check turns into a named problem.
  idem::mysql::Store unchecked{t.pool, {.table = t.name, .check_table = false}};
  try {
    unchecked.claim(key, "fp", {});
    FAIL("claimed without the attempts column");
  } catch (const idem::StoreError& e) {
    CHECK(e.diagnostics().code == 1054);
  }
  // Once the table is fixed the same store checks again and works; after a check passed it is
  // not repeated (one check per store, not per operation).
  try {
    store.check_schema();
  } catch (const idem::SchemaMismatch& e) {
    t.pool->acquire()->query(e.problems().at(0).fix);
  }
  CHECK(store.claim(key, "fp", {}).verdict == idem::Verdict::acquired);
  t.pool->acquire()->query("ALTER TABLE " + t.store.table() + " DROP KEY idx_expire");
  CHECK(store.find(key).has_value());
}

TEST_CASE("check_schema: an index MariaDB ignores does not count, and the fix shows it again") {
  idem_test::Table t;
  t.pool->acquire()->query("ALTER TABLE " + t.store.table() + " ALTER INDEX idx_stale IGNORED");
  std::string fix;
  try {
    t.store.check_schema();
    FAIL("an ignored idx_stale passed");
  } catch (const idem::SchemaMismatch& e) {
    REQUIRE(e.problems().size() == 1);
    CHECK_THAT(e.problems()[0].what,
               Catch::Contains("idx_stale") && Catch::Contains("may not use it"));
    fix = e.problems()[0].fix;
  }
  CHECK_THAT(fix, Catch::Contains("NOT IGNORED"));
  t.pool->acquire()->query(fix);
  CHECK_NOTHROW(t.store.check_schema());
}

TEST_CASE("check_schema: the fix for a hidden index is the server's own statement") {
  using idem::mysql::detail::IndexHiding;
  using idem::mysql::detail::schema_dialect;
  CHECK(schema_dialect(IndexHiding::ignored).unhide_index("`t`", "idx_stale") ==
        "ALTER TABLE `t` ALTER INDEX idx_stale NOT IGNORED");
  CHECK(schema_dialect(IndexHiding::invisible).unhide_index("`t`", "idx_stale") ==
        "ALTER TABLE `t` ALTER INDEX idx_stale VISIBLE");
  CHECK(schema_dialect(IndexHiding::none).unhide_index == nullptr);
  // The column each server names its flag with; none where it has no such flag.
  using idem::mysql::detail::live_indexes_sql;
  CHECK_THAT(live_indexes_sql(IndexHiding::ignored), Catch::Contains("IGNORED = 'YES'"));
  CHECK_THAT(live_indexes_sql(IndexHiding::invisible), Catch::Contains("IS_VISIBLE = 'NO'"));
  CHECK_THAT(live_indexes_sql(IndexHiding::none),
             !Catch::Contains("IGNORED") && !Catch::Contains("IS_VISIBLE"));
  // This MariaDB says IGNORED.
  auto pool = idem_test::make_pool(1);
  CHECK(idem::mysql::detail::index_hiding(pool->acquire()->select(
            idem::mysql::detail::index_hiding_sql, {})) == IndexHiding::ignored);
}

TEST_CASE("check_schema: a missing table says what to run") {
  auto pool = idem_test::make_pool(2);
  idem::mysql::Store store{pool, {.table = idem_test::unique_table()}};
  try {
    store.check_schema();
    FAIL("a missing table passed");
  } catch (const idem::SchemaMismatch& e) {
    REQUIRE(e.problems().size() == 1);
    CHECK_THAT(e.problems()[0].what, Catch::Contains("does not exist"));
    CHECK_THAT(e.problems()[0].fix, Catch::Contains("ensure_schema"));
  }
}

TEST_CASE("the expected table is read from record_table_ddl: every column and both indexes") {
  const auto shape = idem::detail::ddl_shape(idem::mysql::record_table_ddl("`t`"));
  CHECK(shape.columns.size() == 16);
  REQUIRE(shape.indexes.size() == 3);
  CHECK(shape.indexes[0].columns == std::vector<std::string>{"idempotent_key", "biz_type"});
  CHECK(shape.indexes[1].columns == std::vector<std::string>{"expire_at"});
  CHECK(shape.indexes[2].columns == std::vector<std::string>{"status", "lease_until"});
  for (const auto& c : shape.columns)
    CHECK_FALSE(c.type.empty());
}
