#pragma once
// idem::redis::AsyncPool: a few AsyncConnections (idem/redis/async_connection.hpp) shared by
// every coroutine of a service. Unlike the blocking Pool, a connection is not lent to one
// caller at a time: each carries many callers' commands pipelined, so a handful serves a whole
// loop. acquire() hands out the connections in turn; a broken one (the server restarted or
// killed it, a reply timed out) is opened again by the first caller that meets it, while the
// others go on with the remaining ones.
//
//   auto pool = std::make_shared<idem::redis::AsyncPool>(io.get_executor(), params);
//   idem::redis::AsyncStore store{pool};
//
// With ConnectionParams::cluster_nodes, each connection is a session with the cluster
// (idem/redis/async_connection.hpp): one pipelined link per node it needs, a cluster session
// never breaks, and one or two serve a loop as they serve a single server.
//
// The connections live on `executor` (the service's loop), which must be running while the
// pool is used; coroutines on other executors may use them too, each resuming on its own.
//
// PoolParams::size: the connections (default 2); acquire_timeout: how long acquire() waits
// for a connection to open when none is usable, before a retryable StoreError.
// ping_after_idle is not used: a connection that died idle fails its next command, which the
// store retries on a fresh one.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/async/net.hpp"
#include "idem/errors.hpp"
#include "idem/pool_params.hpp"
#include "idem/redis/async_connection.hpp"
#include "idem/redis/connection_params.hpp"
#include "idem/redis/detail/slot_map.hpp"

namespace idem::redis {

class AsyncPool {
 public:
  using Handle = std::shared_ptr<AsyncConnection>;

  AsyncPool(net::any_io_executor executor, ConnectionParams params, PoolParams pool = {.size = 2})
      : executor_(std::move(executor)),
        params_(std::move(params)),
        where_(where_of(params_)),
        acquire_timeout_(pool.acquire_timeout),
        slots_(pool.size) {
    if (pool.size == 0) throw InvalidArgument("idem::redis::AsyncPool: size must be at least 1");
    if (pool.acquire_timeout <= Duration::zero()) {
      throw InvalidArgument("idem::redis::AsyncPool: acquire_timeout must be positive");
    }
  }
  ~AsyncPool() {
    const std::lock_guard lock(mutex_);
    for (Slot& s : slots_)
      if (s.connection) s.connection->close();
  }
  AsyncPool(const AsyncPool&) = delete;
  AsyncPool& operator=(const AsyncPool&) = delete;

  // A usable connection, opened now if the turn's slot has none. Throws StoreError.
  net::awaitable<Handle> acquire() {
    const auto deadline = std::chrono::steady_clock::now() + acquire_timeout_;
    const std::size_t first = next_.fetch_add(1, std::memory_order_relaxed);
    for (;;) {
      std::optional<std::size_t> to_open;
      {
        const std::lock_guard lock(mutex_);
        for (std::size_t i = 0; i < slots_.size(); ++i) {
          Slot& s = slots_[(first + i) % slots_.size()];
          if (s.connection && !s.connection->broken()) co_return s.connection;
        }
        for (std::size_t i = 0; i < slots_.size() && !to_open; ++i) {
          const std::size_t k = (first + i) % slots_.size();
          if (!slots_[k].opening) {
            slots_[k].opening = true;
            to_open = k;
          }
        }
      }
      if (to_open) {
        co_return co_await open_slot(*to_open);
      }
      // Every slot is being opened by another caller: wait for one.
      if (std::chrono::steady_clock::now() >= deadline) {
        throw StoreError(fmt::format("idem::redis::AsyncPool: no connection to {} opened within "
                                     "acquire_timeout ({} ms)",
                                     where(), acquire_timeout_.count()),
                         true, Diagnostics{code::other, "", "no connection", false});
      }
      co_await async::sleep_for(Duration{5});
    }
  }

  const ConnectionParams& params() const noexcept { return params_; }
  std::string where() const { return where_; }

 private:
  struct Slot {
    Handle connection;
    bool opening = false;
  };

  // Also checks the cluster's nodes (InvalidArgument).
  static std::string where_of(const ConnectionParams& p) {
    std::vector<detail::Address> seeds;
    for (const std::string& node : p.cluster_nodes)
      seeds.push_back(detail::Address::parse(node));
    return detail::session_text(p, seeds);
  }

  net::awaitable<Handle> open_slot(std::size_t k) {
    Handle opened;
    std::exception_ptr failed;
    try {
      opened = co_await AsyncConnection::open(executor_, params_);
    } catch (...) {
      failed = std::current_exception();
    }
    Handle old;
    {
      const std::lock_guard lock(mutex_);
      slots_[k].opening = false;
      if (opened) {
        old = std::move(slots_[k].connection);
        slots_[k].connection = opened;
      }
    }
    if (old) old->close();
    if (failed) std::rethrow_exception(failed);
    co_return opened;
  }

  net::any_io_executor executor_;
  ConnectionParams params_;
  std::string where_;
  Duration acquire_timeout_;
  std::mutex mutex_;
  std::vector<Slot> slots_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace idem::redis
