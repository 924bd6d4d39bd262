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
// all validated before the first write, so a bad request in a batch changes nothing.

#include <span>
#include <vector>

#include "idem/detail/checks.hpp"
#include "idem/key.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/store.hpp"

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
    for (const ClaimRequest& r : requests)
      results.push_back(store.claim(r.key, r.fingerprint, options));
    return results;
  }
}

}  // namespace idem
