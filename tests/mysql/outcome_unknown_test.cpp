// Status 3, outcome_unknown, on MariaDB: a record whose effect may or may not have happened is
// never purged, never taken over (not even past its expire_at), never released by
// release_stale, and leaves that state only by a repair.
#include <chrono>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "../support/mysql_server.hpp"

using namespace std::chrono_literals;
using idem::Repair;
using idem::RepairAction;
using idem_test::Table;

namespace {

// A claim marked outcome_unknown by a repair, as the resolver does it.
idem::Record mark_unknown(Table& t, const idem::Key& key) {
  const auto claim = t.store.claim(key, "fp", {.lease = 60s, .ttl = 1h});
  return t.store.repair(key, Repair{.action = RepairAction::mark_unknown,
                                    .fence = claim.record.ticket.fence,
                                    .reason = "the gateway timed out",
                                    .keep = 1ms});
}

// Moves a record's expire_at (and lease) into the past, as if its ttl ran out long ago.
void age(Table& t, const idem::Key& key) {
  t.pool->acquire()->execute(
      "UPDATE " + t.store.table() +
          " SET expire_at = UTC_TIMESTAMP(3) - INTERVAL 1 DAY, lease_until = UTC_TIMESTAMP(3) - "
          "INTERVAL 1 DAY WHERE idempotent_key = ? AND biz_type = ?",
      {key.id(), key.biz_type()});
}

}  // namespace

TEST_CASE("purge never deletes an outcome_unknown record, however long expired") {
  Table t;
  const idem::Key unknown{"PAY", "unknown"};
  const idem::Key done{"PAY", "done"};
  const idem::Key stale{"PAY", "stale"};
  mark_unknown(t, unknown);
  const auto c = t.store.claim(done, "fp", {.lease = 60s, .ttl = 1h});
  t.store.complete(done, c.record.ticket, R"({"ok":1})");
  t.store.claim(stale, "fp", {.lease = 60s, .ttl = 1h});
  for (const auto& k : {unknown, done, stale})
    age(t, k);

  CHECK(t.store.purge_expired(100, 10) == 2);  // the finished and the processing one
  CHECK_FALSE(t.store.find(done));
  CHECK_FALSE(t.store.find(stale));
  const auto kept = t.store.find(unknown);
  REQUIRE(kept);
  CHECK(kept->status == idem::Status::outcome_unknown);
  CHECK(t.store.purge_expired(100, 10) == 0);
  // The bound store's purge (the same statement, in a transaction) leaves it too.
  CHECK(idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& conn) {
          return t.store.bind(conn).purge_expired(100, 10);
        }) == 0);
  CHECK(t.count() == 1);
}

TEST_CASE("an outcome_unknown record is never taken over or released, only repaired") {
  Table t;
  const idem::Key key{"PAY", "unknown-claims"};
  const idem::Record marked = mark_unknown(t, key);
  CHECK(marked.status == idem::Status::outcome_unknown);
  CHECK(marked.repair_reason == "the gateway timed out");
  age(t, key);  // past expire_at and past its lease

  for (int i = 0; i < 3; ++i) {
    const auto claim = t.store.claim(key, "fp", {.lease = 60s, .ttl = 1h});
    CHECK(claim.verdict == idem::Verdict::outcome_unknown);
    CHECK(claim.record.ticket == marked.ticket);  // nothing written
  }
  // Another payload is still a conflict first, as for any record.
  CHECK(t.store.claim(key, "other", {}).verdict == idem::Verdict::conflict);
  const auto batch = idem::claim_batch(t.store, std::vector<idem::ClaimRequest>{{key, "fp"}}, {});
  CHECK(batch.at(0).verdict == idem::Verdict::outcome_unknown);
  int ran = 0;
  const auto out = idem::run_once(t.store, key, "fp", [&] { return ++ran; });
  CHECK(out.verdict() == idem::Verdict::outcome_unknown);
  CHECK(ran == 0);
  CHECK(t.store.release_stale(100) == 0);
  CHECK(t.store.list({.stale = true}).empty());
  const auto still = t.store.find(key);
  CHECK(still->status == idem::Status::outcome_unknown);
  CHECK(still->ticket == marked.ticket);

  // A repair settles it: released, the next claim runs, without after_crash.
  const auto released = t.store.repair(key, Repair{.action = RepairAction::release,
                                                   .fence = still->ticket.fence,
                                                   .reason = "the gateway has no charge"});
  CHECK(released.expire_at > released.updated_at);  // the repair's keep, never shortened
  const auto next = t.store.claim(key, "fp", {.lease = 60s, .ttl = 1h});
  CHECK(next.verdict == idem::Verdict::acquired);
  CHECK_FALSE(next.after_crash);
}

TEST_CASE("release_stale still frees only stale processing records") {
  Table t;
  const idem::Key stale{"PAY", "release-stale"};
  const idem::Key unknown{"PAY", "release-unknown"};
  t.store.claim(stale, "fp", {.lease = 50ms, .ttl = 1h});
  mark_unknown(t, unknown);
  std::this_thread::sleep_for(100ms);
  CHECK(t.store.release_stale(100) == 1);
  const auto released = t.store.find(stale);
  CHECK(released->status == idem::Status::failed);
  CHECK(released->retryable);
  CHECK(released->snapshot == idem::backend::released_snapshot);
  CHECK(t.store.find(unknown)->status == idem::Status::outcome_unknown);
}
