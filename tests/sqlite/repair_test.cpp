// Fenced repairs and the outcome_unknown state on idem::sqlite: what a repair writes, when it is
// refused, two threads repairing one fence, a repair in the caller's transaction, the decoding
// of the new columns (and of corrupt ones), and an outcome_unknown record that neither expires,
// nor is purged, nor is taken over.
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/sqlite_file.hpp"

using namespace std::chrono_literals;
using idem_test::ms;
using idem_test::TempDir;

namespace {

struct RepairFixture {
  TempDir dir;
  idem::ManualClock clock;
  idem::sqlite::Store store{dir / "repair.db",
                            idem::sqlite::StoreParams{.clock = [this] { return clock.now(); }}};
};

// The row's columns as SQL sees them, to check what was written rather than what was decoded.
struct Row {
  std::int64_t status = -1, fence = -1, updated_at = -1, expire_at = -1;
  std::optional<std::string> snapshot, reason;
  std::optional<std::int64_t> repaired_at;
};

Row row_of(idem::sqlite::Store& store, const idem::Key& key) {
  auto c = store.pool().acquire();
  auto rows = c->query(
      "SELECT status, fence, updated_at, expire_at, response_snapshot, "
      "repair_reason, repaired_at FROM " +
          store.table() + " WHERE idempotent_key = ? AND biz_type = ?",
      {key.id(), key.biz_type()});
  if (!rows.next()) throw std::runtime_error("no row for " + key.id());
  Row r{rows.integer(0), rows.integer(1), rows.integer(2), rows.integer(3), {}, {}, {}};
  if (!rows.is_null(4)) r.snapshot = rows.text(4);
  if (!rows.is_null(5)) r.reason = rows.text(5);
  if (!rows.is_null(6)) r.repaired_at = rows.integer(6);
  return r;
}

}  // namespace

TEST_CASE("a repair writes its columns: status, fence, owner, snapshot, reason and time") {
  RepairFixture fx;
  auto& store = fx.store;
  const idem::Key key{"PAY", "repair-columns"};
  const auto c = store.claim(key, "", {.ttl = 1h});
  fx.clock.advance(5s);
  const auto repaired = store.repair(key, {.action = idem::RepairAction::fail,
                                           .fence = c.record.ticket.fence,
                                           .snapshot = R"({"error":"card_declined"})",
                                           .retryable = true,
                                           .reason = "bank says declined: 拒付",
                                           .keep = 48h});
  CHECK(repaired.status == idem::Status::failed);
  CHECK(repaired.retryable);
  CHECK(repaired.ticket.fence == 2);
  CHECK(repaired.ticket.owner != c.record.ticket.owner);
  CHECK(repaired.attempts == 1);
  CHECK(repaired.lease_until == c.record.lease_until);
  CHECK(store.find(key) == repaired);

  const Row row = row_of(store, key);
  const std::int64_t now = ms(fx.clock.now());
  CHECK(row.status == 2);
  CHECK(row.fence == 2);
  CHECK(row.snapshot == std::optional<std::string>(R"({"error":"card_declined"})"));
  CHECK(row.reason == std::optional<std::string>("bank says declined: 拒付"));
  CHECK(row.repaired_at == std::optional<std::int64_t>(now));
  CHECK(row.updated_at == now);
  CHECK(row.expire_at == now + 48 * 3'600'000);  // keep outlasts the claim's ttl: pushed out

  // mark_unknown without a snapshot stores the note; status 3 in SQL.
  const auto unknown = store.repair(key, {.action = idem::RepairAction::mark_unknown,
                                          .fence = repaired.ticket.fence,
                                          .reason = "second look: the bank is unsure",
                                          .keep = 1h});
  const Row marked = row_of(store, key);
  CHECK(marked.status == 3);
  CHECK(marked.snapshot == std::optional<std::string>(idem::backend::repair_unknown_snapshot));
  CHECK(marked.expire_at == now + 48 * 3'600'000);  // never shortened
  CHECK(store.find(key) == unknown);
}

