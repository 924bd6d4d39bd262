#pragma once
// The store conformance suite: the decision table and the Store contract as Catch2 test cases,
// written once and run on every backend - MemoryStore, the SQL stores, and yours.
//
// Usage, in one test source file of your own:
//
//   struct MyFixture {                       // a fresh, empty store per test case
//     MyStore& store();
//     void advance(idem::Duration d);        // move the store's clock forward by at least d
//   };                                       // (a ManualClock, or a real sleep for SQL stores)
//   #define IDEM_CONFORMANCE_FIXTURES std::tuple<MyFixture>
//   #include <idem/testing/conformance.hpp>
//
// Works with Catch2 2.x (<catch2/catch.hpp>) and 3.x. Test names start with "conformance: ".
// The cases of an optional operation (repair, list, record_step: idem/optional_operations.hpp) run
// on stores that have it and say so with a warning on stores that do not.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#else
#include <catch2/catch.hpp>
#endif

#include <nlohmann/json.hpp>

#include "idem/attempt.hpp"
#include "idem/errors.hpp"
#include "idem/fingerprint.hpp"
#include "idem/guard.hpp"
#include "idem/key.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/permanent_failure.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/record_stats.hpp"
#include "idem/repair.hpp"
#include "idem/resolver.hpp"
#include "idem/run_once.hpp"
#include "idem/store.hpp"
#include "idem/verdict.hpp"

#ifndef IDEM_CONFORMANCE_FIXTURES
#error \
    "define IDEM_CONFORMANCE_FIXTURES as a std::tuple of store fixtures before including idem/testing/conformance.hpp"
#endif

namespace idem::testing {

template <class F>
concept StoreFixture = requires(F& f, Duration d) {
  requires Store<std::remove_cvref_t<decltype(f.store())>>;
  f.advance(d);
};

// Timings used by the cases that need a lease or a ttl to run out. Short enough for SQL
// fixtures that sleep, long enough that nothing expires while a case is still asserting.
inline constexpr Duration short_lease{400};
inline constexpr Duration short_ttl{900};
inline constexpr Options long_options{};  // 30 s lease, 7 days ttl

inline Options short_lease_options() {
  return Options{.lease = short_lease, .ttl = std::chrono::hours{1}};
}
inline Options short_ttl_options() {
  return Options{.lease = short_lease, .ttl = short_ttl};
}

inline const std::string fp_a = fingerprint(nlohmann::json{{"amount", 299}, {"currency", "CNY"}});
inline const std::string fp_b = fingerprint(nlohmann::json{{"amount", 599}, {"currency", "CNY"}});

// The store type of a fixture.
template <class F>
using store_of = std::remove_cvref_t<decltype(std::declval<F&>().store())>;

// A record put in outcome_unknown the way the resolver does it: a claim whose worker "died",
// marked by a fenced repair.
template <class S>
Record unknown_record(S& store, const Key& key) {
  const auto c = store.claim(key, fp_a, long_options);
  return store.repair(key, Repair{.action = RepairAction::mark_unknown,
                                  .fence = c.record.ticket.fence,
                                  .snapshot = R"({"error":"gateway unreachable"})",
                                  .reason = "conformance: the outcome is unknown"});
}

// Catch2's macros cannot take a type list with a comma in it; an alias can.
using conformance_fixtures = IDEM_CONFORMANCE_FIXTURES;

}  // namespace idem::testing

TEMPLATE_LIST_TEST_CASE("conformance: the first claim acquires a fresh processing record",
                        "[conformance]", idem::testing::conformance_fixtures) {
  static_assert(idem::testing::StoreFixture<TestType>);
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key key{"PAY", "trade-0001"};

  REQUIRE_FALSE(store.find(key).has_value());
  const idem::ClaimResult c = store.claim(key, fp_a, long_options);
  REQUIRE(c.verdict == idem::Verdict::acquired);
  CHECK(c.record.key == key);
  CHECK(c.record.status == idem::Status::processing);
  CHECK(c.record.ticket.fence == 1);
  CHECK(c.record.ticket.owner.size() >= 16);
  CHECK(c.record.fingerprint == fp_a);
  CHECK(c.record.attempts == 1);
  CHECK(c.record.lease_until - c.record.created_at == long_options.lease);
  CHECK(c.record.expire_at - c.record.created_at == long_options.ttl);

  const auto found = store.find(key);
  REQUIRE(found.has_value());
  CHECK(*found == c.record);
}

TEMPLATE_LIST_TEST_CASE("conformance: a duplicate of a success replays the first response",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key key{"PAY", "trade-0002"};

  const auto c = store.claim(key, fp_a, long_options);
  REQUIRE(c.verdict == idem::Verdict::acquired);
  store.complete(key, c.record.ticket, R"({"paid":true,"receipt":"R-1"})");

  const auto again = store.claim(key, fp_a, long_options);
  REQUIRE(again.verdict == idem::Verdict::replayed);
  CHECK(again.record.status == idem::Status::succeeded);
  CHECK(nlohmann::json::parse(again.record.snapshot) ==
        nlohmann::json{{"paid", true}, {"receipt", "R-1"}});
  CHECK(again.record.ticket == c.record.ticket);

  int runs = 0;
  const auto out = idem::run_once(store, key, fp_a, [&] {
    ++runs;
    return nlohmann::json{{"paid", false}};
  });
  CHECK(runs == 0);
  REQUIRE(out);
  CHECK(out.verdict() == idem::Verdict::replayed);
  CHECK(out.value()["receipt"] == "R-1");
}

