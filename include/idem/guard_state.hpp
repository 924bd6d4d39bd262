#pragma once
// What the blocking guard (idem/guard.hpp) and the coroutine guard (idem/async/guard.hpp)
// share, written once: the wait for an in-progress claim, the reports to the observer, the
// claim's state and its bookkeeping around commit / fail, and the replay of a stored result.
// The two guards differ only in how they call their store. Not for services: its names are in
// idem::detail (a service uses the guards).

#include <algorithm>
#include <chrono>
#include <concepts>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/backend/record_rules.hpp"
#include "idem/detail/snapshot.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/observer.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/outcome.hpp"
#include "idem/record.hpp"
#include "idem/repair.hpp"
#include "idem/retry_policy.hpp"
#include "idem/serializable.hpp"
#include "idem/store.hpp"
#include "idem/verdict.hpp"

namespace idem::detail {

// The wait of Options::wait: while a claim answers in_progress, claim again after a pause
// with jittered exponential backoff (so a finished claim turns into a replay, and a claim whose
// lease ran out meanwhile is taken over by the decision table), until the wait is over.
// A store may forbid the wait (idem::supports_wait_v, idem/optional_operations.hpp).
class ClaimWait {
 public:
  ClaimWait(const Options& options, bool supported)
      : enabled_(supported && options.wait > Duration::zero()),
        deadline_(steady::now() + options.wait) {}

  // The pause before claiming again, or nullopt: the answer stands.
  std::optional<Duration> pause(const ClaimResult& answer) {
    if (!enabled_ || answer.verdict != Verdict::in_progress) return std::nullopt;
    const auto left = std::chrono::duration_cast<Duration>(deadline_ - steady::now());
    if (left <= Duration::zero()) return std::nullopt;
    return std::min(left, backoff_.next());
  }

 private:
  using steady = std::chrono::steady_clock;
  bool enabled_;
  steady::time_point deadline_;
  Backoff backoff_{Duration{2}, Duration{100}};
};

// How a store failure is reported: a bound store's failure has rolled back the caller's
// transaction (idem::in_caller_transaction_v, idem/optional_operations.hpp).
template <class S>
constexpr EventKind store_failure_event() {
  return in_caller_transaction_v<S> ? EventKind::transaction_error : EventKind::store_error;
}

inline constexpr std::string_view abandoned_snapshot =
    R"({"error":"idem.abandoned","detail":"the guard was destroyed without commit or fail"})";

// The observer a guard on `store` reports options.observer's events to: a store bound to a
// with_transaction try answers one that holds them until the try ends (ClaimLedger::held).
template <class S>
Observer* observer_for(S& store, Observer* requested) {
  if constexpr (requires {
                  { store.observer_for(requested) } -> std::same_as<Observer*>;
                }) {
    return store.observer_for(requested);
  } else {
    return requested;
  }
}

inline constexpr std::string_view abandoned_reason = "idem.abandoned";
inline constexpr std::string_view effect_unknown_reason = "idem.effect_unknown";

// Reports an event about `key`: of its claim's record when there is one (fence, attempts),
// else of a failure before any (error).
inline void notify(Observer* observer, EventKind kind, const Key& key,
                   std::chrono::nanoseconds latency, std::string_view context, const Record* record,
                   const std::exception* error = nullptr, std::string_view reason = {}) noexcept {
  if (observer == nullptr) return;
  observer->on_event(Event{kind, key.biz_type(), key.id(), latency, error,
                           record != nullptr ? record->ticket.fence : 0,
                           record != nullptr ? record->attempts : 0, reason, context});
}

// The event that reports a claim's answer.
constexpr EventKind claim_event(const ClaimResult& r) noexcept {
  switch (r.verdict) {
    case Verdict::acquired:
      return r.record.ticket.fence > 1 ? EventKind::taken_over : EventKind::acquired;
    case Verdict::replayed:
      return EventKind::replayed;
    case Verdict::in_progress:
      return EventKind::in_progress;
    case Verdict::conflict:
      return EventKind::conflict;
    case Verdict::outcome_unknown:
      return EventKind::outcome_unknown;
  }
  return EventKind::in_progress;
}

// A claim (with its wait) as the observer sees it: its answer or its store failure, with the
// latency of the whole.
class ClaimReport {
 public:
  ClaimReport(Observer* observer, const Key& key, EventKind failure, std::string_view context)
      : observer_(observer), key_(key), failure_(failure), context_(context) {}
  void answered(const ClaimResult& r) const noexcept {
    notify(observer_, claim_event(r), key_, elapsed(), context_, &r.record);
  }
  void failed(const StoreError& e) const noexcept {
    notify(observer_, failure_, key_, elapsed(), context_, nullptr, &e);
  }

