#pragma once
// idem::pg::Pool: idem::backend::BasicPool (idem/backend/pool.hpp, which says how it bounds,
// waits and fails) over PostgreSQL connections. A connection idle longer than ping_after_idle
// is pinged before it is handed out, and a broken one (pg_terminate_backend, a restart, a
// failover) is opened again, so the pool follows the server without restarting the process. A
// connection handed back inside a transaction is rolled back first.

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "idem/backend/pool.hpp"
#include "idem/clock.hpp"
#include "idem/pg/connection.hpp"
#include "idem/pg/connection_params.hpp"
#include "idem/pool_params.hpp"

namespace idem::pg {

using PoolParams = idem::PoolParams;

namespace detail {

// How idem::pg::Pool opens, readies and takes back its connections (see BasicPool): as
// Redis's, and one handed back inside a transaction is rolled back.
struct PoolDriver : backend::ReopeningPoolDriver<pg::Connection, ConnectionParams> {
  static bool reusable(Connection& c) noexcept {
    return backend::reusable_after_rollback(
        c, [](Connection& open) { open.query("ROLLBACK", "rollback of a returned connection"); });
  }
};

}  // namespace detail

class Pool : public backend::BasicPool<detail::PoolDriver> {
 public:
  explicit Pool(ConnectionParams params, PoolParams pool = {})
      : BasicPool(detail::PoolDriver{{std::move(params), pool.ping_after_idle}}, pool.size,
                  pool.acquire_timeout, "idem::pg::Pool") {}

  const ConnectionParams& params() const noexcept { return driver().params; }
};

}  // namespace idem::pg
