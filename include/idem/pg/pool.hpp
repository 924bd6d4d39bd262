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

// How idem::pg::Pool opens, readies and takes back its connections (see BasicPool).
struct PoolDriver {
  using Connection = pg::Connection;
  ConnectionParams params;
  std::chrono::milliseconds ping_after_idle;

  std::unique_ptr<Connection> open() const { return std::make_unique<Connection>(params); }
  void ready(Connection& c, Duration idle_for, backend::ConnectionPurpose) const {
    if (c.broken() || (idle_for > ping_after_idle && !c.ping())) c.reconnect();
  }
  // A transaction left open by the last user must not leak into the next one.
  static bool reusable(Connection& c) noexcept {
    if (!c.broken() && c.in_transaction()) {
      try {
        c.query("ROLLBACK", "rollback of a returned connection");
      } catch (...) {
        c.mark_broken();
      }
    }
    return !c.broken();
  }
  static std::string where() { return {}; }
};

}  // namespace detail

class Pool : public backend::BasicPool<detail::PoolDriver> {
 public:
  explicit Pool(ConnectionParams params, PoolParams pool = {})
      : BasicPool(detail::PoolDriver{std::move(params), pool.ping_after_idle}, pool.size,
                  pool.acquire_timeout, "idem::pg::Pool") {}

  const ConnectionParams& params() const noexcept { return driver().params; }
};

}  // namespace idem::pg
