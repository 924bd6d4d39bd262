// idem::async::OffloadStore: a blocking SQLite store used from a loop thread, its calls run on
// a thread pool, with the same outcomes and a loop that keeps serving; repair, list and
// record_step on the pool as well.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <catch2/catch.hpp>
#include <idem/async.hpp>
#include <idem/sqlite.hpp>

#include "../support/async_scenarios.hpp"
#include "../support/loop.hpp"
#include "../support/sqlite_file.hpp"
#include "optional_operations.hpp"

namespace net = idem::async::net;
using namespace std::chrono_literals;

TEST_CASE(
    "async offload: SQLite through a thread pool runs once, replays, and leaves the loop "
    "thread free") {
  idem_test::TempDir dir;
  idem::sqlite::Store sqlite{dir / "offload.db"};
  net::thread_pool calls{2};
  idem::async::OffloadStore store{sqlite, calls.get_executor()};
  net::io_context io;
  const auto loop_thread = std::this_thread::get_id();
  int ran = 0;
  int answered = 0;
  bool business_on_loop = true;
  for (int i = 0; i < 50; ++i) {
    net::co_spawn(
        io,
        [&, i]() -> net::awaitable<void> {
          auto body = [&]() -> net::awaitable<int> {
            ++ran;
            business_on_loop = business_on_loop && std::this_thread::get_id() == loop_thread;
            co_await idem::async::sleep_for(1ms);
            co_return i % 10;
          };
          // Five duplicates of each of ten keys.
          const auto out = co_await idem::async::run_once(store, {"PAY", std::to_string(i % 10)},
                                                          "fp", body, {.wait = 5s});
          if (out && out.value() == i % 10) ++answered;
        },
        net::detached);
  }
  io.run();
  CHECK(ran == 10);
  CHECK(answered == 50);
  CHECK(business_on_loop);  // the business resumes on the loop; only the store's calls moved
  CHECK(sqlite.find({"PAY", "3"})->status == idem::Status::succeeded);
  // Errors come back through the co_await, as from the store itself.
  auto bad = [&]() -> net::awaitable<void> {
    co_await store.claim({"PAY", "x"}, "fp", {.lease = -1s});
  };
  std::exception_ptr error;
  net::co_spawn(io, bad(), [&](std::exception_ptr e) { error = e; });
  io.restart();
  io.run();
  REQUIRE(error);
  CHECK_THROWS_AS(std::rethrow_exception(error), idem::InvalidArgument);
  calls.join();
}

TEST_CASE(
    "async offload: repair, list and record_step run on the pool, with the store's answers "
    "and errors") {
  idem::ManualClock clock;
  const auto loop_thread = std::this_thread::get_id();
  std::atomic<int> on_loop{0};
  std::atomic<int> calls{0};
  // The memory store reads its clock in every call: where the clock is read, the call ran.
  idem::MemoryStore memory{[&] {
    ++calls;
    if (std::this_thread::get_id() == loop_thread) ++on_loop;
    return clock.now();
  }};
  net::thread_pool pool{2};
  idem::async::OffloadStore store{memory, pool.get_executor()};
  static_assert(idem::async::RepairingAsyncStore<decltype(store)> &&
                idem::async::ListingAsyncStore<decltype(store)> &&
                idem::async::RecoveryPointAsyncStore<decltype(store)>);
  net::io_context io;
  idem_test::run_on(io, [&]() -> net::awaitable<int> {
    co_await idem_test::exercise_optional_operations(store,
                                                     [&](idem::Duration d) { clock.advance(d); });
    co_return 0;
  }());
  CHECK(calls > 10);
  CHECK(on_loop == 0);
  pool.join();
}

TEST_CASE("async offload: SQLite's repair, list and record_step through the pool") {
  idem_test::TempDir dir;
  idem::ManualClock clock;
  idem::sqlite::Store sqlite{dir / "optional_operations.db",
                             idem::sqlite::StoreParams{.clock = [&clock] { return clock.now(); }}};
  net::thread_pool pool{2};
  idem::async::OffloadStore store{sqlite, pool.get_executor()};
  net::io_context io;
  idem_test::run_on(io, [&]() -> net::awaitable<int> {
    co_await idem_test::exercise_optional_operations(store,
                                                     [&](idem::Duration d) { clock.advance(d); });
    co_return 0;
  }());
  CHECK(sqlite.find({"PAY", "ab-1"})->status == idem::Status::succeeded);
  pool.join();
}