TEMPLATE_LIST_TEST_CASE("conformance: a mismatched fingerprint is a conflict on every path",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();

  const idem::Key done{"PAY", "conflict-succeeded"};
  const auto c1 = store.claim(done, fp_a, long_options);
  store.complete(done, c1.record.ticket, R"({"ok":1})");

  const idem::Key running{"PAY", "conflict-processing"};
  store.claim(running, fp_a, long_options);

  const idem::Key failed_retryable{"PAY", "conflict-failed-r"};
  const auto c3 = store.claim(failed_retryable, fp_a, long_options);
  store.fail(failed_retryable, c3.record.ticket, R"({"error":"timeout"})", true);

  const idem::Key failed_permanent{"PAY", "conflict-failed-p"};
  const auto c4 = store.claim(failed_permanent, fp_a, long_options);
  store.fail(failed_permanent, c4.record.ticket, R"({"error":"declined"})", false);

  for (const idem::Key& key : {done, running, failed_retryable, failed_permanent}) {
    INFO("key " << key.id());
    const auto before = store.find(key);
    const auto r = store.claim(key, fp_b, long_options);
    CHECK(r.verdict == idem::Verdict::conflict);
    CHECK(r.record.fingerprint == fp_a);
    CHECK(store.find(key) == before);  // nothing changed
  }

  // A waiting duplicate with the wrong payload is rejected at once, not after the wait.
  const auto t0 = std::chrono::steady_clock::now();
  idem::IdempotencyGuard guard{store, running, fp_b,
                               idem::Options{.wait = std::chrono::seconds{5}}};
  CHECK(guard.verdict() == idem::Verdict::conflict);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds{4});
}

TEMPLATE_LIST_TEST_CASE("conformance: an empty fingerprint opts out of the payload check",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key key{"PAY", "no-fingerprint"};

  const auto c = store.claim(key, fp_a, long_options);
  store.complete(key, c.record.ticket, R"("ok")");
  CHECK(store.claim(key, "", long_options).verdict == idem::Verdict::replayed);

  const idem::Key key2{"PAY", "no-fingerprint-2"};
  const auto c2 = store.claim(key2, "", long_options);
  CHECK(c2.record.fingerprint.empty());
  store.complete(key2, c2.record.ticket, R"("ok")");
  CHECK(store.claim(key2, fp_b, long_options).verdict == idem::Verdict::replayed);
}

TEMPLATE_LIST_TEST_CASE("conformance: a live claim answers in_progress and changes nothing",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key key{"PAY", "in-progress"};

  const auto c = store.claim(key, fp_a, long_options);
  REQUIRE(c.verdict == idem::Verdict::acquired);
  for (int i = 0; i < 3; ++i) {
    const auto d = store.claim(key, fp_a, long_options);
    CHECK(d.verdict == idem::Verdict::in_progress);
    CHECK(d.record.ticket == c.record.ticket);
  }
  CHECK(store.find(key) == c.record);

  int runs = 0;
  const auto out = idem::run_once(store, key, fp_a, [&] { return ++runs; });
  CHECK(out.verdict() == idem::Verdict::in_progress);
  CHECK_FALSE(out);
  CHECK_FALSE(out.failed());
  CHECK_THROWS_AS(out.value(), idem::BadOutcomeAccess);
  CHECK(runs == 0);
}

TEMPLATE_LIST_TEST_CASE("conformance: a claim whose lease ran out is taken over with a fence bump",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key key{"PAY", "takeover"};

  const auto first = store.claim(key, fp_a, short_lease_options());
  REQUIRE(first.verdict == idem::Verdict::acquired);
  fx.advance(short_lease + idem::Duration{100});

  const auto second = store.claim(key, fp_a, short_lease_options());
  REQUIRE(second.verdict == idem::Verdict::acquired);
  CHECK(second.record.status == idem::Status::processing);
  CHECK(second.record.ticket.fence == first.record.ticket.fence + 1);
  CHECK(second.record.ticket.owner != first.record.ticket.owner);
  CHECK(second.record.attempts == 2);
  CHECK(second.record.created_at == first.record.created_at);
  CHECK(second.record.lease_until > first.record.lease_until);

  // The new claim is live: a third caller is told in_progress.
  CHECK(store.claim(key, fp_a, short_lease_options()).verdict == idem::Verdict::in_progress);
}

TEMPLATE_LIST_TEST_CASE("conformance: a stale owner's late commit or fail throws LeaseLost",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key key{"PAY", "lease-lost"};

  const auto old_owner = store.claim(key, fp_a, short_lease_options());
  fx.advance(short_lease + idem::Duration{100});
  const auto new_owner = store.claim(key, fp_a, short_lease_options());
  REQUIRE(new_owner.verdict == idem::Verdict::acquired);

  CHECK_THROWS_AS(store.complete(key, old_owner.record.ticket, R"({"by":"old"})"), idem::LeaseLost);
  CHECK_THROWS_AS(store.fail(key, old_owner.record.ticket, R"({"by":"old"})", false),
                  idem::LeaseLost);
  CHECK(store.find(key) == new_owner.record);

  store.complete(key, new_owner.record.ticket, R"({"by":"new"})");
  CHECK_THROWS_AS(store.complete(key, old_owner.record.ticket, R"({"by":"old"})"), idem::LeaseLost);
  const auto stored = store.find(key);
  REQUIRE(stored.has_value());
  CHECK(stored->status == idem::Status::succeeded);
  CHECK(nlohmann::json::parse(stored->snapshot)["by"] == "new");

  // Through the guard: the stale guard's commit throws, and its destructor leaves the record be.
  const idem::Key key2{"PAY", "lease-lost-guard"};
  {
    idem::IdempotencyGuard stale{store, key2, fp_a, short_lease_options()};
    REQUIRE(stale.acquired());
    fx.advance(short_lease + idem::Duration{100});
    idem::IdempotencyGuard fresh{store, key2, fp_a, short_lease_options()};
    REQUIRE(fresh.acquired());
    fresh.commit(std::string{"fresh"});
    CHECK_THROWS_AS(stale.commit(std::string{"stale"}), idem::LeaseLost);
  }
  const auto stored2 = store.find(key2);
  REQUIRE(stored2.has_value());
  CHECK(stored2->status == idem::Status::succeeded);
  CHECK(stored2->snapshot == R"("fresh")");
}

