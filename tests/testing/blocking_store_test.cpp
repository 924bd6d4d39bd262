// idem::testing::BlockingStore: an async store's repair, list and record_step as blocking calls,
// so that the conformance suite's cases for them run on async stores unchanged.
#include <catch2/catch.hpp>
#include <idem/async.hpp>
#include <idem/idem.hpp>
#include <idem/testing/blocking_store.hpp>

using namespace std::chrono_literals;

TEST_CASE("async blocking store: forwards repair, list and record_step") {
  using Async = idem::async::InlineStore<idem::MemoryStore>;
  using Blocking = idem::testing::BlockingStore<Async>;
  static_assert(idem::RepairingStore<Blocking> && idem::ListingStore<Blocking> &&
                idem::RecoveryPointStore<Blocking>);
  idem::ManualClock clock;
  idem::MemoryStore memory{[&clock] { return clock.now(); }};
  Async async{memory};
  Blocking store{async};

  const idem::Key key{"PAY", "b-1"};
  const auto claim = store.claim(key, "fp", {.lease = 1s});
  CHECK(store.record_step(key, claim.record.ticket, "reserve", "1") == R"({"reserve":1})");
  CHECK_THROWS_AS(store.record_step(key, idem::Ticket{9, "x"}, "ship", "1"), idem::LeaseLost);
  clock.advance(2s);
  const auto stale = store.list({.stale = true});
  REQUIRE(stale.size() == 1);
  CHECK(stale.front().recovery_points == R"({"reserve":1})");
  const auto released = store.repair(
      key, {.action = idem::RepairAction::release, .fence = 1, .reason = "not charged"});
  CHECK(released.status == idem::Status::failed);
  CHECK(released.retryable);
  CHECK_THROWS_AS(
      store.repair(key, {.action = idem::RepairAction::release, .fence = 1, .reason = "again"}),
      idem::RepairRefused);
  CHECK(memory.find(key)->ticket.fence == 2);
}
