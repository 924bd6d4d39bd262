#pragma once
// idem::pg::AsyncPool: AsyncConnections for coroutines (see idem::backend::AsyncBasicPool and the
// rules of idem::pg::Pool, which hold here: lazily opened, pinged after ping_after_idle,
// reopened when broken (pg_terminate_backend, a restart, a failover), a transaction left open
// rolled back).

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "idem/async/net.hpp"
#include "idem/backend/async_pool.hpp"
#include "idem/backend/pool.hpp"
#include "idem/clock.hpp"
#include "idem/pg/async_connection.hpp"
#include "idem/pg/connection_params.hpp"
#include "idem/pool_params.hpp"

namespace idem::pg {

namespace detail {

struct AsyncPoolDriver {
  using Connection = AsyncConnection;
  ConnectionParams params;
  std::chrono::milliseconds ping_after_idle;

  net::awaitable<std::unique_ptr<Connection>> open() const {
    co_return co_await AsyncConnection::open(params);
  }
  // The clean-up that the blocking pool does when a connection comes back happens here, when
  // it is next handed out: it needs round trips.
  net::awaitable<void> ready(std::unique_ptr<Connection>& c, Duration idle_for,
                             backend::ConnectionPurpose) const {
    co_await backend::ready_sql_connection(c, idle_for, ping_after_idle,
                                           [this] { return AsyncConnection::open(params); });
  }
  static bool reusable(const Connection& c) noexcept { return !c.broken(); }
  static std::string where() { return {}; }
};

}  // namespace detail

class AsyncPool : public idem::backend::AsyncBasicPool<detail::AsyncPoolDriver> {
 public:
  // Coroutines on any executor, of any thread, may share the pool.
  explicit AsyncPool(ConnectionParams params, PoolParams pool = {})
      : AsyncBasicPool(detail::AsyncPoolDriver{std::move(params), pool.ping_after_idle}, pool.size,
                       pool.acquire_timeout, "idem::pg::AsyncPool") {}

  const ConnectionParams& params() const noexcept { return driver().params; }
};

}  // namespace idem::pg
