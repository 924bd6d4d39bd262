// The record table's shape on SQLite (idem/sqlite/schema.hpp): a table whose key column
// compares case-insensitively never makes one key replay another key's response.
#include <atomic>
#include <string>

#include <catch2/catch.hpp>

#include "../support/sqlite_file.hpp"

using idem_test::TempDir;

TEST_CASE("a key column declared NOCASE never replays another key") {
  TempDir dir;
  const auto file = dir / "nocase.db";
  {
    // The current DDL with the key column's collation changed by hand.
    std::string ddl = idem::sqlite::record_table_ddl(idem::sqlite::parse_table_name("rec"));
    const std::string binary = "idempotent_key    TEXT COLLATE BINARY";
    REQUIRE(ddl.find(binary) != std::string::npos);
    ddl.replace(ddl.find(binary), binary.size(), "idempotent_key    TEXT COLLATE NOCASE");
    idem::sqlite::Connection c{file};
    c.exec(ddl);
  }
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
  CHECK(idem_test::count(store) == 1);
}
