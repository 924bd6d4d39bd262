// list() on idem::sqlite: stale claims, outcome_unknown records, by biz_type, limit and order;
// the same answers as MemoryStore (backend/record_rules.hpp's matches() and listed_before()) after a
// random history; and the stale query on the (status, lease_until) index.
#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/sqlite_file.hpp"

using namespace std::chrono_literals;
using idem_test::TempDir;

namespace {

struct ListFixture {
  TempDir dir;
  idem::ManualClock clock;
  idem::sqlite::Store store{
      dir / "list.db", idem::sqlite::StoreParams{.clock = [this] { return clock.now(); },
                                                 .synchronous = idem::sqlite::Synchronous::normal}};
};

std::vector<std::string> ids(const std::vector<idem::Record>& records) {
  std::vector<std::string> out;
  for (const auto& r : records)
    out.push_back(r.key.biz_type() + "/" + r.key.id());
  return out;
}

using Ids = std::vector<std::string>;

idem::Record mark_unknown(idem::sqlite::Store& store, const idem::Key& key) {
  const auto c = store.claim(key, "", {});
  return store.repair(key, {.action = idem::RepairAction::mark_unknown,
                            .fence = c.record.ticket.fence,
                            .reason = "test: unknown"});
}

}  // namespace

TEST_CASE("list: stale claims by lease, outcome_unknown by last update, biz_type, limit, age") {
  ListFixture fx;
  auto& store = fx.store;
  const auto step = [&] { fx.clock.advance(10ms); };
  // Claimed first but with the longer lease: listed after the later, shorter one.
  store.claim(idem::Key{"PAY", "stale-long"}, "", {.lease = 3s, .ttl = 1h});
  step();
  store.claim(idem::Key{"REFUND", "stale-short"}, "", {.lease = 1s, .ttl = 1h});
  step();
  store.claim(idem::Key{"PAY", "stale-mid"}, "", {.lease = 2s, .ttl = 1h});
  step();
  store.claim(idem::Key{"PAY", "expired"}, "", {.lease = 1s, .ttl = 2s});  // not stale: expired
  step();
  store.claim(idem::Key{"PAY", "live"}, "", {.lease = 1h, .ttl = 2h});
  step();
  const auto u2 = mark_unknown(store, idem::Key{"REFUND", "unknown-2"});
  step();
  mark_unknown(store, idem::Key{"PAY", "unknown-1"});
  step();
  const auto d = store.claim(idem::Key{"PAY", "done"}, "", {});
  store.complete(d.record.key, d.record.ticket, "1");
  step();
  // unknown-2 is updated again (a second repair keeps it unknown): now the most recent.
  store.repair(u2.key, {.action = idem::RepairAction::mark_unknown,
                        .fence = u2.ticket.fence,
                        .reason = "still unknown"});
  fx.clock.advance(5s);

  CHECK(ids(store.list({.stale = true})) ==
        Ids{"REFUND/stale-short", "PAY/stale-mid", "PAY/stale-long"});
  CHECK(ids(store.list({.stale = true, .biz_type = "PAY"})) ==
        Ids{"PAY/stale-mid", "PAY/stale-long"});
  CHECK(ids(store.list({.stale = true, .limit = 2})) == Ids{"REFUND/stale-short", "PAY/stale-mid"});
  CHECK(ids(store.list({.status = idem::Status::outcome_unknown})) ==
        Ids{"PAY/unknown-1", "REFUND/unknown-2"});
  CHECK(ids(store.list({.status = idem::Status::outcome_unknown, .biz_type = "REFUND"})) ==
        Ids{"REFUND/unknown-2"});
  CHECK(ids(store.list({.status = idem::Status::outcome_unknown, .limit = 1})) ==
        Ids{"PAY/unknown-1"});
  // Not updated for 5,015 ms: unknown-1 (5,020 ago) is, unknown-2 (5,000 ago) is not.
  CHECK(ids(store.list({.status = idem::Status::outcome_unknown, .not_updated_for = 5015ms})) ==
        Ids{"PAY/unknown-1"});
  CHECK(ids(store.list({.status = idem::Status::outcome_unknown, .not_updated_for = 5020ms})) ==
        Ids{"PAY/unknown-1"});
  CHECK(store.list({.status = idem::Status::outcome_unknown, .not_updated_for = 5021ms}).empty());
  // A status alone does not look at expiry: the expired claim is still a processing record.
  CHECK(ids(store.list({.status = idem::Status::processing})) ==
        Ids{"PAY/stale-long", "REFUND/stale-short", "PAY/stale-mid", "PAY/expired", "PAY/live"});
  CHECK(ids(store.list({.status = idem::Status::succeeded})) == Ids{"PAY/done"});
  CHECK(store.list({.status = idem::Status::failed}).empty());
  CHECK(store.list({}).size() == 8);
  CHECK(ids(store.list({.biz_type = "REFUND"})) == Ids{"REFUND/stale-short", "REFUND/unknown-2"});
  CHECK(store.list({.limit = idem::max_list_limit}).size() == 8);
  CHECK_THROWS_AS(store.list({.limit = idem::max_list_limit + 1}), idem::InvalidArgument);
  CHECK_THROWS_AS(store.list({.biz_type = "bad type!"}), idem::InvalidArgument);

  // The records come back whole, as find() reads them.
  for (const auto& r : store.list({}))
    CHECK(store.find(r.key) == r);
}

