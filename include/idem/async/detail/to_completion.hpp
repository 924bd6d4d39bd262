#pragma once
// Work that must end once begun (a guard's record of what happened, a cancelled claim's
// clean-up, a blocking call running on another executor) runs to its end whatever happens to
// the coroutine that awaits it. Asio cancels a coroutine in two ways:
// - A cancellation signal reaches the asynchronous operation in flight. to_completion runs the
//   work as a coroutine of its own (co_spawn) with no cancellation slot, so no signal reaches
//   it, and none is carried to another executor: Boost 1.81's co_spawn carries it through a
//   signal that dies with the caller's frame (a use-after-free while the work still runs).
// - Every later co_await of a cancelled coroutine throws operation_aborted before it starts,
//   unless this_coro::throw_if_cancelled(false). That setting belongs to the caller: idem turns
//   it off where what it starts must end (the claim's answer, the guard's records; see
//   idem::async::run_once) and restores the caller's setting after, so the caller still sees
//   its cancellation at its next co_await.

#include <optional>
#include <type_traits>
#include <utility>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include "idem/async/net.hpp"

namespace idem::async::detail {

// use_awaitable without a cancellation slot: the caller's cancellation does not reach the work.
inline auto uncancellable() {
  return net::bind_cancellation_slot(net::cancellation_slot(), net::use_awaitable);
}

// co_spawn hands its handler a default value beside an exception: an optional has one.
template <class T>
net::awaitable<std::optional<T>> optional_of(net::awaitable<T> work) {
  co_return co_await std::move(work);
}

// Runs `work` to its end on `executor` (by default the calling coroutine's); answers its result
// or rethrows its exception.
template <class T>
net::awaitable<T> to_completion(net::awaitable<T> work,
                                std::optional<net::any_io_executor> executor = std::nullopt) {
  if (!executor) executor = co_await net::this_coro::executor;
  if constexpr (std::is_void_v<T>) {
    co_await net::co_spawn(*executor, std::move(work), uncancellable());
  } else {
    co_return std::move(
        *co_await net::co_spawn(*executor, optional_of(std::move(work)), uncancellable()));
  }
}

}  // namespace idem::async::detail