// The caller's cancellation never reaches the call on the pool (Boost 1.81's co_spawn would carry
// it there through a signal freed with the caller's frame), and the cancelled request's claim is
// settled before its call returns.
TEST_CASE(
    "async offload: requests cancelled at any point (||, parallel_group, a signal) never crash, "
    "and each leaves its key settled when its call returns") {
  idem::MemoryStore memory;
  net::thread_pool calls{2};
  idem::async::OffloadStore store{memory, calls.get_executor()};
  const auto r = idem_test::cancel_at_random(store, 400, 17);
  std::printf("async offload cancel: %d of %d requests cancelled in %d rounds\n", r.cancelled,
              r.requests, r.rounds);
  CHECK(r.cancelled > 20);
  CHECK(r.finished > 0);
  CHECK(r.processing_after == 0);
  CHECK(idem_test::replayed_or_ran(store, r, 400) == r.requests);
  calls.join();
}

TEST_CASE(
    "async offload: SQLite - requests cancelled at any point leave each key settled when their "
    "call returns") {
  idem_test::TempDir dir;
  idem::sqlite::Store sqlite{dir / "cancel.db"};
  net::thread_pool calls{2};
  idem::async::OffloadStore store{sqlite, calls.get_executor()};
  const auto r = idem_test::cancel_at_random(store, 200, 19);
  CHECK(r.cancelled > 20);
  CHECK(r.finished > 0);
  CHECK(r.processing_after == 0);
  CHECK(idem_test::replayed_or_ran(store, r, 200) == r.requests);
  calls.join();
}

TEST_CASE(
    "async offload: SQLite - one loop thread, 1,000 concurrent requests at 12% duplicates - "
    "executions equal keys") {
  idem_test::TempDir dir;
  idem::sqlite::Store sqlite{dir / "storm.db"};
  net::thread_pool calls{4};
  idem::async::OffloadStore store{sqlite, calls.get_executor()};
  const auto storm = idem_test::storm_of(1000, 53);
  idem_test::Executions executions;
  const auto r = idem_test::async_storm(store, storm, executions);
  idem_test::check_storm(r, storm, executions);
  calls.join();
}

TEST_CASE(
    "async offload: SQLite - a 1 ms timer on the loop keeps firing while claims are on the "
    "pool") {
  idem_test::TempDir dir;
  idem::sqlite::Store sqlite{dir / "ticks.db"};
  net::thread_pool calls{4};
  idem::async::OffloadStore store{sqlite, calls.get_executor()};
  const auto r = idem_test::ticks_while_claiming(store, 64, 2000);
  std::printf(
      "async offload (SQLite): %d ticks of 1 ms (%d with claims in flight), latest by %lld us, "
      "up to %d claims in flight\n",
      r.ticks, r.ticks_in_flight, r.latest_us, r.most_in_flight);
  CHECK(r.done == 64);
  CHECK(r.most_in_flight > 1);
  CHECK(r.ticks_in_flight > 0);
  calls.join();
}

TEST_CASE(
    "async offload: SQLite - a batch cancelled at any point leaves no processing claim behind") {
  idem_test::TempDir dir;
  idem::sqlite::Store sqlite{dir / "batches.db"};
  net::thread_pool calls{2};
  idem::async::OffloadStore store{sqlite, calls.get_executor()};
  const auto r = idem_test::cancel_batches_at_random(store, 8, 150, 31);
  const auto left = idem_test::batch_keys_left(store, r, 8, 150);
  idem_test::check_cancelled_batches("async offload (SQLite)", r, 8, left.processing, left.cut_off,
                                     left.made_before);
  calls.join();
}

namespace {

// A memory store whose claims take a while on the pool's thread, and are counted.
struct SlowClaims : idem::MemoryStore {
  std::atomic<int> claims{0};
  idem::ClaimResult claim(const idem::Key& key, std::string_view fp, const idem::Options& o) {
    ++claims;
    std::this_thread::sleep_for(20ms);
    return MemoryStore::claim(key, fp, o);
  }
};

}  // namespace

TEST_CASE(
    "async offload: a request cancelled while its claim was on the pool stops waiting for "
    "another caller's claim instead of polling on") {
  SlowClaims memory;
  const auto held = memory.claim({"PAY", "held"}, "fp", {.lease = 1h});  // another caller's
  REQUIRE(held.verdict == idem::Verdict::acquired);
  memory.claims = 0;
  net::thread_pool calls{1};
  idem::async::OffloadStore store{memory, calls.get_executor()};
  net::io_context io;
  const auto first = idem_test::run_on(io, [&]() -> net::awaitable<int> {
    using namespace net::experimental::awaitable_operators;
    net::steady_timer timer(co_await net::this_coro::executor, 5ms);  // cuts the first claim
    auto body = []() -> net::awaitable<int> { co_return 1; };
    const auto r =
        co_await (idem::async::run_once(store, {"PAY", "held"}, "fp", body, {.wait = 10s}) ||
                  timer.async_wait(net::use_awaitable));
    co_return static_cast<int>(r.index());
  }());
  CHECK(first == 1);
  CHECK(memory.claims == 1);  // no claim after the cancellation
  calls.join();
}
