// idem::mysql::AsyncBoundStore's recovery points, repairs and lists on the real MariaDB server,
// inside coroutine transactions (with_transaction): a step's recovery point commits or rolls
// back with the business row beside it, a local step (async::Attempt::step(bound, ...)) of a
// pooled claim runs again after its transaction rolled back and never after it committed, a
// claim taken over refuses the step, a fenced repair applies in the transaction or is refused
// with the current record, and list answers the query, the transaction's own writes included.
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/testing/blocking_store.hpp>
#include <nlohmann/json.hpp>

#include "../support/mysql_async.hpp"

using namespace std::chrono_literals;
namespace net = idem::async::net;
using idem::Repair;
using idem::RepairAction;
using idem::mysql::AsyncBoundStore;
using idem::mysql::AsyncTransaction;
using idem_test::insert_row;
using idem_test::run_on;

// The bound store has the three optional operations, as its coroutine self and seen through the
// blocking adapter (idem/optional_operations.hpp).
static_assert(idem::async::RecoveryPointAsyncStore<AsyncBoundStore>);
static_assert(idem::async::RepairingAsyncStore<AsyncBoundStore>);
static_assert(idem::async::ListingAsyncStore<AsyncBoundStore>);
static_assert(idem::RecoveryPointStore<idem::testing::BlockingStore<AsyncBoundStore>>);
static_assert(idem::RepairingStore<idem::testing::BlockingStore<AsyncBoundStore>>);
static_assert(idem::ListingStore<idem::testing::BlockingStore<AsyncBoundStore>>);

namespace {

const idem::Options long_lease{.lease = 60s, .ttl = 1h};
const idem::Options short_lease{.lease = 100ms, .ttl = 1h};

// run_on answers a value: a store call that answers none, run to its end.
net::awaitable<bool> to_end(net::awaitable<void> call) {
  co_await std::move(call);
  co_return true;
}

nlohmann::json parsed(const std::string& points) {
  return nlohmann::json::parse(points.empty() ? "{}" : points);
}

std::vector<std::string> ids(const std::vector<idem::Record>& records) {
  std::vector<std::string> out;
  for (const idem::Record& r : records)
    out.emplace_back(r.key.id());
  return out;
}

}  // namespace

TEST_CASE(
    "async mysql bound: Attempt::step in a transaction commits its recovery point with the "
    "business row, or neither stays and the step runs again") {
  idem_test::AsyncTable t;
  idem_test::BusinessTable biz(t.blocking.pool);
  net::io_context io;
  using Attempt = idem::async::Attempt<AsyncBoundStore>;
  const idem::Key key{"ORDER", "abs-attempt"};
  int ran = 0;
  auto body = [&](bool throw_after) {
    return [&, throw_after](AsyncTransaction& tx) -> net::awaitable<std::string> {
      auto bound = tx.bind(t.store);
      auto business = [&](Attempt& attempt) -> net::awaitable<std::string> {
        const std::string hold =
            co_await attempt.step("reserve", [&]() -> net::awaitable<std::string> {
              ++ran;
              co_await insert_row(tx.connection(), biz.name, key.id());
              co_return "h-" + std::to_string(ran);
            });
        // The second step's write is guarded by the points the first one left (`known`).
        const std::string charge = co_await attempt.step("charge", [] { return std::string("c"); });
        if (throw_after) throw std::runtime_error("after the steps");
        co_return hold + "/" + charge;
      };
      const auto out = co_await idem::async::run_once(bound, key, "fp", business, long_lease);
      co_return out.value();
    };
  };

  // The body throws after its steps: the claim, the business row and the recovery points roll
  // back together.
  CHECK_THROWS_WITH(run_on(io, idem::mysql::with_transaction(*t.pool, body(true))),
                    "after the steps");
  CHECK(ran == 1);
  CHECK(biz.rows() == 0);
  CHECK(t.count() == 0);

  // The next delivery finds no kept step, runs it again and commits everything.
  CHECK(run_on(io, idem::mysql::with_transaction(*t.pool, body(false))) == "h-2/c");
  CHECK(ran == 2);
  CHECK(biz.rows() == 1);
  const auto stored = t.blocking.store.find(key);
  REQUIRE(stored);
  CHECK(stored->status == idem::Status::succeeded);
  CHECK(parsed(stored->recovery_points) == nlohmann::json{{"reserve", "h-2"}, {"charge", "c"}});
}

