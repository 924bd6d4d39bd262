#pragma once
// idem::async::AwaitableStore: the contract of idem::Store (idem/store.hpp), word for word, with
// each operation a coroutine. The same decision table, the same errors (thrown out of the
// co_await), the same optional operations (idem/optional_operations.hpp: supports_wait,
// in_caller_transaction, abandon, repair, list, record_step; below). The conformance suite
// runs on async stores through idem::testing::BlockingStore (idem/testing/blocking_store.hpp).
//
//   net::awaitable<ClaimResult> claim(const Key&, std::string_view fingerprint, const Options&)
//   net::awaitable<void> complete(const Key&, const Ticket&, std::string_view snapshot)
//   net::awaitable<void> fail(const Key&, const Ticket&, std::string_view error, bool retryable)
//   net::awaitable<std::optional<Record>> find(const Key&)
//   net::awaitable<std::size_t> purge_expired(std::size_t batch, std::size_t max_batches)
//   net::awaitable<std::size_t> release_stale(std::size_t batch)
//
// Stores: idem::mysql::AsyncStore (non-blocking MariaDB), idem::pg::AsyncStore (libpq's
// asynchronous API), idem::redis::AsyncStore (pipelined Redis connections),
// idem::async::InlineStore (a Store whose calls never wait on I/O, such as MemoryStore, run on
// the loop thread) and idem::async::OffloadStore (a blocking Store run on a thread pool, such
// as SQLite's).

#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "idem/async/net.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"

namespace idem::async {

template <class S>
concept AwaitableStore = requires(S& store, const Key& key, std::string_view text,
                                  const Options& options, const Ticket& ticket, bool flag,
                                  std::size_t n) {
  { store.claim(key, text, options) } -> std::same_as<net::awaitable<ClaimResult>>;
  { store.complete(key, ticket, text) } -> std::same_as<net::awaitable<void>>;
  { store.fail(key, ticket, text, flag) } -> std::same_as<net::awaitable<void>>;
  { store.find(key) } -> std::same_as<net::awaitable<std::optional<Record>>>;
  { store.purge_expired(n, n) } -> std::same_as<net::awaitable<std::size_t>>;
  { store.release_stale(n) } -> std::same_as<net::awaitable<std::size_t>>;
};

// The concept's name until it met the class idem::mysql::AsyncStore (docs/changes.md); it
// will be removed in the next release.
template <class S>
concept AsyncStore = AwaitableStore<S>;

// An async store that must know that a guard was abandoned (see idem::AbandoningStore).
template <class S>
concept AbandoningAsyncStore = AwaitableStore<S> &&
    requires(S& store, const Key& key, const Ticket& ticket, std::string_view error) {
  { store.abandon(key, ticket, error) } -> std::same_as<net::awaitable<void>>;
};

// An async store inside the caller's transaction, whose claims go with that transaction: a
// guard destroyed without a result only notes it (no I/O, no write racing the transaction's
// own statements on its connection); the transaction then rolls back.
template <class S>
concept NotingAsyncStore = AwaitableStore<S> &&
    requires(S& store, const Key& key, const Ticket& ticket) {
  { store.note_abandoned(key, ticket) }
  noexcept;
};

// The coroutine counterparts of idem::RepairingStore, ListingStore and RecoveryPointStore
// (idem/optional_operations.hpp), with the same contracts: the resolver on the claim path of
// async::Guard repairs, async::Attempt records its steps, the Janitor's passes and operators
// list and repair.
template <class S>
concept RepairingAsyncStore = AwaitableStore<S> &&
    requires(S& store, const Key& key, const Repair& repair) {
  { store.repair(key, repair) } -> std::same_as<net::awaitable<Record>>;
};

template <class S>
concept ListingAsyncStore = AwaitableStore<S> && requires(S& store, const RecordQuery& query) {
  { store.list(query) } -> std::same_as<net::awaitable<std::vector<Record>>>;
};

template <class S>
concept RecoveryPointAsyncStore = AwaitableStore<S> &&
    requires(S& store, const Key& key, const Ticket& ticket, std::string_view text) {
  { store.record_step(key, ticket, text, text) } -> std::same_as<net::awaitable<std::string>>;
};

// The coroutine counterparts of idem::BatchClaimingStore and idem::RollbackOnlyStore: a store
// that claims a batch in fewer round trips than one claim each (idem::async::claim_batch,
// idem/async/batch.hpp), and one whose whole transaction can be marked to roll back
// (idem::async::consume_batch on a bound store).
template <class S>
concept BatchClaimingAsyncStore = AwaitableStore<S> &&
    requires(S& store, std::span<const ClaimRequest> requests, const Options& options) {
  {
    store.claim_batch(requests, options)
    } -> std::same_as<net::awaitable<std::vector<ClaimResult>>>;
};

template <class S>
concept RollbackOnlyAsyncStore = AwaitableStore<S> && requires(S& store) {
  store.set_rollback_only();
};

// The coroutine counterpart of idem::AttemptCountingStore: fail_after_rollback() only queues
// the write for after the rollback, so it answers at once.
template <class S>
concept AttemptCountingAsyncStore = RollbackOnlyAsyncStore<S> &&
    requires(S& store, const Key& key, std::string_view fp, const Options& options,
             std::string error) {
  { store.fail_after_rollback(key, fp, options, std::move(error), true) } -> std::same_as<bool>;
};

}  // namespace idem::async
