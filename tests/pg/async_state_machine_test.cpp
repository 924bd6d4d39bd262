// idem::pg::async_apply on a real PostgreSQL: the same results as the blocking apply() move
// after move, and 50 coroutines on one loop thread, each on its own connection, racing the
// same transition.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>

#include "../support/pg_async.hpp"
#include "../support/pg_shop.hpp"

namespace net = idem::async::net;
using idem_test::OrderStatus;
using idem_test::PgShop;
using idem_test::run_on;
using enum OrderStatus;

namespace {

std::string describe(const idem::TransitionResult<OrderStatus>& r) {
  return fmt::format("{} {} {} {}", r.transitioned(), static_cast<int>(r.reason),
                     r.stored_status.value_or("-"), r.version ? *r.version : -1);
}

std::shared_ptr<idem::pg::AsyncPool> async_pool(std::size_t size) {
  return std::make_shared<idem::pg::AsyncPool>(
      idem::pg::ConnectionParams{.conninfo = idem_test::pg_conninfo()},
      idem::pg::PoolParams{.size = size});
}

}  // namespace

TEST_CASE("async pg transitions: the same results as apply(), move after move") {
  struct Move {
    std::string order;
    OrderStatus from;
    OrderStatus to;
    std::optional<std::int64_t> version;
    idem::TransitionOptions options;
  };
  const std::vector<Move> moves{
      {"A1", pending, paid, 0, {}},
      {"A1", pending, paid, 0, {.explain = true}},    // status moved on
      {"A1", paid, refunded, 0, {.explain = true}},   // version moved on
      {"nope", pending, paid, 0, {.explain = true}},  // not found
      {"A1", paid, refunded, 0, {}},                  // not explained
      {"A1", paid, refunded, 1, {}},
  };
  auto pool = idem_test::make_pg_pool(2);
  auto coroutine_pool = async_pool(2);
  PgShop blocking_shop(pool);
  PgShop async_shop(pool);
  const auto blocking_machine = blocking_shop.machine();
  const auto async_machine = async_shop.machine();
  blocking_shop.add_order("A1");
  async_shop.add_order("A1");
  net::io_context io;
  auto c = pool->acquire();
  for (const Move& m : moves) {
    INFO(m.order << " " << static_cast<int>(m.from) << " -> " << static_cast<int>(m.to));
    const auto expected =
        idem::pg::apply(*c, blocking_machine, m.order, m.from, m.to, m.version, m.options);
    const auto got = run_on(io, [&]() -> net::awaitable<idem::TransitionResult<OrderStatus>> {
      auto handle = co_await coroutine_pool->acquire();
      co_return co_await idem::pg::async_apply(*handle, async_machine, m.order, m.from, m.to,
                                               m.version, m.options);
    }());
    CHECK(describe(got) == describe(expected));
    CHECK(async_shop.row("A1") == blocking_shop.row("A1"));
  }
  CHECK(async_shop.row("A1") == std::pair<std::string, long long>{"3", 2});
  CHECK_THROWS_AS(run_on(io,
                         [&]() -> net::awaitable<idem::TransitionResult<OrderStatus>> {
                           auto handle = co_await coroutine_pool->acquire();
                           co_return co_await idem::pg::async_apply(*handle, async_machine, "A1",
                                                                    refunded, pending, 2);
                         }()),
                  idem::IllegalTransition);
}

TEST_CASE("async pg transitions: 50 coroutines on one loop race the same move, one wins") {
  constexpr int racers = 50;
  auto pool = idem_test::make_pg_pool(2);
  auto coroutine_pool = async_pool(racers);
  PgShop shop(pool);
  const auto m = shop.machine();
  shop.add_order("R1");
  net::io_context io;
  std::vector<idem::TransitionResult<OrderStatus>> results;
  std::vector<std::string> errors;
  int ready = 0;  // racers holding their connection, having read the order
  for (int i = 0; i < racers; ++i) {
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          try {
            auto handle = co_await coroutine_pool->acquire();
            (void)co_await handle->exec(
                "SELECT status FROM " + shop.orders + " WHERE order_no = 'R1'", {});
            ++ready;
            net::steady_timer gate(co_await net::this_coro::executor);
            while (ready < racers) {
              gate.expires_after(std::chrono::milliseconds(1));
              co_await gate.async_wait(net::use_awaitable);
            }
            results.push_back(co_await idem::pg::async_apply(*handle, m, "R1", pending, paid, 0,
                                                             {.explain = true}));
          } catch (const std::exception& e) {
            errors.push_back(e.what());
          }
        },
        net::detached);
  }
  io.run();
  REQUIRE(errors.empty());
  REQUIRE(results.size() == racers);
  int won = 0;
  int stale = 0;
  for (const auto& r : results) {
    if (r.transitioned()) ++won;
    if (r.rejected() && r.stale() && r.status == paid && r.version == 1) ++stale;
  }
  CHECK(won == 1);
  CHECK(stale == racers - 1);
  CHECK(shop.scalar("SELECT count(*) FROM " + shop.moves) == 1);
}
