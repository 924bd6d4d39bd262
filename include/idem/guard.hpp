#pragma once
// idem::IdempotencyGuard: claim -> execute -> record, as a RAII guard.
//
//   idem::IdempotencyGuard guard{store, key, idem::fingerprint(body), options};
//   if (guard.acquired()) {
//     Receipt r = charge();
//     guard.commit(r);
//     return respond(r);
//   }
//   if (guard.verdict() == idem::Verdict::replayed) {
//     auto replay = guard.replay<Receipt>();         // an idem::Outcome<Receipt>
//     return replay ? respond(replay.value()) : decline(replay.error());
//   }
//   return guard.verdict() == idem::Verdict::in_progress ? busy() : mismatch();  // 409 / 422
//
// The constructor claims (and, with options.wait, waits for an in-progress claim to finish;
// with options.resolvers, asks the resolver about a crashed attempt it took over, see
// idem/resolver.hpp: the verdict may then be replayed or outcome_unknown).
// An acquired guard that is destroyed without commit() or fail() - an exception, an early
// return - records a retryable failure, so a retry may run again and no processing record is
// left behind; the destructor never throws. On a bound store (same-transaction mode) that
// also marks the transaction as not to be committed: with_transaction then rolls it back
// (and throws UsageError if no exception was on its way). With options.observer set, each
// step is reported to it (idem/observer.hpp).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/attempt.hpp"
#include "idem/backend/record_rules.hpp"
#include "idem/detail/snapshot.hpp"
#include "idem/errors.hpp"
#include "idem/guard_state.hpp"
#include "idem/key.hpp"
#include "idem/observer.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/outcome.hpp"
#include "idem/record.hpp"
#include "idem/repair.hpp"
#include "idem/resolver.hpp"
#include "idem/retry_policy.hpp"
#include "idem/serializable.hpp"
#include "idem/store.hpp"
#include "idem/verdict.hpp"

