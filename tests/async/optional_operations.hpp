#pragma once
// The optional operations every idem store has (repair, list, record_step), exercised through an
// async store: the same answers and errors as the blocking store behind it. Shared by the tests of
// InlineStore, OffloadStore and testing::BlockingStore.
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include <catch2/catch.hpp>
#include <idem/async/store.hpp>
#include <idem/idem.hpp>

namespace idem_test {

// `advance` moves the store's clock on.
template <idem::async::AwaitableStore S>
requires idem::async::RepairingAsyncStore<S> && idem::async::ListingAsyncStore<S> &&
    idem::async::RecoveryPointAsyncStore<S>
        idem::async::net::awaitable<void> exercise_optional_operations(
            S& store, std::function<void(idem::Duration)> advance) {
  using namespace std::chrono_literals;
  const idem::Key a{"PAY", "ab-1"}, b{"PAY", "ab-2"}, c{"REFUND", "ab-3"};
  const idem::Options options{.lease = 1s};

  // record_step: kept while the claim holds, the first result wins, fenced by the ticket.
  const idem::ClaimResult claim_a = co_await store.claim(a, "fp", options);
  REQUIRE(claim_a.verdict == idem::Verdict::acquired);
  const idem::Ticket& ticket = claim_a.record.ticket;
  CHECK(co_await store.record_step(a, ticket, "reserve", R"("hold-1")") ==
        R"({"reserve":"hold-1"})");
  CHECK(co_await store.record_step(a, ticket, "reserve", R"("hold-2")") ==
        R"({"reserve":"hold-1"})");
  const std::string points = co_await store.record_step(a, ticket, "charge", "7");
  CHECK(nlohmann::json::parse(points) == nlohmann::json{{"reserve", "hold-1"}, {"charge", 7}});
  bool lease_lost = false, bad_name = false;
  const idem::Ticket other_ticket{ticket.fence, "someone-else"};
  try {
    co_await store.record_step(a, other_ticket, "ship", "1");
  } catch (const idem::LeaseLost&) {
    lease_lost = true;
  }
  try {
    co_await store.record_step(a, ticket, "bad name", "1");
  } catch (const idem::InvalidArgument&) {
    bad_name = true;
  }
  CHECK(lease_lost);
  CHECK(bad_name);

  // list: stale claims by lease, then by status and biz_type. (Every braced value is built
  // in a statement of its own: GCC 12 miscompiles one inside an expression with co_await.)
  const idem::Options longer{.lease = 2s};
  const idem::ClaimResult claim_b = co_await store.claim(b, "fp", longer);
  const idem::ClaimResult claim_c = co_await store.claim(c, "fp", options);
  REQUIRE(claim_b.verdict == idem::Verdict::acquired);
  REQUIRE(claim_c.verdict == idem::Verdict::acquired);
  advance(3s);
  const idem::RecordQuery stale_query{.stale = true};
  const auto stale = co_await store.list(stale_query);
  REQUIRE(stale.size() == 3);
  CHECK(stale.back().key == b);  // the latest lease
  const idem::RecordQuery refund_query{.status = idem::Status::processing, .biz_type = "REFUND"};
  const auto refunds = co_await store.list(refund_query);
  REQUIRE(refunds.size() == 1);
  CHECK(refunds.front().key == c);
  const idem::RecordQuery first_query{.stale = true, .limit = 1};
  const auto first = co_await store.list(first_query);
  CHECK(first.size() == 1);
  bool bad_query = false;
  const idem::RecordQuery bad{.stale = true, .status = idem::Status::failed};
  try {
    co_await store.list(bad);
  } catch (const idem::InvalidArgument&) {
    bad_query = true;
  }
  CHECK(bad_query);

  // repair: fenced on the fence read, refused with the current record, keeps the reason.
  const idem::Repair complete{.action = idem::RepairAction::complete,
                              .fence = ticket.fence,
                              .snapshot = R"({"charge":"ch_1"})",
                              .reason = "the gateway shows ch_1"};
  const idem::Record done = co_await store.repair(a, complete);
  CHECK(done.status == idem::Status::succeeded);
  CHECK(done.ticket.fence == ticket.fence + 1);
  CHECK(done.repair_reason == "the gateway shows ch_1");
  CHECK(done.recovery_points == points);
  std::optional<idem::Record> refused_current;
  const idem::Repair late{
      .action = idem::RepairAction::release, .fence = ticket.fence, .reason = "late"};
  try {
    co_await store.repair(a, late);
  } catch (const idem::RepairRefused& e) {
    refused_current = e.current();
  }
  REQUIRE(refused_current);
  CHECK(refused_current->ticket.fence == done.ticket.fence);
  bool missing = false;
  const idem::Key none{"PAY", "ab-none"};
  const idem::Repair gone{.action = idem::RepairAction::release, .fence = 1, .reason = "gone"};
  try {
    co_await store.repair(none, gone);
  } catch (const idem::RepairRefused& e) {
    missing = !e.current();
  }
  CHECK(missing);
  bool bad_repair = false;
  const idem::Repair no_snapshot{.action = idem::RepairAction::complete, .fence = 1, .reason = "x"};
  try {
    co_await store.repair(b, no_snapshot);
  } catch (const idem::InvalidArgument&) {
    bad_repair = true;
  }
  CHECK(bad_repair);
  // A repaired record's late worker is fenced off.
  bool late_fenced = false;
  try {
    co_await store.complete(a, ticket, "1");
  } catch (const idem::LeaseLost&) {
    late_fenced = true;
  }
  CHECK(late_fenced);

  // mark_unknown, then listed by that status; a duplicate neither runs nor replays.
  const idem::Repair mark{
      .action = idem::RepairAction::mark_unknown, .fence = 1, .reason = "no answer"};
  const idem::Record unknown = co_await store.repair(b, mark);
  CHECK(unknown.status == idem::Status::outcome_unknown);
  const idem::RecordQuery unknown_query{.status = idem::Status::outcome_unknown};
  const auto unknowns = co_await store.list(unknown_query);
  REQUIRE(unknowns.size() == 1);
  CHECK(unknowns.front().key == b);
  const idem::ClaimResult duplicate = co_await store.claim(b, "fp", options);
  CHECK(duplicate.verdict == idem::Verdict::outcome_unknown);
}

}  // namespace idem_test
