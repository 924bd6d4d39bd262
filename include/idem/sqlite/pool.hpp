#pragma once
// idem::sqlite::Pool: a bounded, thread-safe pool of connections to one database file, handed
// out as RAII handles.
//
// - At most PoolParams::size connections exist; acquire() waits up to acquire_timeout for one
//   (a Store's pool: up to the busy timeout). ping_after_idle does not apply: a file needs no
//   ping.
// - Connections are opened lazily, each in WAL mode with the busy timeout and synchronous
//   level of ConnectionParams, and keep their prepared statements while pooled.
// - A handle returned inside an open transaction is rolled back first; a broken connection
//   (corrupt file, I/O error) is closed instead of pooled.
// - Owned by one process: never use a pool (or any connection) that was open before fork()
//   in the child; open a new one there.

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "idem/backend/pool.hpp"
#include "idem/clock.hpp"
#include "idem/pool_params.hpp"
#include "idem/sqlite/connection.hpp"

namespace idem::sqlite {

using PoolParams = idem::PoolParams;

namespace detail {

// How idem::sqlite::Pool opens and takes back its connections (see BasicPool).
struct PoolDriver {
  using Connection = sqlite::Connection;
  std::filesystem::path path;
  ConnectionParams params;

  std::unique_ptr<Connection> open() const { return std::make_unique<Connection>(path, params); }
  static void ready(Connection&, Duration, backend::ConnectionPurpose) noexcept {}
  // Someone gave the handle back mid-transaction; the next user must not run in it.
  static bool reusable(Connection& c) noexcept {
    return backend::reusable_after_rollback(c, [](Connection& open) { open.exec("ROLLBACK"); });
  }
  std::string where() const { return " to " + path.string(); }
};

}  // namespace detail

class Pool : public backend::BasicPool<detail::PoolDriver> {
 public:
  explicit Pool(std::filesystem::path path, ConnectionParams params = {}, PoolParams pool = {})
      : BasicPool(detail::PoolDriver{std::move(path), params}, pool.size, pool.acquire_timeout,
                  "idem::sqlite::Pool") {}
  // The constructor before the pools took PoolParams alike (docs/changes.md): waits for a
  // free connection up to the busy timeout.
  [[deprecated("use Pool(path, params, PoolParams{.size = ..., .acquire_timeout = ...})")]] Pool(
      std::filesystem::path path, ConnectionParams params, std::size_t size)
      : Pool(std::move(path), params,
             PoolParams{.size = size, .acquire_timeout = params.busy_timeout}) {}

  const std::filesystem::path& path() const noexcept { return driver().path; }
  const ConnectionParams& params() const noexcept { return driver().params; }
};

}  // namespace idem::sqlite