// The local step, async::Attempt::step(bound, name, fn), of a claim on the pooled store: as
// idem::Attempt's in tests/mysql/steps_test.cpp.
using PooledAttempt = idem::async::Attempt<idem::mysql::AsyncStore>;

TEST_CASE("async mysql bound: a local step commits with its business row, or neither stays") {
  idem_test::AsyncTable t;
  idem_test::BusinessTable biz(t.blocking.pool);
  net::io_context io;
  const idem::Key key{"ORDER", "abs-local"};
  int ran = 0;
  // The step "reserve" in a transaction of its own: fn inserts the business row `trade_no`
  // and answers `result`; the body throws after the step when `throw_after`.
  auto reserve = [&](PooledAttempt& attempt, std::string trade_no, std::string result,
                     bool throw_after) {
    return idem::mysql::with_transaction(
        *t.pool,
        [&, trade_no, result, throw_after](AsyncTransaction& tx) -> net::awaitable<std::string> {
          auto bound = tx.bind(t.store);
          std::string hold =
              co_await attempt.step(bound, "reserve", [&]() -> net::awaitable<std::string> {
                ++ran;
                co_await insert_row(tx.connection(), biz.name, trade_no);
                co_return result;
              });
          if (throw_after) throw std::runtime_error("after the step");
          co_return hold;
        });
  };

  // The body throws after its step: the transaction, and with it the step's row and its
  // recovery point, roll back; the claim fails retryably.
  CHECK_THROWS_AS(run_on(io, idem::async::run_once(
                                 t.store, key, "fp",
                                 [&](PooledAttempt& attempt) -> net::awaitable<std::string> {
                                   co_return co_await reserve(attempt, key.id(), "h-1", true);
                                 },
                                 long_lease)),
                  std::runtime_error);
  CHECK(ran == 1);
  CHECK(biz.rows() == 0);
  CHECK(t.blocking.store.find(key)->recovery_points.empty());
  CHECK(t.blocking.store.find(key)->status == idem::Status::failed);

  // The next attempt runs the step again (nothing was kept) and this time commits both.
  std::uint32_t number = 0;
  const auto out = run_on(io, idem::async::run_once(
                                  t.store, key, "fp",
                                  [&](PooledAttempt& attempt) -> net::awaitable<std::string> {
                                    number = attempt.number();
                                    co_return co_await reserve(attempt, key.id(), "h-2", false);
                                  },
                                  long_lease));
  CHECK(number == 2);
  REQUIRE(out);
  CHECK(out.value() == "h-2");
  CHECK(ran == 2);
  CHECK(biz.rows() == 1);
  CHECK(parsed(t.blocking.store.find(key)->recovery_points) == nlohmann::json{{"reserve", "h-2"}});

  // A claim taken over from a dead worker finds the committed step and does not run it again.
  const idem::Key crashed{"ORDER", "abs-local-crashed"};
  const auto first = run_on(io, t.store.claim(crashed, "fp", short_lease));
  REQUIRE(first.verdict == idem::Verdict::acquired);
  run_on(io, idem::mysql::with_transaction(
                 *t.pool, [&](AsyncTransaction& tx) -> net::awaitable<std::string> {
                   auto bound = tx.bind(t.store);
                   co_await insert_row(tx.connection(), biz.name, crashed.id());
                   co_return co_await bound.record_step(crashed, first.record.ticket, "reserve",
                                                        R"("h-3")");
                 }));
  std::this_thread::sleep_for(200ms);  // the worker "died": its lease runs out
  bool after_crash = false;
  const auto resumed =
      run_on(io, idem::async::run_once(
                     t.store, crashed, "fp",
                     [&](PooledAttempt& attempt) -> net::awaitable<std::string> {
                       after_crash = attempt.after_crash();
                       co_return co_await reserve(attempt, crashed.id(), "again", false);
                     },
                     long_lease));
  CHECK(after_crash);
  REQUIRE(resumed);
  CHECK(resumed.value() == "h-3");
  CHECK(ran == 2);
  CHECK(biz.rows("trade_no = 'abs-local-crashed'") == 1);
}

