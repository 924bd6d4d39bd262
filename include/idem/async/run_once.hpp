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
// fn returns the response, or a net::awaitable of it (a coroutine). It may take an
// idem::async::Attempt<S>& (idem/async/attempt.hpp): a business made of steps keeps each
// finished step's result with the key, and passes step_key()s downstream. With
// options.resolvers, a crashed attempt's resolver may answer for it (idem/async/guard.hpp):
// the Outcome is then a replay, or has the verdict outcome_unknown. An exception from fn
// records a retryable failure before it propagates; idem::PermanentFailure records a
// permanent one and comes back as a failed Outcome; idem::EffectUnknown marks the record
// outcome_unknown and comes back with that verdict (as with idem::run_once). A coroutine cancelled
// while fn runs records the retryable failure too (the cancellation reaches fn as an exception), so
// the next duplicate runs again at once; a cancellation after fn returned does not stop its
// response from being recorded. Either record is written before run_once completes.

#include <concepts>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "idem/async/attempt.hpp"
#include "idem/async/guard.hpp"
#include "idem/async/net.hpp"
#include "idem/async/store.hpp"
#include "idem/errors.hpp"
#include "idem/guard_state.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/outcome.hpp"
#include "idem/permanent_failure.hpp"
#include "idem/serializable.hpp"

namespace idem::async {

namespace detail {

// What a business answers: fn(attempt) when fn takes its attempt, else fn().
template <class F, class A, bool = std::invocable<F&, A&>>
struct BusinessResponse {
  using type = response_of<F>;
};
template <class F, class A>
struct BusinessResponse<F, A, true> {
  using type = response_of<F, A>;
};
template <class F, class A>
using business_response_t = typename BusinessResponse<F, A>::type;

// fn() or, for a business that wants its claim's view (steps, keys for downstream),
// fn(attempt) (idem/async/attempt.hpp), co_awaited when it is a coroutine.
template <class F, class A>
net::awaitable<business_response_t<F, A>> invoke_business(F& fn, A& attempt) {
  if constexpr (std::invocable<F&, A&>) {
    co_return co_await invoke_awaiting(fn, attempt);
  } else {
    co_return co_await invoke_awaiting(fn);
  }
}

// run_once's record of what the business did: the business's exception (the claim abandoned,
// then the exception rethrown), an unknown effect, a permanent failure, or its response.
template <class T, class S>
net::awaitable<Outcome<T>> record_result(IdempotencyGuard<S>& guard, std::optional<T> value,
                                         std::optional<nlohmann::json> permanent,
                                         std::optional<std::string> unknown,
                                         std::exception_ptr thrown) {
  if (thrown) {
    co_await guard.abandon();
    std::rethrow_exception(thrown);
  }
  if constexpr (MarksUnknown<S>) {
    if (unknown) {
      co_await guard.mark_unknown(*unknown);
      co_return Outcome<T>::none(Verdict::outcome_unknown, guard.record());
    }
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

}  // namespace detail

template <AwaitableStore S, class F>
requires std::invocable<F&> || std::invocable < F&, Attempt<S>
& > auto run_once(S& store, Key key, std::string fingerprint, F fn, Options options = {})
        -> net::awaitable<Outcome<detail::business_response_t<F, Attempt<S>>>> {
  using T = detail::business_response_t<F, Attempt<S>>;
  static_assert(!std::is_void_v<T>,
                "idem::async::run_once: fn must return the response to record (e.g. a bool or a "
                "json), or an awaitable of it");
  static_assert(Serializable<T>,
                "idem::async::run_once: fn's result must be serialisable by nlohmann_json");

  auto guard =
      co_await IdempotencyGuard<S>::claim(store, std::move(key), std::move(fingerprint), options);
  if (auto answered = idem::detail::outcome_without_running<T>(guard.state())) co_return *answered;

  std::optional<T> value;
  std::optional<nlohmann::json> permanent;
  std::optional<std::string> unknown;
  std::exception_ptr thrown;
  try {
    Attempt<S> attempt = guard.attempt();
    value.emplace(co_await detail::invoke_business(fn, attempt));
  } catch (const PermanentFailure& e) {
    permanent = e.error();
  } catch (const EffectUnknown& e) {
    if constexpr (detail::MarksUnknown<S>) {
      unknown = e.what();
    } else {
      thrown = std::current_exception();
    }
  } catch (...) {
    thrown = std::current_exception();
  }
  // What happened is recorded before run_once returns, also when this coroutine was cancelled
  // meanwhile: Asio's refusal of a cancelled coroutine's co_awaits is off until then, and the
  // records run to their end (idem/async/detail/to_completion.hpp). The caller's cancellation
  // shows at its own next co_await.
  const bool throws = co_await net::this_coro::throw_if_cancelled();
  co_await net::this_coro::throw_if_cancelled(false);
  std::optional<Outcome<T>> outcome;
  std::exception_ptr failed;
  try {
    outcome.emplace(co_await detail::record_result(guard, std::move(value), std::move(permanent),
                                                   std::move(unknown), thrown));
  } catch (...) {
    failed = std::current_exception();
  }
  co_await net::this_coro::throw_if_cancelled(throws);
  if (failed) std::rethrow_exception(failed);
  co_return std::move(*outcome);
}

}  // namespace idem::async
