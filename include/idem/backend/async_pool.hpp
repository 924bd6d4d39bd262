#pragma once
// idem::backend::AsyncBasicPool: a bounded pool of connections for coroutines, handed out as RAII
// handles, for any backend with a non-blocking connection. The rules of BasicPool
// (idem/backend/pool.hpp) hold: at most `size` connections, opened lazily, made ready before
// they are handed out, dropped when returned unusable; running out is a retryable StoreError
// after acquire_timeout (both pools check their bounds and say so with PoolBounds). What
// differs: a coroutine waiting for a connection waits on its executor (the loop serves other work),
// and the pool may be shared by coroutines on any executors and threads.
//
//   struct Driver {
//     using Connection = ...;
//     net::awaitable<std::unique_ptr<Connection>> open();                  // throws StoreError
//     // ping, roll back, reopen (replacing the connection)...
//     net::awaitable<void> ready(std::unique_ptr<Connection>&, Duration idle_for,
//                                ConnectionPurpose);
//     bool reusable(const Connection&) noexcept;  // healthy? (no I/O: ready() cleans up)
//     std::string where() const;                  // for the "no connection free" error
//   };
//
// The pool holds `size` slots in a thread-safe channel: an idle connection, or an empty slot
// that the next taker opens a connection in. A waiting coroutine receives the next slot
// returned, in order.

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "idem/async/net.hpp"
#include "idem/backend/pool.hpp"
#include "idem/clock.hpp"
#include "idem/errors.hpp"

namespace idem::backend {

namespace net = async::net;

template <class Driver>
class AsyncBasicPool {
 public:
  using Connection = typename Driver::Connection;

  using Handle = PoolHandle<AsyncBasicPool, Connection>;

  // `who` names the pool in errors.
  AsyncBasicPool(Driver driver, std::size_t size, Duration acquire_timeout, std::string_view who)
      : driver_(std::move(driver)),
        bounds_(size, acquire_timeout, who),
        // Every receive names its caller's executor; the channel's own is never used.
        slots_(net::system_executor(), size) {
    for (std::size_t i = 0; i < size; ++i)
      slots_.try_send(error_code{}, Slot{});
  }
  AsyncBasicPool(const AsyncBasicPool&) = delete;
  AsyncBasicPool& operator=(const AsyncBasicPool&) = delete;

  // A ready connection for the calling coroutine's exclusive use. Throws StoreError:
  // retryable when none frees up within the acquire timeout, or as the driver says when one
  // cannot be opened.
  net::awaitable<Handle> acquire(ConnectionPurpose use = ConnectionPurpose::statements) {
    Slot slot = co_await take();
    try {
      if (!slot.conn) {
        slot.conn = co_await driver_.open();
      } else {
        co_await driver_.ready(
            slot.conn, std::chrono::duration_cast<Duration>(Clock::now() - slot.since), use);
      }
    } catch (...) {
      release(nullptr);  // the slot goes back empty: the next taker opens a connection
      throw;
    }
    co_return Handle(this, std::move(slot.conn));
  }

  std::size_t size() const noexcept { return bounds_.size; }
  const Driver& driver() const noexcept { return driver_; }

 private:
  friend Handle;
  using Clock = std::chrono::steady_clock;
  using error_code = boost::system::error_code;
  struct Slot {
    std::unique_ptr<Connection> conn;  // empty: open one
    Clock::time_point since{};
  };
  using Channel = net::experimental::concurrent_channel<void(error_code, Slot)>;

  net::awaitable<Slot> take() {
    Slot slot;
    if (slots_.try_receive([&](error_code, Slot s) { slot = std::move(s); })) co_return slot;
    // Both results come back, so a slot received as the timer fired is never dropped. The
    // receive completes on the caller's executor, not the channel's (which may not be run).
    const auto executor = co_await net::this_coro::executor;
    net::steady_timer timer(executor, bounds_.acquire_timeout);
    auto [order, received, got, timed] =
        co_await net::experimental::make_parallel_group(
            slots_.async_receive(net::bind_executor(executor, net::deferred)),
            timer.async_wait(net::deferred))
            .async_wait(net::experimental::wait_for_one(), net::use_awaitable);
    (void)order;
    if (!received) co_return std::move(got);
    // Both cancelled: the caller's coroutine was.
    if (timed) throw boost::system::system_error(received);
    throw bounds_.exhausted(driver_.where());
  }

  void release(std::unique_ptr<Connection> conn) noexcept {
    if (conn && !driver_.reusable(*conn)) conn.reset();  // closed; the slot goes back empty
    slots_.try_send(error_code{}, Slot{std::move(conn), Clock::now()});
  }

  Driver driver_;
  PoolBounds bounds_;
  Channel slots_;
};

// A driver's ready() for an SQL connection (broken, in_transaction, mark_broken, ping and
// query("ROLLBACK"), each a coroutine where it does I/O): the blocking pool's rules
// (reopen_if_lost, reusable_after_rollback in idem/backend/pool.hpp) with their round trips
// done here, when the connection is next handed out. A transaction left open is rolled back (a
// connection whose rollback fails is replaced), one idle longer than `ping_after` is pinged,
// and a broken one is replaced by co_await open(). Answers whether `c` was replaced.
template <class Connection, class Open>
net::awaitable<bool> ready_sql_connection(std::unique_ptr<Connection>& c, Duration idle_for,
                                          Duration ping_after, Open open) {
  if (!c->broken() && c->in_transaction()) {
    try {
      co_await c->query("ROLLBACK");
    } catch (const StoreError&) {
      c->mark_broken();
    }
  }
  if (!c->broken() && (idle_for <= ping_after || co_await c->ping())) co_return false;
  c = co_await open();
  co_return true;
}

// The coroutine pool's driver of an SQL connection that opens from its Params (C::open(params),
// a coroutine): readied by ready_sql_connection, pooled again unless broken. A backend whose
// connections need more before they are handed out derives and hides ready().
template <class C, class Params>
struct SqlAsyncPoolDriver {
  using Connection = C;
  Params params;
  std::chrono::milliseconds ping_after_idle;

  net::awaitable<std::unique_ptr<Connection>> open() const {
    co_return co_await Connection::open(params);
  }
  net::awaitable<void> ready(std::unique_ptr<Connection>& c, Duration idle_for,
                             ConnectionPurpose) const {
    co_await ready_sql_connection(c, idle_for, ping_after_idle, [this] { return open(); });
  }
  static bool reusable(const Connection& c) noexcept { return !c.broken(); }
  static std::string where() { return {}; }
};

}  // namespace idem::backend
