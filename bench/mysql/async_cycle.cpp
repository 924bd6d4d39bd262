// mysql.async_cycle (issue 18): mysql.cycle's request (run_once: claim, no-op business, commit
// of a small JSON, on a fresh key) on idem::mysql::AsyncStore from ONE loop thread with many
// requests in flight, against the same request on the blocking idem::mysql::Store from
// --threads threads (mysql.cycle's library side, blocking_cycles), in the same run, on the same
// table. The goal: one loop thread serves at least what 32 blocked threads serve.
#include "shared.hpp"

#ifdef IDEM_BENCH_ASYNC
#include <boost/asio/io_context.hpp>
#include <idem/mysql/async.hpp>
#endif

namespace bench::mysql_bench {

#ifdef IDEM_BENCH_ASYNC

namespace {

namespace net = idem::async::net;

// The requests of one round of the async side, handed out in order to the coroutines that
// keep them in flight (all on the one loop thread: no locking).
struct Feed {
  int round;
  std::size_t total;
  std::size_t next = 0;
  long runs = 0;
};

// One of the in-flight coroutines: mysql.cycle's request on the next fresh key, until the
// round's requests are all out. (The key and the business are built apart from the co_await:
// GCC 12 cannot keep a braced temporary alive across one.)
net::awaitable<void> requester(idem::mysql::AsyncStore& store, Feed& feed) {
  while (feed.next < feed.total) {
    const idem::Key key{"BENCH", key_id(feed.round, 0, feed.next++)};
    const PaidBusiness business{&feed.runs};
    const auto out =
        co_await idem::async::run_once(store, key, fixed_fingerprint(), business, options);
    if (!out) throw std::runtime_error("neither acquired nor replayed");
  }
}

// Opens every connection of the pool (connecting is not what is measured).
net::awaitable<void> open_all(idem::mysql::AsyncPool& pool) {
  std::vector<idem::mysql::AsyncPool::Handle> handles;
  handles.reserve(pool.size());
  for (std::size_t i = 0; i < pool.size(); ++i)
    handles.push_back(co_await pool.acquire());
}

// Runs the coroutines on `io` from this thread until all have ended; rethrows the first error.
void run_all(net::io_context& io, std::vector<net::awaitable<void>> coroutines) {
  std::exception_ptr failed;
  for (auto& c : coroutines)
    net::co_spawn(io, std::move(c), [&](std::exception_ptr e) {
      if (e && !failed) failed = e;
    });
  io.restart();
  io.run();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace

void async_cycle_scenario(const Config& config) {
  const std::string name = "mysql.async_cycle";
  const int threads = config.threads > 0 ? config.threads : 32;
  // The async pool has as many connections as the blocking side has threads (and
  // connections): the server runs as many statements at once for either side, so what is
  // compared is the client side, one loop thread against `threads` blocked ones.
  const auto pool_size = static_cast<std::size_t>(threads);
  // Twice as many requests in flight as connections: every connection handed back finds a
  // request already waiting for it (its claim or its commit), so no connection idles while
  // the loop thread is busy decoding a reply or binding the next statement; more would only
  // lengthen the queue on the pool.
  const std::size_t in_flight = 2 * pool_size;
  Server server(config, threads);
  const std::size_t per = config.ops(5'000, 1'500) / threads;
  const std::size_t total = per * threads;

  auto pool = std::make_shared<idem::mysql::AsyncPool>(connection_params(config),
                                                       idem::mysql::PoolParams{.size = pool_size});
  idem::mysql::AsyncStore store(pool, store_params(config));
  net::io_context io(1);  // run by one thread: the bench thread of the library side
  {
    std::vector<net::awaitable<void>> opening;
    opening.push_back(open_all(*pool));
    run_all(io, std::move(opening));
  }
  long async_runs = 0;
  std::atomic<long> blocking_runs{0};

  // Both sides on the same table (the library's), emptied before each round.
  Side async_side{[&](int) { server.truncate(lib_table); },
                  [&](int, int r) {
                    Feed feed{r, total};
                    std::vector<net::awaitable<void>> requesters;
                    for (std::size_t k = 0; k < in_flight; ++k)
                      requesters.push_back(requester(store, feed));
                    run_all(io, std::move(requesters));
                    async_runs += feed.runs;
                  }};
  Side blocking_side{[&](int) { server.truncate(lib_table); },
                     [&](int t, int r) {
                       blocking_runs += blocking_cycles(
                           *server.store, per, [&](std::size_t i) { return key_id(r, t, i); });
                     }};
  const auto t =
      alternate(name, config.rounds_per_side(), 1, threads, total, async_side, blocking_side);
  auto j = throughput_json(name, 1, total, t, ">= 1.0");
  j["baseline_threads"] = threads;
  j["connections"] = pool_size;  // per side
  j["in_flight"] = in_flight;
  j["library_executions"] = async_runs / config.rounds_per_side();
  j["baseline_executions"] = blocking_runs.load() / config.rounds_per_side();
  j["library"] = fmt::format(
      "idem::async::run_once on mysql::AsyncStore from one loop thread, {} requests in flight "
      "on an AsyncPool of {} connections: claim, no-op business, commit of a small JSON",
      in_flight, pool_size);
  j["baseline"] = fmt::format(
      "mysql.cycle's library side: idem::run_once on the blocking mysql::Store, {} threads on a "
      "Pool of {} connections",
      threads, threads);
  emit(j);
}

#else

void async_cycle_scenario(const Config&) {
  throw std::runtime_error("idem-bench was built without idem::async (Boost.Asio 1.81)");
}

#endif

}  // namespace bench::mysql_bench
