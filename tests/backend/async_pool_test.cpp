// idem::backend::AsyncBasicPool (idem/backend/async_pool.hpp) on a driver that counts what it was asked: the
// same bounds and error as the blocking pool (backend::PoolBounds), lazy opening, an idle
// connection readied, an unusable one dropped, and a coroutine waiting for a free one on its
// loop. tests/mysql/async_test.cpp runs it on MariaDB's non-blocking connections.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <idem/backend/async_pool.hpp>

#include "../support/loop.hpp"

using namespace std::chrono_literals;
namespace net = idem::async::net;

namespace {

struct AsyncCountedConnection {
  int id = 0;
  bool usable = true;
  int readied = 0;
};

struct AsyncCountingDriver {
  using Connection = AsyncCountedConnection;
  std::shared_ptr<int> opened = std::make_shared<int>(0);

  net::awaitable<std::unique_ptr<Connection>> open() const {
    auto c = std::make_unique<Connection>();
    c->id = ++*opened;
    co_return c;
  }
  static net::awaitable<void> ready(std::unique_ptr<Connection>& c, idem::Duration,
                                    idem::backend::ConnectionPurpose) {
    ++c->readied;
    co_return;
  }
  static bool reusable(const Connection& c) noexcept { return c.usable; }
  static std::string where() { return {}; }
};

using AsyncCountingPool = idem::backend::AsyncBasicPool<AsyncCountingDriver>;

}  // namespace

TEST_CASE("AsyncBasicPool: the bounds and their messages are the blocking pool's") {
  CHECK_THROWS_WITH(AsyncCountingPool(AsyncCountingDriver{}, 0, 10ms, "test::AsyncPool"),
                    "test::AsyncPool: size must be at least 1");
  CHECK_THROWS_WITH(AsyncCountingPool(AsyncCountingDriver{}, 1, -1ms, "test::AsyncPool"),
                    "test::AsyncPool: the acquire timeout must not be negative");
}

TEST_CASE("AsyncBasicPool: opens lazily - readies an idle one - drops an unusable one") {
  net::io_context io;
  AsyncCountingDriver driver;
  AsyncCountingPool pool(driver, 1, 100ms, "test::AsyncPool");
  const std::vector<int> seen = idem_test::run_on(io, [&]() -> net::awaitable<std::vector<int>> {
    std::vector<int> ids;
    {
      auto h = co_await pool.acquire();
      ids.push_back(h->id);
      ids.push_back(h->readied);
    }
    {
      auto h = co_await pool.acquire();
      ids.push_back(h->id);
      ids.push_back(h->readied);
      h->usable = false;
    }
    auto h = co_await pool.acquire();
    ids.push_back(h->id);
    co_return ids;
  }());
  CHECK(seen == std::vector<int>{1, 0, 1, 1, 2});
}

TEST_CASE("AsyncBasicPool: a waiter gets the slot given back - none within the timeout throws") {
  net::io_context io;
  AsyncCountingPool pool(AsyncCountingDriver{}, 1, 50ms, "test::AsyncPool");
  const std::string outcome = idem_test::run_on(io, [&]() -> net::awaitable<std::string> {
    auto first = std::make_unique<AsyncCountingPool::Handle>(co_await pool.acquire());
    // A second coroutine waits on the loop while the first holds the only connection.
    std::string waited;
    net::co_spawn(
        co_await net::this_coro::executor,
        [&]() -> net::awaitable<void> {
          auto h = co_await pool.acquire();
          waited = "got " + std::to_string(h->id);
        },
        net::detached);
    co_await idem::async::sleep_for(10ms);
    first.reset();  // given back: the waiter takes it
    co_await idem::async::sleep_for(10ms);
    auto held = co_await pool.acquire();
    try {
      auto nothing = co_await pool.acquire();
      co_return "acquired past the size";
    } catch (const idem::StoreError& e) {
      co_return waited + " | " + e.what() + (e.retryable() ? " (retryable)" : "");
    }
  }());
  CHECK(outcome == "got 1 | test::AsyncPool: no connection free within 50 ms (size 1) (retryable)");
}
