// list() on idem::redis::Store (and idem::redis::AsyncStore, which sends the same round trips):
// stale claims and outcome_unknown records from their indexes, in order, over many buckets and
// many pages, checked against every record read one by one; the other queries by a walk of
// every record; and what each costs the server, counted.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <idem/redis.hpp>

#include "../support/redis_async.hpp"
#include "../support/redis_server.hpp"
#include "../support/threads.hpp"
#include "raw.hpp"

using namespace std::chrono_literals;
using idem_test::RedisStore;
namespace net = idem::async::net;

namespace {

// Records of every kind, spread over the buckets: stale claims of three biz_types whose leases
// ran out at different times, live claims, successes, retryable failures, and outcome_unknown
// records marked in two waves: one before everything else, one at the end, `wave_gap` after
// the last stale lease ran out.
struct Population {
  std::vector<idem::Key> keys;
  static constexpr int stale = 240, live = 60, succeeded = 90, failed = 45, unknown = 30;
};

Population populate(idem::redis::Store& store, idem::Duration wave_gap) {
  Population p;
  const char* types[] = {"PAY", "REFUND", "SHIP"};
  auto key = [&](const std::string& kind, int i) {
    p.keys.push_back(idem::Key{types[i % 3], kind + "-" + std::to_string(i)});
    return p.keys.back();
  };
  auto unknown = [&](int i) {
    const auto c = store.claim(key("unknown", i), "", idem::Options{.lease = 1h, .ttl = 2h});
    store.repair(c.record.key, {.action = idem::RepairAction::mark_unknown,
                                .fence = c.record.ticket.fence,
                                .reason = "test: unknown"});
  };
  for (int i = 0; i < Population::unknown / 3; ++i)
    unknown(i);
  for (int i = 0; i < Population::stale; ++i) {
    // Leases of 20 to 259 ms: they run out in an order the test does not write them in.
    const auto lease = idem::Duration{20 + (i * 97) % Population::stale};
    store.claim(key("stale", i), "", idem::Options{.lease = lease, .ttl = 1h});
  }
  for (int i = 0; i < Population::live; ++i)
    store.claim(key("live", i), "", idem::Options{.lease = 1h, .ttl = 2h});
  for (int i = 0; i < Population::succeeded + Population::failed; ++i) {
    const bool ok = i < Population::succeeded;
    const auto c = store.claim(key(ok ? "done" : "failed", i), "", {});
    if (ok) {
      store.complete(c.record.key, c.record.ticket, "1");
    } else {
      store.fail(c.record.key, c.record.ticket, "{}", true);
    }
  }
  std::this_thread::sleep_for(300ms);  // every stale lease has run out
  std::this_thread::sleep_for(wave_gap);
  for (int i = Population::unknown / 3; i < Population::unknown; ++i)
    unknown(i);
  return p;
}

// Checks what a list(q) answered (`listed`) against the records read one by one: the best
// `limit` that match, in order (ties may come in any order, so the order keys are compared, and
// the membership).
void check_listed(idem::redis::Store& store, const Population& p, const idem::RecordQuery& q,
                  const std::vector<idem::Record>& listed) {
  const idem::TimePoint now = store.ops().read(*store.pool().acquire(), p.keys.front(), false)->now;
  std::vector<idem::Record> expected;
  for (const idem::Key& k : p.keys) {
    const auto r = store.find(k);
    if (r && idem::backend::matches(q, *r, now)) expected.push_back(*r);
  }
  std::sort(expected.begin(), expected.end(),
            [&](const auto& a, const auto& b) { return idem::backend::listed_before(q, a, b); });
  const auto key_of = [&](const idem::Record& r) { return q.stale ? r.lease_until : r.updated_at; };
  INFO("stale " << q.stale << ", status " << (q.status ? int(*q.status) : -1) << ", biz_type "
                << q.biz_type << ", limit " << q.limit);
  REQUIRE(listed.size() == std::min(q.limit, expected.size()));
  std::set<idem::Key> matching;
  for (const auto& r : expected)
    matching.insert(r.key);
  std::set<idem::Key> seen;
  for (std::size_t i = 0; i < listed.size(); ++i) {
    CHECK(key_of(listed[i]) == key_of(expected[i]));
    CHECK(matching.count(listed[i].key) == 1);
    CHECK(seen.insert(listed[i].key).second);  // each record once
  }
}

void check_list(idem::redis::Store& store, const Population& p, const idem::RecordQuery& q) {
  check_listed(store, p, q, store.list(q));
}

}  // namespace

