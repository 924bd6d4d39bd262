#pragma once
// idem::consume: at-least-once message consumption that runs the business once per key.
//
//   // The key is the business number the message carries (order number + biz type), never
//   // the broker's message id: a redelivered message may get a new id, and a producer that
//   // retried may have sent the same business event twice under two ids.
//   idem::Ack ack = idem::consume(store, idem::Key{"order.paid", msg.order_no},
//                                 idem::fingerprint(msg.body), [&] { apply(msg); }, options);
//   switch (ack.action) {
//     case idem::Ack::commit: consumer.ack(msg); break;
//     case idem::Ack::retry_later: consumer.redeliver(msg, ack.delay); break;
//     case idem::Ack::dead_letter: consumer.dead_letter(msg, ack.reason); break;
//   }
//
// The rules (ack.verdict and ack.reason say which one applied; options.consumer is the
// ConsumerPolicy that sets the delays and the attempts a key may have):
//   acquired, fn returns         -> result recorded             -> commit
//   acquired, fn throws PermanentFailure -> failure recorded    -> commit (duplicates replay it)
//   acquired, fn throws EffectUnknown -> record outcome_unknown -> retry_later (as below)
//   acquired, fn throws anything else (or a non-retryable StoreError of its own SQL)
//            -> retryable failure recorded -> retry_later, after the policy's delay; on the
//               key's last attempt: permanent failure recorded -> dead_letter
//   replayed (success or permanent failure)  -> fn not run      -> commit
//   replayed, the key's attempts exhausted   -> fn not run      -> dead_letter again: the
//                                               consumer that gave up may have died before
//                                               its dead letter went out
//   in_progress (another consumer holds it)  -> fn not run      -> retry_later
//   conflict (same key, another payload)     -> fn not run      -> dead_letter: redelivery can
//                                               never succeed.
//   outcome_unknown (an earlier attempt died mid-effect) -> fn not run -> retry_later: the
//                                               record waits for a resolver pass or a repair.
//   the message's check (the overload with `check`) throws InvalidMessage -> no claim, no
//                                               record touched -> dead_letter
// Transient store failures (a retryable idem::StoreError, also when the business's own SQL
// throws one), any store failure outside the business, and a lost lease (idem::LeaseLost)
// propagate as exceptions: do not acknowledge the message; its redelivery is answered by the
// record. (In same-transaction mode this lets with_transaction run the transaction again
// after a deadlock.)
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
#include <cstdint>
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
#include "idem/consumer_policy.hpp"
#include "idem/errors.hpp"
#include "idem/guard.hpp"
#include "idem/key.hpp"
#include "idem/observer.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/permanent_failure.hpp"
#include "idem/serializable.hpp"
#include "idem/status.hpp"
#include "idem/store.hpp"
#include "idem/verdict.hpp"

namespace idem {

// What to do with a message: acknowledge it, have it delivered again after `delay`, or send it
// to the dead-letter queue (it can never succeed).
struct Ack {
  enum Action { commit, retry_later, dead_letter };

  Action action = retry_later;
  // What the claim answered; none when the message failed its check before the claim.
  std::optional<Verdict> verdict = Verdict::in_progress;
  std::string reason;  // empty for a plain success; else why
  Duration delay{};    // retry_later: how long the redelivery should wait; else zero

