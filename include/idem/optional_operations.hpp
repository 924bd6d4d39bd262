#pragma once
// The optional operations of an idem::Store (idem/store.hpp), for whoever writes a store. A store
// has an optional operation when it declares the member on the left; the guard, claim_batch and
// consume_batch test for it by the name on the right and otherwise keep to the plain contract.
//
//   static constexpr bool supports_wait = false;         supports_wait_v<S> is false
//   static constexpr bool in_caller_transaction = true;  in_caller_transaction_v<S> is true
//   void abandon(const Key&, const Ticket&, std::string_view error)  AbandoningStore<S>
//   void set_rollback_only()                                         RollbackOnlyStore<S>
//   bool fail_after_rollback(const Key&, std::string_view fingerprint, const Options&,
//                            std::string error, bool retryable)    AttemptCountingStore<S>
//   std::vector<ClaimResult> claim_batch(std::span<const ClaimRequest>, const Options&)
//                                                                    BatchClaimingStore<S>
//   Record repair(const Key&, const Repair&)                         RepairingStore<S>
//   std::vector<Record> list(const RecordQuery&)                     ListingStore<S>
//   RecordStats stats()                                              StatsStore<S>
//   std::string record_step(const Key&, const Ticket&, std::string_view step,
//                           std::string_view result)                 RecoveryPointStore<S>
//
// idem::mysql::BoundStore (same-transaction mode) has the first five, idem::mysql::Store
// claim_batch. Every store of idem's can repair, list and record steps; MemoryStore and the
// standalone SQL stores can count (stats).

#include <concepts>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/record_stats.hpp"
#include "idem/repair.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"

namespace idem {

// Whether a guard may poll an in-progress claim (Options::wait). A store says false when
// polling would hurt: a claim inside a transaction holds row locks that block the very claim it
// waits for, so the guard answers in_progress at once instead.
template <class S>
inline constexpr bool supports_wait_v = true;
template <class S>
requires requires {
  S::supports_wait;
}
inline constexpr bool supports_wait_v<S> = static_cast<bool>(S::supports_wait);

// Whether the store runs inside the caller's transaction. Its failures roll that transaction
// back and only the transaction's runner knows whether it runs again, so the guard reports them
// as EventKind::transaction_error instead of store_error.
template <class S>
inline constexpr bool in_caller_transaction_v = false;
template <class S>
requires requires {
  S::in_caller_transaction;
}
inline constexpr bool in_caller_transaction_v<S> = static_cast<bool>(S::in_caller_transaction);

// A store that must know that a guard was destroyed without a result (a forgotten commit, an
// exception) rather than failed on purpose, e.g. to refuse to let the transaction commit. The
// guard calls abandon() instead of fail(key, ticket, error, true); it records the same failure.
template <class S>
concept AbandoningStore = Store<S> &&
    requires(S& store, const Key& key, const Ticket& ticket, std::string_view error) {
  store.abandon(key, ticket, error);
};

// A store whose whole transaction can be marked to roll back whatever its claims say.
// consume_batch does so when one message of a bound batch fails retryably, because the
// messages before it were written in the same transaction and must run again with it.
template <class S>
concept RollbackOnlyStore = Store<S> && requires(S& store) {
  store.set_rollback_only();
};

// A store whose failed claim rolls back with the caller's transaction, and that can still
// count the attempt for its key: fail_after_rollback() records a failure of the key in a
// transaction of its own once the caller's has rolled back (a claim then the failure), and
// answers false when it cannot (nobody tells it of the rollback). A consumer's attempt limit
// (idem/consumer_policy.hpp) counts with it.
template <class S>
concept AttemptCountingStore = RollbackOnlyStore<S> &&
    requires(S& store, const Key& key, std::string_view fp, const Options& options,
             std::string error) {
  { store.fail_after_rollback(key, fp, options, std::move(error), true) } -> std::same_as<bool>;
};

// A store that claims many keys in fewer round trips than one claim() each. idem::claim_batch
// uses it; results[i] must be what claim() would have answered for requests[i] had the
// requests been claimed one after another.
template <class S>
concept BatchClaimingStore = Store<S> &&
    requires(S& store, std::span<const ClaimRequest> requests, const Options& options) {
  { store.claim_batch(requests, options) } -> std::same_as<std::vector<ClaimResult>>;
};

// A store that applies fenced repairs (idem/repair.hpp): the resolver, the Janitor's resolver
// pass and an operator's tool use it. repair() returns the record as written, throws
// RepairRefused (with the current record) when the fence moved on, InvalidArgument for a bad
// Repair; nothing is written in either case.
template <class S>
concept RepairingStore = Store<S> && requires(S& store, const Key& key, const Repair& repair) {
  { store.repair(key, repair) } -> std::same_as<Record>;
};

// A store that lists records by status (idem/record_query.hpp), for the Janitor's resolver
// pass and for operators.
template <class S>
concept ListingStore = Store<S> && requires(S& store, const RecordQuery& query) {
  { store.list(query) } -> std::same_as<std::vector<Record>>;
};

// A store that counts its records (idem/record_stats.hpp), for operators: `idem stats` and
// `idem purge --dry-run`.
template <class S>
concept StatsStore = Store<S> && requires(S& store) {
  { store.stats() } -> std::same_as<RecordStats>;
};

// A store that keeps the results of a business's finished steps with the key (recovery points,
// idem/attempt.hpp). record_step() adds `step` with `result` (JSON text) to the record's
// recovery points while the record is processing under `ticket` (else LeaseLost), and returns
// the recovery points as stored: a step already there keeps its first result.
template <class S>
concept RecoveryPointStore = Store<S> &&
    requires(S& store, const Key& key, const Ticket& ticket, std::string_view text) {
  { store.record_step(key, ticket, text, text) } -> std::same_as<std::string>;
};

}  // namespace idem
