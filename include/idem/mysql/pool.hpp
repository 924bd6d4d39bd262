#pragma once
// idem::mysql::Pool: a bounded, thread-safe pool of connections handed out as RAII handles.
//
// - At most PoolParams::size connections exist; acquire() waits up to acquire_timeout for one.
// - Connections are opened lazily. One that sat idle longer than ping_after_idle is pinged
//   before it is handed out; a broken one (lost, killed, server restarted) is reopened, so the
//   pool recovers from a database restart without restarting the process.
// - A handle returned while its connection is broken closes that connection; one returned
//   with a transaction still open is rolled back first.
// - Running out of connections is a StoreError that idem's stores do not retry on their own:
//   it surfaces after acquire_timeout, so an overloaded service fails fast.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/mysql/connection_params.hpp"

namespace idem::mysql {

struct PoolParams {
  std::size_t size = 8;
  std::chrono::milliseconds acquire_timeout{10'000};
  std::chrono::milliseconds ping_after_idle{5'000};
};

class Pool {
 public:
  class Handle {
   public:
    Handle(Handle&& other) noexcept
        : pool_(std::exchange(other.pool_, nullptr)), conn_(std::move(other.conn_)) {}
    Handle& operator=(Handle&&) = delete;
    Handle(const Handle&) = delete;
    ~Handle() {
      if (pool_ != nullptr) pool_->release(std::move(conn_));
    }
    Connection& operator*() const noexcept { return *conn_; }
    Connection* operator->() const noexcept { return conn_.get(); }

   private:
    friend class Pool;
    Handle(Pool* pool, std::unique_ptr<Connection> conn) : pool_(pool), conn_(std::move(conn)) {}
    Pool* pool_;
    std::unique_ptr<Connection> conn_;
  };

  explicit Pool(ConnectionParams params, PoolParams pool = {})
      : params_(std::move(params)), pool_(pool) {
    if (pool_.size == 0) throw InvalidArgument("idem::mysql::Pool: size must be at least 1");
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // A healthy connection for this thread's exclusive use. Throws StoreError (retryable) when
  // none frees up within acquire_timeout or a new connection cannot be opened.
  Handle acquire() {
    detail::thread_init();  // the driver's per-thread state, for every thread that uses a
                            // connection
    std::unique_ptr<Connection> conn;
    Clock::time_point idle_since{};
    {
      std::unique_lock lock(mutex_);
      if (!cv_.wait_for(lock, pool_.acquire_timeout,
                        [&] { return !idle_.empty() || open_ < pool_.size; })) {
        throw StoreError(fmt::format("idem::mysql::Pool: no connection free within {} ms (size {})",
                                     pool_.acquire_timeout.count(), pool_.size),
                         true);
      }
      if (!idle_.empty()) {
        conn = std::move(idle_.back().conn);
        idle_since = idle_.back().since;
        idle_.pop_back();
      } else {
        ++open_;  // reserve the slot; opened below, outside the lock
      }
    }
    try {
      if (!conn) {
        conn = std::make_unique<Connection>(params_);
      } else if (conn->broken() ||
                 (Clock::now() - idle_since > pool_.ping_after_idle && !conn->ping())) {
        conn->reconnect();
      }
    } catch (...) {
      std::lock_guard lock(mutex_);
      --open_;
      cv_.notify_one();
      throw;
    }
    return Handle(this, std::move(conn));
  }

  const ConnectionParams& params() const noexcept { return params_; }
  std::size_t size() const noexcept { return pool_.size; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Idle {
    std::unique_ptr<Connection> conn;
    Clock::time_point since;
  };

  void release(std::unique_ptr<Connection> conn) noexcept {
    // A transaction left open by the last user must not leak into the next one.
    if (conn && !conn->broken() && conn->in_transaction()) {
      try {
        conn->query("ROLLBACK");
      } catch (...) {
        conn->mark_broken();
      }
    }
    std::unique_lock lock(mutex_);
    if (conn && !conn->broken()) {
      idle_.push_back(Idle{std::move(conn), Clock::now()});
      conn = nullptr;
    } else {
      --open_;
    }
    cv_.notify_one();
    lock.unlock();
    conn.reset();  // closing a broken connection may wait on the network: not under the lock
  }

  ConnectionParams params_;
  PoolParams pool_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Idle> idle_;
  std::size_t open_ = 0;  // connections that exist: idle + handed out + being opened
};

}  // namespace idem::mysql