  friend bool operator==(const Ack& ack, Action wanted) noexcept { return ack.action == wanted; }
};

constexpr std::string_view to_string(Ack::Action a) noexcept {
  switch (a) {
    case Ack::commit:
      return "commit";
    case Ack::retry_later:
      return "retry_later";
    case Ack::dead_letter:
      return "dead_letter";
  }
  return "?";
}

// Thrown by a message's check (consume's overload with `check`) when the message must not claim
// its key: malformed, failing validation, or not authentic. The message is dead-lettered with
// this reason and no record is touched.
class InvalidMessage : public Error {
 public:
  using Error::Error;
};

namespace detail {

inline const ConsumerPolicy& consumer_policy(const Options& options) {
  static const ConsumerPolicy fallback{};
  return options.consumer != nullptr ? *options.consumer : fallback;
}

// A claim made before anything of the message ran: waited out through a store outage on a
// standalone store (a bound store's transaction is with_transaction's to run again).
template <class S, class Claim>
auto claim_message(const ConsumerPolicy& policy, Claim&& claim) -> decltype(claim()) {
  if constexpr (RollbackOnlyStore<S>) {
    return claim();
  } else {
    return through_store_outage(policy, claim);
  }
}

// The error of the permanent failure a key's last attempt records.
inline constexpr std::string_view attempts_exhausted = "idem.attempts_exhausted";

// Whether a stored record is the permanent failure of a key that ran out of attempts.
inline bool ran_out_of_attempts(const Record& stored) {
  if (stored.status != Status::failed || stored.retryable) return false;
  const auto error = nlohmann::json::parse(stored.snapshot, nullptr, false);
  return error.is_object() && error.value("error", "") == attempts_exhausted;
}

// The answer to a message whose claim was not ours to run.
inline Ack ack_without_running(Verdict verdict, const Record& stored,
                               const ConsumerPolicy& policy) {
  switch (verdict) {
    case Verdict::replayed:
      // A consumer may die between recording the last attempt and dead-lettering the
      // message: its redelivery is dead-lettered again (at least once, as everything else).
      if (ran_out_of_attempts(stored)) {
        return {Ack::dead_letter, verdict,
                fmt::format("replayed: gave up after {} attempts", stored.attempts)};
      }
      return {Ack::commit, verdict,
              stored.status == Status::succeeded ? "" : "replayed a recorded permanent failure"};
    case Verdict::in_progress:
      return {Ack::retry_later, verdict, "another consumer is processing this key",
              policy.first_delay};
    case Verdict::conflict:
      return {Ack::dead_letter, verdict,
              "the key was used before with another payload; redelivery cannot succeed"};
    case Verdict::outcome_unknown:
      return {Ack::retry_later, verdict,
              "an earlier attempt's outcome is unknown; a resolver pass or an operator's repair "
              "settles it",
              policy.delay_after(stored.attempts)};
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

// What a failed attempt records and answers: a retryable failure and retry_later after the
// policy's delay, or on the key's last attempt a permanent failure with the last error and
// dead_letter.
struct FailedAttempt {
  nlohmann::json retry;      // the retryable failure's error
  nlohmann::json exhausted;  // the last attempt's permanent failure
  bool last = false;
  std::uint32_t attempts = 0;  // this one included
  std::string what;
  Duration delay{};

  const nlohmann::json& error() const noexcept { return last ? exhausted : retry; }
  // `counted`: the store recorded the attempt (a bound store whose transaction rolls back
  // may not), so the last one gives up.
  Ack ack(bool counted) const {
    if (last && counted) {
      return {Ack::dead_letter, Verdict::acquired,
              fmt::format("gave up after {} attempts: {}", attempts, what)};
    }
    return {Ack::retry_later, Verdict::acquired, what, delay};
  }
};

inline FailedAttempt failed_attempt(const ConsumerPolicy& policy, const Key& key,
                                    std::uint32_t attempts, std::string what) {
  const std::uint32_t limit = policy.max_attempts_for(key.biz_type());
  FailedAttempt f;
  f.retry = {{"error", "idem.consumer_exception"}, {"detail", what}};
  f.exhausted = {{"error", attempts_exhausted}, {"attempts", attempts}, {"detail", what}};
  f.last = limit != 0 && attempts >= limit;
  f.attempts = attempts;
  f.delay = policy.delay_after(attempts);
  f.what = std::move(what);
  return f;
}

// What the business's exception means for its message (the table at the top of this file).
struct BusinessFailure {
  enum Kind {
    permanent,  // PermanentFailure: recorded as permanent; the message is acknowledged
    unknown,    // EffectUnknown: the record waits for its resolver
    transient,  // a retryable StoreError: propagates, the message is not acknowledged
    failed      // anything else: a failed attempt
  };
  Kind kind = failed;
  std::string what;
  nlohmann::json error;  // permanent: the failure to record
};

inline BusinessFailure business_failure(std::exception_ptr thrown) {
  try {
    std::rethrow_exception(thrown);
  } catch (const PermanentFailure& e) {
    return {BusinessFailure::permanent, e.what(), e.error()};
  } catch (const EffectUnknown& e) {
    return {BusinessFailure::unknown, e.what(), nullptr};
  } catch (const StoreError& e) {
    // A transient failure of the database under the business (in same-transaction mode a
    // deadlock has already rolled back the claim with it) propagates, so that with_transaction
    // can run the transaction again, or the message comes again. A non-retryable one of the
    // business's own SQL (a value out of range) fails again on every delivery: a failed attempt.
    if (e.retryable()) return {BusinessFailure::transient, e.what(), nullptr};
    return {BusinessFailure::failed, fmt::format("the business's SQL failed: {}", e.what()),
            nullptr};
  } catch (const std::exception& e) {
    return {BusinessFailure::failed, e.what(), nullptr};
  } catch (...) {
    return {BusinessFailure::failed, "a non-standard exception", nullptr};
  }
}

// Runs fn under an acquired guard and records its result.
template <Store S, class F>
Ack run_acquired(S& store, IdempotencyGuard<S>& guard, F& fn, const ConsumerPolicy& policy,
                 const Options& options) {
  using R = std::decay_t<std::invoke_result_t<F&>>;
  std::optional<Produced<R>> produced;
  const Key key = guard.record().key;
  const std::string fingerprint = guard.record().fingerprint;
  const std::uint32_t attempts = guard.record().attempts;  // this one included
  const auto failed = [&](std::string what) -> Ack {
    const FailedAttempt f = failed_attempt(policy, key, attempts, std::move(what));
    bool counted = true;
    if constexpr (RollbackOnlyStore<S>) {
      // The try rolls back, this claim with the business's writes; the store writes the
      // attempt once it has, or nobody counts it.
      guard.fail(f.retry, true);
      counted = false;
      if constexpr (AttemptCountingStore<S>) {
        counted = store.fail_after_rollback(key, fingerprint, options, f.error().dump(), !f.last);
      }
    } else {
      guard.fail(f.error(), !f.last);
    }
    return f.ack(counted);
  };
  std::exception_ptr thrown;
  try {
    if constexpr (std::is_void_v<R>) {
      std::invoke(fn);
      produced.emplace();
    } else {
      produced.emplace(Produced<R>{std::invoke(fn)});
    }
  } catch (...) {
    thrown = std::current_exception();
  }
  if (thrown) {
    BusinessFailure failure = business_failure(thrown);
    switch (failure.kind) {
      case BusinessFailure::permanent:
        guard.fail(failure.error, false);
        return {Ack::commit, Verdict::acquired, std::move(failure.what)};
      case BusinessFailure::unknown:
        // Redelivered, the message meets an outcome_unknown record and waits for its resolver.
        if constexpr (detail::MarksUnknown<S>) {
          guard.mark_unknown(failure.what);
          return {Ack::retry_later, Verdict::acquired, std::move(failure.what),
                  policy.delay_after(attempts)};
        }
        return failed(std::move(failure.what));
      case BusinessFailure::transient:
        // The guard's destructor records a retryable failure if it still can.
        std::rethrow_exception(thrown);
      case BusinessFailure::failed:
        return failed(std::move(failure.what));
    }
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

// A bound batch's message `failed` must run again, and the messages before it were written in
// the same transaction: the batch comes back whole. Why, for the records and the acks.
inline std::string batch_rollback_reason(const std::vector<Ack>& acks, std::size_t failed) {
  return fmt::format("rolled back with message {} of the batch: {}", failed, acks[failed].reason);
}
inline nlohmann::json batch_rollback_error(const std::string& why) {
  return {{"error", "idem.batch_rolled_back"}, {"detail", why}};
}
// Every message but the failed one is answered retry_later, when the failed one may run again.
template <class Guards>
void answer_rolled_back_batch(const Guards& guards, std::vector<Ack>& acks, std::size_t failed,
                              const std::string& why) {
  for (std::size_t j = 0; j < acks.size(); ++j) {
    if (j != failed) {
      acks[j] = {Ack::retry_later, guards[j] ? Verdict::acquired : acks[j].verdict, why,
                 acks[failed].delay};
    }
  }
}

// A bound batch whose message `failed` must run again: the messages not yet run are released
// (not abandoned: this is no misuse) and every message is answered retry_later.
template <class S>
void roll_back_batch(S& store, std::vector<std::optional<IdempotencyGuard<S>>>& guards,
                     std::vector<Ack>& acks, std::size_t failed) {
  store.set_rollback_only();
  const std::string why = batch_rollback_reason(acks, failed);
  for (std::size_t j = failed + 1; j < acks.size(); ++j) {
    if (guards[j]) guards[j]->fail(batch_rollback_error(why), true);
  }
  answer_rolled_back_batch(guards, acks, failed, why);
}

// A batch claims all its messages at once and runs them one after another, so the later
// messages' leases are spent while the earlier ones run. A message whose claim may be near
// its end (another consumer takes an expired claim over, and both would run it) is not
// started: a batch starts a message only while at least half of the lease is left, counted
// from before the claim was sent. The rest are failed retryably (past_window_error) for their
// redelivery. A store inside the caller's transaction needs no window: nothing it claims is
// seen by another consumer before the transaction commits.
class BatchWindow {
 public:
  explicit BatchWindow(Duration lease) : lease_(lease) {}

  void claiming() noexcept { claimed_from_ = std::chrono::steady_clock::now(); }
  bool open() const noexcept {
    return std::chrono::steady_clock::now() - claimed_from_ < lease_ / 2;
  }

 private:
  Duration lease_;
  std::chrono::steady_clock::time_point claimed_from_ = std::chrono::steady_clock::now();
};

inline nlohmann::json past_window_error() {
  return {{"error", "idem.batch_window"}};
}
inline Ack ack_past_window() {
  return {Ack::retry_later, Verdict::acquired,
          "not started: the batch reached this message with less than half of its lease left; "
          "its redelivery runs it"};
}

// A batch's claims reported as single claims are: each answer, or the failure for every message.
inline void report_batch_claims(Observer* observer, const std::vector<ClaimResult>& claims,
                                std::chrono::nanoseconds latency, std::string_view context) {
  if (observer == nullptr) return;
  for (const ClaimResult& c : claims)
    notify(observer, claim_event(c), c.record.key, latency, context, &c.record);
}
template <class S>
void report_batch_failure(Observer* observer, std::span<const ClaimRequest> messages,
                          std::chrono::nanoseconds latency, std::string_view context,
                          const StoreError& e) {
  for (const ClaimRequest& m : messages)
    notify(observer, store_failure_event<S>(), m.key, latency, context, nullptr, &e);
}

}  // namespace detail

template <Store S, std::invocable F>
Ack consume(S& store, const Key& key, std::string_view fingerprint, F&& fn,
            const Options& options = {}) {
  using R = std::decay_t<std::invoke_result_t<F&>>;
  static_assert(std::is_void_v<R> || Serializable<R>,
                "idem::consume: fn must return void or a value nlohmann_json can serialise");
  const ConsumerPolicy& policy = detail::consumer_policy(options);
  validate(policy);
  std::optional<IdempotencyGuard<S>> guard;
  detail::claim_message<S>(policy, [&] { guard.emplace(store, key, fingerprint, options); });
  if (!guard->acquired()) {
    return detail::ack_without_running(guard->verdict(), guard->record(), policy);
  }
  return detail::run_acquired(store, *guard, fn, policy, options);
}

// The same after `check()`, which runs first and may throw InvalidMessage: a malformed,
// invalid or forged message is then dead-lettered without claiming its key, so it can neither
// record a failure under the key nor hold it while the genuine message comes. Check there
// what makes the message unusable whoever sends it (its schema, its signature, the amount
// against the order); a business refusal of a well-formed message (insufficient funds) is a
// PermanentFailure of fn, recorded for its duplicates.
template <Store S, std::invocable C, std::invocable F>
Ack consume(S& store, const Key& key, std::string_view fingerprint, C&& check, F&& fn,
            const Options& options = {}) {
  validate(detail::consumer_policy(options));
  try {
    std::invoke(check);
  } catch (const InvalidMessage& e) {
    return {Ack::dead_letter, std::nullopt, e.what()};
  }
  return consume(store, key, fingerprint, std::forward<F>(fn), options);
}

// The batch form: acks[i] answers messages[i] with exactly the rules of consume(), after one
// idem::claim_batch for the whole batch. fn(i) runs message i (in order, on this thread) when
// its claim was acquired and at least half of the lease is left (detail::BatchWindow); a
// message reached later is released and answered retry_later. If a store failure escapes for
// one message, the claims of the messages not yet run are released as retryable failures (or
// left to their lease), so their redeliveries run them.
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
  const ConsumerPolicy& policy = detail::consumer_policy(options);
  validate(policy);
  const auto start = std::chrono::steady_clock::now();
  Observer* const observer = detail::observer_for(store, options.observer);
  detail::BatchWindow window(options.lease);
  std::vector<ClaimResult> claims;
  try {
    claims = detail::claim_message<S>(policy, [&] {
      window.claiming();
      return claim_batch(store, messages, options);
    });
  } catch (const StoreError& e) {
    detail::report_batch_failure<S>(observer, messages, std::chrono::steady_clock::now() - start,
                                    options.context, e);
    throw;
  }
  detail::report_batch_claims(observer, claims, std::chrono::steady_clock::now() - start,
                              options.context);

  // Every acquired claim gets its guard before anything runs, so that an escaping exception
  // releases the claims of the messages not yet run.
  std::vector<std::optional<IdempotencyGuard<S>>> guards(claims.size());
  std::vector<Ack> acks(claims.size());
  for (std::size_t i = 0; i < claims.size(); ++i) {
    if (claims[i].verdict == Verdict::acquired) {
      guards[i].emplace(store, std::move(claims[i]), observer, options.context);
    } else {
      acks[i] = detail::ack_without_running(claims[i].verdict, claims[i].record, policy);
    }
  }
  for (std::size_t i = 0; i < claims.size(); ++i) {
    if (!guards[i]) continue;
    if constexpr (!in_caller_transaction_v<S>) {
      if (!window.open()) {
        try {
          guards[i]->fail(detail::past_window_error(), true);
        } catch (const LeaseLost&) {   // taken over: the new owner runs it
        } catch (const StoreError&) {  // left to its guard's last try, or to its lease
        }
        acks[i] = detail::ack_past_window();
        continue;
      }
    }
    auto run = [&fn, i]() -> decltype(auto) { return std::invoke(fn, i); };
    acks[i] = detail::run_acquired(store, *guards[i], run, policy, options);
    if constexpr (RollbackOnlyStore<S>) {
      // Bound, a message that failed (to run again, or dead-lettered on its last attempt)
      // rolls back the transaction.
      if (acks[i] != Ack::commit) {
        detail::roll_back_batch(store, guards, acks, i);
        break;
      }
    }
  }
  return acks;
}

}  // namespace idem