TEMPLATE_LIST_TEST_CASE("conformance: complete or fail without a claim throws LeaseLost",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key key{"PAY", "never-claimed"};
  CHECK_THROWS_AS(store.complete(key, idem::Ticket{1, "nobody"}, "{}"), idem::LeaseLost);
  CHECK_THROWS_AS(store.fail(key, idem::Ticket{1, "nobody"}, "{}", true), idem::LeaseLost);
  CHECK_FALSE(store.find(key).has_value());

  const auto c = store.claim(key, fp_a, long_options);
  CHECK_THROWS_AS(store.complete(key, idem::Ticket{c.record.ticket.fence, "forged"}, "{}"),
                  idem::LeaseLost);
  CHECK(store.find(key) == c.record);
}

TEMPLATE_LIST_TEST_CASE(
    "conformance: retryable failures run again, permanent ones replay as failures", "[conformance]",
    idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key key{"PAY", "retryable"};

  int runs = 0;
  CHECK_THROWS_AS(idem::run_once(store, key, fp_a,
                                 [&]() -> int {
                                   ++runs;
                                   throw std::runtime_error("channel timeout");
                                 }),
                  std::runtime_error);
  auto stored = store.find(key);
  REQUIRE(stored.has_value());
  CHECK(stored->status == idem::Status::failed);
  CHECK(stored->retryable);

  const auto retried = idem::run_once(store, key, fp_a, [&] { return ++runs; });
  REQUIRE(retried);
  CHECK(retried.verdict() == idem::Verdict::acquired);
  CHECK(retried.value() == 2);
  CHECK(store.find(key)->attempts == 2);
  CHECK(store.find(key)->ticket.fence == 2);

  const idem::Key declined{"PAY", "permanent"};
  const auto first = idem::run_once(store, declined, fp_a, [&]() -> int {
    ++runs;
    throw idem::PermanentFailure({{"error", "card_declined"}});
  });
  CHECK(first.verdict() == idem::Verdict::acquired);
  CHECK(first.failed());
  CHECK_FALSE(first);
  CHECK(first.error()["error"] == "card_declined");
  CHECK_THROWS_AS(first.value(), idem::BadOutcomeAccess);

  const int runs_before = runs;
  for (int i = 0; i < 3; ++i) {
    const auto dup = idem::run_once(store, declined, fp_a, [&] { return ++runs; });
    CHECK(dup.verdict() == idem::Verdict::replayed);
    CHECK(dup.failed());
    CHECK_FALSE(dup);
    CHECK(dup.error()["error"] == "card_declined");
    CHECK_THROWS_AS(dup.value(), idem::BadOutcomeAccess);
  }
  CHECK(runs == runs_before);
  stored = store.find(declined);
  REQUIRE(stored.has_value());
  CHECK(stored->status == idem::Status::failed);
  CHECK_FALSE(stored->retryable);
}

TEMPLATE_LIST_TEST_CASE("conformance: an expired record is taken over as a brand-new one",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key key{"PAY", "expired"};

  const auto first = store.claim(key, fp_a, short_ttl_options());
  store.complete(key, first.record.ticket, R"({"n":1})");
  CHECK(store.claim(key, fp_a, short_ttl_options()).verdict == idem::Verdict::replayed);

  fx.advance(short_ttl + idem::Duration{100});
  // Past the ttl the key behaves as never seen: even a different payload is a new request.
  const auto renewed = store.claim(key, fp_b, short_ttl_options());
  REQUIRE(renewed.verdict == idem::Verdict::acquired);
  CHECK(renewed.record.fingerprint == fp_b);
  CHECK(renewed.record.attempts == 1);
  CHECK(renewed.record.ticket.fence == first.record.ticket.fence + 1);
  CHECK(renewed.record.snapshot.empty());
  CHECK(renewed.record.created_at > first.record.created_at);
  CHECK(renewed.record.expire_at - renewed.record.created_at == short_ttl);
}

TEMPLATE_LIST_TEST_CASE(
    "conformance: purge_expired deletes expired records only, in bounded batches", "[conformance]",
    idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();

  std::vector<idem::Key> old_keys;
  for (int i = 0; i < 25; ++i) {
    old_keys.emplace_back("PURGE", "old-" + std::to_string(i));
    const auto c = store.claim(old_keys.back(), fp_a, short_ttl_options());
    if (i % 2 == 0) store.complete(old_keys.back(), c.record.ticket, "1");
  }
  fx.advance(short_ttl + idem::Duration{100});
  std::vector<idem::Key> live_keys;
  for (int i = 0; i < 5; ++i) {
    live_keys.emplace_back("PURGE", "live-" + std::to_string(i));
    store.claim(live_keys.back(), fp_a, long_options);
  }

  CHECK(store.purge_expired(10, 1) == 10);
  CHECK(store.purge_expired(10, 10) == 15);
  CHECK(store.purge_expired(10, 10) == 0);
  for (const auto& k : old_keys)
    CHECK_FALSE(store.find(k).has_value());
  for (const auto& k : live_keys)
    CHECK(store.find(k).has_value());
}

TEMPLATE_LIST_TEST_CASE("conformance: release_stale frees dead claims for the next retry",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key dead{"PAY", "dead-worker"};
  const idem::Key alive{"PAY", "live-worker"};

  const auto dead_claim = store.claim(dead, fp_a, short_lease_options());
  fx.advance(short_lease + idem::Duration{100});
  const auto alive_claim = store.claim(alive, fp_a, long_options);

  CHECK(store.release_stale(100) == 1);
  const auto released = store.find(dead);
  REQUIRE(released.has_value());
  CHECK(released->status == idem::Status::failed);
  CHECK(released->retryable);
  CHECK(store.find(alive) == alive_claim.record);
  CHECK(store.release_stale(100) == 0);

  // The dead worker, should it wake, cannot record anything; the next duplicate runs again.
  CHECK_THROWS_AS(store.complete(dead, dead_claim.record.ticket, "1"), idem::LeaseLost);
  const auto retry = store.claim(dead, fp_a, long_options);
  CHECK(retry.verdict == idem::Verdict::acquired);
  CHECK(retry.record.ticket.fence == dead_claim.record.ticket.fence + 1);
}

