#pragma once
// idem::Attempt: the business's view of its acquired claim, for a business made of steps whose
// effects lie outside the store (reserve stock, charge the gateway, mark the order paid).
//
//   auto out = idem::run_once(store, key, fp, [&](idem::Attempt<Store>& attempt) {
//     auto hold = attempt.step("reserve", [&] { return stock.reserve(order); });
//     auto charge = attempt.step("charge", [&] {
//       return gateway.charge(order.amount, attempt.step_key("charge"));  // the gateway dedups
//     });
//     return Receipt{hold, charge};
//   });
//
// Each step's result is kept with the key as it finishes (a recovery point). When a worker
// dies and a later claim takes its attempt over, finished steps return their kept result
// without running, and only the unfinished ones run. step_key() is a key derived from the
// idempotency key and the step name, the same in every attempt, to pass downstream: a
// gateway that deduplicates by it then deduplicates the step that was running when the
// worker died. A local step whose writes must commit together with its recovery point runs
// with a bound store of the transaction that carries those writes: attempt.step(tx, "reserve",
// fn). docs/recovery.md says which tool fits which effect.

#include <array>
#include <concepts>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "idem/backend/record_rules.hpp"
#include "idem/detail/recovery_points.hpp"
#include "idem/detail/snapshot.hpp"
#include "idem/fingerprint.hpp"
#include "idem/guard_state.hpp"
#include "idem/key.hpp"
#include "idem/optional_operations.hpp"
#include "idem/record.hpp"
#include "idem/serializable.hpp"
#include "idem/store.hpp"

namespace idem {

// A key for `step` of the action `key`, to pass to a downstream service that deduplicates by
// key (a payment gateway's Idempotency-Key): the same for every attempt of the action, and
// different for every other action or step. 64 lower-case hex characters (SHA-256 of the
// biz_type, the id and the step name, each length-prefixed so that no two triples collide).
inline std::string step_key(const Key& key, std::string_view step) {
  detail::check_step_name(step);
  std::string bytes;
  const std::array<std::string_view, 3> parts{key.biz_type(), key.id(), step};
  for (const std::string_view part : parts) {
    bytes += std::to_string(part.size());
    bytes += ':';
    bytes += part;
  }
  return detail::sha256_hex(bytes);
}

template <Store S>
class Attempt {
 public:
  Attempt(S& store, detail::GuardState& state) : store_(store), state_(state) {}

  const Key& key() const noexcept { return state_.key(); }
  // The claim: fence, attempts, the recovery points it started with.
  const Record& claim() const noexcept { return state_.record(); }
  // 1 for the first attempt of the action, 2 for its first retry, ...
  std::uint32_t number() const noexcept { return state_.record().attempts; }
  // Whether this attempt took over one whose worker died mid-flight: effects of that attempt
  // outside the store may have happened (finished steps say which; step_key() dedups the rest).
  bool after_crash() const noexcept { return state_.after_crash(); }

  std::string step_key(std::string_view step) const { return idem::step_key(key(), step); }

  // Runs fn unless `step` already finished in this or an earlier attempt of the action; keeps
  // its result with the key (fenced: LeaseLost when the claim was taken over) and returns it.
  // A kept result is decoded as fn's type (CorruptRecord when it does not decode).
  template <class F>
  requires RecoveryPointStore<S> && std::invocable<F&>
  auto step(std::string_view step, F&& fn) -> std::decay_t<std::invoke_result_t<F&>> {
    using T = std::decay_t<std::invoke_result_t<F&>>;
    static_assert(Serializable<T> && Deserializable<T>,
                  "idem::Attempt::step: a step's result must be JSON-serialisable both ways");
    state_.require_open("step");
    detail::check_step_name(step);
    if (auto kept = detail::kept_result(state_.record().recovery_points, step)) {
      return detail::decode_snapshot<T>(*kept);
    }
    T value = std::invoke(fn);
    std::string points = record(store_, step, detail::encode_snapshot(value), guess());
    guess_ = points;
    state_.steps_recorded(std::move(points));
    return value;
  }

