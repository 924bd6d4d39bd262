#pragma once
// idem::Observer: a hook the guard calls at each step of a guarded request, for logs, traces
// and metrics (idem/metrics.hpp is a ready one).
//
//   idem::Metrics metrics;                        // or your own class deriving from Observer
//   idem::Options options{.observer = &metrics};
//   idem::run_once(store, key, fp, charge, options);
//
// Without an observer (the default) the guard skips even the clock reads: the hook costs one
// pointer test per step. An observer is called on the caller's thread, from any thread at
// once, and must be thread-safe; on_event is noexcept because the guard also reports from its
// destructor - an observer that throws terminates the program.

#include <chrono>
#include <cstdint>
#include <exception>
#include <string_view>

namespace idem {

enum class EventKind {
  acquired,             // a fresh claim: the business runs now
  taken_over,           // a claim that took over an expired, released, retryable or stale record
  replayed,             // a duplicate of a finished request: its stored result is returned
  in_progress,          // a duplicate of a request still running (after any wait)
  conflict,             // the key was used with another payload
  committed,            // the business result was recorded
  failed,               // a failure was recorded (retryable or not; also an abandoned guard)
  lease_lost,           // the claim was taken over before the result could be recorded
  store_error,          // a store failure reached the caller (idem::StoreError): the request has no
                        // verdict or record. Standalone stores report it after their own retries;
                        // in same-transaction mode with_transaction does, when it gives up.
  transaction_error,    // a store operation of a bound store failed inside the caller's
                        // transaction (a deadlock, ...): the transaction is rolled back
  transaction_retried,  // with_transaction rolled a try back after a transient failure and
                        // runs it again (a deadlock between duplicates, an ordinary event)
  cache_hit,            // idem::CachedStore answered the claim from memory, without the store
                        // (the claim's answer, replayed or conflict, is reported as well)
  outcome_unknown,      // a duplicate met an outcome_unknown record (or its claim's resolver
                        // could not tell): nothing ran, nothing was replayed
};

constexpr std::string_view to_string(EventKind k) noexcept {
  switch (k) {
    case EventKind::acquired:
      return "acquired";
    case EventKind::taken_over:
      return "taken_over";
    case EventKind::replayed:
      return "replayed";
    case EventKind::in_progress:
      return "in_progress";
    case EventKind::conflict:
      return "conflict";
    case EventKind::committed:
      return "committed";
    case EventKind::failed:
      return "failed";
    case EventKind::lease_lost:
      return "lease_lost";
    case EventKind::store_error:
      return "store_error";
    case EventKind::transaction_error:
      return "transaction_error";
    case EventKind::transaction_retried:
      return "transaction_retried";
    case EventKind::cache_hit:
      return "cache_hit";
    case EventKind::outcome_unknown:
      return "outcome_unknown";
  }
  return "unknown";
}

// True for the kinds that answer a claim (exactly one of them per guarded request that got a
// verdict).
constexpr bool is_claim_answer(EventKind k) noexcept {
  return k == EventKind::acquired || k == EventKind::taken_over || k == EventKind::replayed ||
         k == EventKind::in_progress || k == EventKind::conflict || k == EventKind::outcome_unknown;
}

struct Event {
  EventKind kind;
  std::string_view biz_type;
  std::string_view id;  // the key's id: log it only if ids are not personal data
  // Claim answers: the claim's round trip(s), waits included. committed / failed / lease_lost:
  // from the verdict to the end of the write (the business plus the record). store_error and
  // transaction_error: the failed operation (from with_transaction: its tries); zero for
  // transaction_retried.
  std::chrono::nanoseconds latency{0};
  // store_error, transaction_error, transaction_retried and lease_lost: the exception (valid
  // only during the call); otherwise null.
  const std::exception* error = nullptr;
  // The claim's fence and the record's attempts (claims that ran the business, 1 for the
  // first): from the record the event is about; 0 when there is none (a store failure before
  // the claim answered, with_transaction's retries).
  std::uint64_t fence = 0;
  std::uint32_t attempts = 0;
  // failed: why, as the recorded failure says (its "error" member, e.g. a PermanentFailure's
  // code, or idem.abandoned, idem.effect_unknown); empty otherwise. Valid only during the call.
  std::string_view reason{};
  // The request's Options::context (a request or trace id of yours); valid only during the call.
  std::string_view context{};
};

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_event(const Event& event) noexcept = 0;
};

}  // namespace idem