TEMPLATE_LIST_TEST_CASE("conformance: a waiting duplicate turns into the replay", "[conformance]",
                        idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key key{"PAY", "wait-replay"};

  const auto holder = store.claim(key, fp_a, long_options);
  REQUIRE(holder.verdict == idem::Verdict::acquired);
  std::thread finisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds{150});
    store.complete(key, holder.record.ticket, R"({"receipt":"R-9"})");
  });
  idem::IdempotencyGuard waiter{store, key, fp_a, idem::Options{.wait = std::chrono::seconds{20}}};
  finisher.join();
  REQUIRE(waiter.verdict() == idem::Verdict::replayed);
  const auto out = waiter.template replay<nlohmann::json>();
  REQUIRE(out);
  CHECK(out.value()["receipt"] == "R-9");

  // Without a wait the same situation answers in_progress at once.
  const idem::Key key2{"PAY", "wait-none"};
  store.claim(key2, fp_a, long_options);
  idem::IdempotencyGuard impatient{store, key2, fp_a};
  CHECK(impatient.verdict() == idem::Verdict::in_progress);
}

TEMPLATE_LIST_TEST_CASE("conformance: a waiter that outlasts the holder's lease takes over",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key key{"PAY", "wait-takeover"};

  const auto holder = store.claim(key, fp_a, short_lease_options());
  std::thread time_passes([&] { fx.advance(short_lease + idem::Duration{100}); });
  auto options = short_lease_options();
  options.wait = std::chrono::seconds{20};
  idem::IdempotencyGuard waiter{store, key, fp_a, options};
  time_passes.join();
  REQUIRE(waiter.acquired());
  CHECK(waiter.record().ticket.fence == holder.record.ticket.fence + 1);
  waiter.commit(1);
  CHECK_THROWS_AS(store.complete(key, holder.record.ticket, "2"), idem::LeaseLost);
}

TEMPLATE_LIST_TEST_CASE(
    "conformance: bad input is refused with InvalidArgument and changes nothing", "[conformance]",
    idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key key{"PAY", "bad-input"};

  CHECK_THROWS_AS(idem::Key("", "x"), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::Key("PAY", ""), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::Key("PAY ", "x"), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::Key("PAY", std::string(65, 'x')), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::Key("PAY", std::string("a\0b", 3)), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::Key("PAY", "\xff\xfe"), idem::InvalidArgument);

  const idem::Options bad_options[] = {
      {.lease = idem::Duration{0}},
      {.lease = idem::Duration{-1}},
      {.ttl = idem::Duration{0}},
      {.lease = std::chrono::seconds{10}, .ttl = std::chrono::seconds{5}},
      {.wait = idem::Duration{-1}}};
  for (const auto& o : bad_options)
    CHECK_THROWS_AS(store.claim(key, fp_a, o), idem::InvalidArgument);
  CHECK_THROWS_AS(store.claim(key, "has space", long_options), idem::InvalidArgument);
  CHECK_THROWS_AS(store.claim(key, std::string(129, 'a'), long_options), idem::InvalidArgument);
  CHECK_FALSE(store.find(key).has_value());

  const auto c = store.claim(key, fp_a, long_options);
  const std::string too_big(idem::max_snapshot_bytes + 1, 'x');
  CHECK_THROWS_AS(store.complete(key, c.record.ticket, too_big), idem::InvalidArgument);
  CHECK_THROWS_AS(store.fail(key, c.record.ticket, too_big, true), idem::InvalidArgument);
  CHECK(store.find(key) == c.record);
  store.complete(key, c.record.ticket, R"("fits")");
  CHECK(store.find(key)->status == idem::Status::succeeded);
}

TEMPLATE_LIST_TEST_CASE("conformance: keys compare byte for byte and are stored verbatim",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const std::vector<idem::Key> keys = {{"PAY", "abc"},
                                       {"PAY", "ABC"},
                                       {"PAY", "a"},
                                       {"PAY", "a "},
                                       {"pay", "abc"},
                                       {"REFUND", "abc"},
                                       {"PAY", "x' OR '1'='1"},
                                       {"PAY", "'); DROP TABLE idempotent_record; --"},
                                       {"PAY", "单号-42"},
                                       {"PAY", "a\\b%_"}};
  for (const auto& k : keys) {
    INFO("key " << k.biz_type() << "/" << k.id());
    CHECK(store.claim(k, fp_a, long_options).verdict == idem::Verdict::acquired);
  }
  for (const auto& k : keys) {
    const auto r = store.find(k);
    REQUIRE(r.has_value());
    CHECK(r->key == k);
  }
}

TEMPLATE_LIST_TEST_CASE("conformance: concurrent claims on one key acquire exactly once",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key key{"PAY", "race"};

  constexpr int threads = 16;
  std::atomic<int> acquired{0};
  std::atomic<int> in_progress{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      while (!go.load())
        std::this_thread::yield();
      const auto r = store.claim(key, fp_a, long_options);
      if (r.verdict == idem::Verdict::acquired) ++acquired;
      if (r.verdict == idem::Verdict::in_progress) ++in_progress;
    });
  }
  go = true;
  for (auto& th : pool)
    th.join();
  CHECK(acquired == 1);
  CHECK(in_progress == threads - 1);
}