TEST_CASE("list answers stale and outcome_unknown records in order, across buckets and pages") {
  RedisStore s(8);  // 1024 buckets: a page of each bucket holds a few records at most
  const Population p = populate(s.store, 1500ms);
  // First, while the last wave of outcome_unknown records is fresh (marked less than a second
  // ago, even on a loaded machine): the first wave only.
  const auto first_wave =
      s.store.list({.status = idem::Status::outcome_unknown, .not_updated_for = 1s});
  CHECK(first_wave.size() == Population::unknown / 3);
  check_list(s.store, p, {.status = idem::Status::outcome_unknown, .not_updated_for = 1s});
  for (const std::size_t limit : {1u, 9u, 30u, 100u}) {
    check_list(s.store, p, {.status = idem::Status::outcome_unknown, .limit = limit});
  }
  check_list(s.store, p, {.status = idem::Status::outcome_unknown, .biz_type = "PAY"});
  for (const std::size_t limit : {1u, 7u, 100u, 239u, 240u, 10'000u}) {
    check_list(s.store, p, {.stale = true, .limit = limit});
  }
  check_list(s.store, p, {.stale = true, .biz_type = "REFUND", .limit = 33});
  check_list(s.store, p, {.stale = true, .biz_type = "SHIP"});
  check_list(s.store, p, {.stale = true, .not_updated_for = 1h});  // none
}

TEST_CASE("list answers the other queries by walking every record, in order") {
  RedisStore s(8, {.buckets = 16});  // few buckets: indexes of many members, several pages each
  const Population p = populate(s.store, 1500ms);
  check_list(s.store, p, {.status = idem::Status::succeeded, .limit = 1'000});
  check_list(s.store, p, {.status = idem::Status::succeeded, .limit = 17});
  check_list(s.store, p, {.status = idem::Status::failed, .biz_type = "SHIP"});
  check_list(s.store, p, {.status = idem::Status::processing, .limit = 1'000});
  check_list(s.store, p, {.limit = 1'000});  // every record, outcome_unknown ones too
  check_list(s.store, p, {.limit = 50});
  // All but the last wave of outcome_unknown records, marked less than a second ago.
  check_list(s.store, p, {.biz_type = "PAY", .not_updated_for = 1s, .limit = 1'000});
  // The stale and outcome_unknown queries on few buckets: several pages of each index.
  for (const std::size_t limit : {10u, 30u, 1'000u})
    check_list(s.store, p, {.stale = true, .limit = limit});
  check_list(s.store, p, {.stale = true, .biz_type = "PAY", .limit = 10});
  check_list(s.store, p, {.status = idem::Status::outcome_unknown, .limit = 3});
}

TEST_CASE("pages of one score (ties) are read without missing or repeating a record") {
  // Stale claims written by hand with one lease_until, in one bucket, three biz_types
  // interleaved: a query for one type reads page after page of the same score.
  RedisStore s(2, {.buckets = 1});
  const auto t = idem_test::raw({"TIME"});
  const long long now =
      std::stoll(std::string(t[0].text())) * 1000 + std::stoll(std::string(t[1].text())) / 1000;
  const std::string lease = std::to_string(now - 1000);
  const std::string expire = std::to_string(now + 3'600'000);
  const char* types[] = {"PAY", "REFUND", "SHIP"};
  std::vector<idem::Key> keys;
  for (int i = 0; i < 60; ++i) {
    keys.push_back(idem::Key{types[i % 3], "tie-" + std::to_string(i)});
    const auto k = idem_test::keys_of(s.store, keys.back());
    idem_test::raw({"HSET",        k.record, "status",     "processing",
                    "fence",       "1",      "owner",      "0123456789abcdef0123456789abcdef",
                    "fingerprint", "",       "snapshot",   "",
                    "retryable",   "0",      "attempts",   "1",
                    "created_at",  lease,    "updated_at", lease,
                    "lease_until", lease,    "expire_at",  expire});
    idem_test::raw({"ZADD", k.leases, lease, idem_test::member_of(keys.back())});
    idem_test::raw({"ZADD", k.expiry, expire, idem_test::member_of(keys.back())});
  }
  for (const std::size_t limit : {1u, 5u, 19u, 20u, 21u, 100u}) {
    const auto listed = s.store.list({.stale = true, .biz_type = "REFUND", .limit = limit});
    std::set<idem::Key> seen;
    for (const auto& r : listed) {
      CHECK(r.key.biz_type() == "REFUND");
      CHECK(seen.insert(r.key).second);
    }
    CHECK(listed.size() == std::min<std::size_t>(limit, 20));
  }
  CHECK(s.store.list({.stale = true, .limit = 60}).size() == 60);
}

TEST_CASE("list of stale or outcome_unknown records reads about what it lists, not the store") {
  // A server of the test's own, so that its command counts are this test's alone.
  idem_test::OwnRedis server("");
  auto pool =
      std::make_shared<idem::redis::Pool>(server.params(), idem::redis::PoolParams{.size = 16});
  idem::redis::Store store(pool, idem_test::fresh_params());
  constexpr int finished = 20'000;
  std::atomic<int> next{0};
  idem_test::run_threads(16, [&](int) {
    for (int i = next++; i < finished; i = next++) {
      const auto c = store.claim(idem::Key{"PAY", "done-" + std::to_string(i)}, "", {});
      store.complete(c.record.key, c.record.ticket, R"({"ok":true})");
    }
  });
  for (int i = 0; i < 10; ++i)
    store.claim(idem::Key{"PAY", "stale-" + std::to_string(i)}, "", {.lease = 50ms, .ttl = 1h});
  for (int i = 0; i < 5; ++i) {
    const auto c = store.claim(idem::Key{"PAY", "unknown-" + std::to_string(i)}, "", {});
    store.repair(
        c.record.key,
        {.action = idem::RepairAction::mark_unknown, .fence = 1, .reason = "test: unknown"});
  }
  std::this_thread::sleep_for(100ms);

  idem::redis::Connection admin(server.params());
  auto scripts_run = [&] {
    const std::string info(admin.command({"INFO", "commandstats"}).text());
    const auto at = info.find("cmdstat_evalsha:calls=");
    REQUIRE(at != std::string::npos);
    return std::stol(info.substr(at + 22));
  };
  auto measure = [&](const idem::RecordQuery& q, std::size_t expect) {
    const long before = scripts_run();
    const auto start = std::chrono::steady_clock::now();
    const auto listed = store.list(q);
    const auto took = std::chrono::steady_clock::now() - start;
    const long calls = scripts_run() - before;
    CHECK(listed.size() == expect);
    return std::pair{calls, std::chrono::duration_cast<std::chrono::milliseconds>(took).count()};
  };
  measure({.stale = true}, 10);  // the scripts are loaded once
  const auto [stale_calls, stale_ms] = measure({.stale = true}, 10);
  const auto [unknown_calls, unknown_ms] = measure({.status = idem::Status::outcome_unknown}, 5);
  const auto [walk_calls, walk_ms] = measure({.status = idem::Status::succeeded, .limit = 10}, 10);
  // One page script per bucket (1024), then one read per record listed.
  CHECK(stale_calls <= 1024 + 10 + 10);
  CHECK(unknown_calls <= 1024 + 5 + 5);
  CHECK(walk_calls >= finished);  // the walk reads every record
  WARN("redis list over " << finished + 15 << " records: stale " << stale_calls << " scripts, "
                          << stale_ms << " ms; outcome_unknown " << unknown_calls << " scripts, "
                          << unknown_ms << " ms; succeeded (a walk) " << walk_calls << " scripts, "
                          << walk_ms << " ms");
}

TEST_CASE("the coroutine store lists as the blocking one, across buckets and pages") {
  // The same run (RecordOps::ListRun) sent by a coroutine connection. One bucket: indexes of
  // hundreds of members, walked in several ZSCAN pages and paged in several ordered rounds; 20
  // buckets: a walk of 40 indexes, more cursors than one round trip takes.
  for (const std::uint32_t buckets : {1u, 20u}) {
    INFO(buckets << " buckets");
    net::io_context io;
    idem_test::RedisAsyncStore s(io.get_executor(), 1, {.buckets = buckets});
    const Population p = populate(s.blocking, 1500ms);
    const idem::RecordQuery queries[] = {
        {.stale = true, .limit = 10},
        {.stale = true, .limit = 1'000},
        {.stale = true, .biz_type = "PAY", .limit = 10},
        {.status = idem::Status::outcome_unknown, .limit = 3},
        {.status = idem::Status::succeeded, .limit = 17},
        {.status = idem::Status::failed, .biz_type = "SHIP"},
        {.limit = 1'000},
    };
    for (const idem::RecordQuery& q : queries) {
      check_listed(s.blocking, p, q, idem_test::run_on(io, s.store.list(q)));
    }
    CHECK_THROWS_AS(idem_test::run_on(io, s.store.list({.limit = 0})), idem::InvalidArgument);
  }
}
