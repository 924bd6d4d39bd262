#pragma once
// idem::testing::BlockingStore: an AwaitableStore (idem/async/store.hpp) seen as a Store, each call
// run to its end on an io_context of the calling thread. It lets the conformance suite
// (idem/testing/conformance.hpp) run its cases, unchanged, on an async store:
//
//   struct MyAsyncFixture {
//     MyAsyncStore async;
//     idem::testing::BlockingStore<MyAsyncStore> blocking{async};
//     idem::testing::BlockingStore<MyAsyncStore>& store() { return blocking; }
//     void advance(idem::Duration d);
//   };
//
// A store whose connections live on a loop of their own (idem::redis::AsyncPool) is given
// that loop's executor: each call then runs there while the calling thread waits for it.
//
// For tests only: a service on a loop co_awaits its async store.

#include <boost/asio/io_context.hpp>

#include <cstddef>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "idem/async/net.hpp"
#include "idem/async/store.hpp"
#include "idem/key.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"

namespace idem::testing {

template <async::AwaitableStore S>
class BlockingStore {
 public:
  static constexpr bool supports_wait = supports_wait_v<S>;

  explicit BlockingStore(S& store) noexcept : store_(&store) {}
  // Each call on `loop`, which another thread runs.
  BlockingStore(S& store, async::net::any_io_executor loop) noexcept
      : store_(&store), loop_(std::move(loop)) {}

  ClaimResult claim(const Key& key, std::string_view fingerprint, const Options& options) {
    return run(store_->claim(key, fingerprint, options));
  }
  void complete(const Key& key, const Ticket& ticket, std::string_view snapshot) {
    run(store_->complete(key, ticket, snapshot));
  }
  void fail(const Key& key, const Ticket& ticket, std::string_view error, bool retryable) {
    run(store_->fail(key, ticket, error, retryable));
  }
  std::optional<Record> find(const Key& key) { return run(store_->find(key)); }
  std::size_t purge_expired(std::size_t batch, std::size_t max_batches) {
    return run(store_->purge_expired(batch, max_batches));
  }
  std::size_t release_stale(std::size_t batch) { return run(store_->release_stale(batch)); }

  Record repair(const Key& key, const Repair& repair) requires async::RepairingAsyncStore<S> {
    return run(store_->repair(key, repair));
  }
  std::vector<Record> list(const RecordQuery& query) requires async::ListingAsyncStore<S> {
    return run(store_->list(query));
  }
  std::string record_step(const Key& key, const Ticket& ticket, std::string_view step,
                          std::string_view result,
                          std::optional<std::string_view> known =
                              std::nullopt) requires async::RecoveryPointAsyncStore<S> {
    if constexpr (requires { store_->record_step(key, ticket, step, result, known); }) {
      return run(store_->record_step(key, ticket, step, result, known));
    } else {
      return run(store_->record_step(key, ticket, step, result));
    }
  }

  S& store() const noexcept { return *store_; }

 private:
  template <class T>
  T run(async::net::awaitable<T> call) const {
    std::exception_ptr error;
    std::optional<std::conditional_t<std::is_void_v<T>, bool, T>> out;
    auto body = [&]() -> async::net::awaitable<void> {
      if constexpr (std::is_void_v<T>) {
        co_await std::move(call);
        out.emplace(true);
      } else {
        out.emplace(co_await std::move(call));
      }
    };
    if (loop_) {
      // The handler keeps the promise alive until it has returned.
      auto done = std::make_shared<std::promise<void>>();
      std::future<void> finished = done->get_future();
      async::net::co_spawn(*loop_, body, [&error, done](std::exception_ptr e) {
        error = e;
        done->set_value();
      });
      finished.wait();
    } else {
      async::net::io_context io;
      async::net::co_spawn(io, body, [&](std::exception_ptr e) { error = e; });
      io.run();  // also whatever the call left running on the loop (a clean-up) ends here
    }
    if (error) std::rethrow_exception(error);
    if constexpr (!std::is_void_v<T>) return std::move(*out);
  }

  S* store_;
  std::optional<async::net::any_io_executor> loop_;
};

}  // namespace idem::testing