TEMPLATE_LIST_TEST_CASE("conformance: a stale claim is taken over after_crash, a retry without",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  TestType fx;
  auto& store = fx.store();
  const idem::Key crashed{"PAY", "after-crash"};
  const auto first = store.claim(crashed, fp_a, short_lease_options());
  REQUIRE(first.verdict == idem::Verdict::acquired);
  CHECK_FALSE(first.after_crash);
  fx.advance(short_lease + idem::Duration{100});
  const auto second = store.claim(crashed, fp_a, short_lease_options());
  REQUIRE(second.verdict == idem::Verdict::acquired);
  CHECK(second.after_crash);
  CHECK(second.record.attempts == 2);

  const idem::Key failed{"PAY", "after-failure"};
  const auto c = store.claim(failed, fp_a, long_options);
  store.fail(failed, c.record.ticket, R"({"error":"timeout"})", true);
  const auto retry = store.claim(failed, fp_a, long_options);
  REQUIRE(retry.verdict == idem::Verdict::acquired);
  CHECK_FALSE(retry.after_crash);
}

TEMPLATE_LIST_TEST_CASE(
    "conformance: a repair applies only at the fence read, and fences out "
    "the crashed worker",
    "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  using S = store_of<TestType>;
  if constexpr (!idem::RepairingStore<S>) {
    WARN("this store has no repair(): skipped");
  } else {
    TestType fx;
    auto& store = fx.store();
    const idem::Key key{"PAY", "repair"};
    const auto c = store.claim(key, fp_a, long_options);

    const idem::Record done = store.repair(key, {.action = idem::RepairAction::complete,
                                                 .fence = c.record.ticket.fence,
                                                 .snapshot = R"({"charge":"ch_1"})",
                                                 .reason = "gateway shows ch_1"});
    CHECK(done.status == idem::Status::succeeded);
    CHECK(done.ticket.fence == c.record.ticket.fence + 1);
    CHECK(done.repair_reason == "gateway shows ch_1");
    REQUIRE(done.repaired_at.has_value());
    CHECK(*done.repaired_at == done.updated_at);
    CHECK(store.find(key) == done);

    // The crashed worker wakes up: its write is refused, and the repair stands.
    CHECK_THROWS_AS(store.complete(key, c.record.ticket, R"({"charge":"ch_2"})"), idem::LeaseLost);
    const auto replay = store.claim(key, fp_a, long_options);
    CHECK(replay.verdict == idem::Verdict::replayed);
    CHECK(nlohmann::json::parse(replay.record.snapshot)["charge"] == "ch_1");

    // A repair read at an older fence is refused with the record as it is now.
    try {
      store.repair(key, {.action = idem::RepairAction::release,
                         .fence = c.record.ticket.fence,
                         .reason = "too late"});
      FAIL("a repair at a moved fence was applied");
    } catch (const idem::RepairRefused& e) {
      REQUIRE(e.current().has_value());
      CHECK(*e.current() == done);
    }
    CHECK(store.find(key) == done);

    // No record: refused without one. A bad repair: InvalidArgument, nothing written.
    try {
      store.repair(idem::Key{"PAY", "repair-none"},
                   {.action = idem::RepairAction::release, .fence = 1, .reason = "none"});
      FAIL("a repair of a missing record was applied");
    } catch (const idem::RepairRefused& e) {
      CHECK_FALSE(e.current().has_value());
    }
    CHECK_THROWS_AS(store.repair(key, {.action = idem::RepairAction::complete,
                                       .fence = done.ticket.fence,
                                       .snapshot = "{not json",
                                       .reason = "bad"}),
                    idem::InvalidArgument);
    CHECK_THROWS_AS(
        store.repair(
            key, {.action = idem::RepairAction::release, .fence = done.ticket.fence, .reason = ""}),
        idem::InvalidArgument);
    CHECK(store.find(key) == done);

    // release lets the next duplicate run; fail (permanent) makes duplicates replay the error.
    store.repair(key, {.action = idem::RepairAction::release,
                       .fence = done.ticket.fence,
                       .reason = "refunded by hand; run again"});
    int runs = 0;
    const auto out = idem::run_once(store, key, fp_a, [&] {
      ++runs;
      return std::string("again");
    });
    CHECK(runs == 1);
    CHECK(out.acquired());
    const auto now = store.find(key);
    REQUIRE(now.has_value());
    store.repair(key, {.action = idem::RepairAction::fail,
                       .fence = now->ticket.fence,
                       .snapshot = R"({"error":"card_declined"})",
                       .retryable = false,
                       .reason = "the bank declined after all"});
    const auto declined = idem::run_once(store, key, fp_a, [&] {
      ++runs;
      return std::string("never");
    });
    CHECK(runs == 1);
    CHECK(declined.failed());
    CHECK(declined.error()["error"] == "card_declined");
  }
}

TEMPLATE_LIST_TEST_CASE("conformance: repairs racing on one fence: exactly one is applied",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  using S = store_of<TestType>;
  if constexpr (!idem::RepairingStore<S>) {
    WARN("this store has no repair(): skipped");
  } else {
    TestType fx;
    auto& store = fx.store();
    const idem::Key key{"PAY", "repair-race"};
    const auto c = store.claim(key, fp_a, long_options);
    constexpr int threads = 8;
    std::atomic<int> applied{0};
    std::atomic<int> refused{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        while (!go.load())
          std::this_thread::yield();
        try {
          store.repair(key, {.action = idem::RepairAction::complete,
                             .fence = c.record.ticket.fence,
                             .snapshot = nlohmann::json{{"by", t}}.dump(),
                             .reason = "race"});
          ++applied;
        } catch (const idem::RepairRefused&) {
          ++refused;
        }
      });
    }
    go = true;
    for (auto& th : pool)
      th.join();
    CHECK(applied == 1);
    CHECK(refused == threads - 1);
    const auto stored = store.find(key);
    REQUIRE(stored.has_value());
    CHECK(stored->ticket.fence == c.record.ticket.fence + 1);
  }
}

