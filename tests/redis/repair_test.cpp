// Fenced repairs on idem::redis::Store: what one writes (the hash, the indexes, the key's
// expiry), what is refused and left alone, 16 threads on 16 connections racing to repair the
// same fence, and a repair whose reply was lost recognising its own write.
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <idem/redis.hpp>

#include "../support/redis_server.hpp"
#include "../support/threads.hpp"
#include "raw.hpp"

using namespace std::chrono_literals;
using idem_test::ms_text;
using idem_test::raw;
using idem_test::RedisStore;

namespace {

// A claim whose worker "died": its lease has run out by the time this returns.
idem::Record stale_claim(idem::redis::Store& store, const idem::Key& key) {
  const auto c = store.claim(key, "fp", idem::Options{.lease = 100ms, .ttl = 1h});
  REQUIRE(c.verdict == idem::Verdict::acquired);
  std::this_thread::sleep_for(150ms);
  return c.record;
}

}  // namespace

TEST_CASE("a repair writes what repaired() computes, and the next duplicate replays it") {
  RedisStore s(4, {.keep_expired = 2s});
  const idem::Key key{"PAY", "repair-applied"};
  const idem::Record crashed = stale_claim(s.store, key);
  const auto keys = idem_test::keys_of(s.store, key);
  const std::string member = idem_test::member_of(key);
  REQUIRE_FALSE(raw({"ZSCORE", keys.leases, member}).is_nil());

  const idem::Record w =
      s.store.repair(key, idem::Repair{.action = idem::RepairAction::complete,
                                       .fence = crashed.ticket.fence,
                                       .snapshot = R"({"charge":"ch_1"})",
                                       .reason = "the gateway says ch_1 was captured",
                                       .keep = 1h});
  CHECK(w.status == idem::Status::succeeded);
  CHECK(w.snapshot == R"({"charge":"ch_1"})");
  CHECK(w.ticket.fence == crashed.ticket.fence + 1);
  CHECK(w.ticket.owner != crashed.ticket.owner);
  CHECK(w.repair_reason == "the gateway says ch_1 was captured");
  REQUIRE(w.repaired_at);
  CHECK(*w.repaired_at == w.updated_at);
  CHECK(w.expire_at >= crashed.expire_at);
  CHECK(w.attempts == crashed.attempts);
  CHECK(s.store.find(key) == w);  // what it answered is what it stored

  // The hash, the indexes and the key's time to live follow the repaired record.
  CHECK(raw({"HGET", keys.record, "repair_reason"}).text() == w.repair_reason);
  CHECK(raw({"HGET", keys.record, "repaired_at"}).text() == ms_text(*w.repaired_at));
  CHECK(raw({"HGET", keys.record, "status"}).text() == "succeeded");
  CHECK(raw({"ZSCORE", keys.leases, member}).is_nil());
  CHECK(raw({"ZSCORE", keys.expiry, member}).text() == ms_text(w.expire_at));
  CHECK(raw({"ZSCORE", keys.unknown, member}).is_nil());
  CHECK(raw({"PEXPIRETIME", keys.record}).integer() ==
        w.expire_at.time_since_epoch().count() + 2000);

  // The crashed worker's late result no longer holds; a duplicate replays the repair's answer.
  CHECK_THROWS_AS(s.store.complete(key, crashed.ticket, "{}"), idem::LeaseLost);
  const auto dup = s.store.claim(key, "fp", {});
  CHECK(dup.verdict == idem::Verdict::replayed);
  CHECK(dup.record.snapshot == R"({"charge":"ch_1"})");
}

TEST_CASE("a repair of a moved fence or of no record is refused, and writes nothing") {
  RedisStore s;
  const idem::Key key{"PAY", "repair-refused"};
  const idem::Repair release{.action = idem::RepairAction::release,
                             .fence = 1,
                             .reason = "operator: the charge never left"};

  // No record: refused without current, and no key is created.
  try {
    s.store.repair(key, release);
    FAIL("a repair of no record was applied");
  } catch (const idem::RepairRefused& e) {
    CHECK_FALSE(e.current());
  }
  CHECK(raw({"EXISTS", idem_test::record_key(s.store, key)}).integer() == 0);
  CHECK_FALSE(s.store.find(key));

  // The fence read has moved on (a takeover): refused with the record as it is now.
  const idem::Record first = stale_claim(s.store, key);
  const auto second = s.store.claim(key, "fp", {});
  REQUIRE(second.verdict == idem::Verdict::acquired);
  REQUIRE(second.record.ticket.fence == first.ticket.fence + 1);
  const auto before = s.store.find(key);
  try {
    s.store.repair(key, release);
    FAIL("a repair of a moved fence was applied");
  } catch (const idem::RepairRefused& e) {
    REQUIRE(e.current());
    CHECK(*e.current() == *before);
  }
  CHECK(s.store.find(key) == before);

  // A repair applied moves the fence on too: repairing the same fence again is refused.
  s.store.repair(key, {.action = idem::RepairAction::fail,
                       .fence = second.record.ticket.fence,
                       .reason = "operator: refunded by hand"});
  CHECK_THROWS_AS(s.store.repair(key, {.action = idem::RepairAction::release,
                                       .fence = second.record.ticket.fence,
                                       .reason = "a second look"}),
                  idem::RepairRefused);
  // A bad repair is InvalidArgument, before anything is read.
  CHECK_THROWS_AS(s.store.repair(key, {.fence = 3, .reason = ""}), idem::InvalidArgument);
  CHECK_THROWS_AS(
      s.store.repair(
          key, {.action = idem::RepairAction::complete, .fence = 3, .reason = "no response given"}),
      idem::InvalidArgument);
}

