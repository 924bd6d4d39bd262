#pragma once
// idem::mysql::AsyncPool: AsyncConnections for coroutines (see idem::backend::AsyncBasicPool and the
// rules of idem::mysql::Pool, which hold here: lazily opened, pinged after ping_after_idle,
// reopened when broken, a transaction left open rolled back, autocommit restored).

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "idem/async/net.hpp"
#include "idem/backend/async_pool.hpp"
#include "idem/backend/pool.hpp"
#include "idem/clock.hpp"
#include "idem/mysql/async_connection.hpp"
#include "idem/mysql/connection_params.hpp"

namespace idem::mysql {

namespace detail {

// As the shared driver, and a connection used for statements gets autocommit back (a
// transaction's try turned it off).
struct AsyncPoolDriver : backend::SqlAsyncPoolDriver<AsyncConnection, ConnectionParams> {
  net::awaitable<void> ready(std::unique_ptr<Connection>& c, Duration idle_for,
                             backend::ConnectionPurpose use) const {
    const bool reopened = co_await backend::ready_sql_connection(c, idle_for, ping_after_idle,
                                                                 [this] { return open(); });
    if (!reopened && use == backend::ConnectionPurpose::statements) {
      co_await c->restore_autocommit();
    }
  }
};

}  // namespace detail

class AsyncPool : public idem::backend::AsyncBasicPool<detail::AsyncPoolDriver> {
 public:
  // Coroutines on any executor, of any thread, may share the pool.
  explicit AsyncPool(ConnectionParams params, PoolParams pool = {})
      : AsyncBasicPool(detail::AsyncPoolDriver{{std::move(params), pool.ping_after_idle}},
                       pool.size, pool.acquire_timeout, "idem::mysql::AsyncPool") {}

  const ConnectionParams& params() const noexcept { return driver().params; }
};

}  // namespace idem::mysql
