// A service's -O2 build of the coroutine API on every async store: compiled warning-free with
// -Wall -Wextra -Werror (tests/CMakeLists.txt), never run.
#include <boost/asio/thread_pool.hpp>
#include <idem/async.hpp>
#include <idem/http/async_handle.hpp>
#include <idem/memory_store.hpp>
#include <idem/mysql/async.hpp>
#include <idem/pg/async.hpp>
namespace net = idem::async::net;
template <class S>
net::awaitable<void> use(S& store) {
  auto out = co_await idem::async::run_once(store, {"PAY", "1"}, "fp",
                                            []() -> net::awaitable<int> { co_return 1; });
  auto g = co_await idem::async::IdempotencyGuard<S>::claim(store, {"PAY", "2"}, "fp");
  if (g.acquired()) co_await g.commit(2);
  co_await store.find({"PAY", "1"});
  (void)out;
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
  net::co_spawn(io, use(mstore), net::detached);
  net::co_spawn(io, use(pstore), net::detached);
  net::co_spawn(io, use(off), net::detached);
  net::co_spawn(io, use(inl), net::detached);
  io.run();
}
