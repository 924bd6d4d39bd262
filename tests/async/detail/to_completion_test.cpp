// idem::async::detail::to_completion: work that must end once begun runs to its end when its
// caller is cancelled, and the caller still sees its cancellation.
#include <chrono>
#include <optional>
#include <stdexcept>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <catch2/catch.hpp>
#include <idem/async/detail/to_completion.hpp>

#include "../../support/loop.hpp"

namespace net = idem::async::net;
using namespace std::chrono_literals;
using namespace net::experimental::awaitable_operators;

namespace {

struct Seen {
  bool work_ended = false;
  int answer = 0;
  bool caller_cancelled_after = false;
};

net::awaitable<int> to_completion_work(Seen& seen) {
  co_await idem::async::sleep_for(30ms);
  seen.work_ended = true;
  co_return 7;
}

net::awaitable<int> to_completion_caller(Seen& seen, std::optional<net::any_io_executor> executor) {
  seen.answer = co_await idem::async::detail::to_completion(to_completion_work(seen), executor);
  try {
    co_await idem::async::sleep_for(1ms);
  } catch (const boost::system::system_error&) {
    seen.caller_cancelled_after = true;
  }
  co_return seen.answer;
}

}  // namespace

TEST_CASE(
    "to_completion: a caller cancelled meanwhile waits for the work's end, then sees its "
    "cancellation - on its own executor and on another") {
  net::thread_pool other{1};
  for (const bool elsewhere : {false, true}) {
    net::io_context io;
    Seen seen;
    std::optional<net::any_io_executor> executor;
    if (elsewhere) executor = other.get_executor();
    const auto first = idem_test::run_on(io, [&]() -> net::awaitable<int> {
      net::steady_timer timer(co_await net::this_coro::executor, 2ms);
      const auto r =
          co_await (to_completion_caller(seen, executor) || timer.async_wait(net::use_awaitable));
      co_return static_cast<int>(r.index());
    }());
    CHECK(first == 1);  // the timer won
    CHECK(seen.work_ended);
    CHECK(seen.answer == 7);
    CHECK(seen.caller_cancelled_after);
  }
  other.join();
}

TEST_CASE("to_completion: the work's exception reaches the caller") {
  net::io_context io;
  auto failing = []() -> net::awaitable<int> {
    co_await idem::async::sleep_for(1ms);
    throw std::runtime_error("the work failed");
  };
  CHECK_THROWS_WITH(idem_test::run_on(io, idem::async::detail::to_completion(failing())),
                    "the work failed");
}
