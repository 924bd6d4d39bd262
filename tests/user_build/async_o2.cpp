// A service's -O2 build of the coroutine API on every async store: compiled warning-free with
// -Wall -Wextra -Werror (tests/CMakeLists.txt), never run.
#include <boost/asio/thread_pool.hpp>
#include <idem/async.hpp>
#include <idem/http/async_handle.hpp>
#include <idem/memory_store.hpp>
#include <idem/mysql/async.hpp>
#include <idem/pg/async.hpp>
#include <idem/redis/async.hpp>
namespace net = idem::async::net;
template <class S>
net::awaitable<void> use(S& store) {
  auto out = co_await idem::async::run_once(store, {"PAY", "1"}, "fp",
                                            []() -> net::awaitable<int> { co_return 1; });
  auto g = co_await idem::async::IdempotencyGuard<S>::claim(store, {"PAY", "2"}, "fp");
  if (g.acquired()) co_await g.commit(2);
  co_await store.find({"PAY", "1"});
  const idem::Ack ack = co_await idem::async::consume(store, {"MSG", "1"}, "fp",
                                                      []() -> net::awaitable<void> { co_return; });
  const std::vector<idem::ClaimRequest> batch{{{"MSG", "2"}, "fp"}};
  const auto acks = co_await idem::async::consume_batch(store, batch, [](std::size_t) {});
  (void)out;
  (void)ack;
  (void)acks;
}
enum class Order { pending, paid };
net::awaitable<void> move(idem::mysql::AsyncPool& mysql, idem::pg::AsyncPool& pg) {
  const idem::StateMachine<Order> machine{{.table = "t_order", .key_column = "order_no"},
                                          {{Order::pending, Order::paid}}};
  auto m = co_await mysql.acquire();
  (void)co_await idem::mysql::async_apply(*m, machine, "A1", Order::pending, Order::paid);
  auto p = co_await pg.acquire();
  (void)co_await idem::pg::async_apply(*p, machine, "A1", Order::pending, Order::paid);
}
// The service's own handle: a coroutine transaction on it, a consumer inside.
net::awaitable<void> own(idem::mysql::AsyncStore& store, MYSQL* mysql) {
  idem::mysql::AsyncConnection c(mysql);
  auto tx = co_await idem::mysql::AsyncTransaction::begin(c);
  auto bound = tx.bind(store);
  const idem::Ack ack = co_await idem::async::consume(bound, {"MSG", "3"}, "fp",
                                                      []() -> net::awaitable<void> { co_return; });
  (void)ack;
  (void)co_await tx.commit();
  // The retry loop on the service's own connection source.
  auto lend = [mysql](auto use) -> net::awaitable<void> { co_await use(mysql); };
  auto body = [&](idem::mysql::AsyncTransaction& t) -> net::awaitable<int> {
    auto b = t.bind(store);
    auto g = co_await idem::async::IdempotencyGuard<idem::mysql::AsyncBoundStore>::claim(
        b, {"PAY", "3"}, "fp");
    if (g.acquired()) co_await g.commit(3);
    co_return 3;
  };
  (void)co_await idem::mysql::with_transaction(lend, body);
}
// PostgreSQL's: the object on the service's PGconn*, and with_transaction on it and on the pool.
net::awaitable<void> own_pg(idem::pg::AsyncStore& store, PGconn* conn) {
  idem::pg::AsyncConnection c(conn);
  auto tx = co_await idem::pg::AsyncTransaction::begin(c);
  auto bound = tx.bind(store);
  auto g = co_await idem::async::IdempotencyGuard<idem::pg::AsyncBoundStore>::claim(
      bound, {"PAY", "4"}, "fp");
  if (g.acquired()) co_await g.commit(4);
  (void)co_await tx.commit();
  auto body = [&](idem::pg::AsyncTransaction& t) -> net::awaitable<int> {
    auto b = t.bind(store);
    auto guard = co_await idem::async::IdempotencyGuard<idem::pg::AsyncBoundStore>::claim(
        b, {"PAY", "5"}, "fp");
    if (guard.acquired()) co_await guard.commit(5);
    co_return 5;
  };
  (void)co_await idem::pg::with_transaction(conn, body);
  (void)co_await idem::pg::with_transaction(store.pool(), body);
}
int main() {
  net::io_context io;
  auto mpool = std::make_shared<idem::mysql::AsyncPool>(idem::mysql::ConnectionParams{},
                                                        idem::PoolParams{.size = 2});
  idem::mysql::AsyncStore mstore{mpool};
  auto ppool = std::make_shared<idem::pg::AsyncPool>(idem::pg::ConnectionParams{},
                                                     idem::PoolParams{.size = 2});
  idem::pg::AsyncStore pstore{ppool};
  idem::MemoryStore mem;
  net::thread_pool tp{1};
  idem::async::OffloadStore off{mem, tp.get_executor()};
  idem::async::InlineStore inl{mem};
  auto rpool =
      std::make_shared<idem::redis::AsyncPool>(io.get_executor(), idem::redis::ConnectionParams{});
  idem::redis::AsyncStore rstore{rpool};
  net::co_spawn(io, use(mstore), net::detached);
  net::co_spawn(io, use(pstore), net::detached);
  net::co_spawn(io, use(off), net::detached);
  net::co_spawn(io, use(inl), net::detached);
  net::co_spawn(io, use(rstore), net::detached);
  net::co_spawn(io, move(*mpool, *ppool), net::detached);
  net::co_spawn(io, own(mstore, nullptr), net::detached);
  net::co_spawn(io, own_pg(pstore, nullptr), net::detached);
  idem::async::Janitor janitor(mstore);
  net::co_spawn(io, janitor.run(), net::detached);
  io.run();
}