TEST_CASE(
    "async mysql bound: a local step rolled back with its transaction runs again, and a later "
    "step reads") {
  idem_test::AsyncTable t;
  idem_test::BusinessTable biz(t.blocking.pool);
  net::io_context io;
  const idem::Key key{"ORDER", "abs-local-rolled-back"};
  int reserved = 0, tries = 0, shipped = 0;
  bool gave_up = false;
  std::string again;
  auto business = [&](PooledAttempt& attempt) -> net::awaitable<nlohmann::json> {
    // The first try's step writes its row and its recovery point, then the server rolls the
    // try back (a deadlock, say): with_transaction runs the body again, and the step with it,
    // although this attempt has seen its own point written.
    const std::string hold = co_await idem::mysql::with_transaction(
        *t.pool, [&](AsyncTransaction& tx) -> net::awaitable<std::string> {
          auto bound = tx.bind(t.store);
          std::string h =
              co_await attempt.step(bound, "reserve", [&]() -> net::awaitable<std::string> {
                ++reserved;
                co_await insert_row(tx.connection(), biz.name, key.id());
                co_return "h-" + std::to_string(reserved);
              });
          if (++tries == 1) throw idem::StoreError("deadlock (simulated)", true);
          co_return h;
        });
    // A step in a transaction the caller rolls back by hand, then another step: the second
    // one's write finds the points unlike this attempt believes and reads them again.
    try {
      co_await idem::mysql::with_transaction(
          *t.pool, [&](AsyncTransaction& tx) -> net::awaitable<void> {
            auto bound = tx.bind(t.store);
            co_await attempt.step(bound, "ship", [&] { return ++shipped; });
            throw std::runtime_error("the caller gives up on this transaction");
          });
    } catch (const std::runtime_error&) {
      gave_up = true;
    }
    const bool paid = co_await idem::mysql::with_transaction(
        *t.pool, [&](AsyncTransaction& tx) -> net::awaitable<bool> {
          auto bound = tx.bind(t.store);
          co_return co_await attempt.step(bound, "paid", [] { return true; });
        });
    // And the rolled-back step runs again.
    const int ship = co_await idem::mysql::with_transaction(
        *t.pool, [&](AsyncTransaction& tx) -> net::awaitable<int> {
          auto bound = tx.bind(t.store);
          co_return co_await attempt.step(bound, "ship", [&] { return ++shipped; });
        });
    // A step this attempt committed answers its result again, without running.
    again = co_await idem::mysql::with_transaction(
        *t.pool, [&](AsyncTransaction& tx) -> net::awaitable<std::string> {
          auto bound = tx.bind(t.store);
          co_return co_await attempt.step(bound, "reserve", [&] {
            ++reserved;
            return std::string("again");
          });
        });
    nlohmann::json out{{"hold", hold}, {"paid", paid}, {"ship", ship}};
    co_return out;
  };
  const auto out = run_on(io, idem::async::run_once(t.store, key, "fp", business, long_lease));
  REQUIRE(out);
  CHECK(out.value() == nlohmann::json{{"hold", "h-2"}, {"paid", true}, {"ship", 2}});
  CHECK(gave_up);
  CHECK(again == "h-2");
  CHECK(tries == 2);
  CHECK(reserved == 2);
  CHECK(shipped == 2);
  CHECK(biz.rows() == 1);
  CHECK(parsed(t.blocking.store.find(key)->recovery_points) ==
        nlohmann::json{{"reserve", "h-2"}, {"paid", true}, {"ship", 2}});
}

