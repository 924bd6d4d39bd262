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

using AsyncPoolDriver = backend::SqlAsyncPoolDriver<AsyncConnection, ConnectionParams>;

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