TEST_CASE("list answers what MemoryStore answers after the same random history") {
  ListFixture fx;
  auto& sql = fx.store;
  idem::MemoryStore memory{[&] { return fx.clock.now(); }};
  std::mt19937 rng(26);
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const std::vector<std::string> types{"PAY", "REFUND", "ORDER"};
  std::map<idem::Key, idem::Ticket> sql_held, memory_held;
  int mismatches = 0;

  const auto history = [&](int ops) {
    for (int op = 0; op < ops; ++op) {
      // Every operation at its own millisecond and updating one record at most, so that no two
      // updates or leases tie.
      fx.clock.advance(idem::Duration{1 + pick(100)});
      const idem::Key key{types[static_cast<std::size_t>(pick(3))], "k" + std::to_string(pick(40))};
      switch (pick(8)) {
        case 0:
        case 1:
        case 2: {
          const idem::Options o{.lease = 1500ms, .ttl = idem::Duration{2'000 + pick(60'000)}};
          const auto a = sql.claim(key, "", o);
          const auto b = memory.claim(key, "", o);
          if (a.verdict != b.verdict || a.after_crash != b.after_crash) ++mismatches;
          if (a.verdict == idem::Verdict::acquired) sql_held[key] = a.record.ticket;
          if (b.verdict == idem::Verdict::acquired) memory_held[key] = b.record.ticket;
          break;
        }
        case 3:
        case 4: {
          if (!sql_held.count(key) || !memory_held.count(key)) break;
          const bool retryable = pick(2) == 0;
          const bool succeed = pick(2) == 0;
          int lost = 0;
          try {
            succeed ? sql.complete(key, sql_held[key], "1")
                    : sql.fail(key, sql_held[key], R"({"e":1})", retryable);
          } catch (const idem::LeaseLost&) {
            ++lost;
          }
          try {
            succeed ? memory.complete(key, memory_held[key], "1")
                    : memory.fail(key, memory_held[key], R"({"e":1})", retryable);
          } catch (const idem::LeaseLost&) {
            --lost;
          }
          if (lost != 0) ++mismatches;
          break;
        }
        case 5: {
          if (!sql_held.count(key) || !memory_held.count(key)) break;
          const std::string name = "s" + std::to_string(pick(4));
          int lost = 0;
          try {
            sql.record_step(key, sql_held[key], name, std::to_string(op));
          } catch (const idem::LeaseLost&) {
            ++lost;
          }
          try {
            memory.record_step(key, memory_held[key], name, std::to_string(op));
          } catch (const idem::LeaseLost&) {
            --lost;
          }
          if (lost != 0) ++mismatches;
          break;
        }
        case 6: {
          const auto a = sql.find(key);
          const auto b = memory.find(key);
          if (a.has_value() != b.has_value()) ++mismatches;
          if (!a || !b) break;
          const idem::Repair repair{.action = pick(2) == 0 ? idem::RepairAction::mark_unknown
                                                           : idem::RepairAction::release,
                                    .fence = a->ticket.fence,
                                    .reason = "random history",
                                    .keep = idem::Duration{1'000 + pick(10'000)}};
          sql.repair(key, repair);
          memory.repair(key, repair);
          break;
        }
        case 7:
          // (Not release_stale: it updates many records at one `now`, and records that tie may
          // be listed in any order.)
          if (pick(4) == 0 && sql.purge_expired(10'000, 1) != memory.purge_expired(10'000, 1)) {
            ++mismatches;
          }
          break;
      }
    }
  };
  // The same records in the same order, field for field (owner tokens are each store's own).
  const auto same = [](const std::vector<idem::Record>& a, const std::vector<idem::Record>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      idem::Record x = a[i], y = b[i];
      x.ticket.owner.clear();
      y.ticket.owner.clear();
      if (x != y) return false;
    }
    return true;
  };
  std::vector<idem::RecordQuery> queries;
  for (const std::string biz : {"", "PAY", "REFUND"}) {
    for (const std::size_t limit : {1u, 3u, 100u}) {
      queries.push_back({.stale = true, .biz_type = biz, .limit = limit});
      for (const auto s : {idem::Status::processing, idem::Status::succeeded, idem::Status::failed,
                           idem::Status::outcome_unknown}) {
        queries.push_back({.status = s, .biz_type = biz, .limit = limit});
        queries.push_back({.status = s, .biz_type = biz, .not_updated_for = 3s, .limit = limit});
      }
      queries.push_back({.biz_type = biz, .limit = limit});
    }
  }
  // Compared every so often along the history, and in every state at least once.
  std::size_t compared = 0, nonempty = 0;
  std::map<idem::Status, std::size_t> seen;
  std::size_t stale_seen = 0;
  const auto compare = [&] {
    for (const auto& q : queries) {
      const auto a = sql.list(q);
      const auto b = memory.list(q);
      INFO("stale " << q.stale << " status " << (q.status ? static_cast<int>(*q.status) : -1)
                    << " biz " << q.biz_type << " limit " << q.limit);
      CHECK(ids(a) == ids(b));
      CHECK(same(a, b));
      ++compared;
      nonempty += a.empty() ? 0 : 1;
    }
    for (const auto& r : sql.list({.limit = idem::max_list_limit}))
      ++seen[r.status];
    stale_seen += sql.list({.stale = true}).size();
  };

  for (int round = 0; round < 6; ++round) {
    history(250);
    compare();
  }
  CHECK(mismatches == 0);
  for (const auto s : {idem::Status::processing, idem::Status::succeeded, idem::Status::failed,
                       idem::Status::outcome_unknown}) {
    INFO("status " << static_cast<int>(s));
    CHECK(seen[s] > 0);
  }
  CHECK(stale_seen > 0);
  CHECK(nonempty > compared / 2);
}

TEST_CASE("list's stale query walks the (status, lease_until) index, in its order") {
  ListFixture fx;
  const auto table = idem::sqlite::parse_table_name("idempotent_record");
  const auto plan = [&](const idem::RecordQuery& q) {
    std::vector<idem::sqlite::Value> params;
    const std::string sql = idem::sqlite::detail::list_sql(table, q, fx.clock.now(), params);
    auto c = fx.store.pool().acquire();
    auto rows = c->query("EXPLAIN QUERY PLAN " + sql, params);
    std::string text;
    while (rows.next())
      text += rows.text(3) + "\n";
    return text;
  };
  for (const std::string biz : {"", "PAY"}) {
    const std::string stale = plan({.stale = true, .biz_type = biz});
    INFO(stale);
    CHECK_THAT(stale, Catch::Contains("idempotent_record_idx_stale"));
    CHECK_THAT(stale, !Catch::Contains("TEMP B-TREE"));  // the index gives the order
    const std::string unknown = plan({.status = idem::Status::outcome_unknown, .biz_type = biz});
    INFO(unknown);
    CHECK_THAT(unknown, Catch::Contains("idempotent_record_idx_stale"));
  }
}
