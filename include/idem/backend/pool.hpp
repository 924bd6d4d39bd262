#pragma once
// idem::backend::BasicPool: a bounded, thread-safe pool of connections handed out as RAII handles,
// for any backend. The backend's driver says how to open a connection, how to make a pooled one
// ready before it is handed out, and whether a returned one may be pooled again:
//
//   struct Driver {
//     using Connection = ...;
//     std::unique_ptr<Connection> open();  // throws StoreError
//     // Pings or reopens a pooled connection before it is handed out; throws StoreError.
//     void ready(Connection&, Duration idle_for, ConnectionPurpose);
//     bool reusable(Connection&) noexcept;  // cleaned (rolled back) and healthy?
//     std::string where() const;            // for the "no connection free" error
//   };
//
// - At most `size` connections exist; acquire() waits up to `acquire_timeout` for one.
// - Connections are opened lazily, outside the pool's lock.
// - A connection that is not reusable() when returned is closed, also outside the lock (a
//   close may wait on the network).
// - Running out of connections is a retryable StoreError that idem's stores do not retry on
//   their own: it surfaces after acquire_timeout, so an overloaded service fails fast.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/errors.hpp"
#include "idem/pool_params.hpp"

namespace idem::backend {

// What a connection is taken for. A with_transaction begins its transaction itself, so the
// driver may hand the connection over in the session state the last transaction left it in
// (idem::mysql keeps autocommit off between transactions, see Connection::begin_transaction);
// anything else gets the session as it was opened.
enum class ConnectionPurpose { statements, transaction };

// A connection handed out by a pool (this one, or AsyncBasicPool): exclusively the
// holder's until the handle is destroyed, then given back to its pool.
template <class Pool, class Connection>
class PoolHandle {
 public:
  PoolHandle(PoolHandle&& other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), conn_(std::move(other.conn_)) {}
  PoolHandle& operator=(PoolHandle&&) = delete;
  PoolHandle(const PoolHandle&) = delete;
  ~PoolHandle() {
    if (pool_ != nullptr) pool_->release(std::move(conn_));
  }
  Connection& operator*() const noexcept { return *conn_; }
  Connection* operator->() const noexcept { return conn_.get(); }

 private:
  friend Pool;
  PoolHandle(Pool* pool, std::unique_ptr<Connection> conn) : pool_(pool), conn_(std::move(conn)) {}
  Pool* pool_;
  std::unique_ptr<Connection> conn_;
};

// The drivers' shared rules. For a networked connection (broken, ping, reconnect): a broken
// connection (killed, the server restarted or failed over) is opened again, and one idle
// longer than `ping_after` is pinged first and opened again when the ping fails. Returns
// whether it reopened the connection.
template <class Connection>
bool reopen_if_lost(Connection& c, Duration idle_for, Duration ping_after) {
  if (!c.broken() && (idle_for <= ping_after || c.ping())) return false;
  c.reconnect();
  return true;
}

// For an SQL connection (broken, in_transaction): one given back inside a transaction is
// rolled back by `rollback(c)`, so that the last user's transaction never leaks into the next
// one; one whose rollback fails is not pooled again.
template <class Connection, class Rollback>
bool reusable_after_rollback(Connection& c, Rollback&& rollback) noexcept {
  if (!c.broken() && c.in_transaction()) {
    try {
      rollback(c);
    } catch (...) {
      return false;
    }
    if (c.in_transaction()) return false;
  }
  return !c.broken();
}

// The driver of a networked connection that opens from its Params (redis, pg): opened again
// when lost (reopen_if_lost), pooled again unless broken. A backend whose connections need
// more when they come back (a rollback) derives and hides reusable().
template <class C, class Params>
struct ReopeningPoolDriver {
  using Connection = C;
  Params params;
  std::chrono::milliseconds ping_after_idle;

  std::unique_ptr<Connection> open() const { return std::make_unique<Connection>(params); }
  void ready(Connection& c, Duration idle_for, ConnectionPurpose) const {
    reopen_if_lost(c, idle_for, ping_after_idle);
  }
  static bool reusable(Connection& c) noexcept { return !c.broken(); }
  static std::string where() { return {}; }
};

// The bounds of a pool, blocking or coroutine, checked when it is made, and the error it
// throws when no connection frees up in time.
struct PoolBounds {
  std::size_t size;
  Duration acquire_timeout;
  std::string who;  // names the pool in errors, e.g. "idem::mysql::Pool"

  PoolBounds(std::size_t size_, Duration acquire_timeout_, std::string_view who_)
      : size(size_), acquire_timeout(acquire_timeout_), who(who_) {
    if (size == 0) throw InvalidArgument(fmt::format("{}: size must be at least 1", who));
    if (acquire_timeout < Duration::zero()) {
      throw InvalidArgument(fmt::format("{}: the acquire timeout must not be negative", who));
    }
  }

  // Retryable: the caller may try again once the load drops. `where`: the driver's words for
  // what the pool connects to, if any.
  StoreError exhausted(std::string_view where) const {
    return StoreError(fmt::format("{}: no connection{} free within {} ms (size {})", who, where,
                                  acquire_timeout.count(), size),
                      true);
  }
};

template <class Driver>
class BasicPool {
 public:
  using Connection = typename Driver::Connection;

  using Handle = PoolHandle<BasicPool, Connection>;

  // `who` names the pool in errors, e.g. "idem::mysql::Pool".
  BasicPool(Driver driver, std::size_t size, Duration acquire_timeout, std::string_view who)
      : driver_(std::move(driver)), bounds_(size, acquire_timeout, who) {}
  BasicPool(const BasicPool&) = delete;
  BasicPool& operator=(const BasicPool&) = delete;

  // A ready connection for this thread's exclusive use. Throws StoreError: retryable when
  // none frees up within the acquire timeout, or as the driver says when one cannot be opened.
  Handle acquire(ConnectionPurpose use = ConnectionPurpose::statements) {
    std::unique_ptr<Connection> conn;
    Clock::time_point idle_since{};
    {
      std::unique_lock lock(mutex_);
      if (!cv_.wait_for(lock, bounds_.acquire_timeout,
                        [&] { return !idle_.empty() || open_ < bounds_.size; })) {
        throw bounds_.exhausted(driver_.where());
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
        conn = driver_.open();
      } else {
        driver_.ready(*conn, std::chrono::duration_cast<Duration>(Clock::now() - idle_since), use);
      }
    } catch (...) {
      {
        std::lock_guard lock(mutex_);
        --open_;
      }
      cv_.notify_one();
      throw;
    }
    return Handle(this, std::move(conn));
  }

  std::size_t size() const noexcept { return bounds_.size; }
  const Driver& driver() const noexcept { return driver_; }

 private:
  friend Handle;
  using Clock = std::chrono::steady_clock;
  struct Idle {
    std::unique_ptr<Connection> conn;
    Clock::time_point since;
  };

  void release(std::unique_ptr<Connection> conn) noexcept {
    if (conn && !driver_.reusable(*conn)) {
      {
        std::lock_guard lock(mutex_);
        --open_;
      }
      cv_.notify_one();
      conn.reset();  // closed outside the lock
      return;
    }
    {
      std::lock_guard lock(mutex_);
      if (conn) {
        idle_.push_back(Idle{std::move(conn), Clock::now()});
      } else {
        --open_;
      }
    }
    cv_.notify_one();
  }

  Driver driver_;
  backend::PoolBounds bounds_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Idle> idle_;
  std::size_t open_ = 0;  // connections that exist: idle + handed out + being opened
};

}  // namespace idem::backend