TEMPLATE_LIST_TEST_CASE("conformance: outcome_unknown neither runs nor replays, and never expires",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  using S = store_of<TestType>;
  if constexpr (!idem::RepairingStore<S>) {
    WARN("this store has no repair(): skipped");
  } else {
    TestType fx;
    auto& store = fx.store();
    const idem::Key key{"PAY", "unknown"};
    const auto c = store.claim(key, fp_a, short_ttl_options());
    const idem::Record unknown =
        store.repair(key, {.action = idem::RepairAction::mark_unknown,
                           .fence = c.record.ticket.fence,
                           .snapshot = R"({"error":"gateway unreachable"})",
                           .reason = "resolver: unknown",
                           .keep = short_ttl});
    CHECK(unknown.status == idem::Status::outcome_unknown);

    int runs = 0;
    auto business = [&] {
      ++runs;
      return std::string("charged");
    };
    const auto out = idem::run_once(store, key, fp_a, business, short_ttl_options());
    CHECK(out.verdict() == idem::Verdict::outcome_unknown);
    CHECK_FALSE(out.has_value());
    CHECK_FALSE(out.failed());
    CHECK(store.claim(key, fp_b, short_ttl_options()).verdict == idem::Verdict::conflict);

    // Past its expire_at it still holds the key: not taken over, not purged, not released.
    fx.advance(short_ttl + idem::Duration{200});
    CHECK(store.claim(key, fp_a, short_ttl_options()).verdict == idem::Verdict::outcome_unknown);
    store.purge_expired(100, 10);
    store.release_stale(100);
    const auto kept = store.find(key);
    REQUIRE(kept.has_value());
    CHECK(kept->status == idem::Status::outcome_unknown);
    CHECK(runs == 0);

    // Only a repair moves it on.
    store.repair(key, {.action = idem::RepairAction::complete,
                       .fence = kept->ticket.fence,
                       .snapshot = R"("charged")",
                       .reason = "gateway answered: charged"});
    const auto replay = idem::run_once(store, key, fp_a, business, short_ttl_options());
    CHECK(replay.verdict() == idem::Verdict::replayed);
    CHECK(replay.value() == "charged");
    CHECK(runs == 0);
  }
}

TEMPLATE_LIST_TEST_CASE(
    "conformance: a business that cannot tell whether its effect happened leaves the record "
    "outcome_unknown",
    "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  using S = store_of<TestType>;
  if constexpr (!idem::RepairingStore<S>) {
    WARN("this store has no repair(): skipped");
  } else {
    TestType fx;
    auto& store = fx.store();
    const idem::Key key{"PAY", "effect-unknown"};
    int runs = 0;
    auto timed_out = [&]() -> std::string {
      ++runs;
      throw idem::EffectUnknown("the gateway timed out after the charge was sent");
    };
    const auto out = idem::run_once(store, key, fp_a, timed_out, short_lease_options());
    CHECK(out.verdict() == idem::Verdict::outcome_unknown);
    CHECK_FALSE(out.has_value());
    CHECK_FALSE(out.failed());
    const auto stored = store.find(key);
    REQUIRE(stored.has_value());
    CHECK(stored->status == idem::Status::outcome_unknown);
    CHECK(stored->ticket.fence == 2);  // the claim's fence, bumped by the mark
    CHECK(stored->snapshot.find("idem.effect_unknown") != std::string::npos);
    CHECK(stored->snapshot.find("timed out after the charge") != std::string::npos);
    CHECK_FALSE(stored->repair_reason.empty());

    // Neither a duplicate nor the end of the lease runs it again.
    fx.advance(short_lease + idem::Duration{100});
    store.release_stale(100);
    const auto dup = idem::run_once(store, key, fp_a, timed_out, short_lease_options());
    CHECK(dup.verdict() == idem::Verdict::outcome_unknown);
    CHECK(runs == 1);

    // A claim taken over while its business ran cannot mark the new owner's record.
    const idem::Key taken{"PAY", "effect-unknown-taken"};
    std::optional<idem::ClaimResult> other;
    CHECK_THROWS_AS(idem::run_once(
                        store, taken, fp_a,
                        [&]() -> std::string {
                          fx.advance(short_lease + idem::Duration{100});
                          other = store.claim(taken, fp_a, short_lease_options());
                          throw idem::EffectUnknown("timed out");
                        },
                        short_lease_options()),
                    idem::LeaseLost);
    REQUIRE(other.has_value());
    REQUIRE(other->verdict == idem::Verdict::acquired);
    const auto kept = store.find(taken);
    REQUIRE(kept.has_value());
    CHECK(kept->status == idem::Status::processing);
    CHECK(kept->ticket == other->record.ticket);

    // Only a repair (the resolver's, an operator's) moves it on.
    store.repair(key, {.action = idem::RepairAction::complete,
                       .fence = stored->ticket.fence,
                       .snapshot = R"("charged")",
                       .reason = "gateway answered: charged"});
    const auto replay = idem::run_once(store, key, fp_a, timed_out, short_lease_options());
    CHECK(replay.verdict() == idem::Verdict::replayed);
    CHECK(replay.value() == "charged");
    CHECK(runs == 1);
  }
}

