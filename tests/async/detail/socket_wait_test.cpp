// idem::async::detail::wait_for_socket: a coroutine waits for a client library's socket. Here
// the "library" is one end of a socketpair that the test reads itself, as Connector/C and libpq
// do between their waits.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <optional>
#include <string>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <idem/async/detail/socket_wait.hpp>

#include "../../support/loop.hpp"

namespace net = idem::async::net;
using idem::async::detail::SocketWait;
using namespace std::chrono_literals;

namespace {

// A socketpair: `library` plays the client library's descriptor (blocking, as a new socket
// is), `server` the other end.
struct Pair {
  int library = -1;
  int server = -1;
  Pair() {
    std::array<int, 2> fds{};
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds.data()) == 0);
    library = fds[0];
    server = fds[1];
  }
  ~Pair() {
    ::close(library);
    ::close(server);
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  void send(const std::string& bytes) const {
    REQUIRE(::send(server, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  }
  // What the library reads, without blocking: everything there is.
  std::string drain() const {
    std::string got;
    std::array<char, 256> buffer{};
    for (;;) {
      const ssize_t n = ::recv(library, buffer.data(), buffer.size(), MSG_DONTWAIT);
      if (n <= 0) break;
      got.append(buffer.data(), static_cast<std::size_t>(n));
    }
    return got;
  }
};

// One read wait on `io`, limited to `limit`: whether the socket was ready first.
bool read_wait(net::io_context& io, int fd, std::chrono::milliseconds limit) {
  return idem_test::run_on(io,
                           idem::async::detail::wait_for_socket(fd, SocketWait::wait_read, limit));
}

// Runs `io`'s reactor for a while with nothing queued on the socket.
void idle_loop(net::io_context& io, std::chrono::milliseconds how_long) {
  net::steady_timer timer(io, how_long);
  timer.async_wait([](boost::system::error_code) {});
  io.restart();
  io.run();
}

}  // namespace

TEST_CASE("wait for socket: a read wait ends when bytes come, and leaves them to the library") {
  net::io_context io;
  Pair pair;
  for (int round = 0; round < 200; ++round) {
    const std::string bytes = "reply " + std::to_string(round);
    pair.send(bytes);
    REQUIRE(read_wait(io, pair.library, 2s));
    CHECK(pair.drain() == bytes);
  }
}

TEST_CASE("wait for socket: bytes that came while no wait was queued are not missed") {
  // Bytes that came, and were seen by the loop, before the next wait was queued end that wait at
  // once.
  net::io_context io;
  Pair pair;
  for (int round = 0; round < 5; ++round) {
    pair.send("early");
    idle_loop(io, 20ms);  // the loop runs while no wait is queued
    CHECK(read_wait(io, pair.library, 500ms));
    CHECK(pair.drain() == "early");
  }
}

TEST_CASE("wait for socket: a wait that times out answers false, and the next one waits again") {
  net::io_context io;
  Pair pair;
  CHECK_FALSE(read_wait(io, pair.library, 20ms));
  pair.send("late");
  CHECK(read_wait(io, pair.library, 2s));
  CHECK(pair.drain() == "late");
  ::shutdown(pair.server, SHUT_WR);  // the peer goes: ready, for the library to find out
  CHECK(read_wait(io, pair.library, 2s));
}

TEST_CASE("wait for socket: a cancelled wait throws operation_aborted") {
  net::io_context io;
  Pair pair;
  net::cancellation_signal cancel;
  std::optional<boost::system::error_code> seen;
  net::co_spawn(
      io, idem::async::detail::wait_for_socket(pair.library, SocketWait::wait_read, std::nullopt),
      net::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, bool) {
        try {
          if (e) std::rethrow_exception(e);
        } catch (const boost::system::system_error& error) {
          seen = error.code();
        }
      }));
  io.run_for(20ms);
  cancel.emit(net::cancellation_type::terminal);
  io.restart();
  io.run();
  REQUIRE(seen);
  CHECK(*seen == net::error::operation_aborted);
}

TEST_CASE("wait for socket: the library's descriptor stays open") {
  Pair pair;
  {
    net::io_context io;
    pair.send("x");
    REQUIRE(read_wait(io, pair.library, 2s));
  }
  CHECK(::fcntl(pair.library, F_GETFD) != -1);
  CHECK(pair.drain() == "x");
}
