#pragma once
// idem::run_once: claim -> execute -> record in one call.
//
//   auto out = idem::run_once(store, key, fp, [&] { return charge(card); }, options);
//   if (out) use(out.value());                   // ran now, or replayed the first response
//   else if (out.failed()) decline(out.error()); // a recorded permanent failure
//   else if (out.verdict() == idem::Verdict::in_progress) ask_to_retry_later();
//   else if (out.verdict() == idem::Verdict::outcome_unknown) ask_to_retry_much_later();
//   else reject_mismatch();                      // conflict
//
// fn may take an idem::Attempt<S>& (idem/attempt.hpp): a business made of steps keeps each
// finished step's result with the key, passes step_key()s downstream, and may complete the
// action in its last local transaction (Attempt::complete).
//
// An exception from fn records a retryable failure and propagates. idem::PermanentFailure
// records a non-retryable failure and comes back as a failed Outcome (verdict acquired), in
// the same shape every later duplicate replays it. idem::EffectUnknown (an effect outside the
// store that may have happened) marks the record outcome_unknown and comes back as an Outcome
// with that verdict, as every later duplicate meets it until a resolver or a repair settles it.

#include <concepts>
#include <functional>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "idem/attempt.hpp"
#include "idem/errors.hpp"
#include "idem/guard.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/outcome.hpp"
#include "idem/permanent_failure.hpp"
#include "idem/serializable.hpp"
#include "idem/store.hpp"

namespace idem {

namespace detail {

// fn() or, for a business that wants its claim's view (steps, keys for downstream),
// fn(attempt) (idem/attempt.hpp).
template <class F, class A>
decltype(auto) invoke_business(F& fn, A& attempt) {
  if constexpr (std::invocable<F&, A&>) {
    return std::invoke(fn, attempt);
  } else {
    return std::invoke(fn);
  }
}

template <class F, class A>
using business_result_t =
    std::decay_t<decltype(invoke_business(std::declval<F&>(), std::declval<A&>()))>;

}  // namespace detail

template <Store S, class F>
requires std::invocable<F&> || std::invocable < F&, Attempt<S>
& > auto run_once(S& store, const Key& key, std::string_view fingerprint, F&& fn,
                  const Options& options = {})
        -> Outcome<detail::business_result_t<F, Attempt<S>>> {
  using T = detail::business_result_t<F, Attempt<S>>;
  static_assert(!std::is_void_v<T>,
                "idem::run_once: fn must return the response to record (e.g. a bool or a json)");
  static_assert(Serializable<T>,
                "idem::run_once: fn's result must be serialisable by nlohmann_json");

  IdempotencyGuard guard{store, key, fingerprint, options};
  if (auto answered = detail::outcome_without_running<T>(guard.state())) return *answered;

  std::optional<T> value;
  try {
    Attempt<S> attempt = guard.attempt();
    value.emplace(detail::invoke_business(fn, attempt));
  } catch (const PermanentFailure& e) {
    guard.fail(e.error(), false);
    return Outcome<T>::failure(Verdict::acquired, e.error(), guard.record());
  } catch (const EffectUnknown& e) {
    if constexpr (detail::MarksUnknown<S>) {
      guard.mark_unknown(e.what());
      return Outcome<T>::none(Verdict::outcome_unknown, guard.record());
    } else {
      throw;
    }
  }
  // Other exceptions from fn propagate; the guard's destructor records a retryable failure.

  try {
    guard.commit(*value);
  } catch (const InvalidArgument& e) {
    guard.fail(detail::unstorable_response(e), false);
    throw;
  }
  return Outcome<T>::success(Verdict::acquired, std::move(*value), guard.record());
}

}  // namespace idem
