// outcome_unknown records on idem::redis::Store: the key has no time to live while the record
// is unknown (it outlives its expire_at and its PEXPIREAT time, is never taken over, never
// purged), a repair gives it an expiry again, the unknown index follows every change of
// status, and records written before these fields existed read as none.
#include <chrono>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include <idem/redis.hpp>

#include "../support/redis_server.hpp"
#include "raw.hpp"

using namespace std::chrono_literals;
using idem_test::ms_text;
using idem_test::raw;
using idem_test::RedisStore;

namespace {

idem::Repair mark_unknown(std::uint64_t fence, idem::Duration keep = idem::Duration{1}) {
  return idem::Repair{.action = idem::RepairAction::mark_unknown,
                      .fence = fence,
                      .snapshot = R"({"error":"gateway timed out"})",
                      .reason = "resolver: the gateway cannot tell",
                      .keep = keep};
}

}  // namespace

TEST_CASE(
    "an outcome_unknown record outlives its expiry in Redis, and a repair gives it one again") {
  RedisStore s(4, {.keep_expired = 1s});
  const idem::Key key{"PAY", "unknown-forever"};
  const auto keys = idem_test::keys_of(s.store, key);
  const std::string member = idem_test::member_of(key);
  const auto c = s.store.claim(key, "fp", idem::Options{.lease = 100ms, .ttl = 500ms});
  const auto pexpire_at = raw({"PEXPIRETIME", keys.record}).integer();
  CHECK(pexpire_at == c.record.expire_at.time_since_epoch().count() + 1000);

  // keep of 1 ms: the expire_at stays the claim's (a repair never shortens it).
  const idem::Record u = s.store.repair(key, mark_unknown(1));
  REQUIRE(u.status == idem::Status::outcome_unknown);
  CHECK(u.expire_at == c.record.expire_at);
  CHECK(raw({"PTTL", keys.record}).integer() == -1);  // no time to live at all
  CHECK(raw({"ZSCORE", keys.expiry, member}).is_nil());
  CHECK(raw({"ZSCORE", keys.leases, member}).is_nil());
  CHECK(raw({"ZSCORE", keys.unknown, member}).text() == ms_text(u.updated_at));

  // Past expire_at and past the time Redis would have deleted the key.
  const auto now_ms = [] {
    const auto t = raw({"TIME"});
    return std::stoll(std::string(t[0].text())) * 1000 +
           std::stoll(std::string(t[1].text())) / 1000;
  };
  while (now_ms() <= pexpire_at + 100)
    std::this_thread::sleep_for(50ms);
  CHECK(raw({"EXISTS", keys.record}).integer() == 1);
  CHECK(s.store.purge_expired(100, 10) == 0);
  CHECK(s.store.release_stale(100) == 0);
  const auto dup = s.store.claim(key, "fp", {});
  CHECK(dup.verdict == idem::Verdict::outcome_unknown);
  CHECK(dup.record == u);  // not taken over, not touched
  CHECK(s.store.find(key) == u);

  // Settled: succeeded, counted keep from now, and Redis expires the key again.
  const idem::Record w = s.store.repair(key, {.action = idem::RepairAction::complete,
                                              .fence = u.ticket.fence,
                                              .snapshot = R"({"charge":"ch_9"})",
                                              .reason = "operator: the bank statement shows it",
                                              .keep = 300ms});
  CHECK(w.status == idem::Status::succeeded);
  CHECK(w.expire_at >= u.expire_at);
  CHECK(w.expire_at == *w.repaired_at + 300ms);
  CHECK(raw({"PEXPIRETIME", keys.record}).integer() ==
        w.expire_at.time_since_epoch().count() + 1000);
  CHECK(raw({"ZSCORE", keys.expiry, member}).text() == ms_text(w.expire_at));
  CHECK(raw({"ZSCORE", keys.unknown, member}).is_nil());
  CHECK(s.store.claim(key, "fp", {}).verdict == idem::Verdict::replayed);
  while (now_ms() <= w.expire_at.time_since_epoch().count() + 1100)
    std::this_thread::sleep_for(50ms);
  CHECK(raw({"EXISTS", keys.record}).integer() == 0);  // gone by Redis itself, as any record
}

