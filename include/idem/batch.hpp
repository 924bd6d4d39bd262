#pragma once
// idem::claim_batch: claim many keys at once, for consumers that poll messages in batches.
//
//   std::vector<idem::ClaimRequest> batch = ...;          // one per message
//   auto results = idem::claim_batch(store, batch, options);
//   // results[i] is what store.claim(batch[i].key, batch[i].fingerprint, options) would have
//   // answered had the requests been claimed one after another, in order.
//
// A store that can do better than one claim per request has its own claim_batch with exactly
// those per-request semantics (idem::BatchClaimingStore in idem/optional_operations.hpp;
// idem::mysql::Store sends one multi-row INSERT and one read per chunk of keys).
// Every other store is claimed one request at a time. Either way options and fingerprints are
// all validated before the first write, so a bad request in a batch changes nothing, and a
// batch that fails midway releases the claims it made (a retryable failure, as an abandoned
// guard records) before the error propagates.
//
// Every lease of the batch starts now: run the messages through idem::consume_batch, or adopt
// each acquired claim into a guard at once and release (destroy unused) one that the earlier
// messages left with little lease, since a duplicate elsewhere may take an expired claim over.

#include <span>
#include <vector>

#include "idem/detail/checks.hpp"
#include "idem/guard_state.hpp"
#include "idem/key.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/store.hpp"
#include "idem/verdict.hpp"

namespace idem {

template <Store S>
std::vector<ClaimResult> claim_batch(S& store, std::span<const ClaimRequest> requests,
                                     const Options& options = {}) {
  if constexpr (BatchClaimingStore<S>) {
    return store.claim_batch(requests, options);
  } else {
    detail::validate_batch(requests, options);
    std::vector<ClaimResult> results;
    results.reserve(requests.size());
    try {
      for (const ClaimRequest& r : requests)
        results.push_back(store.claim(r.key, r.fingerprint, options));
    } catch (...) {
      // The claims made go back (a store inside the caller's transaction loses them with its
      // rollback instead). Best effort: one that cannot be released waits for its lease.
      if constexpr (!RollbackOnlyStore<S>) {
        for (const ClaimResult& c : results) {
          if (c.verdict != Verdict::acquired) continue;
          try {
            if constexpr (AbandoningStore<S>) {
              store.abandon(c.record.key, c.record.ticket, detail::abandoned_snapshot);
            } else {
              store.fail(c.record.key, c.record.ticket, detail::abandoned_snapshot, true);
            }
          } catch (...) {
          }
        }
      }
      throw;
    }
    return results;
  }
}

}  // namespace idem