TEST_CASE(
    "async mysql bound: a local step of a claim taken over meanwhile is LeaseLost and rolls "
    "back") {
  idem_test::AsyncTable t;
  idem_test::BusinessTable biz(t.blocking.pool);
  net::io_context io;
  const idem::Options lease_200ms{.lease = 200ms, .ttl = 1h};
  int ran = 0;
  // The step "reserve" in a transaction of its own, its fn inserting the business row.
  auto reserve = [&](PooledAttempt& attempt, const idem::Key& key, bool throw_after) {
    return idem::mysql::with_transaction(
        *t.pool, [&, throw_after](AsyncTransaction& tx) -> net::awaitable<int> {
          auto bound = tx.bind(t.store);
          const int n = co_await attempt.step(bound, "reserve", [&]() -> net::awaitable<int> {
            ++ran;
            co_await insert_row(tx.connection(), biz.name, key.id());
            co_return 1;
          });
          if (throw_after) throw std::runtime_error("after the step");
          co_return n;
        });
  };
  // Another worker takes the record over (the lease ran out): answers its verdict.
  auto take_over = [&](const idem::Key& key) -> net::awaitable<idem::Verdict> {
    co_await idem::async::sleep_for(300ms);
    const auto other = co_await t.store.claim(key, "fp", long_lease);
    co_return other.verdict;
  };

  SECTION("a step nobody finished: its write, guarded by the claim, is refused") {
    const idem::Key key{"ORDER", "abs-local-taken-over"};
    std::optional<idem::Verdict> other;
    CHECK_THROWS_AS(run_on(io, idem::async::run_once(
                                   t.store, key, "fp",
                                   [&](PooledAttempt& attempt) -> net::awaitable<int> {
                                     other = co_await take_over(key);
                                     co_return co_await reserve(attempt, key, false);
                                   },
                                   lease_200ms)),
                    idem::LeaseLost);
    CHECK(other == idem::Verdict::acquired);
    CHECK(ran == 1);
    CHECK(biz.rows() == 0);
    CHECK(t.blocking.store.find(key)->recovery_points.empty());
  }
  SECTION("a step of this attempt's rolled-back transaction: its read finds the claim gone") {
    const idem::Key key{"ORDER", "abs-local-taken-over-read"};
    std::optional<idem::Verdict> other;
    bool rolled_back = false;
    CHECK_THROWS_AS(run_on(io, idem::async::run_once(
                                   t.store, key, "fp",
                                   [&](PooledAttempt& attempt) -> net::awaitable<int> {
                                     try {
                                       co_await reserve(attempt, key, true);
                                     } catch (const std::runtime_error&) {
                                       rolled_back = true;
                                     }
                                     other = co_await take_over(key);
                                     co_return co_await reserve(attempt, key, false);
                                   },
                                   lease_200ms)),
                    idem::LeaseLost);
    CHECK(rolled_back);
    CHECK(other == idem::Verdict::acquired);
    CHECK(ran == 1);  // the second time, the read refused the step before it ran
    CHECK(biz.rows() == 0);
    CHECK(t.blocking.store.find(key)->recovery_points.empty());
  }
}