TEST_CASE("16 threads on 16 connections race to repair one fence: exactly one wins, per key") {
  constexpr int threads = 16;
  constexpr int keys = 30;
  RedisStore s(threads);
  const idem::RepairAction actions[] = {idem::RepairAction::complete, idem::RepairAction::fail,
                                        idem::RepairAction::release,
                                        idem::RepairAction::mark_unknown};
  int wins_total = 0;
  int refused_total = 0;
  for (int k = 0; k < keys; ++k) {
    const idem::Key key{"PAY", "race-" + std::to_string(k)};
    const auto c = s.store.claim(key, "fp", idem::Options{.lease = 30s, .ttl = 1h});
    std::vector<std::optional<idem::Record>> won(threads);
    std::vector<std::optional<idem::Record>> refused_with(threads);
    idem_test::Errors errors;
    idem_test::run_threads(threads, [&](int t) {
      const idem::RepairAction action = actions[t % 4];
      try {
        won[static_cast<std::size_t>(t)] = s.store.repair(
            key, idem::Repair{.action = action,
                              .fence = c.record.ticket.fence,
                              .snapshot = action == idem::RepairAction::complete ? "{\"t\":1}" : "",
                              .reason = "racer " + std::to_string(t)});
      } catch (const idem::RepairRefused& e) {
        refused_with[static_cast<std::size_t>(t)] = e.current();
      } catch (const std::exception& e) {
        errors.add(e.what());
      }
    });
    INFO("key " << k << ", first error: " << errors.first());
    REQUIRE(errors.size() == 0);
    int wins = 0;
    std::optional<idem::Record> winner;
    for (const auto& w : won) {
      if (w) {
        ++wins;
        winner = w;
      }
    }
    REQUIRE(wins == 1);
    const auto stored = s.store.find(key);
    CHECK(stored == winner);
    for (const auto& r : refused_with) {
      if (!r) continue;
      ++refused_total;
      CHECK(r->ticket.fence == c.record.ticket.fence + 1);  // refused on the winner's write
      CHECK(r->ticket.owner == winner->ticket.owner);
    }
    wins_total += wins;
  }
  CHECK(wins_total == keys);
  CHECK(refused_total == keys * (threads - 1));
}

TEST_CASE("a repair whose reply was lost finds its own write by its owner token") {
  // What the store's retry does after a lost reply, step by step: the same call (same owner
  // token) reads again and finds the record it wrote, whose fence is no longer the one read.
  RedisStore s;
  const idem::Key key{"PAY", "repair-lost-reply"};
  const idem::Record crashed = stale_claim(s.store, key);
  const idem::Repair repair{.action = idem::RepairAction::release,
                            .fence = crashed.ticket.fence,
                            .reason = "resolver: not charged"};
  const std::string token = "repairer-token-00000000000000001";
  auto c = s.pool->acquire();
  const idem::Record written =
      idem::backend::repair_on("test", s.store.ops(), *c, key, repair, token, false);
  CHECK(written.ticket.owner == token);
  // The reply "was lost": the retry of the same call answers the write, not RepairRefused.
  const idem::Record again =
      idem::backend::repair_on("test", s.store.ops(), *c, key, repair, token, false);
  CHECK(again == written);
  // Another call (another token) on the same fence is refused.
  CHECK_THROWS_AS(idem::backend::repair_on("test", s.store.ops(), *c, key, repair,
                                           "another-token-000000000000000000", false),
                  idem::RepairRefused);
}

TEST_CASE("a retry takeover keeps the last repair and the steps, an expired takeover clears them") {
  RedisStore s;
  const idem::Key key{"PAY", "repair-then-takeover"};
  const auto keys = idem_test::keys_of(s.store, key);
  const auto c = s.store.claim(key, "fp", idem::Options{.lease = 100ms, .ttl = 400ms});
  s.store.record_step(key, c.record.ticket, "reserve", "1");
  std::this_thread::sleep_for(150ms);
  const idem::Record released = s.store.repair(key, {.action = idem::RepairAction::release,
                                                     .fence = c.record.ticket.fence,
                                                     .reason = "resolver: not charged",
                                                     .keep = 1ms});
  CHECK(released.expire_at == c.record.expire_at);  // never shortened, not lengthened here

  // The next duplicate runs again (a retry, not a crash) with the repair and the steps kept.
  const auto retry = s.store.claim(key, "fp", idem::Options{.lease = 100ms, .ttl = 400ms});
  REQUIRE(retry.verdict == idem::Verdict::acquired);
  CHECK_FALSE(retry.after_crash);
  CHECK(retry.record.repair_reason == "resolver: not charged");
  CHECK(retry.record.repaired_at == released.repaired_at);
  CHECK(retry.record.recovery_points == R"({"reserve":1})");
  CHECK(s.store.find(key) == retry.record);
  s.store.fail(key, retry.record.ticket, "{}", false);

  // Expired: the next claim is a brand-new request, and the hash loses the old fields.
  std::this_thread::sleep_for(450ms);
  const auto fresh = s.store.claim(key, "fp", {});
  REQUIRE(fresh.verdict == idem::Verdict::acquired);
  CHECK_FALSE(fresh.after_crash);
  CHECK(fresh.record.attempts == 1);
  CHECK(s.store.find(key) == fresh.record);
  CHECK(fresh.record.repair_reason.empty());
  CHECK_FALSE(fresh.record.repaired_at);
  CHECK(fresh.record.recovery_points.empty());
  for (const char* field : {"recovery_points", "repair_reason", "repaired_at"}) {
    CHECK(raw({"HEXISTS", keys.record, field}).integer() == 0);
  }
}