namespace idem {

namespace detail {

// The settling of an acquired claim that resumed a crashed attempt (after_crash) by the
// resolver of its biz_type, before the business runs (idem/resolver.hpp), as pure steps that
// the blocking guard (resolve_crashed) and the coroutine guard (idem/async/guard.hpp) drive:
// happened completes the record with the resolver's response (answered as a replay), unknown
// marks it outcome_unknown, not_happened leaves the claim to run. Both writes are fenced
// repairs on the claim's own fence; one refused means the lease ran out during the resolution
// and someone else holds the key now: answered in_progress.

// Whether the resolver is asked about this claim: one that resumed a crashed attempt, or any
// acquired claim during a window after a restore from a backup (ask_every_claim_until), both
// only for a biz_type with a resolver. `now`: the store's time of the claim.
inline bool resolver_settles(const ClaimResult& claim, const Options& options) {
  return claim.verdict == Verdict::acquired && options.resolvers != nullptr &&
         options.resolvers->asks(claim.record.key.biz_type(), claim.after_crash,
                                 claim.record.updated_at);
}

// The repair that carries out the resolver's answer, or nullopt: the claim runs the business.
inline std::optional<Repair> crash_repair(const Resolution& answer, const ClaimResult& claim) {
  return repair_for(answer, claim.record.ticket.fence, /*claiming=*/true);
}

// The claim's answer once that repair was written (`settled`: the record as written).
inline ClaimResult settled_claim(Record settled) {
  const Verdict v =
      settled.status == Status::succeeded ? Verdict::replayed : Verdict::outcome_unknown;
  return ClaimResult{v, std::move(settled), true};
}

// The claim's answer once that repair was refused.
inline ClaimResult refused_claim(const RepairRefused& e, const ClaimResult& claim) {
  return ClaimResult{Verdict::in_progress, e.current().value_or(claim.record), true};
}

// The repair an acquired claim writes over its own record when its business threw
// EffectUnknown: outcome_unknown under the claim's own fence, with what the business said.
// Only where the business's effect lies outside a transaction of the caller: in
// same-transaction mode its writes roll back anyway, and the exception is like any other.
inline Repair unknown_effect_repair(const Ticket& held, std::string_view what) {
  return Repair{.action = RepairAction::mark_unknown,
                .fence = held.fence,
                .snapshot = encode_error({{"error", "idem.effect_unknown"}, {"detail", what}}),
                .reason = "the business could not tell whether its effect happened"};
}

template <class S>
concept MarksUnknown = RepairingStore<S> && !in_caller_transaction_v<S>;

// Those steps with a blocking resolver call and repair.
template <Store S>
ClaimResult resolve_crashed(S& store, ClaimResult claim, const Options& options) {
  if constexpr (RepairingStore<S>) {
    if (!resolver_settles(claim, options)) return claim;
    const std::optional<Repair> repair =
        crash_repair(options.resolvers->resolve(claim.record), claim);
    if (!repair) return claim;
    try {
      return settled_claim(store.repair(claim.record.key, *repair));
    } catch (const RepairRefused& e) {
      return refused_claim(e, claim);
    }
  } else {
    return claim;
  }
}

// Claims; while the answer is in_progress and options.wait allows, sleeps and claims again
// (see ClaimWait); then settles a resumed crashed attempt (resolve_crashed).
template <Store S>
ClaimResult claim_with_wait(S& store, const Key& key, std::string_view fingerprint,
                            const Options& options) {
  validate(options);
  ClaimResult result = store.claim(key, fingerprint, options);
  ClaimWait wait(options, supports_wait_v<S>);
  while (const std::optional<Duration> pause = wait.pause(result)) {
    std::this_thread::sleep_for(*pause);
    result = store.claim(key, fingerprint, options);
  }
  return resolve_crashed(store, std::move(result), options);
}

// claim_with_wait, reported to options.observer (answer or store failure, with its latency).
template <Store S>
ClaimResult observed_claim(S& store, const Key& key, std::string_view fingerprint,
                           const Options& options) {
  Observer* observer = observer_for(store, options.observer);
  if (observer == nullptr) return claim_with_wait(store, key, fingerprint, options);
  const ClaimReport report(observer, key, store_failure_event<S>(), options.context);
  try {
    ClaimResult r = claim_with_wait(store, key, fingerprint, options);
    report.answered(r);
    return r;
  } catch (const StoreError& e) {
    report.failed(e);
    throw;
  }
}

}  // namespace detail

template <Store S>
class IdempotencyGuard {
 public:
  IdempotencyGuard(S& store, Key key, std::string_view fingerprint, Options options = {})
      : IdempotencyGuard(store, detail::observed_claim(store, key, fingerprint, options),
                         options.observer, options.context) {}

  // Adopts a claim made elsewhere (e.g. one result of idem::claim_batch): an acquired claim
  // becomes this guard's to commit or fail, exactly as if the guard had claimed it. The claim
  // itself is not reported to the observer again; the steps after it are.
  IdempotencyGuard(S& store, ClaimResult claimed, Observer* observer = nullptr,
                   std::string_view context = {})
      : store_(store),
        state_("idem::IdempotencyGuard", std::move(claimed), detail::observer_for(store, observer),
               detail::store_failure_event<S>(), context) {}

  IdempotencyGuard(const IdempotencyGuard&) = delete;
  IdempotencyGuard& operator=(const IdempotencyGuard&) = delete;

  ~IdempotencyGuard() {
    try {
      state_.settle_completion();  // Attempt::complete's transaction committed: nothing to undo
    } catch (...) {
    }
    if (!state_.open()) return;
    // On failure the lease will run out and the next duplicate takes over; nothing else to do.
    std::exception_ptr error;
    try {
      // A store may need to know that the claim was abandoned, not failed on purpose
      // (idem::AbandoningStore); it records the same retryable failure.
      if constexpr (AbandoningStore<S>) {
        store_.abandon(state_.key(), state_.ticket(), detail::abandoned_snapshot);
      } else {
        store_.fail(state_.key(), state_.ticket(), detail::abandoned_snapshot, true);
      }
    } catch (...) {
      error = std::current_exception();
    }
    state_.abandoned(error);
  }

  Verdict verdict() const noexcept { return state_.verdict(); }
  bool acquired() const noexcept { return state_.acquired(); }

  // The claimed record (acquired) or the stored record the verdict was read from; after
  // commit()/fail() its status and snapshot reflect what was recorded.
  const Record& record() const noexcept { return state_.record(); }