 private:
  std::chrono::nanoseconds elapsed() const noexcept {
    return std::chrono::steady_clock::now() - start_;
  }
  Observer* observer_;
  const Key& key_;
  EventKind failure_;
  std::string_view context_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// A guard's claim and whether its result is still to be recorded. `who` names the guard in
// usage errors; `failure` is how the store's failures are reported; `context` goes with every
// event (a copy: the guard may report after the caller's options are gone).
class GuardState {
 public:
  GuardState(std::string_view who, ClaimResult claim, Observer* observer, EventKind failure,
             std::string_view context = {})
      : who_(who),
        observer_(observer),
        failure_(failure),
        claim_(std::move(claim)),
        open_(claim_.verdict == Verdict::acquired) {
    if (observer_ != nullptr) {
      acquired_at_ = std::chrono::steady_clock::now();
      context_ = context;
    }
  }

  Verdict verdict() const noexcept { return claim_.verdict; }
  bool acquired() const noexcept { return claim_.verdict == Verdict::acquired; }
  // Whether an acquired claim's result is still to be recorded.
  bool open() const noexcept { return open_; }
  const Record& record() const noexcept { return claim_.record; }
  // Whether this claim resumed an attempt whose worker died mid-flight (ClaimResult).
  bool after_crash() const noexcept { return claim_.after_crash; }
  const Key& key() const noexcept { return claim_.record.key; }
  const Ticket& ticket() const noexcept { return claim_.record.ticket; }

  // Throws UsageError unless this is an acquired claim whose result is still to be recorded.
  void require_open(std::string_view what) const {
    if (claim_.verdict != Verdict::acquired) {
      throw UsageError(
          fmt::format("{}::{}(): the verdict is {}; only an acquired guard records a result", who_,
                      what, to_string(claim_.verdict)));
    }
    if (!open_) {
      throw UsageError(fmt::format("{}::{}(): the result was already recorded", who_, what));
    }
  }

  // After the store recorded a success.
  void recorded_success(std::string snapshot) {
    record_result(Status::succeeded, std::move(snapshot), false);
    report(EventKind::committed);
  }
  // After the store recorded the failure `error` (its snapshot).
  void recorded_failure(const nlohmann::json& error, std::string snapshot, bool retryable) {
    record_result(Status::failed, std::move(snapshot), retryable);
    report(EventKind::failed, nullptr, failure_reason(error));
  }
  // After the store marked the claim's own record outcome_unknown (EffectUnknown): `written`
  // is the record as written, under a new fence. Reported as the claim's result, `failed`
  // (the business did not succeed): outcome_unknown is a claim answer, and this claim was
  // answered acquired already; the Janitor's gauge counts the record.
  void marked_unknown(Record written) {
    open_ = false;
    claim_.record = std::move(written);
    report(EventKind::failed, nullptr, effect_unknown_reason);
  }
  // After marking the record unknown threw `error`: rethrows it, a refused repair as LeaseLost
  // (the claim was taken over). A store failure closes the claim all the same: a retryable
  // failure written later would let a duplicate run an effect that may have happened, so the
  // lease runs out instead and the record goes to the stale pass (whose resolver, when the
  // biz_type has one, looks the effect up first).
  [[noreturn]] void mark_unknown_failed(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const RepairRefused&) {
      LeaseLost e = backend::lease_lost(who_, key(), ticket());
      lost(e);
      throw e;
    } catch (const StoreError& e) {
      store_failed(e);
      close();
      throw;
    }
  }
  // After the store said the claim is someone else's now: the guard must not touch it again.
  void lost(const LeaseLost& e) noexcept {
    open_ = false;
    report(EventKind::lease_lost, &e);
  }
  // A success that Attempt::complete wrote into a transaction of the caller's: recorded only
  // once that transaction is known to have committed. `committed` is set by the ledger of
  // with_transaction's try when its COMMIT succeeds (through a weak reference: the try may
  // outlive this state); in a transaction of the caller's own, the guard reads the record.
  struct PendingCompletion {
    std::string snapshot;
    bool committed = false;
  };
  // A completion was written; a try run again writes another, which replaces it.
  std::weak_ptr<PendingCompletion> completion_written(std::string snapshot) {
    pending_completion_ =
        std::make_shared<PendingCompletion>(PendingCompletion{std::move(snapshot)});
    return pending_completion_;
  }
  PendingCompletion* pending_completion() const noexcept { return pending_completion_.get(); }
  // The pending completion's transaction committed: the result is recorded.
  void completion_committed() {
    std::string snapshot = std::move(pending_completion_->snapshot);
    pending_completion_.reset();
    recorded_success(std::move(snapshot));
  }
  // Records the pending completion if its commit was reported; whether it was.
  bool settle_completion() {
    if (!open_ || !pending_completion_ || !pending_completion_->committed) return false;
    completion_committed();
    return true;
  }

