// idem::mysql::async_apply on a real MariaDB: the same results as the blocking apply() move
// after move, on a pooled connection and on the service's own handle; 50 coroutines on one loop thread, each on its own connection, racing the same
// transition; and duplicate refund callbacks through guard + state machine in one coroutine
// transaction, which refund once.
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

#include "../support/mysql_async.hpp"
#include "../support/mysql_service.hpp"
#include "../support/mysql_shop.hpp"

namespace net = idem::async::net;
using idem_test::OrderStatus;
using idem_test::run_on;
using idem_test::Shop;
using enum OrderStatus;

namespace {

std::string describe(const idem::TransitionResult<OrderStatus>& r) {
  return fmt::format("{} {} {} {}", r.transitioned(), static_cast<int>(r.reason),
                     r.stored_status.value_or("-"), r.version ? *r.version : -1);
}

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

}  // namespace

TEST_CASE("async mysql transitions: the same results as apply(), move after move") {
  // A pooled connection, or the service's own handle (set up far from idem's habits).
  const bool own_handle = GENERATE(false, true);
  idem_test::ServiceHandle service;
  idem::mysql::AsyncConnection borrowed(service.mysql);
  auto pool = idem_test::make_pool(2);
  auto async_pool = std::make_shared<idem::mysql::AsyncPool>(idem_test::server(),
                                                             idem::mysql::PoolParams{.size = 2});
  Shop blocking_shop(pool);
  Shop async_shop(pool);
  const auto blocking_machine = blocking_shop.machine();
  const auto async_machine = async_shop.machine();
  blocking_shop.add_order("A1");
  async_shop.add_order("A1");
  net::io_context io;
  auto c = pool->acquire();
  for (const Move& m : moves) {
    INFO(m.order << " " << static_cast<int>(m.from) << " -> " << static_cast<int>(m.to));
    const auto expected =
        idem::mysql::apply(*c, blocking_machine, m.order, m.from, m.to, m.version, m.options);
    const auto got = run_on(io, [&]() -> net::awaitable<idem::TransitionResult<OrderStatus>> {
      if (own_handle) {
        co_return co_await idem::mysql::async_apply(borrowed, async_machine, m.order, m.from, m.to,
                                                    m.version, m.options);
      }
      auto handle = co_await async_pool->acquire();
      co_return co_await idem::mysql::async_apply(*handle, async_machine, m.order, m.from, m.to,
                                                  m.version, m.options);
    }());
    CHECK(describe(got) == describe(expected));
    CHECK(async_shop.row("A1") == blocking_shop.row("A1"));
  }
  CHECK(async_shop.row("A1") == std::pair<std::string, long long>{"3", 2});

  SECTION("an undeclared move is refused before anything is sent") {
    CHECK_THROWS_AS(run_on(io,
                           [&]() -> net::awaitable<idem::TransitionResult<OrderStatus>> {
                             auto handle = co_await async_pool->acquire();
                             co_return co_await idem::mysql::async_apply(
                                 *handle, async_machine, "A1", refunded, pending, 2);
                           }()),
                    idem::IllegalTransition);
    CHECK(async_shop.row("A1") == std::pair<std::string, long long>{"3", 2});
  }
}

TEST_CASE("async mysql transitions: 50 coroutines on one loop race the same move, one wins") {
  constexpr int racers = 50;
  auto pool = idem_test::make_pool(2);
  auto async_pool = std::make_shared<idem::mysql::AsyncPool>(
      idem_test::server(), idem::mysql::PoolParams{.size = racers});
  Shop shop(pool);
  const auto m = shop.machine();
  shop.add_order("R1");
  net::io_context io;
  std::vector<idem::TransitionResult<OrderStatus>> results;
  std::vector<std::string> errors;
  // Every racer holds its connection and has read the order before any moves.
  int ready = 0;
  for (int i = 0; i < racers; ++i) {
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          try {
            auto handle = co_await async_pool->acquire();
            (void)co_await handle->select(
                "SELECT status, version FROM `" + shop.orders + "` WHERE order_no = 'R1'", {});
            ++ready;
            net::steady_timer gate(co_await net::this_coro::executor);
            while (ready < racers) {
              gate.expires_after(std::chrono::milliseconds(1));
              co_await gate.async_wait(net::use_awaitable);
            }
            results.push_back(co_await idem::mysql::async_apply(*handle, m, "R1", pending, paid, 0,
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
  CHECK(shop.row("R1") == std::pair<std::string, long long>{"1", 1});
  CHECK(shop.query("SELECT COUNT(*) FROM `" + shop.moves + "`").at(0).at(0) == "1");
}

TEST_CASE(
    "async mysql transitions: 20 duplicate refund callbacks through guard + state machine "
    "in one coroutine transaction refund once") {
  idem_test::AsyncTable t(16);
  Shop shop(t.blocking.pool);
  const auto m = shop.machine();
  shop.add_order("O1", 1);  // paid, version 0
  net::io_context io;
  int refunded_now = 0;
  int replayed = 0;
  std::vector<std::string> errors;
  for (int i = 0; i < 20; ++i) {
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          try {
            const bool first = co_await idem::mysql::with_transaction(
                *t.pool, [&](idem::mysql::AsyncTransaction& tx) -> net::awaitable<bool> {
                  auto bound = tx.bind(t.store);
                  auto guard =
                      co_await idem::async::IdempotencyGuard<idem::mysql::AsyncBoundStore>::claim(
                          bound, {"REFUND", "O1"}, "fp");
                  if (!guard.acquired()) co_return false;
                  const auto r = co_await idem::mysql::async_apply(tx.connection(), m, "O1", paid,
                                                                   refunded, 0);
                  if (r.transitioned()) {
                    co_await tx.connection().execute(
                        "INSERT INTO `" + shop.refunds + "` (order_no) VALUES ('O1')", {});
                  }
                  co_await guard.commit(r.transitioned());
                  co_return r.transitioned();
                });
            ++(first ? refunded_now : replayed);
          } catch (const std::exception& e) {
            errors.push_back(e.what());
          }
        },
        net::detached);
  }
  io.run();
  INFO((errors.empty() ? std::string() : errors.front()));
  CHECK(errors.empty());
  CHECK(refunded_now == 1);
  CHECK(replayed == 19);
  CHECK(shop.query("SELECT COUNT(*) FROM `" + shop.refunds + "`").at(0).at(0) == "1");
  CHECK(shop.query("SELECT COUNT(*) FROM `" + shop.moves + "`").at(0).at(0) == "1");
  CHECK(shop.row("O1") == std::pair<std::string, long long>{"3", 1});
}