TEST_CASE("async mysql bound: record_step refuses with LeaseLost once the claim was taken over") {
  idem_test::AsyncTable t;
  net::io_context io;
  const idem::Key key{"ORDER", "abs-lease-lost"};
  const auto first = run_on(io, t.store.claim(key, "fp", short_lease));
  REQUIRE(first.verdict == idem::Verdict::acquired);
  std::this_thread::sleep_for(200ms);  // the worker "died": its lease runs out
  const auto taken = run_on(io, t.store.claim(key, "fp", long_lease));
  REQUIRE(taken.verdict == idem::Verdict::acquired);
  REQUIRE(taken.after_crash);
  REQUIRE(taken.record.ticket.fence == first.record.ticket.fence + 1);

  auto step_of = [&](idem::Ticket ticket, std::optional<std::string_view> known) {
    return idem::mysql::with_transaction(
        *t.pool, [&, ticket, known](AsyncTransaction& tx) -> net::awaitable<std::string> {
          auto bound = tx.bind(t.store);
          co_return co_await bound.record_step(key, ticket, "reserve", R"("late")", known);
        });
  };
  // The old owner's step is refused, whether it reads first or writes first on what it knew.
  CHECK_THROWS_AS(run_on(io, step_of(first.record.ticket, std::nullopt)), idem::LeaseLost);
  CHECK_THROWS_AS(run_on(io, step_of(first.record.ticket, std::string_view(""))), idem::LeaseLost);
  CHECK(t.blocking.store.find(key)->recovery_points.empty());
  // The new owner's step is kept.
  CHECK(parsed(run_on(io, step_of(taken.record.ticket, std::nullopt))) ==
        nlohmann::json{{"reserve", "late"}});
  CHECK(parsed(t.blocking.store.find(key)->recovery_points) == nlohmann::json{{"reserve", "late"}});
}

TEST_CASE(
    "async mysql bound: a repair applies in the transaction, and is refused with the current "
    "record when the fence moved") {
  idem_test::AsyncTable t;
  net::io_context io;
  const idem::Key key{"PAY", "abs-repair"};
  const auto claim = run_on(io, t.store.claim(key, "fp", long_lease));
  REQUIRE(claim.verdict == idem::Verdict::acquired);
  const Repair complete{.action = RepairAction::complete,
                        .fence = claim.record.ticket.fence,
                        .snapshot = R"({"charge":"ch_1"})",
                        .reason = "gateway shows ch_1"};

  // Rolled back: nothing of the repair stays.
  run_on(io, idem::mysql::with_transaction(
                 *t.pool, [&](AsyncTransaction& tx) -> net::awaitable<idem::Record> {
                   auto bound = tx.bind(t.store);
                   tx.set_rollback_only();
                   co_return co_await bound.repair(key, complete);
                 }));
  CHECK(t.blocking.store.find(key) == claim.record);

  // Committed: what repair() answered is the row; outside the transaction, before its COMMIT,
  // the row was still the claim.
  std::optional<idem::Record> outside;
  const idem::Record done =
      run_on(io, idem::mysql::with_transaction(
                     *t.pool, [&](AsyncTransaction& tx) -> net::awaitable<idem::Record> {
                       auto bound = tx.bind(t.store);
                       idem::Record written = co_await bound.repair(key, complete);
                       outside = co_await t.store.find(key);
                       co_return written;
                     }));
  REQUIRE(outside);
  CHECK(outside->status == idem::Status::processing);
  CHECK(done.status == idem::Status::succeeded);
  CHECK(done.snapshot == R"({"charge":"ch_1"})");
  CHECK(done.repair_reason == "gateway shows ch_1");
  CHECK(done.ticket.fence == claim.record.ticket.fence + 1);
  CHECK(t.blocking.store.find(key) == done);
  // The crashed worker is fenced out.
  CHECK_THROWS_AS(run_on(io, to_end(t.store.complete(key, claim.record.ticket, "1"))),
                  idem::LeaseLost);

  // The same repair again: the fence moved on, refused with the record as it is.
  auto repair_of = [&](idem::Key k, Repair r) {
    return idem::mysql::with_transaction(
        *t.pool, [&, k, r](AsyncTransaction& tx) -> net::awaitable<idem::Record> {
          auto bound = tx.bind(t.store);
          co_return co_await bound.repair(k, r);
        });
  };
  try {
    run_on(io, repair_of(key, complete));
    FAIL("a repair at a fence that moved on was applied");
  } catch (const idem::RepairRefused& e) {
    REQUIRE(e.current().has_value());
    CHECK(*e.current() == done);
  }
  CHECK(t.blocking.store.find(key) == done);

  // No record: refused without one. A bad repair: refused before anything is sent.
  const Repair release{.action = RepairAction::release, .fence = 1, .reason = "gone"};
  try {
    run_on(io, repair_of(idem::Key{"PAY", "abs-repair-none"}, release));
    FAIL("a repair of a missing record was applied");
  } catch (const idem::RepairRefused& e) {
    CHECK_FALSE(e.current().has_value());
  }
  const Repair no_snapshot{
      .action = RepairAction::complete, .fence = done.ticket.fence, .reason = "no snapshot"};
  CHECK_THROWS_AS(run_on(io, repair_of(key, no_snapshot)), idem::InvalidArgument);
  CHECK(t.count() == 1);
}

