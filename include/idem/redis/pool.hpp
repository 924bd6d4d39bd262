#pragma once
// idem::redis::Pool: idem::backend::BasicPool (idem/backend/pool.hpp, which says how it bounds,
// waits and fails) over Redis connections. A connection idle longer than ping_after_idle is pinged
// before it is handed out, and a broken one (CLIENT KILL, a server restart, a timeout) is opened
// again, so the pool recovers from a server restart without restarting the process.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "idem/backend/pool.hpp"
#include "idem/clock.hpp"
#include "idem/redis/connection.hpp"
#include "idem/redis/connection_params.hpp"

namespace idem::redis {

using PoolParams = idem::PoolParams;

namespace detail {

// How idem::redis::Pool opens, readies and takes back its connections (see BasicPool).
using PoolDriver = backend::ReopeningPoolDriver<redis::Connection, ConnectionParams>;

}  // namespace detail

class Pool : public backend::BasicPool<detail::PoolDriver> {
 public:
  explicit Pool(ConnectionParams params, PoolParams pool = {})
      : BasicPool(detail::PoolDriver{std::move(params), pool.ping_after_idle}, pool.size,
                  pool.acquire_timeout, "idem::redis::Pool") {}

  const ConnectionParams& params() const noexcept { return driver().params; }
};

}  // namespace idem::redis
