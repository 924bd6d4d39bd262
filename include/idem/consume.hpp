#pragma once
// idem::consume: at-least-once message consumption that runs the business once per key.
//
//   // The key is the business number the message carries (order number + biz type), never
//   // the broker's message id: a redelivered message may get a new id, and a producer that
//   // retried may have sent the same business event twice under two ids.
//   idem::Ack ack = idem::consume(store, idem::Key{"order.paid", msg.order_no},
//                                 idem::fingerprint(msg.body), [&] { apply(msg); }, options);
//   if (ack == idem::Ack::commit) consumer.commit(msg); else consumer.nack(msg);  // redeliver
//
// The rules (ack.verdict and ack.reason say which one applied):
//   acquired, fn returns         -> result recorded             -> commit
//   acquired, fn throws PermanentFailure -> failure recorded    -> commit (duplicates replay it)
//   acquired, fn throws EffectUnknown -> record outcome_unknown -> retry_later (as below)
//   acquired, fn throws anything else -> retryable failure recorded -> retry_later
//   replayed (success or permanent failure)  -> fn not run      -> commit
//   in_progress (another consumer holds it)  -> fn not run      -> retry_later
//   conflict (same key, another payload)     -> fn not run      -> commit: redelivery can never
//                                               succeed; send it to your dead-letter queue.
//   outcome_unknown (an earlier attempt died mid-effect) -> fn not run -> retry_later: the
//                                               record waits for a resolver pass or a repair.
// Store failures (idem::StoreError, also when the business's own SQL throws one) and a lost
// lease (idem::LeaseLost) propagate as exceptions: do not acknowledge the message; its
// redelivery is answered by the record. (In same-transaction mode this lets
// with_transaction run the transaction again after a deadlock.)
//
// fn may return void or a value that nlohmann_json serialises; the value is stored as the
// record's snapshot (void stores null).
//
// consume_batch does the same for a polled batch with one batch claim (idem/batch.hpp):
//   std::vector<idem::Ack> acks = idem::consume_batch(store, requests,
//                                                     [&](std::size_t i) { apply(batch[i]); });

#include <chrono>
#include <concepts>
#include <cstddef>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/batch.hpp"
#include "idem/errors.hpp"
#include "idem/guard.hpp"
#include "idem/key.hpp"
#include "idem/observer.hpp"
#include "idem/options.hpp"
#include "idem/permanent_failure.hpp"
#include "idem/serializable.hpp"
#include "idem/status.hpp"
#include "idem/store.hpp"
#include "idem/store/abilities.hpp"
#include "idem/verdict.hpp"

namespace idem {

struct Ack {
  enum Action { commit, retry_later };

  Action action = retry_later;
  Verdict verdict = Verdict::in_progress;  // what the claim answered
  std::string reason;                      // empty for a plain success; else why

