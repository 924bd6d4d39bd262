#pragma once
// idem::mysql::Pool: a bounded, thread-safe pool of connections handed out as RAII handles.
//
// - At most PoolParams::size connections exist; acquire() waits up to acquire_timeout for one.
// - Connections are opened lazily. One that sat idle longer than ping_after_idle is pinged
//   before it is handed out; a broken one (lost, killed, server restarted) is reopened, so the
//   pool recovers from a database restart without restarting the process.
// - A handle returned while its connection is broken closes that connection; one returned
//   with a transaction still open is rolled back first.
// - acquire() hands out the session as it was opened (autocommit as the server set it up),
//   also when with_transaction last used the connection and left autocommit off.
// - Running out of connections is a StoreError that idem's stores do not retry on their own:
//   it surfaces after acquire_timeout, so an overloaded service fails fast.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "idem/backend/pool.hpp"
#include "idem/clock.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/mysql/connection_params.hpp"

namespace idem::mysql {

using PoolParams = idem::PoolParams;

namespace detail {

// How idem::mysql::Pool opens, readies and takes back its connections (see BasicPool).
struct PoolDriver {
  using Connection = mysql::Connection;
  ConnectionParams params;
  std::chrono::milliseconds ping_after_idle;

  // thread_init: the driver's per-thread state, for every thread that uses a connection.
  std::unique_ptr<Connection> open() const {
    thread_init();
    return std::make_unique<Connection>(params);
  }
  void ready(Connection& c, Duration idle_for, backend::ConnectionPurpose use) const {
    thread_init();
    const bool reopened = backend::reopen_if_lost(c, idle_for, ping_after_idle);
    if (!reopened && use == backend::ConnectionPurpose::statements) c.restore_autocommit();
  }
  static bool reusable(Connection& c) noexcept {
    return backend::reusable_after_rollback(c, [](Connection& open) { open.query("ROLLBACK"); });
  }
  static std::string where() { return {}; }
};

}  // namespace detail

class Pool : public backend::BasicPool<detail::PoolDriver> {
 public:
  explicit Pool(ConnectionParams params, PoolParams pool = {})
      : BasicPool(detail::PoolDriver{std::move(params), pool.ping_after_idle}, pool.size,
                  pool.acquire_timeout, "idem::mysql::Pool") {}

  const ConnectionParams& params() const noexcept { return driver().params; }
};

}  // namespace idem::mysql
