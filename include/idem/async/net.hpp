#pragma once
// idem::async runs on Boost.Asio's C++20 coroutines: every asynchronous call of idem returns a
// net::awaitable<T>, to co_await on any Asio executor. docs/async.md says why Boost.Asio
// (rather than standalone Asio).
//
// An awaitable is lazy: it starts when co_awaited and refers to its arguments until then, so
// co_await it in the expression that made it.

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <functional>
#include <type_traits>
#include <utility>

#include "idem/clock.hpp"
#include "idem/errors.hpp"

// GCC 12 at -O2 reports -Wmismatched-new-delete on the frames of Asio's coroutines: once the
// frame's own operator new and delete are inlined it pairs them wrongly (GCC PR 109224), a false
// positive. The headers whose coroutines meet it in a service's -O2 build open and close this
// region (tests/user_build/async_o2.cpp is such a build).
#if defined(__GNUC__) && !defined(__clang__)
#define IDEM_ASYNC_FRAMES_BEGIN \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmismatched-new-delete\"")
#define IDEM_ASYNC_FRAMES_END _Pragma("GCC diagnostic pop")
#else
#define IDEM_ASYNC_FRAMES_BEGIN
#define IDEM_ASYNC_FRAMES_END
#endif

namespace idem::async {

namespace net = boost::asio;

namespace detail {

// What a call answers: T for a net::awaitable<T>, else the call's own result.
template <class R>
struct Awaited {
  using type = R;
};
template <class T, class E>
struct Awaited<net::awaitable<T, E>> {
  using type = T;
};

// What fn(args...) answers, co_awaited when fn is a coroutine.
template <class F, class... Args>
using response_of = std::decay_t<typename Awaited<std::invoke_result_t<F&, Args&...>>::type>;

// fn(args...), co_awaited when it returns an awaitable: a business or a step may be a
// coroutine or a plain function.
template <class F, class... Args>
net::awaitable<response_of<F, Args...>> invoke_awaiting(F& fn, Args&... args) {
  if constexpr (std::is_same_v<std::invoke_result_t<F&, Args&...>,
                               net::awaitable<response_of<F, Args...>>>) {
    co_return co_await std::invoke(fn, args...);
  } else {
    co_return std::invoke(fn, args...);
  }
}

}  // namespace detail

// Suspends the calling coroutine for `d` on its executor's timer: the loop thread serves
// other work meanwhile.
inline net::awaitable<void> sleep_for(Duration d) {
  net::steady_timer timer(co_await net::this_coro::executor, d);
  co_await timer.async_wait(net::use_awaitable);
}

namespace detail {

// The coroutine driver of a retry loop (the blocking one is idem::backend::retrying,
// idem/backend/retry_loop.hpp): co_awaits one_try() until it answers. When it throws a StoreError,
// failed(error) (called in the handler, so it may rethrow with `throw;`) ends the loop by
// throwing or answers the pause, waited on a timer.
template <class R, class Try, class Failed>
net::awaitable<R> retrying(Try one_try, Failed failed) {
  for (;;) {
    Duration pause{};
    try {
      co_return co_await one_try();
    } catch (const StoreError& e) {
      pause = failed(e);
    }
    co_await sleep_for(pause);
  }
}

}  // namespace detail

}  // namespace idem::async
