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
// The constructor claims (and, with options.wait, waits for an in-progress claim to finish).
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

#include "idem/detail/snapshot.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/observer.hpp"
#include "idem/options.hpp"
#include "idem/outcome.hpp"
#include "idem/record.hpp"
#include "idem/serializable.hpp"
#include "idem/store.hpp"
#include "idem/store/abilities.hpp"
#include "idem/store/retry.hpp"
#include "idem/verdict.hpp"

namespace idem {

namespace detail {

// Claims; while the answer is in_progress and options.wait allows, sleeps with jittered
// exponential backoff and claims again (so a finished claim turns into a replay, and a claim
// whose lease ran out meanwhile is taken over by the decision table).
// A store may forbid the wait (idem::supports_wait_v, idem/store/abilities.hpp).
template <Store S>
ClaimResult claim_with_wait(S& store, const Key& key, std::string_view fingerprint,
                            const Options& options) {
  validate(options);
  ClaimResult result = store.claim(key, fingerprint, options);
  if (result.verdict != Verdict::in_progress || options.wait <= Duration::zero() ||
      !supports_wait_v<S>) {
    return result;
  }

  using steady = std::chrono::steady_clock;
  const auto deadline = steady::now() + options.wait;
  Backoff backoff(Duration{2}, Duration{100});
  while (result.verdict == Verdict::in_progress) {
    const auto left = std::chrono::duration_cast<Duration>(deadline - steady::now());
    if (left <= Duration::zero()) break;
    std::this_thread::sleep_for(std::min(left, backoff.next()));
    result = store.claim(key, fingerprint, options);
  }
  return result;
}

// How a store failure is reported: a bound store's failure has rolled back the caller's
// transaction (idem::in_caller_transaction_v, idem/store/abilities.hpp).
template <class S>
constexpr EventKind store_failure_event() {
  return in_caller_transaction_v<S> ? EventKind::transaction_error : EventKind::store_error;
}

inline constexpr std::string_view abandoned_snapshot =
    R"({"error":"idem.abandoned","detail":"the guard was destroyed without commit or fail"})";

inline void notify(Observer* observer, EventKind kind, const Key& key,
                   std::chrono::nanoseconds latency,
                   const std::exception* error = nullptr) noexcept {
  if (observer != nullptr)
    observer->on_event(Event{kind, key.biz_type(), key.id(), latency, error});
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
  }
  return EventKind::in_progress;
}

// claim_with_wait, reported to options.observer (answer or store failure, with its latency).
template <Store S>
ClaimResult observed_claim(S& store, const Key& key, std::string_view fingerprint,
                           const Options& options) {
  if (options.observer == nullptr) return claim_with_wait(store, key, fingerprint, options);
  const auto start = std::chrono::steady_clock::now();
  try {
    ClaimResult r = claim_with_wait(store, key, fingerprint, options);
    notify(options.observer, claim_event(r), key, std::chrono::steady_clock::now() - start);
    return r;
  } catch (const StoreError& e) {
    notify(options.observer, store_failure_event<S>(), key,
           std::chrono::steady_clock::now() - start, &e);
    throw;
  }
}

}  // namespace detail

template <Store S>
class IdempotencyGuard {
 public:
  IdempotencyGuard(S& store, Key key, std::string_view fingerprint, Options options = {})
      : store_(store),
        observer_(options.observer),
        claim_(detail::observed_claim(store, key, fingerprint, options)),
        open_(claim_.verdict == Verdict::acquired) {
    if (observer_ != nullptr) acquired_at_ = std::chrono::steady_clock::now();
  }

  // Adopts a claim made elsewhere (e.g. one result of idem::claim_batch): an acquired claim
  // becomes this guard's to commit or fail, exactly as if the guard had claimed it. The claim
  // itself is not reported to the observer again; the steps after it are.
  IdempotencyGuard(S& store, ClaimResult claimed, Observer* observer = nullptr)
      : store_(store),
        observer_(observer),
        claim_(std::move(claimed)),
        open_(claim_.verdict == Verdict::acquired) {
    if (observer_ != nullptr) acquired_at_ = std::chrono::steady_clock::now();
  }

  IdempotencyGuard(const IdempotencyGuard&) = delete;
  IdempotencyGuard& operator=(const IdempotencyGuard&) = delete;

