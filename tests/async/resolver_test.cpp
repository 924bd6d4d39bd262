// idem::async::ResolverCall: a blocking resolver asked from a coroutine, on a thread of its own,
// while the loop keeps serving; a cancelled wait ends the wait, not the call.
#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <idem/async.hpp>
#include <idem/idem.hpp>

#include "../support/loop.hpp"

namespace net = idem::async::net;
using namespace std::chrono_literals;
using namespace net::experimental::awaitable_operators;
using idem::Resolution;
using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

idem::Record record_of(std::string id) {
  return idem::backend::claim_record(idem::Key{"PAY", std::move(id)}, "owner", "",
                                     idem::system_now(), idem::Options{});
}

// A 1 ms timer on the loop, counting its ticks and the longest gap between two of them.
struct Ticker {
  int ticks = 0;
  Clock::duration longest_gap{};
  bool stop = false;

  net::awaitable<void> run() {
    auto last = Clock::now();
    while (!stop) {
      co_await idem::async::sleep_for(1ms);
      const auto now = Clock::now();
      longest_gap = std::max(longest_gap, now - last);
      last = now;
      ++ticks;
    }
  }
};

}  // namespace

TEST_CASE(
    "async resolver call: the answer comes back on the loop thread, which kept ticking "
    "while the resolver slept") {
  idem::Resolvers resolvers;
  resolvers.add("PAY", [](const idem::Record& r, const idem::ResolveContext&) {
    std::this_thread::sleep_for(400ms);
    return Resolution::happened(json{{"charge", r.key.id()}});
  });
  net::io_context io;
  Ticker ticker;
  const auto loop_thread = std::this_thread::get_id();
  std::optional<Resolution> answer;
  bool resumed_on_loop = false;
  Clock::duration took{};
  net::co_spawn(io, ticker.run(), net::detached);
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        const auto t0 = Clock::now();
        answer.emplace(co_await idem::async::resolve(resolvers, record_of("T-1")));
        took = Clock::now() - t0;
        resumed_on_loop = std::this_thread::get_id() == loop_thread;
        ticker.stop = true;
      },
      net::detached);
  io.run();
  REQUIRE(answer);
  CHECK(answer->kind() == Resolution::Kind::happened);
  CHECK(json::parse(answer->snapshot()) == json{{"charge", "T-1"}});
  CHECK(resumed_on_loop);
  CHECK(took >= 400ms);
  // A loop blocked by the resolver would have stood still for its 400 ms.
  CHECK(ticker.ticks >= 50);
  CHECK(ticker.longest_gap < 250ms);
}

TEST_CASE(
    "async resolver call: a cancelled wait ends at once, the call goes on, and a second "
    "wait gets its answer") {
  std::atomic<int> calls{0};
  idem::Resolvers resolvers;
  resolvers.add("PAY", [&](const idem::Record&, const idem::ResolveContext&) {
    ++calls;
    std::this_thread::sleep_for(300ms);
    return Resolution::not_happened();
  });
  net::io_context io;
  std::optional<std::size_t> winner;
  std::optional<Resolution> later;
  Clock::duration cancelled_after{};
  Clock::duration answered_after{};
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        const auto t0 = Clock::now();
        idem::async::ResolverCall call(resolvers, record_of("T-2"),
                                       co_await net::this_coro::executor);
        net::steady_timer timeout(co_await net::this_coro::executor, 20ms);
        const auto first = co_await (call.answer() || timeout.async_wait(net::use_awaitable));
        winner = first.index();
        cancelled_after = Clock::now() - t0;
        later.emplace(co_await call.answer());
        answered_after = Clock::now() - t0;
      },
      net::detached);
  io.run();
  REQUIRE(winner);
  CHECK(*winner == 1);  // the timeout
  CHECK(cancelled_after < 200ms);
  REQUIRE(later);
  CHECK(later->kind() == Resolution::Kind::not_happened);
  CHECK(answered_after >= 300ms);
  CHECK(calls == 1);  // one call, waited for twice
}

TEST_CASE("async resolver call: the loop runs until the thread of an abandoned call ended") {
  std::atomic<bool> finished{false};
  idem::Resolvers resolvers;
  resolvers.add("PAY", [&](const idem::Record&, const idem::ResolveContext&) {
    std::this_thread::sleep_for(200ms);
    finished = true;
    return Resolution::not_happened();
  });
  net::io_context io;
  const auto t0 = Clock::now();
  idem_test::run_on(io, [&]() -> net::awaitable<int> {
    // Started and never waited for.
    idem::async::ResolverCall call(resolvers, record_of("T-3"), co_await net::this_coro::executor);
    co_return 0;
  }());
  CHECK(finished);
  CHECK(Clock::now() - t0 >= 200ms);
}

TEST_CASE("async resolver call: one that throws or overruns answers unknown, as Resolvers does") {
  std::atomic<bool> released{false};
  std::atomic<bool> finished{false};
  idem::Resolvers resolvers;
  resolvers.add("PAY", [](const idem::Record&, const idem::ResolveContext&) -> Resolution {
    throw std::runtime_error("gateway refused the lookup");
  });
  resolvers.add("SLOW",
                [&](const idem::Record&, const idem::ResolveContext&) {
                  while (!released)
                    std::this_thread::sleep_for(1ms);
                  finished = true;
                  return Resolution::happened(1);
                },
                {.time_limit = 50ms});
  net::io_context io;
  const Resolution thrown = idem_test::run_on(io, idem::async::resolve(resolvers, record_of("1")));
  CHECK(thrown.kind() == Resolution::Kind::unknown);
  CHECK_THAT(thrown.snapshot(), Catch::Contains("gateway refused the lookup"));

  idem::Record slow = record_of("2");
  slow.key = idem::Key{"SLOW", "2"};
  const auto t0 = Clock::now();
  const Resolution overran = idem_test::run_on(io, idem::async::resolve(resolvers, slow));
  CHECK(overran.kind() == Resolution::Kind::unknown);
  CHECK_THAT(overran.snapshot(), Catch::Contains("50 ms"));
  CHECK(Clock::now() - t0 < 2s);
  released = true;
  for (int i = 0; i < 5000 && !finished; ++i)
    std::this_thread::sleep_for(1ms);
  CHECK(finished);
}