TEST_CASE(
    "async mysql bound: list answers what a RecordQuery asks, the transaction's own rows too") {
  // Claim-first: this transaction's claim is a row it can list (a record-last one is not
  // written before its result).
  idem_test::AsyncTable t(8, {.bound_claim = idem::BoundClaim::claim_first});
  net::io_context io;
  auto finished = [&](const idem::Key& key) {
    const auto c = run_on(io, t.store.claim(key, "fp", long_lease));
    run_on(io, to_end(t.store.complete(key, c.record.ticket, "1")));
    std::this_thread::sleep_for(10ms);  // distinct updated_at: the order is by last update
  };
  finished({"LSTA", "a1"});
  finished({"LSTB", "b1"});
  finished({"LSTA", "a2"});
  run_on(io, t.store.claim({"LSTA", "a3"}, "fp", long_lease));
  run_on(io, t.store.claim({"LSTC", "c1"}, "fp", short_lease));
  std::this_thread::sleep_for(200ms);  // c1's lease runs out: stale

  const idem::RecordQuery succeeded_a{.status = idem::Status::succeeded, .biz_type = "LSTA"};
  const idem::RecordQuery processing_a{.status = idem::Status::processing, .biz_type = "LSTA"};
  const idem::RecordQuery oldest_succeeded{.status = idem::Status::succeeded, .limit = 2};
  const idem::RecordQuery stale{.stale = true};
  const idem::Key own{"LSTA", "a4"};
  const auto lists = run_on(
      io, idem::mysql::with_transaction(
              *t.pool,
              [&](AsyncTransaction& tx) -> net::awaitable<std::vector<std::vector<idem::Record>>> {
                auto bound = tx.bind(t.store);
                const auto mine = co_await bound.claim(own, "fp", long_lease);
                std::vector<std::vector<idem::Record>> out;
                out.push_back(co_await bound.list(succeeded_a));
                out.push_back(co_await bound.list(processing_a));
                out.push_back(co_await bound.list(oldest_succeeded));
                out.push_back(co_await bound.list(stale));
                co_await bound.complete(own, mine.record.ticket, "1");
                co_return out;
              }));
  REQUIRE(lists.size() == 4);
  CHECK(ids(lists[0]) == std::vector<std::string>{"a1", "a2"});
  CHECK(ids(lists[1]) == std::vector<std::string>{"a3", "a4"});  // a4: this transaction's claim
  CHECK(ids(lists[2]) == std::vector<std::string>{"a1", "b1"});
  CHECK(ids(lists[3]) == std::vector<std::string>{"c1"});
  for (const idem::Record& r : lists[0])
    CHECK(r == *t.blocking.store.find(r.key));

  // A bad query is refused before anything is sent.
  const idem::RecordQuery bad{.limit = 0};
  CHECK_THROWS_AS(run_on(io, idem::mysql::with_transaction(
                                 *t.pool,
                                 [&](AsyncTransaction& tx) -> net::awaitable<std::size_t> {
                                   auto bound = tx.bind(t.store);
                                   co_return (co_await bound.list(bad)).size();
                                 })),
                  idem::InvalidArgument);
}