  ~IdempotencyGuard() {
    if (!open_) return;
    // On failure the lease will run out and the next duplicate takes over; nothing else to do.
    try {
      // A store may need to know that the claim was abandoned, not failed on purpose
      // (idem::AbandoningStore); it records the same retryable failure.
      if constexpr (AbandoningStore<S>) {
        store_.abandon(claim_.record.key, claim_.record.ticket, detail::abandoned_snapshot);
      } else {
        store_.fail(claim_.record.key, claim_.record.ticket, detail::abandoned_snapshot, true);
      }
      report(EventKind::failed);
    } catch (const LeaseLost& e) {
      report(EventKind::lease_lost, &e);
    } catch (const StoreError& e) {
      report(detail::store_failure_event<S>(), &e);
    } catch (...) {
    }
  }

  Verdict verdict() const noexcept { return claim_.verdict; }
  bool acquired() const noexcept { return claim_.verdict == Verdict::acquired; }

  // The claimed record (acquired) or the stored record the verdict was read from; after
  // commit()/fail() its status and snapshot reflect what was recorded.
  const Record& record() const noexcept { return claim_.record; }

  // Records success with the response as its snapshot. Throws InvalidArgument if the response
  // cannot be stored (the claim stays open: commit something else or fail), LeaseLost if the
  // claim was taken over meanwhile (nothing written; the new owner's record stands).
  template <Serializable T>
  void commit(const T& response) {
    require_open("commit");
    std::string snapshot = detail::encode_snapshot(response);
    finish([&] { store_.complete(claim_.record.key, claim_.record.ticket, snapshot); },
           EventKind::committed);
    claim_.record.status = Status::succeeded;
    claim_.record.snapshot = std::move(snapshot);
  }

  // Records a failure. retryable = true lets the next duplicate run the business again;
  // false makes every later duplicate replay this error. Throws LeaseLost like commit().
  void fail(const nlohmann::json& error, bool retryable) {
    require_open("fail");
    std::string snapshot = detail::encode_error(error);
    finish([&] { store_.fail(claim_.record.key, claim_.record.ticket, snapshot, retryable); },
           EventKind::failed);
    claim_.record.status = Status::failed;
    claim_.record.retryable = retryable;
    claim_.record.snapshot = std::move(snapshot);
  }

  // For a replayed verdict: the stored response as T, or the stored permanent failure
  // (failed() true, value() throws). Throws UsageError for any other verdict and
  // CorruptRecord when the stored snapshot does not decode as T.
  template <Deserializable T>
  Outcome<T> replay() const {
    if (claim_.verdict != Verdict::replayed) {
      throw UsageError(
          fmt::format("idem::IdempotencyGuard::replay(): the verdict is {}, not replayed",
                      to_string(claim_.verdict)));
    }
    const Record& r = claim_.record;
    if (r.status == Status::succeeded) {
      return Outcome<T>::success(Verdict::replayed, detail::decode_snapshot<T>(r.snapshot), r);
    }
    return Outcome<T>::failure(Verdict::replayed, detail::parse_snapshot(r.snapshot), r);
  }

 private:
  void require_open(std::string_view what) const {
    if (claim_.verdict != Verdict::acquired) {
      throw UsageError(
          fmt::format("idem::IdempotencyGuard::{}(): the verdict is {}; only an acquired "
                      "guard records a result",
                      what, to_string(claim_.verdict)));
    }
    if (!open_) {
      throw UsageError(
          fmt::format("idem::IdempotencyGuard::{}(): the result was already recorded", what));
    }
  }

  template <class Write>
  void finish(Write&& write, EventKind done) {
    try {
      write();
    } catch (const LeaseLost& e) {
      open_ = false;  // someone else owns the record now; the destructor must not touch it
      report(EventKind::lease_lost, &e);
      throw;
    } catch (const StoreError& e) {
      report(detail::store_failure_event<S>(), &e);  // still open: commit again, fail, or let it go
      throw;
    }
    open_ = false;
    report(done);
  }

  void report(EventKind kind, const std::exception* error = nullptr) const noexcept {
    if (observer_ == nullptr) return;
    detail::notify(observer_, kind, claim_.record.key,
                   std::chrono::steady_clock::now() - acquired_at_, error);
  }

  S& store_;
  Observer* observer_ = nullptr;
  ClaimResult claim_;
  bool open_ = false;
  std::chrono::steady_clock::time_point acquired_at_{};
};

}  // namespace idem
