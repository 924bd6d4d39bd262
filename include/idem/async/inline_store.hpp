#pragma once
// idem::async::InlineStore: a Store whose calls never wait on I/O (MemoryStore, or a store of
// your own kept in memory) used as an AwaitableStore: each call runs on the calling coroutine's
// thread, at once. It lets a coroutine service keep one code path for production and tests:
//
//   idem::MemoryStore memory;
//   idem::async::InlineStore store{memory};
//   auto out = co_await idem::async::run_once(store, key, fp, handler);
//
// A store that blocks (SQLite, the blocking MySQL store) would stall the loop: use
// OffloadStore (idem/async/offload_store.hpp) for it, or an async store.

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "idem/async/net.hpp"
#include "idem/async/store.hpp"
#include "idem/batch.hpp"
#include "idem/key.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"

namespace idem::async {

// Each call is a coroutine the compiler must not inline into the caller's (noinline): GCC 12
// at -O2 then reports a false -Wmismatched-new-delete in the caller's coroutine (GCC PR 109224,
// with Asio's frame allocator).
template <Store S>
class InlineStore {
 public:
  static constexpr bool supports_wait = supports_wait_v<S>;
  static constexpr bool in_caller_transaction = in_caller_transaction_v<S>;

  // `store` must outlive this.
  explicit InlineStore(S& store) noexcept : store_(&store) {}

  [[gnu::noinline]] net::awaitable<ClaimResult> claim(const Key& key, std::string_view fingerprint,
                                                      const Options& options) {
    co_return store_->claim(key, fingerprint, options);
  }
  // idem::claim_batch (idem/batch.hpp) on the loop thread.
  [[gnu::noinline]] net::awaitable<std::vector<ClaimResult>> claim_batch(
      std::span<const ClaimRequest> requests, const Options& options) {
    co_return idem::claim_batch(*store_, requests, options);
  }
  [[gnu::noinline]] net::awaitable<void> complete(const Key& key, const Ticket& ticket,
                                                  std::string_view snapshot) {
    store_->complete(key, ticket, snapshot);
    co_return;
  }
  [[gnu::noinline]] net::awaitable<void> fail(const Key& key, const Ticket& ticket,
                                              std::string_view error, bool retryable) {
    store_->fail(key, ticket, error, retryable);
    co_return;
  }
  [[gnu::noinline]] net::awaitable<std::optional<Record>> find(const Key& key) {
    co_return store_->find(key);
  }
  [[gnu::noinline]] net::awaitable<std::size_t> purge_expired(std::size_t batch,
                                                              std::size_t max_batches) {
    co_return store_->purge_expired(batch, max_batches);
  }
  [[gnu::noinline]] net::awaitable<std::size_t> release_stale(std::size_t batch) {
    co_return store_->release_stale(batch);
  }

  [[gnu::noinline]] net::awaitable<void> abandon(
      const Key& key, const Ticket& ticket, std::string_view error) requires AbandoningStore<S> {
    store_->abandon(key, ticket, error);
    co_return;
  }

  [[gnu::noinline]] net::awaitable<Record> repair(const Key& key,
                                                  const Repair& repair) requires RepairingStore<S> {
    co_return store_->repair(key, repair);
  }
  [[gnu::noinline]] net::awaitable<std::vector<Record>> list(const RecordQuery& query) requires
      ListingStore<S> {
    co_return store_->list(query);
  }
  // `known`: the recovery points the caller believes are stored, for a store that uses them.
  [[gnu::noinline]] net::awaitable<std::string> record_step(
      const Key& key, const Ticket& ticket, std::string_view step, std::string_view result,
      std::optional<std::string_view> known = std::nullopt) requires RecoveryPointStore<S> {
    if constexpr (requires { store_->record_step(key, ticket, step, result, known); }) {
      co_return store_->record_step(key, ticket, step, result, known);
    } else {
      co_return store_->record_step(key, ticket, step, result);
    }
  }

  S& store() const noexcept { return *store_; }

 private:
  S* store_;
};

}  // namespace idem::async