TEST_CASE("a repair is refused with the record as it is now, or without one when there is none") {
  RepairFixture fx;
  auto& store = fx.store;
  const idem::Key key{"PAY", "repair-refused"};
  const auto c = store.claim(key, "", {});
  store.complete(key, c.record.ticket, R"("paid")");
  const auto done = store.find(key);
  REQUIRE(done.has_value());

  try {
    store.repair(key, {.action = idem::RepairAction::release, .fence = 7, .reason = "wrong fence"});
    FAIL("a repair at the wrong fence was applied");
  } catch (const idem::RepairRefused& e) {
    REQUIRE(e.current().has_value());
    CHECK(*e.current() == *done);
    CHECK_THAT(e.what(), Catch::Contains("fence 7") && Catch::Contains("repair-refused"));
  }
  CHECK(store.find(key) == done);

  try {
    store.repair(idem::Key{"PAY", "no-such-record"},
                 {.action = idem::RepairAction::release, .fence = 1, .reason = "gone"});
    FAIL("a repair of a missing record was applied");
  } catch (const idem::RepairRefused& e) {
    CHECK_FALSE(e.current().has_value());
    CHECK_THAT(e.what(), Catch::Contains("there is no record"));
  }
  CHECK(idem_test::count(store) == 1);
}

TEST_CASE("two threads repair the same fence, 200 times - exactly one wins each time") {
  RepairFixture fx;
  auto& store = fx.store;
  constexpr int rounds = 200;
  std::vector<idem::Record> claimed;
  for (int i = 0; i < rounds; ++i) {
    claimed.push_back(store.claim(idem::Key{"PAY", "race-" + std::to_string(i)}, "", {}).record);
  }
  std::atomic<int> applied{0}, refused{0}, wrong{0};
  std::vector<std::optional<idem::Record>> won(rounds);
  idem_test::Errors errors;
  std::atomic<int> turn[rounds] = {};
  idem_test::run_threads(2, [&](int t) {
    for (int i = 0; i < rounds; ++i) {
      // Both threads start each round together.
      ++turn[i];
      while (turn[i].load() < 2)
        std::this_thread::yield();
      const auto& c = claimed[static_cast<std::size_t>(i)];
      try {
        auto r = store.repair(
            c.key, {.action = t == 0 ? idem::RepairAction::complete : idem::RepairAction::release,
                    .fence = c.ticket.fence,
                    .snapshot = t == 0 ? R"("by 0")" : "",
                    .reason = "thread " + std::to_string(t)});
        won[static_cast<std::size_t>(i)] = std::move(r);
        ++applied;
      } catch (const idem::RepairRefused& e) {
        ++refused;
        // The loser sees the winner's repair (fence + 1), never the claim it read.
        if (!e.current() || e.current()->ticket.fence != c.ticket.fence + 1) ++wrong;
      } catch (const std::exception& e) {
        errors.add(e.what());
      }
    }
  });
  INFO("first error: " << errors.first());
  CHECK(errors.size() == 0);
  CHECK(applied == rounds);
  CHECK(refused == rounds);
  CHECK(wrong == 0);
  for (int i = 0; i < rounds; ++i) {
    const auto& w = won[static_cast<std::size_t>(i)];
    REQUIRE(w.has_value());
    CHECK(store.find(w->key) == *w);
  }
}

TEST_CASE("a bound store repairs in the caller's transaction - rolled back with it, or committed") {
  RepairFixture fx;
  auto& store = fx.store;
  const idem::Key key{"PAY", "repair-bound"};
  const auto c = store.claim(key, "", {});
  const idem::Repair repair{.action = idem::RepairAction::complete,
                            .fence = c.record.ticket.fence,
                            .snapshot = R"({"charge":"ch_1"})",
                            .reason = "found in the ledger"};
  CHECK_THROWS_AS(idem::sqlite::with_transaction(store.pool(),
                                                 [&](idem::sqlite::Connection& conn) {
                                                   auto tx = store.bind(conn);
                                                   tx.repair(key, repair);
                                                   throw std::runtime_error("changed my mind");
                                                 }),
                  std::runtime_error);
  CHECK(store.find(key)->status == idem::Status::processing);
  CHECK(store.find(key)->ticket == c.record.ticket);

  const auto written =
      idem::sqlite::with_transaction(store.pool(), [&](idem::sqlite::Connection& conn) {
        auto tx = store.bind(conn);
        return tx.repair(key, repair);
      });
  CHECK(written.status == idem::Status::succeeded);
  CHECK(store.find(key) == written);
  // The same fence again, bound: refused.
  CHECK_THROWS_AS(idem::sqlite::with_transaction(store.pool(),
                                                 [&](idem::sqlite::Connection& conn) {
                                                   auto tx = store.bind(conn);
                                                   return tx.repair(key, repair);
                                                 }),
                  idem::RepairRefused);
}