  // Records success with the response as its snapshot. Throws InvalidArgument if the response
  // cannot be stored (the claim stays open: commit something else or fail), LeaseLost if the
  // claim was taken over meanwhile (nothing written; the new owner's record stands).
  template <Serializable T>
  void commit(const T& response) {
    state_.require_open("commit");
    std::string snapshot = detail::encode_snapshot(response);
    if (state_.pending_completion() != nullptr) return commit_completed(snapshot);
    finish([&] { store_.complete(state_.key(), state_.ticket(), snapshot); });
    state_.recorded_success(std::move(snapshot));
  }

  // Records a failure. retryable = true lets the next duplicate run the business again;
  // false makes every later duplicate replay this error. Throws LeaseLost like commit().
  void fail(const nlohmann::json& error, bool retryable) {
    state_.settle_completion();
    state_.require_open("fail");
    std::string snapshot = detail::encode_error(error);
    finish([&] { store_.fail(state_.key(), state_.ticket(), snapshot, retryable); });
    state_.recorded_failure(error, std::move(snapshot), retryable);
  }

  // Records that the business cannot tell whether its effect outside the store happened
  // (EffectUnknown): the record becomes outcome_unknown under a new fence, so nothing runs or
  // replays until the resolver pass or a repair settles it. Throws LeaseLost when the claim
  // was taken over, and StoreError when the store failed (the claim is closed all the same:
  // its lease runs out, and the stale pass asks the biz_type's resolver, if it has one).
  void mark_unknown(std::string_view what) requires detail::MarksUnknown<S> {
    state_.settle_completion();
    state_.require_open("mark_unknown");
    const Repair repair = detail::unknown_effect_repair(state_.ticket(), what);
    try {
      state_.marked_unknown(store_.repair(state_.key(), repair));
    } catch (...) {
      state_.mark_unknown_failed(std::current_exception());
    }
  }

  // For a replayed verdict: the stored response as T, or the stored permanent failure
  // (failed() true, value() throws). Throws UsageError for any other verdict and
  // CorruptRecord when the stored snapshot does not decode as T.
  template <Deserializable T>
  Outcome<T> replay() const {
    return state_.replay<T>();
  }

  // The claim and its bookkeeping, for idem::run_once.
  const detail::GuardState& state() const noexcept { return state_; }

  // Whether this claim resumed an attempt whose worker died mid-flight (and no resolver
  // settled it): effects of that attempt outside the store may have happened.
  bool after_crash() const noexcept { return state_.after_crash(); }

  // The business's view of this acquired claim: its steps with recovery points and the keys
  // to pass downstream (idem/attempt.hpp). Valid while the guard lives.
  Attempt<S> attempt() { return Attempt<S>(store_, state_); }

 private:
  template <class Write>
  void finish(Write&& write) {
    try {
      write();
    } catch (...) {
      state_.write_failed(std::current_exception());
      throw;
    }
  }

  // commit() after Attempt::complete wrote the success into a transaction: recorded when that
  // transaction committed (reported by with_transaction, or else read once), and only as
  // the response it completed with. Otherwise UsageError: a success whose transaction did not
  // commit is never recorded (the claim stays open, and its guard records a retryable
  // failure when it goes).
  void commit_completed(const std::string& response) {
    const detail::GuardState::PendingCompletion& p = *state_.pending_completion();
    bool committed = p.committed;
    if (!committed) {
      finish([&] {
        const std::optional<Record> stored = store_.find(state_.key());
        committed = stored && backend::finished_as(*stored, state_.ticket(), Status::succeeded,
                                                   p.snapshot, false);
      });
    }
    if (!committed) {
      throw UsageError(
          "idem::IdempotencyGuard::commit(): the transaction that Attempt::complete wrote the "
          "response into has not committed; commit it before the business returns "
          "(with_transaction does)");
    }
    const bool same = p.snapshot == response;
    state_.completion_committed();
    if (!same) {
      throw UsageError(
          "idem::IdempotencyGuard::commit(): the business returned another response than the "
          "one it completed with (Attempt::complete); duplicates replay that one");
    }
  }

  S& store_;
  detail::GuardState state_;
};

}  // namespace idem
