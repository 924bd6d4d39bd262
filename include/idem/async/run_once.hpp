#pragma once
// idem::async::run_once: claim -> execute -> record in one co_await, as idem::run_once
// (idem/run_once.hpp) does it in a thread, with the same Outcome<T>.
//
//   auto out = co_await idem::async::run_once(store, key, fp,
//                                             [&]() -> net::awaitable<Receipt> {
//                                               co_return co_await charge(card);
//                                             },
//                                             options);
//   if (out) use(out.value());
//
// fn returns the response, or a net::awaitable of it (a coroutine). An exception from fn
// records a retryable failure before it propagates; idem::PermanentFailure records a
// permanent one and comes back as a failed Outcome. A coroutine cancelled while fn runs
// records the retryable failure too (the cancellation reaches fn as an exception), so the
// next duplicate runs again at once.

#include <concepts>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "idem/async/guard.hpp"
#include "idem/async/net.hpp"
#include "idem/async/store.hpp"
#include "idem/detail/guard_state.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/outcome.hpp"
#include "idem/permanent_failure.hpp"
#include "idem/serializable.hpp"

namespace idem::async {

namespace detail {

// What fn answers, co_awaited when it is a coroutine.
template <class F>
using response_of = std::decay_t<typename Awaited<std::invoke_result_t<F&>>::type>;

template <class F>
net::awaitable<response_of<F>> invoke_awaiting(F& fn) {
  if constexpr (std::is_same_v<std::invoke_result_t<F&>, net::awaitable<response_of<F>>>) {
    co_return co_await std::invoke(fn);
  } else {
    co_return std::invoke(fn);
  }
}

}  // namespace detail

template <AsyncStore S, std::invocable F>
auto run_once(S& store, Key key, std::string fingerprint, F fn, Options options = {})
    -> net::awaitable<Outcome<detail::response_of<F>>> {
  using T = detail::response_of<F>;
  static_assert(!std::is_void_v<T>,
                "idem::async::run_once: fn must return the response to record (e.g. a bool or a "
                "json), or an awaitable of it");
  static_assert(Serializable<T>,
                "idem::async::run_once: fn's result must be serialisable by nlohmann_json");

  auto guard = co_await Guard<S>::claim(store, std::move(key), std::move(fingerprint), options);
  if (auto answered = idem::detail::outcome_without_running<T>(guard.state())) co_return *answered;

  std::optional<T> value;
  std::optional<nlohmann::json> permanent;
  std::exception_ptr thrown;
  try {
    value.emplace(co_await detail::invoke_awaiting(fn));
  } catch (const PermanentFailure& e) {
    permanent = e.error();
  } catch (...) {
    thrown = std::current_exception();
  }
  if (thrown) {
    co_await guard.abandon();  // no co_await inside a handler: recorded here, then rethrown
    std::rethrow_exception(thrown);
  }
  if (permanent) {
    co_await guard.fail(*permanent, false);
    co_return Outcome<T>::failure(Verdict::acquired, std::move(*permanent), guard.record());
  }

  std::optional<nlohmann::json> unstorable;
  try {
    co_await guard.commit(*value);
  } catch (const InvalidArgument& e) {
    unstorable = idem::detail::unstorable_response(e);
    thrown = std::current_exception();
  }
  if (unstorable) {
    co_await guard.fail(*unstorable, false);
    std::rethrow_exception(thrown);
  }
  co_return Outcome<T>::success(Verdict::acquired, std::move(*value), guard.record());
}

}  // namespace idem::async
