#pragma once
// idem::async::claim_batch: idem::claim_batch (idem/batch.hpp) in a coroutine.
//
//   std::vector<idem::ClaimRequest> batch = ...;  // one per message; alive until it answers
//   auto results = co_await idem::async::claim_batch(store, batch, options);
//   // results[i] is what store.claim(batch[i].key, batch[i].fingerprint, options) would have
//   // answered had the requests been claimed one after another, in order.
//
// A store with its own claim_batch (idem::async::BatchClaimingAsyncStore: OffloadStore and
// InlineStore run idem::claim_batch in one call) claims the batch in one go; any other is
// claimed one request at a time. Options and fingerprints are all validated before the first
// write, so a bad request changes nothing.
//
// Adopt each acquired claim into a guard (idem::async::IdempotencyGuard's adopting
// constructor) before co_awaiting anything else, or use idem::async::consume_batch, which does
// (and, as idem::claim_batch says, does not start a message late in its lease).
// A batch that fails midway, or whose caller is cancelled (a timer `||`, a parallel_group, a
// cancellation signal) while it claims, releases every claim it made before it completes (a
// retryable failure, as an abandoned guard records), so that no claim is left that nobody
// holds: the error propagates, or operation_aborted for a cancellation. (A store inside the
// caller's transaction loses its claims with the rollback instead.) The coroutine stores of
// MariaDB and PostgreSQL also release, once the server is done with it, the claims a statement
// cut off by the cancellation had written.

#include <exception>
#include <span>
#include <utility>
#include <vector>

#include <boost/system/system_error.hpp>

#include "idem/async/detail/to_completion.hpp"
#include "idem/async/net.hpp"
#include "idem/async/store.hpp"
#include "idem/detail/checks.hpp"
#include "idem/guard_state.hpp"
#include "idem/key.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/store.hpp"
#include "idem/verdict.hpp"

namespace idem::async {

namespace detail {

// The claims a batch made before one of its claims failed, released so that their keys do not
// wait for the lease. Best effort: a release that fails leaves its key to the lease.
template <AwaitableStore S>
net::awaitable<void> release_claims(S& store, const std::vector<ClaimResult>& claims) {
  for (const ClaimResult& c : claims) {
    if (c.verdict != Verdict::acquired) continue;
    try {
      if constexpr (AbandoningAsyncStore<S>) {
        co_await to_completion(
            store.abandon(c.record.key, c.record.ticket, idem::detail::abandoned_snapshot));
      } else {
        co_await to_completion(
            store.fail(c.record.key, c.record.ticket, idem::detail::abandoned_snapshot, true));
      }
    } catch (...) {
    }
  }
}

template <AwaitableStore S>
net::awaitable<std::vector<ClaimResult>> claim_each(S& store,
                                                    std::span<const ClaimRequest> requests,
                                                    const Options& options) {
  std::vector<ClaimResult> results;
  results.reserve(requests.size());
  std::exception_ptr failed;
  try {
    for (const ClaimRequest& r : requests)
      results.push_back(co_await store.claim(r.key, r.fingerprint, options));
  } catch (...) {
    failed = std::current_exception();
  }
  if (failed) {
    if constexpr (!NotingAsyncStore<S>) {
      // (A store inside the caller's transaction loses them with its rollback.)
      co_await release_claims(store, results);
    }
    std::rethrow_exception(failed);
  }
  co_return results;
}

}  // namespace detail

template <AwaitableStore S>
net::awaitable<std::vector<ClaimResult>> claim_batch(S& store,
                                                     std::span<const ClaimRequest> requests,
                                                     Options options = {}) {
  idem::detail::validate_batch(requests, options);
  const net::cancellation_state on_entry = co_await net::this_coro::cancellation_state;
  if (on_entry.cancelled() != net::cancellation_type::none) {
    throw boost::system::system_error(net::error::operation_aborted, "idem::async::claim_batch");
  }
  // Asio refuses the co_awaits of a cancelled coroutine: off while claims are made, so that each
  // made reaches the caller; the caller's setting is back before it resumes.
  const bool throws = co_await net::this_coro::throw_if_cancelled();
  co_await net::this_coro::throw_if_cancelled(false);
  std::vector<ClaimResult> results;
  std::exception_ptr failed;
  try {
    if constexpr (BatchClaimingAsyncStore<S>) {
      results = co_await store.claim_batch(requests, options);
    } else {
      results = co_await detail::claim_each(store, requests, options);
    }
  } catch (...) {
    failed = std::current_exception();
  }
  // Cancelled while it claimed: the caller cannot take the answer (a `||` drops it), so the
  // claims go back before the call completes.
  const net::cancellation_state state = co_await net::this_coro::cancellation_state;
  if (!failed && state.cancelled() != net::cancellation_type::none) {
    if constexpr (!NotingAsyncStore<S>) co_await detail::release_claims(store, results);
    failed = std::make_exception_ptr(
        boost::system::system_error(net::error::operation_aborted, "idem::async::claim_batch"));
  }
  co_await net::this_coro::throw_if_cancelled(throws);
  if (failed) std::rethrow_exception(failed);
  co_return results;
}

}  // namespace idem::async