TEMPLATE_LIST_TEST_CASE("conformance: steps are kept with the claim and survive a crash",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  using S = store_of<TestType>;
  if constexpr (!idem::RecoveryPointStore<S>) {
    WARN("this store has no record_step(): skipped");
  } else {
    TestType fx;
    auto& store = fx.store();
    const idem::Key key{"PAY", "steps"};
    const auto c = store.claim(key, fp_a, short_lease_options());
    const std::string points = store.record_step(key, c.record.ticket, "reserve", R"({"hold":7})");
    CHECK(nlohmann::json::parse(points) == nlohmann::json{{"reserve", {{"hold", 7}}}});
    // A step kept once keeps its first result.
    CHECK(store.record_step(key, c.record.ticket, "reserve", R"({"hold":8})") == points);
    CHECK(store.find(key)->recovery_points == points);
    CHECK_THROWS_AS(store.record_step(key, c.record.ticket, "bad name", "1"),
                    idem::InvalidArgument);
    CHECK_THROWS_AS(store.record_step(key, c.record.ticket, "charge", "{not json"),
                    idem::InvalidArgument);

    // The worker dies; the takeover starts with the kept step, and the dead ticket is fenced.
    fx.advance(short_lease + idem::Duration{100});
    const auto resumed = store.claim(key, fp_a, short_lease_options());
    REQUIRE(resumed.verdict == idem::Verdict::acquired);
    CHECK(resumed.after_crash);
    CHECK(resumed.record.recovery_points == points);
    CHECK_THROWS_AS(store.record_step(key, c.record.ticket, "charge", R"({"id":1})"),
                    idem::LeaseLost);
    const std::string more =
        store.record_step(key, resumed.record.ticket, "charge", R"({"id":"ch_9"})");
    CHECK(nlohmann::json::parse(more)["charge"]["id"] == "ch_9");
    store.complete(key, resumed.record.ticket, R"("paid")");
    CHECK_THROWS_AS(store.record_step(key, resumed.record.ticket, "ship", "1"), idem::LeaseLost);
    CHECK_THROWS_AS(
        store.record_step(idem::Key{"PAY", "steps-none"}, idem::Ticket{1, "x"}, "a", "1"),
        idem::LeaseLost);

    // A record that expired starts afresh: its steps are gone.
    const idem::Key old{"PAY", "steps-expired"};
    const auto o = store.claim(old, fp_a, short_ttl_options());
    store.record_step(old, o.record.ticket, "reserve", "1");
    store.complete(old, o.record.ticket, "1");
    fx.advance(short_ttl + idem::Duration{200});
    const auto fresh = store.claim(old, fp_a, short_ttl_options());
    REQUIRE(fresh.verdict == idem::Verdict::acquired);
    CHECK_FALSE(fresh.after_crash);
    CHECK(fresh.record.recovery_points.empty());
  }
}

TEMPLATE_LIST_TEST_CASE(
    "conformance: a business of steps resumes after a crash, running only "
    "the unfinished steps",
    "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  using S = store_of<TestType>;
  if constexpr (!idem::RecoveryPointStore<S>) {
    WARN("this store has no record_step(): skipped");
  } else {
    TestType fx;
    auto& store = fx.store();
    const idem::Key key{"ORDER", "steps-business"};
    int reserved = 0, charged = 0, marked = 0;
    std::string charge_key;
    auto business = [&](idem::Attempt<S>& attempt, bool crash) {
      const int hold = attempt.step("reserve", [&] { return ++reserved; });
      charge_key = attempt.step_key("charge");
      const int charge = attempt.step("charge", [&] { return 100 + ++charged; });
      if (crash) throw std::runtime_error("the worker dies here");
      attempt.step("mark_paid", [&] { return ++marked; });
      return nlohmann::json{{"hold", hold}, {"charge", charge}};
    };
    // The first attempt "dies" after charging: its guard is never told (no fail recorded).
    {
      const auto c = store.claim(key, fp_a, short_lease_options());
      REQUIRE(c.verdict == idem::Verdict::acquired);
      idem::detail::GuardState state("conformance", c, nullptr, idem::EventKind::store_error);
      idem::Attempt<S> attempt(store, state);
      CHECK_THROWS_AS(business(attempt, true), std::runtime_error);
      CHECK_FALSE(attempt.after_crash());
    }
    const std::string first_key = charge_key;
    fx.advance(short_lease + idem::Duration{100});
    const auto out = idem::run_once(
        store, key, fp_a,
        [&](idem::Attempt<S>& attempt) {
          CHECK(attempt.after_crash());
          CHECK(attempt.number() == 2);
          return business(attempt, false);
        },
        short_lease_options());
    REQUIRE(out);
    CHECK(out.value() == nlohmann::json{{"hold", 1}, {"charge", 101}});
    CHECK(reserved == 1);
    CHECK(charged == 1);
    CHECK(marked == 1);
    CHECK(charge_key == first_key);  // the same downstream key in every attempt
    CHECK(charge_key == idem::step_key(key, "charge"));
    CHECK(charge_key != idem::step_key(key, "reserve"));
  }
}

TEMPLATE_LIST_TEST_CASE("conformance: list answers stale and outcome_unknown records in order",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  using S = store_of<TestType>;
  if constexpr (!idem::ListingStore<S> || !idem::RepairingStore<S>) {
    WARN("this store has no list() or repair(): skipped");
  } else {
    TestType fx;
    auto& store = fx.store();
    store.claim(idem::Key{"PAY", "stale-1"}, fp_a, short_lease_options());
    fx.advance(idem::Duration{50});
    store.claim(idem::Key{"PAY", "stale-2"}, fp_a, short_lease_options());
    store.claim(idem::Key{"REFUND", "stale-3"}, fp_a, short_lease_options());
    store.claim(idem::Key{"PAY", "live"}, fp_a, long_options);
    const auto done = store.claim(idem::Key{"PAY", "done"}, fp_a, short_lease_options());
    store.complete(done.record.key, done.record.ticket, "1");
    unknown_record(store, idem::Key{"PAY", "unknown-1"});
    fx.advance(short_lease + idem::Duration{100});

    auto ids = [](const std::vector<idem::Record>& records) {
      std::vector<std::string> out;
      for (const auto& r : records)
        out.push_back(r.key.id());
      return out;
    };
    const auto stale = ids(store.list({.stale = true}));  // stale-2 and stale-3 tie
    CHECK((stale == std::vector<std::string>{"stale-1", "stale-2", "stale-3"} ||
           stale == std::vector<std::string>{"stale-1", "stale-3", "stale-2"}));
    CHECK(ids(store.list({.stale = true, .biz_type = "REFUND"})) ==
          std::vector<std::string>{"stale-3"});
    CHECK(store.list({.stale = true, .limit = 1}).size() == 1);
    CHECK(ids(store.list({.stale = true, .limit = 1})) == std::vector<std::string>{"stale-1"});
    CHECK(ids(store.list({.status = idem::Status::outcome_unknown})) ==
          std::vector<std::string>{"unknown-1"});
    CHECK(store
              .list({.status = idem::Status::outcome_unknown,
                     .not_updated_for = std::chrono::hours{1}})
              .empty());
    CHECK(ids(store.list({.status = idem::Status::succeeded})) == std::vector<std::string>{"done"});
    CHECK_THROWS_AS(store.list({.limit = 0}), idem::InvalidArgument);
    CHECK_THROWS_AS(store.list({.stale = true, .status = idem::Status::failed}),
                    idem::InvalidArgument);
  }
}

