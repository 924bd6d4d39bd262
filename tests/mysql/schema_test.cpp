// The record table's shape on MySQL (idem/mysql/schema.hpp): a table whose key columns a DBA
// changed to compare case-insensitively never makes one key replay another key's response.
#include <atomic>
#include <string>

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
