#pragma once
// idem::async::OffloadStore: a blocking Store (idem::sqlite::Store, the blocking
// idem::mysql::Store, a store of your own) used from coroutines without stalling the loop:
// each call runs on a thread of an executor you give (a net::thread_pool sized for the
// store's connections), and the coroutine resumes on its own executor with the answer.
//
//   net::thread_pool blocking_calls{4};
//   idem::sqlite::Store sqlite{"/var/lib/svc/idem.db"};
//   idem::async::OffloadStore store{sqlite, blocking_calls.get_executor()};
//   auto out = co_await idem::async::run_once(store, key, fp, handler);
//
// The loop thread never waits on the store; a thread of the pool does, once per call in
// flight. SQLite has no non-blocking API, so this is how it runs beside a loop.

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "idem/async/detail/to_completion.hpp"
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

template <Store S>
class OffloadStore {
 public:
  static constexpr bool supports_wait = supports_wait_v<S>;

  // `store` must outlive this; `executor` runs the blocking calls.
  OffloadStore(S& store, net::any_io_executor executor) noexcept
      : store_(&store), executor_(std::move(executor)) {}

  net::awaitable<ClaimResult> claim(const Key& key, std::string_view fingerprint,
                                    const Options& options) {
    co_return co_await offload([&] { return store_->claim(key, fingerprint, options); });
  }
  // The whole batch in one call on the offload executor (idem::claim_batch, idem/batch.hpp).
  net::awaitable<std::vector<ClaimResult>> claim_batch(std::span<const ClaimRequest> requests,
                                                       const Options& options) {
    co_return co_await offload([&] { return idem::claim_batch(*store_, requests, options); });
  }
  net::awaitable<void> complete(const Key& key, const Ticket& ticket, std::string_view snapshot) {
    co_await offload([&] { store_->complete(key, ticket, snapshot); });
  }
  net::awaitable<void> fail(const Key& key, const Ticket& ticket, std::string_view error,
                            bool retryable) {
    co_await offload([&] { store_->fail(key, ticket, error, retryable); });
  }
  net::awaitable<std::optional<Record>> find(const Key& key) {
    co_return co_await offload([&] { return store_->find(key); });
  }
  net::awaitable<std::size_t> purge_expired(std::size_t batch, std::size_t max_batches) {
    co_return co_await offload([&] { return store_->purge_expired(batch, max_batches); });
  }
  net::awaitable<std::size_t> release_stale(std::size_t batch) {
    co_return co_await offload([&] { return store_->release_stale(batch); });
  }

  net::awaitable<Record> repair(const Key& key, const Repair& repair) requires RepairingStore<S> {
    co_return co_await offload([&] { return store_->repair(key, repair); });
  }
  net::awaitable<std::vector<Record>> list(const RecordQuery& query) requires ListingStore<S> {
    co_return co_await offload([&] { return store_->list(query); });
  }
  // `known`: the recovery points the caller believes are stored, for a store that uses them.
  net::awaitable<std::string> record_step(
      const Key& key, const Ticket& ticket, std::string_view step, std::string_view result,
      std::optional<std::string_view> known = std::nullopt) requires RecoveryPointStore<S> {
    co_return co_await offload([&] {
      if constexpr (requires { store_->record_step(key, ticket, step, result, known); }) {
        return store_->record_step(key, ticket, step, result, known);
      } else {
        return store_->record_step(key, ticket, step, result);
      }
    });
  }

  S& store() const noexcept { return *store_; }

 private:
  // Runs call() on the offload executor; the caller resumes on its own with the answer or the
  // exception. The caller waits for the call even when it is cancelled meanwhile (a blocking call
  // cannot be interrupted), so call's references stay valid; its cancellation shows at its next
  // co_await (idem/async/detail/to_completion.hpp).
  template <class Call>
  net::awaitable<std::invoke_result_t<Call&>> offload(Call call) {
    using R = std::invoke_result_t<Call&>;
    if constexpr (std::is_void_v<R>) {
      co_await detail::to_completion(run(std::move(call)), executor_);
    } else {
      co_return co_await detail::to_completion(run(std::move(call)), executor_);
    }
  }
  template <class Call>
  static net::awaitable<std::invoke_result_t<Call&>> run(Call call) {
    co_return call();
  }

  S* store_;
  net::any_io_executor executor_;
};

}  // namespace idem::async
