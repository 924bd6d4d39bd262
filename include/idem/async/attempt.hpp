#pragma once
// idem::async::Attempt: idem::Attempt (idem/attempt.hpp) for coroutines, the business's view
// of its acquired claim when the business is made of steps whose effects lie outside the store.
//
//   auto out = co_await idem::async::run_once(store, key, fp,
//       [&](idem::async::Attempt<Store>& attempt) -> net::awaitable<Receipt> {
//         auto hold = co_await attempt.step("reserve", [&] { return stock.reserve(order); });
//         auto charge = co_await attempt.step("charge", [&]() -> net::awaitable<Charge> {
//           co_return co_await gateway.charge(order.amount, attempt.step_key("charge"));
//         });
//         co_return Receipt{hold, charge};
//       });
//
// A step's fn returns its result or an awaitable of it. Each result is kept with the key as
// the step finishes (the store's record_step); when a later claim takes over a crashed attempt,
// finished steps return their kept result without running, and only the unfinished ones run.
// A local step whose writes must commit together with its recovery point runs with a bound
// store of the transaction that carries those writes (idem::mysql::AsyncTransaction::bind):
// co_await attempt.step(bound, "reserve", fn).

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "idem/async/net.hpp"
#include "idem/async/store.hpp"
#include "idem/attempt.hpp"
#include "idem/backend/record_rules.hpp"
#include "idem/detail/recovery_points.hpp"
#include "idem/detail/snapshot.hpp"
#include "idem/guard_state.hpp"
#include "idem/key.hpp"
#include "idem/record.hpp"
#include "idem/serializable.hpp"

namespace idem::async {

template <AwaitableStore S>
class Attempt {
 public:
  Attempt(S& store, idem::detail::GuardState& state) : store_(store), state_(state) {}

  const Key& key() const noexcept { return state_.key(); }
  // The claim: fence, attempts, the recovery points it started with.
  const Record& claim() const noexcept { return state_.record(); }
  // 1 for the first attempt of the action, 2 for its first retry, ...
  std::uint32_t number() const noexcept { return state_.record().attempts; }
  // Whether this attempt took over one whose worker died mid-flight (idem::Attempt's).
  bool after_crash() const noexcept { return state_.after_crash(); }

  // idem::step_key: the same key for this step in every attempt, to pass downstream.
  std::string step_key(std::string_view step) const { return idem::step_key(key(), step); }

  // As idem::Attempt::step, co_awaiting fn when it is a coroutine: runs fn unless `step`
  // already finished in this or an earlier attempt, keeps its result with the key (LeaseLost
  // when the claim was taken over) and answers it. `step` is used until the step ends:
  // co_await it in the expression that made it.
  template <std::invocable F>
  requires RecoveryPointAsyncStore<S> net::awaitable<detail::response_of<F>> step(
      std::string_view step, F fn) {
    using T = detail::response_of<F>;
    static_assert(
        Serializable<T> && Deserializable<T>,
        "idem::async::Attempt::step: a step's result must be JSON-serialisable both ways");
    state_.require_open("step");
    idem::detail::check_step_name(step);
    if (auto kept = idem::detail::kept_result(state_.record().recovery_points, step)) {
      co_return idem::detail::decode_snapshot<T>(*kept);
    }
    T value = co_await detail::invoke_awaiting(fn);
    const std::string result = idem::detail::encode_snapshot(value);
    // A copy, not a view: guess_ may change while this coroutine is suspended.
    const std::string believed(guess());
    std::string points = co_await record(store_, step, result, believed);
    guess_ = points;
    state_.steps_recorded(std::move(points));
    co_return value;
  }

  // As idem::Attempt::step(bound, ...), co_awaiting fn when it is a coroutine: a local step.
  // fn's writes go through the transaction that `bound` (a store bound to that transaction,
  // e.g. idem::mysql::AsyncTransaction::bind) runs in, and the recovery point is written in the
  // same transaction, so both commit or neither does. The caller commits (with_transaction
  // does). A lost claim is LeaseLost from the point's write, before anything commits. `bound`
  // and `step` are used until the step ends: co_await it in the expression that made it.
  template <class Bound, std::invocable F>
  requires RecoveryPointAsyncStore<Bound> net::awaitable<detail::response_of<F>> step(
      Bound& bound, std::string_view step, F fn) {
    using T = detail::response_of<F>;
    static_assert(
        Serializable<T> && Deserializable<T>,
        "idem::async::Attempt::step: a step's result must be JSON-serialisable both ways");
    state_.require_open("step");
    idem::detail::check_step_name(step);
    // A copy, not a view: guess_ may change while this coroutine is suspended.
    std::string believed(guess());
    switch (idem::detail::local_step_start(state_.record().recovery_points, believed, step)) {
      case idem::detail::LocalStepStart::kept:
        co_return idem::detail::decode_snapshot<T>(
            *idem::detail::kept_result(state_.record().recovery_points, step));
      case idem::detail::LocalStepStart::read: {
        // (The answer is taken apart from the condition: GCC 12 miscompiles a throw after a
        // co_await inside an if's condition.)
        std::optional<Record> current = co_await bound.find(state_.key());
        if (!current || !backend::holds(*current, state_.ticket())) {
          throw backend::lease_lost("idem::async::Attempt", state_.key(), state_.ticket());
        }
        if (auto kept = idem::detail::kept_result(current->recovery_points, step)) {
          co_return idem::detail::decode_snapshot<T>(*kept);
        }
        believed = std::move(current->recovery_points);
        break;
      }
      case idem::detail::LocalStepStart::run:
        break;
    }
    T value = co_await detail::invoke_awaiting(fn);
    const std::string result = idem::detail::encode_snapshot(value);
    // Not copied into this attempt's view (its transaction may still roll back); only into the
    // belief of what is stored, which the next step's write checks instead of trusting.
    std::string points = co_await record(bound, step, result, believed);
    guess_ = std::move(points);
    co_return value;
  }

 private:
  // store.record_step, telling a store that can use it which points this attempt knows of (one
  // round trip instead of a read and a write; see idem::backend::StepSteps).
  template <class Into>
  net::awaitable<std::string> record(Into& store, std::string_view step, std::string_view result,
                                     std::string_view known) {
    const std::optional<std::string_view> points_known(known);
    if constexpr (requires {
                    store.record_step(state_.key(), state_.ticket(), step, result, points_known);
                  }) {
      co_return co_await store.record_step(state_.key(), state_.ticket(), step, result,
                                           points_known);
    } else {
      co_return co_await store.record_step(state_.key(), state_.ticket(), step, result);
    }
  }

  // What the store most likely holds: the view, or what a bound step wrote after it.
  std::string_view guess() const {
    return guess_ ? std::string_view(*guess_) : std::string_view(state_.record().recovery_points);
  }

  S& store_;
  idem::detail::GuardState& state_;
  std::optional<std::string> guess_;
};

}  // namespace idem::async
