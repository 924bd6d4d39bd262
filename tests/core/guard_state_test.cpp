// What the blocking and the coroutine guard share (idem/guard_state.hpp), without a store: the
// wait for an in-progress claim, the event a claim's answer is reported as, the claim's state
// around commit / fail / mark-unknown, the pending completion of a transaction of the caller's,
// and the outcome of a claim that does not run the business. The guards' own tests
// (guard_test.cpp, async/guard_test.cpp) run the same rules through a store.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <idem/guard_state.hpp>

using namespace std::chrono_literals;
using idem::EventKind;
using idem::Verdict;
using idem::detail::GuardState;

namespace {

struct GuardStateEvents final : idem::Observer {
  struct Seen {
    EventKind kind;
    std::uint64_t fence;
    std::string reason;
    std::string error;
    std::string context;
  };
  std::vector<Seen> events;
  void on_event(const idem::Event& e) noexcept override {
    events.push_back({e.kind, e.fence, std::string(e.reason),
                      e.error != nullptr ? e.error->what() : "", std::string(e.context)});
  }
};

idem::ClaimResult claim_answer(Verdict verdict, std::uint64_t fence = 1,
                               idem::Status status = idem::Status::processing,
                               std::string snapshot = {}) {
  idem::Record r = idem::backend::claim_record(idem::Key("PAY", "gs-1"), "owner-token", "fp",
                                               idem::system_now(), idem::Options{});
  r.status = status;
  r.ticket.fence = fence;
  r.snapshot = std::move(snapshot);
  r.attempts = 1;
  return {verdict, std::move(r)};
}

GuardState acquired_state(GuardStateEvents* seen) {
  return GuardState("test::Guard", claim_answer(Verdict::acquired, 3), seen, EventKind::store_error,
                    "trace-1");
}

}  // namespace

TEST_CASE("guard_state: the wait claims again only while in progress - and only until it ends") {
  idem::Options wait_options;
  wait_options.wait = 50ms;
  const idem::ClaimResult in_progress = claim_answer(Verdict::in_progress);

  SECTION("a store that forbids the wait, or no wait asked: the answer stands") {
    CHECK_FALSE(idem::detail::ClaimWait(wait_options, false).pause(in_progress));
    CHECK_FALSE(idem::detail::ClaimWait(idem::Options{}, true).pause(in_progress));
  }
  SECTION("any answer but in_progress stands") {
    idem::detail::ClaimWait wait(wait_options, true);
    CHECK_FALSE(wait.pause(claim_answer(Verdict::acquired)));
    CHECK_FALSE(wait.pause(claim_answer(Verdict::replayed)));
    CHECK_FALSE(wait.pause(claim_answer(Verdict::conflict)));
  }
  SECTION("in progress: a pause within what is left of the wait - none once it is over") {
    idem::detail::ClaimWait wait(wait_options, true);
    const std::optional<idem::Duration> first = wait.pause(in_progress);
    REQUIRE(first);
    CHECK(*first > idem::Duration::zero());
    CHECK(*first <= 50ms);
    std::this_thread::sleep_for(60ms);
    CHECK_FALSE(wait.pause(in_progress));
  }
}

TEST_CASE("guard_state: a claim's answer is reported as its event - a fence above 1 took over") {
  using idem::detail::claim_event;
  CHECK(claim_event(claim_answer(Verdict::acquired, 1)) == EventKind::acquired);
  CHECK(claim_event(claim_answer(Verdict::acquired, 2)) == EventKind::taken_over);
  CHECK(claim_event(claim_answer(Verdict::replayed)) == EventKind::replayed);
  CHECK(claim_event(claim_answer(Verdict::in_progress)) == EventKind::in_progress);
  CHECK(claim_event(claim_answer(Verdict::conflict)) == EventKind::conflict);
  CHECK(claim_event(claim_answer(Verdict::outcome_unknown)) == EventKind::outcome_unknown);
}

TEST_CASE("guard_state: only an acquired claim records - and only once") {
  GuardStateEvents seen;
  SECTION("a duplicate's state refuses, naming its verdict") {
    const GuardState replayed("test::Guard", claim_answer(Verdict::replayed), &seen,
                              EventKind::store_error);
    CHECK_FALSE(replayed.open());
    CHECK_THROWS_WITH(replayed.require_open("commit"),
                      "test::Guard::commit(): the verdict is replayed; only an acquired guard "
                      "records a result");
  }
  SECTION("a success closes the claim and is reported with the claim's fence and context") {
    GuardState g = acquired_state(&seen);
    REQUIRE(g.open());
    g.require_open("commit");
    g.recorded_success(R"({"charge":"ch_1"})");
    CHECK_FALSE(g.open());
    CHECK(g.record().status == idem::Status::succeeded);
    CHECK(g.record().snapshot == R"({"charge":"ch_1"})");
    CHECK_THROWS_AS(g.require_open("commit"), idem::UsageError);
    CHECK_THROWS_WITH(g.require_open("fail"),
                      "test::Guard::fail(): the result was already recorded");
    REQUIRE(seen.events.size() == 1);
    CHECK(seen.events[0].kind == EventKind::committed);
    CHECK(seen.events[0].fence == 3);
    CHECK(seen.events[0].context == "trace-1");
  }
  SECTION("a failure is recorded with its retryability and reported with its reason") {
    GuardState g = acquired_state(&seen);
    g.recorded_failure({{"error", "card_declined"}}, R"({"error":"card_declined"})", true);
    CHECK_FALSE(g.open());
    CHECK(g.record().status == idem::Status::failed);
    CHECK(g.record().retryable);
    REQUIRE(seen.events.size() == 1);
    CHECK(seen.events[0].kind == EventKind::failed);
    CHECK(seen.events[0].reason == "card_declined");
  }
}

