#pragma once
// Waiting for a client library's socket on the calling coroutine's executor: what the
// non-blocking database drivers (MariaDB Connector/C's, libpq's) do between their calls. The
// socket is registered for one wait, so a connection is tied to no executor (and to no
// io_context's lifetime), and the descriptor stays the library's.

#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <optional>

#include "idem/async/net.hpp"

namespace idem::async::detail {

// (At namespace scope: GCC 12 cannot compile a class local to a coroutine.)
struct BorrowedSocket {
  net::posix::stream_descriptor d;
  BorrowedSocket(const net::any_io_executor& executor, int fd) : d(executor, fd) {}
  ~BorrowedSocket() { d.release(); }
};

using SocketWait = net::posix::descriptor_base::wait_type;

// Waits until `fd` is ready for `what`; false when `timeout` (none: no limit) came first.
// Throws boost::system::system_error when the wait fails or the coroutine is cancelled.
inline net::awaitable<bool> wait_for_socket(int fd, SocketWait what,
                                            std::optional<std::chrono::milliseconds> timeout) {
  const auto executor = co_await net::this_coro::executor;
  BorrowedSocket socket{executor, fd};
  if (!timeout) {
    co_await socket.d.async_wait(what, net::use_awaitable);
    co_return true;
  }
  // The first to complete decides; an error of the wait (not a timeout) ends the call.
  net::steady_timer timer(executor, *timeout);
  auto [order, waited, timed] =
      co_await net::experimental::make_parallel_group(socket.d.async_wait(what, net::deferred),
                                                      timer.async_wait(net::deferred))
          .async_wait(net::experimental::wait_for_one(), net::use_awaitable);
  if (order[0] == 1 && !timed) co_return false;
  if (waited) throw boost::system::system_error(waited);
  co_return true;
}

}  // namespace idem::async::detail
