#pragma once
// Running a coroutine to its end from a test: the async tests' one way to do it.
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <idem/async/net.hpp>

namespace idem_test {

// Runs the coroutine on `io` until the loop has no more work (so also whatever it left
// running there), and returns its result or throws its exception.
template <class T>
T run_on(boost::asio::io_context& io, idem::async::net::awaitable<T> a) {
  namespace net = idem::async::net;
  std::optional<std::conditional_t<std::is_void_v<T>, bool, T>> out;
  std::exception_ptr error;
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        if constexpr (std::is_void_v<T>) {
          co_await std::move(a);
          out.emplace(true);
        } else {
          out.emplace(co_await std::move(a));
        }
      },
      [&](std::exception_ptr e) { error = e; });
  io.restart();
  io.run();
  if (error) std::rethrow_exception(error);
  if constexpr (!std::is_void_v<T>) return std::move(*out);
}

// The loop the shared scenarios (async_scenarios.hpp) run on: one per test thread, so that a
// store whose connections live on a loop (idem::redis::AsyncPool) can be made on it first.
inline boost::asio::io_context& test_loop() {
  thread_local boost::asio::io_context io;
  return io;
}

}  // namespace idem_test