TEST_CASE("guard_state: a write that failed - a takeover closes the claim - a store failure not") {
  GuardStateEvents seen;
  GuardState g = acquired_state(&seen);
  g.write_failed(std::make_exception_ptr(idem::StoreError("connection lost", true)));
  CHECK(g.open());  // record again, or let it go
  g.write_failed(std::make_exception_ptr(idem::LeaseLost("taken over")));
  CHECK_FALSE(g.open());
  REQUIRE(seen.events.size() == 2);
  CHECK(seen.events[0].kind == EventKind::store_error);
  CHECK(seen.events[0].error == "connection lost");
  CHECK(seen.events[1].kind == EventKind::lease_lost);
}

TEST_CASE("guard_state: marking the effect unknown - written, refused, or failed") {
  GuardStateEvents seen;
  GuardState g = acquired_state(&seen);
  SECTION("written: the record under its new fence - reported failed as effect unknown") {
    idem::Record written = g.record();
    written.status = idem::Status::outcome_unknown;
    written.ticket.fence = 4;
    g.marked_unknown(written);
    CHECK_FALSE(g.open());
    CHECK(g.record() == written);
    REQUIRE(seen.events.size() == 1);
    CHECK(seen.events[0].kind == EventKind::failed);
    CHECK(seen.events[0].reason == idem::detail::effect_unknown_reason);
  }
  SECTION("refused (the fence moved on): LeaseLost, and the claim is closed") {
    CHECK_THROWS_AS(g.mark_unknown_failed(
                        std::make_exception_ptr(idem::RepairRefused("fence moved", std::nullopt))),
                    idem::LeaseLost);
    CHECK_FALSE(g.open());
    REQUIRE(seen.events.size() == 1);
    CHECK(seen.events[0].kind == EventKind::lease_lost);
  }
  SECTION("a store failure: rethrown, and the claim is closed all the same (the lease runs out)") {
    CHECK_THROWS_AS(
        g.mark_unknown_failed(std::make_exception_ptr(idem::StoreError("server gone", true))),
        idem::StoreError);
    CHECK_FALSE(g.open());
    REQUIRE(seen.events.size() == 1);
    CHECK(seen.events[0].kind == EventKind::store_error);
  }
}

TEST_CASE("guard_state: a completion in the caller's transaction is recorded once it committed") {
  GuardStateEvents seen;
  GuardState g = acquired_state(&seen);
  std::weak_ptr<GuardState::PendingCompletion> first = g.completion_written(R"({"try":1})");
  CHECK_FALSE(g.settle_completion());  // not committed yet
  CHECK(g.open());

  // The try ran again: its completion replaces the first one, which nobody can commit now.
  std::weak_ptr<GuardState::PendingCompletion> second = g.completion_written(R"({"try":2})");
  CHECK(first.expired());
  second.lock()->committed = true;
  CHECK(g.settle_completion());
  CHECK_FALSE(g.open());
  CHECK(g.record().snapshot == R"({"try":2})");
  CHECK(g.pending_completion() == nullptr);
  CHECK_FALSE(g.settle_completion());  // once
  REQUIRE(seen.events.size() == 1);
  CHECK(seen.events[0].kind == EventKind::committed);
}

TEST_CASE("guard_state: a claim that does not run the business answers without running it") {
  using idem::detail::outcome_without_running;
  const GuardState replayed_success(
      "test::Guard", claim_answer(Verdict::replayed, 1, idem::Status::succeeded, R"(42)"), nullptr,
      EventKind::store_error);
  const std::optional<idem::Outcome<int>> success = outcome_without_running<int>(replayed_success);
  REQUIRE(success);
  CHECK(success->verdict() == Verdict::replayed);
  CHECK(success->value() == 42);

  const GuardState replayed_failure(
      "test::Guard",
      claim_answer(Verdict::replayed, 1, idem::Status::failed, R"({"error":"card_declined"})"),
      nullptr, EventKind::store_error);
  const std::optional<idem::Outcome<int>> failure = outcome_without_running<int>(replayed_failure);
  REQUIRE(failure);
  CHECK(failure->failed());
  CHECK(failure->error()["error"] == "card_declined");

  const GuardState busy("test::Guard", claim_answer(Verdict::in_progress), nullptr,
                        EventKind::store_error);
  const std::optional<idem::Outcome<int>> none = outcome_without_running<int>(busy);
  REQUIRE(none);
  CHECK(none->verdict() == Verdict::in_progress);
  CHECK_FALSE(none->has_value());
  CHECK_THROWS_WITH(busy.replay<int>(),
                    "test::Guard::replay(): the verdict is in_progress, not replayed");

  const GuardState acquired = acquired_state(nullptr);
  CHECK_FALSE(outcome_without_running<int>(acquired));
}
