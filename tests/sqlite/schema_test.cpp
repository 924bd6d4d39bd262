// The record table's shape on SQLite (idem/sqlite/schema.hpp, schema_check.hpp): a store
// refuses at open a table that is not idem's, naming each difference and its fix, and a key
// column made case-insensitive after it opened never makes one key replay another's response.
#include <atomic>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/sqlite_file.hpp"

using idem_test::TempDir;

namespace {

// `text` with `from` replaced by `to` (which must be there).
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

// The current DDL of table `rec` with `from` replaced by `to`.
std::string ddl_with(const std::string& from, const std::string& to) {
  return replaced(idem::sqlite::record_table_ddl(idem::sqlite::parse_table_name("rec")), from, to);
}

// The problems a store reports when it opens `file` (with create_schema) or, without,
// when it is asked (check_schema); none: the table passed.
std::vector<idem::SchemaMismatch::Problem> problems_at_open(const std::filesystem::path& file,
                                                            bool create_schema) {
  try {
    idem::sqlite::Store store{file, {.table = "rec", .create_schema = create_schema}};
    if (!create_schema) store.check_schema();
    return {};
  } catch (const idem::SchemaMismatch& e) {
    CHECK_FALSE(e.retryable());
    return e.problems();
  }
}

}  // namespace

TEST_CASE("a store refuses at open a table whose key column is NOCASE, and says how to fix it") {
  TempDir dir;
  const auto file = dir / "nocase.db";
  idem::sqlite::Connection{file}.exec(
      ddl_with("idempotent_key    TEXT COLLATE BINARY", "idempotent_key    TEXT COLLATE NOCASE"));
  for (const bool create : {true, false}) {
    const auto problems = problems_at_open(file, create);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].what == "column idempotent_key has collation nocase, idem expects binary");
    CHECK_THAT(problems[0].fix, Catch::StartsWith("rebuild \"rec\" with the column as "
                                                  "idempotent_key TEXT COLLATE BINARY NOT NULL"));
  }
}

TEST_CASE("a key column declared NOCASE under a BINARY primary key is refused too") {
  // WHERE idempotent_key = ? compares with the column's collation, whatever the key's says.
  TempDir dir;
  const auto file = dir / "nocase-column.db";
  idem::sqlite::Connection{file}.exec(replaced(
      ddl_with("idempotent_key    TEXT COLLATE BINARY", "idempotent_key    TEXT COLLATE NOCASE"),
      "PRIMARY KEY (idempotent_key,", "PRIMARY KEY (idempotent_key COLLATE BINARY,"));
  const auto problems = problems_at_open(file, true);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].what == "column idempotent_key has collation nocase, idem expects binary");
}

TEST_CASE("a store refuses at open a column of another type, a missing column or index") {
  TempDir dir;
  const auto file = dir / "bad.db";
  SECTION("status declared VARCHAR(16)") {
    idem::sqlite::Connection{file}.exec(
        ddl_with("status            INTEGER NOT NULL", "status            VARCHAR(16) NOT NULL"));
    const auto problems = problems_at_open(file, true);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].what == "column status is varchar(16), idem expects integer");
  }
  SECTION("no attempts column") {
    idem::sqlite::Connection{file}.exec(ddl_with(
        "  attempts          INTEGER NOT NULL DEFAULT 1,    -- claims that ran the business\n",
        ""));
    const auto problems = problems_at_open(file, true);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].what == "column attempts is missing");
    CHECK(problems[0].fix == "ALTER TABLE \"rec\" ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1");
  }
  SECTION("no created_at column: NOT NULL without a default, so the fix is a rebuild") {
    idem::sqlite::Connection{file}.exec(ddl_with(
        "  created_at        INTEGER NOT NULL,              -- ms since the Unix epoch, UTC\n",
        ""));
    const auto problems = problems_at_open(file, true);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].what == "column created_at is missing");
    CHECK_THAT(problems[0].fix, Catch::StartsWith("rebuild \"rec\" with the column created_at"));
  }
  SECTION("a dropped index: create_schema makes it again, a store without it refuses") {
    {
      idem::sqlite::Connection c{file};
      c.exec(idem::sqlite::record_table_ddl(idem::sqlite::parse_table_name("rec")));
      c.exec("DROP INDEX rec_idx_stale");
    }
    const auto problems = problems_at_open(file, false);
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0].what,
               Catch::Contains("(status, lease_until)") && Catch::Contains("release_stale"));
    CHECK(problems[0].fix == "CREATE INDEX rec_idx_stale ON \"rec\" (status, lease_until)");
    CHECK(problems_at_open(file, true).empty());
    CHECK(problems_at_open(file, false).empty());
  }
}

TEST_CASE("a key column made NOCASE after the store opened never replays another key") {
  TempDir dir;
  const auto file = dir / "nocase-later.db";
  idem::sqlite::Store store{file, {.table = "rec"}};
  std::atomic<int> runs{0};
  const auto pay = [&runs](const std::string& order) {
    return [&runs, order] {
      ++runs;
      return nlohmann::json{{"order", order}};
    };
  };
  const idem::Key lower{"PAY", "order-abc"};
  const idem::Key upper{"PAY", "ORDER-ABC"};
  REQUIRE(idem::run_once(store, lower, "fp", pay("abc")).acquired());
  {
    // A rebuild of the table with the key column's collation changed, behind the store's back.
    idem::sqlite::Connection c{file};
    c.exec("BEGIN IMMEDIATE");
    c.exec("ALTER TABLE rec RENAME TO rec_old");
    c.exec(
        ddl_with("idempotent_key    TEXT COLLATE BINARY", "idempotent_key    TEXT COLLATE NOCASE"));
    c.exec("INSERT INTO rec SELECT * FROM rec_old");
    c.exec("DROP TABLE rec_old");
    c.exec("COMMIT");
  }
  try {
    (void)idem::run_once(store, upper, "fp", pay("ABC"));
    FAIL("ORDER-ABC answered with the record of order-abc");
  } catch (const idem::CorruptRecord& e) {
    CHECK_FALSE(e.retryable());
    CHECK_THAT(e.what(), Catch::Contains("ORDER-ABC") && Catch::Contains("order-abc"));
  }
  CHECK_THROWS_AS(store.find(upper), idem::CorruptRecord);
  const auto again = idem::run_once(store, lower, "fp", pay("abc"));
  CHECK(again.replayed());
  CHECK(again.value() == nlohmann::json{{"order", "abc"}});
  CHECK(runs == 1);
  CHECK_THROWS_AS(store.check_schema(), idem::SchemaMismatch);
}