TEMPLATE_LIST_TEST_CASE(
    "conformance: stats counts records by type and status, the purge backlog and stale claims",
    "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  using S = store_of<TestType>;
  if constexpr (!idem::StatsStore<S> || !idem::RepairingStore<S>) {
    WARN("this store has no stats() or repair(): skipped");
  } else {
    TestType fx;
    auto& store = fx.store();
    const idem::RecordStats empty = store.stats();
    CHECK(empty.counts.empty());
    CHECK(empty.total() == 0);
    CHECK(empty.purge_backlog == 0);
    CHECK(empty.stale_claims == 0);
    CHECK_FALSE(empty.oldest_stale_lease.has_value());

    for (int i = 0; i < 3; ++i) {  // expired: two succeeded, one failed for good
      const idem::Key key{"PAY", "old-" + std::to_string(i)};
      const auto c = store.claim(key, fp_a, short_ttl_options());
      if (i < 2)
        store.complete(key, c.record.ticket, "1");
      else
        store.fail(key, c.record.ticket, "declined", false);
    }
    store.claim(idem::Key{"PAY", "stale-1"}, fp_a, short_lease_options());
    fx.advance(idem::Duration{50});
    store.claim(idem::Key{"REFUND", "stale-2"}, fp_a, short_lease_options());
    unknown_record(store, idem::Key{"REFUND", "unknown-1"});
    fx.advance(short_ttl + idem::Duration{100});
    store.claim(idem::Key{"PAY", "live"}, fp_a, long_options);  // after the advance: not stale

    const idem::RecordStats stats = store.stats();
    using idem::Status;
    CHECK(stats.counts ==
          std::vector<idem::RecordCount>{
              {.biz_type = "PAY", .status = Status::processing, .records = 2},
              {.biz_type = "PAY", .status = Status::succeeded, .records = 2},
              {.biz_type = "PAY", .status = Status::failed, .records = 1},
              {.biz_type = "REFUND", .status = Status::processing, .records = 1},
              {.biz_type = "REFUND", .status = Status::outcome_unknown, .records = 1}});
    CHECK(stats.total() == 7);
    CHECK(stats.purge_backlog == 3);  // outcome_unknown never expires
    CHECK(stats.stale_claims == 2);
    REQUIRE(stats.oldest_stale_lease.has_value());
    CHECK(*stats.oldest_stale_lease == store.find(idem::Key{"PAY", "stale-1"})->lease_until);
    CHECK(stats.now >= *stats.oldest_stale_lease);
    CHECK(store.purge_expired(10, 10) == stats.purge_backlog);  // the purge's own rule
    CHECK(store.stats().purge_backlog == 0);
  }
}

TEMPLATE_LIST_TEST_CASE("conformance: a resolver settles a crashed attempt before anything runs",
                        "[conformance]", idem::testing::conformance_fixtures) {
  using namespace idem::testing;
  using S = store_of<TestType>;
  if constexpr (!idem::RepairingStore<S>) {
    WARN("this store has no repair(): skipped");
  } else {
    TestType fx;
    auto& store = fx.store();
    std::map<std::string, idem::Resolution> answers{
        {"happened", idem::Resolution::happened(nlohmann::json{{"charge", "ch_1"}})},
        {"not-happened", idem::Resolution::not_happened()},
        {"unknown", idem::Resolution::unknown("gateway unreachable")}};
    idem::Resolvers resolvers;
    std::atomic<int> asked{0};
    resolvers.add("PAY", [&](const idem::Record& r, const idem::ResolveContext&) {
      ++asked;
      return answers.at(r.key.id());
    });
    idem::Options options = short_lease_options();
    options.resolvers = &resolvers;
    for (const auto& [id, answer] : answers) {
      store.claim(idem::Key{"PAY", id}, fp_a, options);  // a worker that dies
    }
    fx.advance(short_lease + idem::Duration{100});
    int runs = 0;
    auto charge = [&] {
      ++runs;
      return nlohmann::json{{"charge", "ch_new"}};
    };
    const auto happened =
        idem::run_once(store, idem::Key{"PAY", "happened"}, fp_a, charge, options);
    CHECK(happened.verdict() == idem::Verdict::replayed);
    REQUIRE(happened);
    CHECK(happened.value()["charge"] == "ch_1");
    CHECK(runs == 0);

    const auto again =
        idem::run_once(store, idem::Key{"PAY", "not-happened"}, fp_a, charge, options);
    CHECK(again.acquired());
    CHECK(runs == 1);

    const auto unknown = idem::run_once(store, idem::Key{"PAY", "unknown"}, fp_a, charge, options);
    CHECK(unknown.verdict() == idem::Verdict::outcome_unknown);
    CHECK(runs == 1);
    CHECK(store.find(idem::Key{"PAY", "unknown"})->status == idem::Status::outcome_unknown);
    CHECK(asked == 3);

    // Without a resolver for its biz_type, a crashed attempt runs again as before.
    store.claim(idem::Key{"REFUND", "r-1"}, fp_a, options);
    fx.advance(short_lease + idem::Duration{100});
    CHECK(idem::run_once(store, idem::Key{"REFUND", "r-1"}, fp_a, charge, options).acquired());
    CHECK(runs == 2);
    CHECK(asked == 3);
  }
}
