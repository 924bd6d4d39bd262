// list() (idem/record_query.hpp) on MariaDB: the filter of backend::matches() and the order of
// backend::listed_before(), judged at the server's time, checked against those functions over every
// row; and the index the server walks for the resolver's two questions.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "../support/mysql_server.hpp"

using namespace std::chrono_literals;
using idem::RecordQuery;
using idem::Status;
using idem_test::Table;

namespace {

struct Row {
  const char* biz;
  const char* id;
  Status status;
  int lease_s;    // lease_until - now
  int updated_s;  // updated_at - now
  int expire_s;   // expire_at - now
};

// Records whose every time is seconds away from the server's now and from each other, so that
// the moments between statements cannot change an answer, and no two tie in either order.
const std::vector<Row> rows{
    {"PAY", "stale-a", Status::processing, -30, -40, 3600},
    {"PAY", "stale-b", Status::processing, -10, -50, 3600},
    {"REFUND", "stale-c", Status::processing, -20, -5, 3600},
    {"PAY", "live", Status::processing, 60, -8, 3600},
    {"PAY", "expired-claim", Status::processing, -60, -70, -1},       // expired: not stale
    {"PAY", "unknown-old", Status::outcome_unknown, -300, -100, -1},  // never expires
    {"REFUND", "unknown-new", Status::outcome_unknown, -300, -3, 3600},
    {"PAY", "done", Status::succeeded, -300, -200, 3600},
    {"PAY", "failed", Status::failed, -300, -7, 3600},
};

void put_rows(Table& t) {
  for (const Row& r : rows) {
    const idem::Key key{r.biz, r.id};
    t.store.claim(key, "fp", {.lease = 60s, .ttl = 1h});
    t.pool->acquire()->execute(
        "UPDATE " + t.store.table() +
            " SET status = ?, lease_until = UTC_TIMESTAMP(3) + INTERVAL ? SECOND, updated_at = "
            "UTC_TIMESTAMP(3) + INTERVAL ? SECOND, expire_at = UTC_TIMESTAMP(3) + INTERVAL ? "
            "SECOND WHERE idempotent_key = ? AND biz_type = ?",
        {static_cast<int>(r.status), r.lease_s, r.updated_s, r.expire_s, key.id(), key.biz_type()});
  }
}

idem::TimePoint server_now(Table& t) {
  return *t.pool->acquire()->select("SELECT UTC_TIMESTAMP(3)", {}).at(0).at(0).time();
}

// What matches() and listed_before() answer over every stored row.
std::vector<std::string> expected(Table& t, const RecordQuery& q) {
  const idem::TimePoint now = server_now(t);
  std::vector<idem::Record> all;
  for (const Row& r : rows)
    all.push_back(*t.store.find(idem::Key{r.biz, r.id}));
  std::vector<idem::Record> found;
  for (const auto& r : all)
    if (idem::backend::matches(q, r, now)) found.push_back(r);
  std::sort(found.begin(), found.end(),
            [&](const auto& a, const auto& b) { return idem::backend::listed_before(q, a, b); });
  std::vector<std::string> ids;
  for (const auto& r : found)
    if (ids.size() < q.limit) ids.push_back(r.key.id());
  return ids;
}

std::vector<std::string> listed(Table& t, const RecordQuery& q) {
  std::vector<std::string> ids;
  for (const auto& r : t.store.list(q))
    ids.push_back(r.key.id());
  return ids;
}

}  // namespace

TEST_CASE("list filters and orders as matches() and listed_before() do") {
  Table t;
  put_rows(t);
  using V = std::vector<std::string>;
  const std::vector<std::pair<RecordQuery, V>> cases{
      {{.stale = true}, {"stale-a", "stale-c", "stale-b"}},
      {{.stale = true, .biz_type = "PAY"}, {"stale-a", "stale-b"}},
      {{.stale = true, .limit = 2}, {"stale-a", "stale-c"}},
      {{.stale = true, .not_updated_for = 30s}, {"stale-a", "stale-b"}},
      {{.status = Status::outcome_unknown}, {"unknown-old", "unknown-new"}},
      {{.status = Status::outcome_unknown, .biz_type = "REFUND"}, {"unknown-new"}},
      {{.status = Status::outcome_unknown, .not_updated_for = 10s}, {"unknown-old"}},
      {{.status = Status::processing}, {"expired-claim", "stale-b", "stale-a", "live", "stale-c"}},
      {{.status = Status::failed}, {"failed"}},
      {{.biz_type = "REFUND"}, {"stale-c", "unknown-new"}},
      {{.not_updated_for = 60s}, {"done", "unknown-old", "expired-claim"}},
      {{.limit = 3}, {"done", "unknown-old", "expired-claim"}},
      {{.biz_type = "NONE"}, {}},
  };
  for (const auto& [query, want] : cases) {
    INFO("stale " << query.stale << ", status "
                  << (query.status ? idem::to_string(*query.status) : "any") << ", biz_type '"
                  << query.biz_type << "', limit " << query.limit);
    const V got = listed(t, query);
    CHECK(got == want);
    CHECK(got == expected(t, query));  // the same as the rules say, for every row
  }
  // The records come whole, as find() reads them.
  const auto unknown = t.store.list({.status = Status::outcome_unknown, .biz_type = "REFUND"});
  REQUIRE(unknown.size() == 1);
  CHECK(unknown.front() == t.store.find(unknown.front().key));
  // A query that breaks a rule is refused before anything is sent.
  CHECK_THROWS_AS(t.store.list({.stale = true, .status = Status::processing}),
                  idem::InvalidArgument);
  CHECK_THROWS_AS(t.store.list({.limit = 0}), idem::InvalidArgument);
}

TEST_CASE("the resolver's lists walk idx_stale, not the table") {
  Table t;
  put_rows(t);
  // A table mostly of finished records, as in production.
  t.pool->acquire()->query(
      "INSERT INTO " + t.store.table() +
      " SELECT CONCAT('done-', seq), 'PAY', 1, 1, REPEAT('b', 32), '', '{\"ok\":1}', 0, 1, "
      "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) - INTERVAL seq SECOND, UTC_TIMESTAMP(3) - INTERVAL seq "
      "SECOND, UTC_TIMESTAMP(3) + INTERVAL 1 DAY, NULL, NULL, NULL FROM seq_1_to_5000");
  t.pool->acquire()->query("ANALYZE TABLE " + t.store.table());
  for (const RecordQuery& q :
       {RecordQuery{.stale = true}, RecordQuery{.status = Status::outcome_unknown},
        RecordQuery{.status = Status::outcome_unknown, .biz_type = "PAY"}}) {
    const std::string sql = idem::mysql::detail::list_sql(t.store.ops().sql(), q);
    const auto plan =
        t.pool->acquire()->select("EXPLAIN " + sql, idem::mysql::detail::list_values(q));
    REQUIRE(plan.size() == 1);
    INFO(sql);
    CHECK(plan[0].at(5) == "idx_stale");                             // EXPLAIN's `key` column
    CHECK(std::stoll(plan[0].at(8).to_text().value_or("0")) < 100);  // rows examined, not 5,000
  }
  CHECK(t.store.list({.stale = true}).size() == 3);
  CHECK(t.store.list({.status = Status::outcome_unknown}).size() == 2);
}