TEST_CASE("decoding: status 3 and the new columns, and a corrupt value names its column") {
  RepairFixture fx;
  auto& store = fx.store;
  const idem::Key key{"PAY", "decode"};
  const auto c = store.claim(key, "", {});
  auto conn = store.pool().acquire();
  const auto set = [&](const std::string& assignment) {
    conn->execute(
        "UPDATE " + store.table() + " SET " + assignment + " WHERE idempotent_key = 'decode'", {});
  };
  set("status = 3, recovery_points = CAST('{\"a\":1}' AS BLOB), repair_reason = 'why', "
      "repaired_at = 1700000000123");
  auto r = store.find(key);
  REQUIRE(r.has_value());
  CHECK(r->status == idem::Status::outcome_unknown);
  CHECK(r->recovery_points == R"({"a":1})");
  CHECK(r->repair_reason == "why");
  CHECK(r->repaired_at == std::optional<idem::TimePoint>(idem::TimePoint{1700000000123ms}));
  set("recovery_points = '{\"b\":2}'");  // written as TEXT by hand: read the same
  CHECK(store.find(key)->recovery_points == R"({"b":2})");
  set("recovery_points = NULL, repair_reason = NULL, repaired_at = NULL");
  r = store.find(key);
  CHECK(r->recovery_points.empty());
  CHECK(r->repair_reason.empty());
  CHECK_FALSE(r->repaired_at.has_value());

  const std::vector<std::pair<std::string, std::string>> corrupt{
      {"status = 4", "status"},
      {"status = -1", "status"},
      {"status = 'x'", "status"},
      {"recovery_points = 42", "recovery_points"},
      {"recovery_points = '[1,2]'", "recovery_points"},
      {"recovery_points = 'not json'", "recovery_points"},
      {"repaired_at = 'yesterday'", "repaired_at"},
      {"repaired_at = 1.5", "repaired_at"},
      // (repair_reason has TEXT affinity: SQLite stores any number written there as text.)
  };
  for (const auto& [assignment, column] : corrupt) {
    set("status = 0, recovery_points = NULL, repair_reason = NULL, repaired_at = NULL");
    set(assignment);
    INFO(assignment);
    CHECK_THROWS_MATCHES(store.find(key), idem::CorruptRecord,
                         Catch::Matchers::Predicate<idem::CorruptRecord>(
                             [&](const idem::CorruptRecord& e) {
                               return std::string(e.what()).find(column) != std::string::npos;
                             },
                             "names the column"));
  }
  (void)c;
}

TEST_CASE("outcome_unknown past its expire_at - never purged, never taken over, never released") {
  RepairFixture fx;
  auto& store = fx.store;
  const idem::Options short_life{.lease = 1s, .ttl = 2s};
  const idem::Key unknown_key{"PAY", "unknown"};
  const auto c = store.claim(unknown_key, "", short_life);
  store.repair(unknown_key, {.action = idem::RepairAction::mark_unknown,
                             .fence = c.record.ticket.fence,
                             .reason = "gateway timed out",
                             .keep = 2s});
  // Beside it: an expired success (purged), and a stale claim (released).
  const auto d = store.claim(idem::Key{"PAY", "done"}, "", short_life);
  store.complete(d.record.key, d.record.ticket, "1");
  fx.clock.advance(1h);
  store.claim(idem::Key{"PAY", "stale"}, "", {.lease = 1s, .ttl = 2h});
  fx.clock.advance(5s);

  const std::int64_t now = ms(fx.clock.now());
  CHECK(idem_test::count(store, "status = 3 AND expire_at <= " + std::to_string(now)) == 1);
  CHECK(store.release_stale(100) == 1);
  CHECK(store.purge_expired(100, 10) == 1);
  CHECK(idem_test::count(store) == 2);
  CHECK(store.find(idem::Key{"PAY", "stale"})->status == idem::Status::failed);
  CHECK(store.find(unknown_key)->status == idem::Status::outcome_unknown);

  // Eight threads claim it: none acquires, nothing runs.
  std::atomic<int> runs{0}, unknown{0};
  idem_test::Errors errors;
  idem_test::run_threads(8, [&](int) {
    try {
      const auto out = idem::run_once(store, unknown_key, "", [&] {
        ++runs;
        return 1;
      });
      if (out.verdict() == idem::Verdict::outcome_unknown) ++unknown;
    } catch (const std::exception& e) {
      errors.add(e.what());
    }
  });
  INFO("first error: " << errors.first());
  CHECK(errors.size() == 0);
  CHECK(runs == 0);
  CHECK(unknown == 8);
  const auto kept = store.find(unknown_key);
  REQUIRE(kept.has_value());
  CHECK(kept->status == idem::Status::outcome_unknown);
  CHECK(kept->ticket.fence == 2);
  CHECK(kept->attempts == 1);
  // And purging in every batch size leaves it.
  for (std::size_t batch : {1u, 2u, 1000u})
    CHECK(store.purge_expired(batch, 100) == 0);
  CHECK(idem_test::count(store, "status = 3") == 1);
}