  friend bool operator==(const Ack& ack, Action wanted) noexcept { return ack.action == wanted; }
};

constexpr std::string_view to_string(Ack::Action a) noexcept {
  return a == Ack::commit ? "commit" : "retry_later";
}

namespace detail {

// The answer to a message whose claim was not ours to run.
inline Ack ack_without_running(Verdict verdict, const Record& stored) {
  switch (verdict) {
    case Verdict::replayed:
      return {Ack::commit, verdict,
              stored.status == Status::succeeded ? "" : "replayed a recorded permanent failure"};
    case Verdict::in_progress:
      return {Ack::retry_later, verdict, "another consumer is processing this key"};
    case Verdict::conflict:
      return {Ack::commit, verdict,
              "the key was used before with another payload; redelivery cannot succeed"};
    case Verdict::outcome_unknown:
      return {Ack::retry_later, verdict,
              "an earlier attempt's outcome is unknown; a resolver pass or an operator's repair "
              "settles it"};
    case Verdict::acquired:
      break;
  }
  throw UsageError("idem::consume: an acquired claim must be run, not acknowledged");
}

template <class R>
struct Produced {
  R value;
};
template <>
struct Produced<void> {
  std::nullptr_t value = nullptr;  // stored as JSON null
};

// Runs fn under an acquired guard and records its result.
template <Store S, class F>
Ack run_acquired(IdempotencyGuard<S>& guard, F& fn) {
  using R = std::decay_t<std::invoke_result_t<F&>>;
  std::optional<Produced<R>> produced;
  const auto retry_later = [&](const std::string& what) -> Ack {
    guard.fail({{"error", "idem.consumer_exception"}, {"detail", what}}, true);
    return {Ack::retry_later, Verdict::acquired, what};
  };
  try {
    if constexpr (std::is_void_v<R>) {
      std::invoke(fn);
      produced.emplace();
    } else {
      produced.emplace(Produced<R>{std::invoke(fn)});
    }
  } catch (const PermanentFailure& e) {
    guard.fail(e.error(), false);
    return {Ack::commit, Verdict::acquired, e.what()};
  } catch (const EffectUnknown& e) {
    // Redelivered, the message meets an outcome_unknown record and waits for its resolver.
    if constexpr (detail::MarksUnknown<S>) {
      guard.mark_unknown(e.what());
      return {Ack::retry_later, Verdict::acquired, e.what()};
    } else {
      return retry_later(e.what());
    }
  } catch (const StoreError&) {
    // The database failed under the business (in same-transaction mode a deadlock has already
    // rolled back the claim with it): propagate, so that with_transaction can run the
    // transaction again. The guard's destructor records a retryable failure if it still can.
    throw;
  } catch (const std::exception& e) {
    return retry_later(e.what());
  } catch (...) {
    return retry_later("a non-standard exception");
  }
  try {
    guard.commit(produced->value);
  } catch (const InvalidArgument& e) {
    // The business ran but its result cannot be stored; running it again could repeat its
    // effect, so (as run_once does) the failure is recorded as permanent and rethrown.
    guard.fail(detail::unstorable_response(e), false);
    throw;
  }
  return {Ack::commit, Verdict::acquired, ""};
}

// A bound batch whose message `failed` must run again: the messages not yet run are released
// (not abandoned: this is no misuse) and every message is answered retry_later.
template <class S>
void roll_back_batch(S& store, std::vector<std::optional<IdempotencyGuard<S>>>& guards,
                     std::vector<Ack>& acks, std::size_t failed) {
  store.set_rollback_only();
  const std::string why =
      fmt::format("rolled back with message {} of the batch: {}", failed, acks[failed].reason);
  for (std::size_t j = 0; j < acks.size(); ++j) {
    if (j > failed && guards[j]) {
      guards[j]->fail({{"error", "idem.batch_rolled_back"}, {"detail", why}}, true);
    }
    if (j != failed)
      acks[j] = {Ack::retry_later, guards[j] ? Verdict::acquired : acks[j].verdict, why};
  }
}

}  // namespace detail

template <Store S, std::invocable F>
Ack consume(S& store, const Key& key, std::string_view fingerprint, F&& fn,
            const Options& options = {}) {
  using R = std::decay_t<std::invoke_result_t<F&>>;
  static_assert(std::is_void_v<R> || Serializable<R>,
                "idem::consume: fn must return void or a value nlohmann_json can serialise");
  IdempotencyGuard guard{store, key, fingerprint, options};
  if (!guard.acquired()) return detail::ack_without_running(guard.verdict(), guard.record());
  return detail::run_acquired(guard, fn);
}

// The batch form: acks[i] answers messages[i] with exactly the rules of consume(), after one
// idem::claim_batch for the whole batch. fn(i) runs message i (in order, on this thread) when
// its claim was acquired. If a store failure escapes for one message, the claims of the
// messages not yet run are released as retryable failures (or left to their lease), so their
// redeliveries run them.
// On a bound store the whole batch is one transaction: a message whose fn fails retryably
// rolls back the messages before it too, so then no further message runs, every ack is
// retry_later and the transaction is marked rollback-only (with_transaction rolls it back
// and returns the acks).
template <Store S, class F>
requires std::invocable<F&, std::size_t> std::vector<Ack> consume_batch(
    S& store, std::span<const ClaimRequest> messages, F&& fn, const Options& options = {}) {
  using R = std::decay_t<std::invoke_result_t<F&, std::size_t>>;
  static_assert(std::is_void_v<R> || Serializable<R>,
                "idem::consume_batch: fn must return void or a value nlohmann_json can serialise");
  const auto start = std::chrono::steady_clock::now();
  Observer* const observer = detail::observer_for(store, options.observer);
  std::vector<ClaimResult> claims;
  try {
    claims = claim_batch(store, messages, options);
  } catch (const StoreError& e) {
    const auto latency = std::chrono::steady_clock::now() - start;
    for (const ClaimRequest& m : messages) {
      detail::notify(observer, detail::store_failure_event<S>(), m.key, latency, options.context,
                     nullptr, &e);
    }
    throw;
  }
  if (observer != nullptr) {
    const auto latency = std::chrono::steady_clock::now() - start;
    for (const ClaimResult& c : claims)
      detail::notify(observer, detail::claim_event(c), c.record.key, latency, options.context,
                     &c.record);
  }

  // Every acquired claim gets its guard before anything runs, so that an escaping exception
  // releases the claims of the messages not yet run.
  std::vector<std::optional<IdempotencyGuard<S>>> guards(claims.size());
  std::vector<Ack> acks(claims.size());
  for (std::size_t i = 0; i < claims.size(); ++i) {
    if (claims[i].verdict == Verdict::acquired) {
      guards[i].emplace(store, std::move(claims[i]), observer, options.context);
    } else {
      acks[i] = detail::ack_without_running(claims[i].verdict, claims[i].record);
    }
  }
  for (std::size_t i = 0; i < claims.size(); ++i) {
    if (!guards[i]) continue;
    auto run = [&fn, i]() -> decltype(auto) { return std::invoke(fn, i); };
    acks[i] = detail::run_acquired(*guards[i], run);
    if constexpr (RollbackOnlyStore<S>) {
      if (acks[i] == Ack::retry_later) {
        detail::roll_back_batch(store, guards, acks, i);
        break;
      }
    }
  }
  return acks;
}

}  // namespace idem
