#pragma once
// idem::Store: the contract every backend (MemoryStore, idem::mysql::Store, idem::sqlite::Store,
// or your own) satisfies word for word. The conformance suite in idem/testing/conformance.hpp
// checks it; run it on any store you write.
//
// ClaimResult claim(const Key& key, std::string_view fingerprint, const Options& options)
//   Atomically decides by the decision table (idem/backend/record_rules.hpp) with `now` from the
//   store's clock (the database server's for MySQL; the application's, injectable, for SQLite):
//   - no record: inserts claim_record() {processing, fence 1, attempts 1, lease_until =
//     now + lease, expire_at = now + ttl, fresh owner token} and answers acquired;
//   - a takeover row (expired; failed retryable; processing with lease_until <= now): rewrites
//     the record as take_over() does, fence + 1 and a fresh owner token, and answers
//     acquired, with after_crash set for a processing row (take_over_stale). At most one
//     concurrent caller can win a takeover (it is fenced on the old ticket);
//   - replay / in_progress / conflict / outcome_unknown: changes nothing and answers with the
//     stored record.
//   Never two callers acquired for the same live record. Throws InvalidArgument for bad
//   options or fingerprint (before any write), StoreError on infrastructure failure.
//
// void complete(const Key& key, const Ticket& ticket, std::string_view snapshot)
//   processing -> succeeded with the snapshot (JSON text), only while the stored record is
//   processing with this ticket's fence and owner; otherwise throws LeaseLost and changes
//   nothing. A snapshot over max_snapshot_bytes is InvalidArgument, nothing written.
//
// void fail(const Key& key, const Ticket& ticket, std::string_view error, bool retryable)
//   processing -> failed with the error snapshot and the retryable flag, under the same fencing
//   rule and size limit as complete().
//
// std::optional<Record> find(const Key& key)
//   The stored record, expired or not (callers judge expire_at), or nullopt.
//
// std::size_t purge_expired(std::size_t batch, std::size_t max_batches)
//   Deletes records with expire_at <= now, at most `batch` per round trip / lock hold and at most
//   `max_batches` rounds, so that a large backlog never blocks claims. Returns rows deleted.
//
// std::size_t release_stale(std::size_t batch)
//   Marks at most `batch` processing records whose lease ran out as failed and retryable (their
//   workers are presumed dead), so that the next duplicate runs again without waiting for a
//   claim. The stale workers' later complete()/fail() get LeaseLost. Returns rows changed.
//   This is the blind release: for effects outside the store, the Janitor with resolvers
//   (idem/janitor.hpp, idem/resolver.hpp) asks first and repairs instead.
//
// Optional operations beyond this contract (not waiting, running inside the caller's
// transaction, abandon, set_rollback_only, claim_batch, repair, list, record_step) are named,
// each with what it changes, in idem/optional_operations.hpp.

#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "idem/detail/checks.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem {

struct ClaimResult {
  Verdict verdict;
  // acquired: the new claim (its ticket is the caller's to complete or fail).
  // replayed / in_progress / conflict / outcome_unknown: the stored record the verdict was read
  // from.
  Record record;
  // acquired by taking over a processing record whose lease ran out: the previous worker died
  // mid-flight, and its effects outside the store may have happened (a resolver, or the
  // recovery points, say which).
  bool after_crash = false;
};

// One claim of idem::claim_batch (idem/batch.hpp) and of a store's own claim_batch.
struct ClaimRequest {
  Key key;
  std::string fingerprint;  // as for Store::claim; empty opts out of the payload check
};

namespace detail {

// What claim_batch checks before any write, whichever store claims the batch.
inline void validate_batch(std::span<const ClaimRequest> requests, const Options& options) {
  validate(options);
  for (const ClaimRequest& r : requests)
    check_fingerprint(r.fingerprint);
}

}  // namespace detail

template <class S>
concept Store = requires(S& store, const Key& key, std::string_view text, const Options& options,
                         const Ticket& ticket, bool flag, std::size_t n) {
  { store.claim(key, text, options) } -> std::same_as<ClaimResult>;
  { store.complete(key, ticket, text) } -> std::same_as<void>;
  { store.fail(key, ticket, text, flag) } -> std::same_as<void>;
  { store.find(key) } -> std::same_as<std::optional<Record>>;
  { store.purge_expired(n, n) } -> std::same_as<std::size_t>;
  { store.release_stale(n) } -> std::same_as<std::size_t>;
};

}  // namespace idem