TEST_CASE("the unknown index holds exactly the outcome_unknown records, through every change") {
  RedisStore s(2, {.buckets = 1});
  const idem::Key key{"PAY", "unknown-index"};
  const auto keys = idem_test::keys_of(s.store, key);
  const std::string member = idem_test::member_of(key);
  auto in_unknown = [&] { return !raw({"ZSCORE", keys.unknown, member}).is_nil(); };
  auto in_expiry = [&] { return !raw({"ZSCORE", keys.expiry, member}).is_nil(); };
  auto ttl = [&] { return raw({"PTTL", keys.record}).integer(); };

  const auto c = s.store.claim(key, "fp", idem::Options{.lease = 30s, .ttl = 1h});
  CHECK_FALSE(in_unknown());
  auto r = s.store.repair(key, mark_unknown(c.record.ticket.fence));
  CHECK(in_unknown());
  CHECK_FALSE(in_expiry());
  CHECK(ttl() == -1);
  // Marked again later: scored by the new updated_at.
  std::this_thread::sleep_for(5ms);
  r = s.store.repair(key, mark_unknown(r.ticket.fence));
  CHECK(raw({"ZSCORE", keys.unknown, member}).text() == ms_text(r.updated_at));
  // Released: the next duplicate runs again, and the record expires as any other.
  r = s.store.repair(key, {.action = idem::RepairAction::release,
                           .fence = r.ticket.fence,
                           .reason = "operator: not charged"});
  CHECK_FALSE(in_unknown());
  CHECK(in_expiry());
  CHECK(ttl() > 0);
  const auto retry = s.store.claim(key, "fp", idem::Options{.lease = 30s, .ttl = 1h});
  REQUIRE(retry.verdict == idem::Verdict::acquired);
  CHECK_FALSE(retry.after_crash);  // a released record is a retry, not a crash
  r = s.store.repair(key, mark_unknown(retry.record.ticket.fence));
  CHECK(in_unknown());
  r = s.store.repair(key, {.action = idem::RepairAction::fail,
                           .fence = r.ticket.fence,
                           .reason = "operator: refunded"});
  CHECK_FALSE(in_unknown());
  CHECK(in_expiry());
  CHECK(ttl() > 0);
  CHECK(raw({"ZCARD", keys.unknown}).integer() == 0);
}

TEST_CASE("a record written before recovery points and repairs existed reads as none of them") {
  RedisStore s(2, {.buckets = 1});
  const idem::Key key{"PAY", "old-record"};
  const auto keys = idem_test::keys_of(s.store, key);
  const std::string member = idem_test::member_of(key);
  // The record as the earlier layout wrote it: eleven fields, a stale claim.
  const auto now = raw({"TIME"});
  const long long ms =
      std::stoll(std::string(now[0].text())) * 1000 + std::stoll(std::string(now[1].text())) / 1000;
  const std::string created = std::to_string(ms - 60'000);
  const std::string lease = std::to_string(ms - 30'000);
  const std::string expire = std::to_string(ms + 3'600'000);
  raw({"HSET",        keys.record, "status",     "processing",
       "fence",       "3",         "owner",      "0123456789abcdef0123456789abcdef",
       "fingerprint", "fp",        "snapshot",   "",
       "retryable",   "0",         "attempts",   "3",
       "created_at",  created,     "updated_at", created,
       "lease_until", lease,       "expire_at",  expire});
  raw({"ZADD", keys.leases, lease, member});
  raw({"ZADD", keys.expiry, expire, member});

  const auto old = s.store.find(key);
  REQUIRE(old);
  CHECK(old->recovery_points.empty());
  CHECK(old->repair_reason.empty());
  CHECK_FALSE(old->repaired_at);
  const auto listed = s.store.list({.stale = true});
  REQUIRE(listed.size() == 1);
  CHECK(listed.front() == *old);

  const auto next = s.store.claim(key, "fp", {});
  REQUIRE(next.verdict == idem::Verdict::acquired);
  CHECK(next.after_crash);
  CHECK(next.record.ticket.fence == 4);
  CHECK(next.record.recovery_points.empty());
  CHECK(s.store.record_step(key, next.record.ticket, "reserve", "1") == R"({"reserve":1})");
  // Empty optional fields are not written: the hash holds what the record has.
  CHECK(raw({"HEXISTS", keys.record, "repair_reason"}).integer() == 0);
  CHECK(raw({"HEXISTS", keys.record, "repaired_at"}).integer() == 0);
  CHECK(raw({"HGET", keys.record, "recovery_points"}).text() == R"({"reserve":1})");
}