  // A local step: fn's writes go through the transaction that `bound` (a store bound to that
  // transaction, e.g. idem::mysql::Store::bind) runs in, and the recovery point is written in
  // the same transaction, so both commit or neither does. The caller commits (with_transaction
  // does). A lost claim is LeaseLost from the point's write, before anything commits.
  template <class Bound, class F>
  requires RecoveryPointStore<Bound> && std::invocable<F&>
  auto step(Bound& bound, std::string_view step, F&& fn) -> std::decay_t<std::invoke_result_t<F&>> {
    using T = std::decay_t<std::invoke_result_t<F&>>;
    static_assert(Serializable<T> && Deserializable<T>,
                  "idem::Attempt::step: a step's result must be JSON-serialisable both ways");
    state_.require_open("step");
    detail::check_step_name(step);
    std::string_view believed = guess();
    std::optional<Record> current;
    switch (detail::local_step_start(state_.record().recovery_points, believed, step)) {
      case detail::LocalStepStart::kept:
        return detail::decode_snapshot<T>(
            *detail::kept_result(state_.record().recovery_points, step));
      case detail::LocalStepStart::read:
        current = bound.find(state_.key());
        if (!current || !backend::holds(*current, state_.ticket())) {
          throw backend::lease_lost("idem::Attempt", state_.key(), state_.ticket());
        }
        if (auto kept = detail::kept_result(current->recovery_points, step)) {
          return detail::decode_snapshot<T>(*kept);
        }
        believed = current->recovery_points;
        break;
      case detail::LocalStepStart::run:
        break;
    }
    T value = std::invoke(fn);
    // Not copied into this attempt's view (its transaction may still roll back); only into the
    // belief of what is stored, which the next step's write checks instead of trusting.
    guess_ = record(bound, step, detail::encode_snapshot(value), believed);
    return value;
  }

  // Completes the action with `response` inside the transaction `bound` runs in (a store bound
  // to it, e.g. idem::mysql::Store::bind), beside the business's last local writes: the
  // record becomes succeeded in the same COMMIT as they do, or neither happens. No recovery
  // point is needed for that last phase, and no write after it. Returns `response`, for the
  // business to return in turn. Commit before the business returns: with with_transaction
  // the commit itself tells the guard; in a transaction of the caller's own, the guard reads
  // the record once. A business that returns before that transaction committed, or returns
  // another response, gets UsageError from run_once (guard.commit), and nothing of it is
  // recorded as a success that did not commit.
  // Throws LeaseLost when the claim was taken over (nothing commits), InvalidArgument when
  // the response cannot be stored. Not in same-transaction mode, whose record commits with
  // the business's writes anyway: there the business returns its response.
  template <class Bound, Serializable T>
  requires(!in_caller_transaction_v<S>) &&
      requires(Bound& b, const Key& k, const Ticket& t, std::string_view v) {
    { b.complete(k, t, v) } -> std::same_as<void>;
  }
  T complete(Bound& bound, T response) {
    state_.require_open("complete");
    std::string snapshot = detail::encode_snapshot(response);
    bound.complete(state_.key(), state_.ticket(), snapshot);
    auto pending = state_.completion_written(std::move(snapshot));
    if constexpr (requires { bound.after_commit(std::function<void()>{}); }) {
      bound.after_commit([pending] {
        if (auto p = pending.lock()) p->committed = true;
      });
    }
    return response;
  }

 private:
  // store.record_step, telling a store that can use it which points this attempt knows of
  // (one round trip instead of a read and a write; see idem::backend::StepSteps).
  template <class Into>
  std::string record(Into& store, std::string_view step, const std::string& result,
                     std::string_view known) {
    if constexpr (requires {
                    store.record_step(state_.key(), state_.ticket(), step, result,
                                      std::optional<std::string_view>(known));
                  }) {
      return store.record_step(state_.key(), state_.ticket(), step, result,
                               std::optional<std::string_view>(known));
    } else {
      return store.record_step(state_.key(), state_.ticket(), step, result);
    }
  }

  // What the store most likely holds: the view, or what a bound step wrote after it.
  std::string_view guess() const {
    return guess_ ? std::string_view(*guess_) : std::string_view(state_.record().recovery_points);
  }

  S& store_;
  detail::GuardState& state_;
  std::optional<std::string> guess_;
};

}  // namespace idem