  // After the store kept a step's result: the recovery points as stored.
  void steps_recorded(std::string points) { claim_.record.recovery_points = std::move(points); }
  // The result is no one's to record through this state any more (a moved-from guard).
  void close() noexcept { open_ = false; }
  // After the store failed to record: still open (record again, or let it go).
  void store_failed(const StoreError& e) const noexcept { report(failure_, &e); }

  // After a commit or fail threw `error` (rethrown by the caller): a claim taken over is
  // closed, a store failure leaves it open; both are reported.
  void write_failed(const std::exception_ptr& error) noexcept {
    try {
      std::rethrow_exception(error);
    } catch (const LeaseLost& e) {
      lost(e);
    } catch (const StoreError& e) {
      store_failed(e);
    } catch (...) {
    }
  }

  // After the retryable failure of a guard that was let go was written (no error) or not.
  void abandoned(const std::exception_ptr& error) const noexcept {
    if (!error) return report(EventKind::failed, nullptr, abandoned_reason);
    try {
      std::rethrow_exception(error);
    } catch (const LeaseLost& e) {
      report(EventKind::lease_lost, &e);
    } catch (const StoreError& e) {
      store_failed(e);
    } catch (...) {
    }
  }

  template <Deserializable T>
  Outcome<T> replay() const {
    if (claim_.verdict != Verdict::replayed) {
      throw UsageError(fmt::format("{}::replay(): the verdict is {}, not replayed", who_,
                                   to_string(claim_.verdict)));
    }
    const Record& r = claim_.record;
    if (r.status == Status::succeeded) {
      return Outcome<T>::success(Verdict::replayed, decode_snapshot<T>(r.snapshot), r);
    }
    return Outcome<T>::failure(Verdict::replayed, parse_snapshot(r.snapshot), r);
  }

  void report(EventKind kind, const std::exception* error = nullptr,
              std::string_view reason = {}) const noexcept {
    if (observer_ == nullptr) return;
    notify(observer_, kind, claim_.record.key, std::chrono::steady_clock::now() - acquired_at_,
           context_, &claim_.record, error, reason);
  }

 private:
  void record_result(Status status, std::string snapshot, bool retryable) {
    open_ = false;
    claim_.record.status = status;
    claim_.record.retryable = retryable;
    claim_.record.snapshot = std::move(snapshot);
  }

  std::string_view who_;
  Observer* observer_;
  EventKind failure_;
  ClaimResult claim_;
  bool open_;
  std::shared_ptr<PendingCompletion> pending_completion_;
  std::chrono::steady_clock::time_point acquired_at_{};
  std::string context_;
};

// The outcome of a claim that does not run the business (replayed, in_progress, conflict), or
// nullopt for an acquired one.
template <class T>
std::optional<Outcome<T>> outcome_without_running(const GuardState& g) {
  switch (g.verdict()) {
    case Verdict::replayed:
      return g.replay<T>();
    case Verdict::in_progress:
    case Verdict::conflict:
    case Verdict::outcome_unknown:
      return Outcome<T>::none(g.verdict(), g.record());
    case Verdict::acquired:
      break;
  }
  return std::nullopt;
}

// What run_once records when the business ran but its response cannot be stored: running it
// again could repeat its effect, so the failure is permanent and duplicates replay it.
inline nlohmann::json unstorable_response(const InvalidArgument& e) {
  return {{"error", "idem.unstorable_response"}, {"detail", e.what()}};
}

}  // namespace idem::detail
