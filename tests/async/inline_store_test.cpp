// idem::async::InlineStore: a MemoryStore's repair, list and record_step as coroutines, with the
// memory store's answers and errors.
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <idem/async.hpp>
#include <idem/idem.hpp>

#include "../support/async_scenarios.hpp"
#include "../support/loop.hpp"
#include "optional_operations.hpp"

namespace net = idem::async::net;

TEST_CASE("async inline store: repair, list and record_step answer as the memory store does") {
  idem::ManualClock clock;
  idem::MemoryStore memory{[&clock] { return clock.now(); }};
  idem::async::InlineStore store{memory};
  static_assert(idem::async::RepairingAsyncStore<decltype(store)> &&
                idem::async::ListingAsyncStore<decltype(store)> &&
                idem::async::RecoveryPointAsyncStore<decltype(store)>);
  net::io_context io;
  idem_test::run_on(io, [&]() -> net::awaitable<int> {
    co_await idem_test::exercise_optional_operations(store,
                                                     [&](idem::Duration d) { clock.advance(d); });
    co_return 0;
  }());
  CHECK(memory.find({"PAY", "ab-1"})->status == idem::Status::succeeded);
}

TEST_CASE(
    "async inline store: requests cancelled at any point (||, parallel_group, a signal) leave "
    "each key settled when their call returns") {
  idem::MemoryStore memory;
  idem::async::InlineStore store{memory};
  const auto r = idem_test::cancel_at_random(store, 400, 23);
  CHECK(r.cancelled > 20);
  CHECK(r.finished > 0);
  CHECK(r.processing_after == 0);
  CHECK(idem_test::replayed_or_ran(store, r, 400) == r.requests);
}

TEST_CASE(
    "async inline store: one loop thread, 1,000 concurrent requests at 12% duplicates - "
    "executions equal keys") {
  idem::MemoryStore memory;
  idem::async::InlineStore store{memory};
  const auto storm = idem_test::storm_of(1000, 59);
  idem_test::Executions executions;
  const auto r = idem_test::async_storm(store, storm, executions);
  idem_test::check_storm(r, storm, executions);
}
