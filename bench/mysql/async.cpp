// The coroutine stores against the blocking ones, in the same run, on the same tables: ONE
// loop thread with many requests in flight against --threads blocked threads (32 by default).
//  - mysql.async_cycle (issue 18): mysql.cycle's request (run_once: claim, no-op business,
//    commit of a small JSON, on a fresh key) on idem::mysql::AsyncStore, against the same
//    request on the blocking idem::mysql::Store (mysql.cycle's library side, blocking_cycles).
//  - mysql.async_bound (issue 31): mysql.tx's request (a transaction holding the claim and the
//    business's order INSERT, record_last) through the coroutine with_transaction and the
//    bound AsyncStore, against mysql.tx's library side (the blocking with_transaction).
// The goal of both: one loop thread serves at least what 32 blocked threads serve.
//  - mysql.async_batch (issue 31): mysql.batch in coroutines: idem::async::claim_batch of 100
//    messages on the AsyncStore, against the same messages claimed one co_await store.claim
//    after another (what a consumer without claim_batch writes), both from one loop thread
//    with 4 consumers in flight on 4 connections. The goal: mysql.batch's, >= 3.
// Each also reports loop_timer_late: how late a 1 ms timer on the loop thread fired while the
// coroutine side's requests were out (the goal: a few ms at most, the loop never stalls), and
// mysql.async_cycle and mysql.async_bound idle_timer_late: how late a thread doing nothing else
// woke meanwhile during the blocking side's rounds (what the machine alone causes).
#include "shared.hpp"

#include <optional>

#ifdef IDEM_BENCH_ASYNC
#include <boost/asio/io_context.hpp>
#include <idem/mysql/async.hpp>

#include "../async_run.hpp"
#endif

namespace bench::mysql_bench {

#ifdef IDEM_BENCH_ASYNC

namespace {

namespace net = idem::async::net;

// Requests per round, --quick or not: three times the steady rounds of the blocking
// scenarios, because one loop thread and the server share the two cores unevenly from one
// second to the next, and the median of rounds of a second still moved from run to run
// (docs/performance.md, "One loop thread against 32 threads").
constexpr std::size_t async_round_operations = 3 * steady_round_operations;

// One of mysql.async_bound's in-flight coroutines: mysql.tx's request on the next fresh key, in
// a coroutine transaction of its own (with_transaction runs the body again when the server
// asks for it), until the round's requests are all out. `feed.runs` counts the bodies.
net::awaitable<void> bound_requester(idem::mysql::AsyncPool& pool, idem::mysql::AsyncStore& store,
                                     const std::string& order_sql, Feed& feed) {
  while (feed.next < feed.total) {
    const std::string id = key_id(feed.round, 0, feed.next++);
    auto body = [&](idem::mysql::AsyncTransaction& tx) -> net::awaitable<bool> {
      ++feed.runs;
      auto bound = tx.bind(store);
      auto business = [&]() -> net::awaitable<nlohmann::json> {
        std::vector<idem::mysql::Param> values;
        values.emplace_back(id);
        values.emplace_back(std::int64_t{100});
        co_await tx.connection().execute(order_sql, std::move(values));
        co_return nlohmann::json{{"order", id}};
      };
      const idem::Key key{"BENCH", id};
      const auto out =
          co_await idem::async::run_once(bound, key, fixed_fingerprint(), business, options);
      co_return static_cast<bool>(out);
    };
    const bool ok = co_await idem::mysql::with_transaction(pool, body);
    if (!ok) throw std::runtime_error("transaction did not succeed");
  }
}

// One of mysql.async_batch's consumers: the next `batch` fresh messages of the round, claimed
// in one claim_batch (`batched`) or one claim after another, until the round's are out.
// `feed.runs` counts the claims acquired.
net::awaitable<void> batch_requester(idem::mysql::AsyncStore& store, Feed& feed, std::size_t batch,
                                     bool batched) {
  while (feed.next < feed.total) {
    const std::size_t first = feed.next;
    feed.next = std::min(feed.total, first + batch);
    std::vector<idem::ClaimRequest> requests;
    requests.reserve(feed.next - first);
    for (std::size_t i = first; i < feed.next; ++i)
      requests.push_back({idem::Key{"BENCH", key_id(feed.round, 0, i)}, fixed_fingerprint()});
    if (batched) {
      const std::vector<idem::ClaimResult> results =
          co_await idem::async::claim_batch(store, requests, options);
      for (const idem::ClaimResult& r : results) {
        if (r.verdict != idem::Verdict::acquired) throw std::runtime_error("not acquired");
        ++feed.runs;
      }
    } else {
      for (const idem::ClaimRequest& m : requests) {
        const idem::ClaimResult r = co_await store.claim(m.key, m.fingerprint, options);
        if (r.verdict != idem::Verdict::acquired) throw std::runtime_error("not acquired");
        ++feed.runs;
      }
    }
  }
}

// The async side's machinery: an AsyncPool of as many connections as the blocking side has
// threads (and connections), so the server runs as many statements at once for either side
// and what is compared is the client side, one loop thread against `threads` blocked ones;
// twice as many requests in flight as connections, so every connection handed back finds a
// request already waiting for it while the loop thread decodes a reply or binds the next
// statement (more would only lengthen the queue on the pool).
struct AsyncSide {
  std::size_t pool_size;
  std::size_t in_flight = 2 * pool_size;
  std::shared_ptr<idem::mysql::AsyncPool> pool;
  idem::mysql::AsyncStore store;
  net::io_context io{1};       // run by one thread: the bench thread of the library side
  LoopLateness lateness;       // of a 1 ms timer on `io`, over every round
  LoopLateness idle_lateness;  // of an IdleTicker during the blocking side's rounds

  AsyncSide(const Config& config, int threads)
      : pool_size(static_cast<std::size_t>(threads)),
        pool(std::make_shared<idem::mysql::AsyncPool>(connection_params(config),
                                                      idem::mysql::PoolParams{.size = pool_size})),
        store(pool, store_params(config)) {
    std::vector<net::awaitable<void>> opening;
    opening.push_back(open_all(*pool));
    run_all(io, std::move(opening));
  }

  // One round: `total` requests, in_flight coroutines made by make(feed). Returns the runs.
  template <class Make>
  long round(int r, std::size_t total, Make make) {
    Feed feed{r, total};
    std::vector<net::awaitable<void>> requesters;
    for (std::size_t k = 0; k < in_flight; ++k)
      requesters.push_back(make(feed));
    run_all(io, std::move(requesters), &lateness);
    return feed.runs;
  }

  // Runs both sides in alternating rounds (the one loop thread against `threads` blocked
  // ones) and answers the fields of the line that both scenarios share.
  nlohmann::json compare(const std::string& name, const Config& config, int threads,
                         std::size_t total, const Side& async_side,
                         const Side& blocking_side) const {
    const auto t =
        alternate(name, steady_rounds(config), 1, threads, total, async_side, blocking_side);
    auto j = throughput_json(name, 1, total, t, ">= 1.0");
    j["baseline_threads"] = threads;
    j["connections"] = pool_size;  // per side
    j["in_flight"] = in_flight;
    j["rounds_per_side"] = steady_rounds(config);
    j["loop_timer_late"] = lateness.json();
    j["idle_timer_late"] = idle_lateness.json();
    return j;
  }
};

}  // namespace

void async_cycle_scenario(const Config& config) {
  const std::string name = "mysql.async_cycle";
  const int threads = config.threads > 0 ? config.threads : 32;
  Server server(config, threads);
  AsyncSide async(config, threads);
  const std::size_t per = async_round_operations / static_cast<std::size_t>(threads);
  const std::size_t total = per * static_cast<std::size_t>(threads);
  long async_runs = 0;
  std::atomic<long> blocking_runs{0};

  // Both sides on the same table (the library's), emptied before each round.
  Side async_side{[&](int) { server.truncate(lib_table); },
                  [&](int, int r) {
                    async_runs += async.round(r, total, [&](Feed& feed) {
                      return cycle_requester(async.store, feed, options);
                    });
                  }};
  Side blocking_side{[&](int) { server.truncate(lib_table); },
                     [&](int t, int r) {
                       std::optional<IdleTicker> ticker;
                       if (t == 0) ticker.emplace(async.idle_lateness);
                       blocking_runs += blocking_cycles(
                           *server.store, per, [&](std::size_t i) { return key_id(r, t, i); });
                     }};
  auto j = async.compare(name, config, threads, total, async_side, blocking_side);
  j["library_executions"] = async_runs / steady_rounds(config);
  j["baseline_executions"] = blocking_runs.load() / steady_rounds(config);
  j["library"] = fmt::format(
      "idem::async::run_once on mysql::AsyncStore from one loop thread, {} requests in flight "
      "on an AsyncPool of {} connections: claim, no-op business, commit of a small JSON",
      async.in_flight, async.pool_size);
  j["baseline"] = fmt::format(
      "mysql.cycle's library side: idem::run_once on the blocking mysql::Store, {} threads on a "
      "Pool of {} connections",
      threads, threads);
  emit(j);
}

void async_bound_scenario(const Config& config) {
  const std::string name = "mysql.async_bound";
  const int threads = config.threads > 0 ? config.threads : 32;
  Server server(config, threads);
  AsyncSide async(config, threads);
  server.conn(0).query(business_order_ddl("bench_lib_order"));
  const std::string order_sql = business_order_insert_sql("bench_lib_order");
  const std::size_t per = async_round_operations / static_cast<std::size_t>(threads);
  const std::size_t total = per * static_cast<std::size_t>(threads);
  long async_bodies = 0;
  std::atomic<long> blocking_bodies{0};
  auto empty_tables = [&](int) {
    server.truncate(lib_table);
    server.truncate("bench_lib_order");
  };

  // Both sides on the same record and order tables, emptied before each round.
  Side async_side{empty_tables, [&](int, int r) {
                    async_bodies += async.round(r, total, [&](Feed& feed) {
                      return bound_requester(*async.pool, async.store, order_sql, feed);
                    });
                  }};
  Side blocking_side{empty_tables, [&](int t, int r) {
                       std::optional<IdleTicker> ticker;
                       if (t == 0) ticker.emplace(async.idle_lateness);
                       for (std::size_t i = 0; i < per; ++i) {
                         const std::string id = key_id(r, t, i);
                         const bool ok =
                             idem::mysql::with_transaction(*server.pool, [&](Connection& c) {
                               ++blocking_bodies;
                               return bound_order_request(c, *server.store, id, order_sql);
                             });
                         if (!ok) throw std::runtime_error("transaction did not succeed");
                       }
                     }};
  auto j = async.compare(name, config, threads, total, async_side, blocking_side);
  // Over all rounds, as mysql.tx reports them: more tries than transactions when some ran
  // again (a deadlock, a lock wait, a record-last claim superseded).
  j["library_transactions"] = total * static_cast<std::size_t>(steady_rounds(config));
  j["library_transaction_tries"] = async_bodies;
  j["baseline_transaction_tries"] = blocking_bodies.load();
  j["library"] = fmt::format(
      "idem::mysql::with_transaction (coroutine) + tx.bind(store) + idem::async::run_once "
      "(record_last), the business INSERTing an order, from one loop thread, {} transactions in "
      "flight on an AsyncPool of {} connections",
      async.in_flight, async.pool_size);
  j["baseline"] = fmt::format(
      "mysql.tx's library side: the blocking with_transaction + store.bind(c) + run_once, {} "
      "threads on a Pool of {} connections",
      threads, threads);
  emit(j);
}

void async_batch_scenario(const Config& config) {
  const std::string name = "mysql.async_batch";
  const int consumers = 4;  // mysql.batch's threads
  const std::size_t batch = 100;
  Server server(config, 2);
  AsyncSide async(config, consumers);
  async.in_flight = static_cast<std::size_t>(consumers);  // one batch per connection
  // Three times mysql.batch's messages: a batched round of theirs is a fifth of a second here.
  const std::size_t total = config.ops(30'000, 10'000) / batch * batch;
  long batched_claims = 0;
  long single_claims = 0;
  const auto side = [&](bool batched, long* claims) {
    return Side{[&](int) { server.truncate(lib_table); },
                [&, batched, claims](int, int r) {
                  *claims += async.round(r, total, [&](Feed& feed) {
                    return batch_requester(async.store, feed, batch, batched);
                  });
                }};
  };
  const auto t = alternate(name, config.rounds_per_side(), 1, 1, total, side(true, &batched_claims),
                           side(false, &single_claims));
  auto j = throughput_json(name, 1, total, t, ">= 3");
  j["connections"] = consumers;
  j["in_flight"] = async.in_flight;
  j["batch"] = batch;
  j["loop_timer_late"] = async.lateness.json();  // both sides run on the loop
  j["library_claims"] = batched_claims / config.rounds_per_side();
  j["baseline_claims"] = single_claims / config.rounds_per_side();
  j["library"] = fmt::format(
      "idem::async::claim_batch of {} messages on mysql::AsyncStore (one multi-row INSERT IGNORE "
      "... RETURNING), from one loop thread, {} consumers in flight on an AsyncPool of {} "
      "connections",
      batch, async.in_flight, async.pool_size);
  j["baseline"] =
      "co_await store.claim once per message, on the same loop thread, consumers and connections";
  emit(j);
}

#else

void async_cycle_scenario(const Config&) {
  throw std::runtime_error("idem-bench was built without idem::async (Boost.Asio 1.81)");
}

void async_bound_scenario(const Config&) {
  throw std::runtime_error("idem-bench was built without idem::async (Boost.Asio 1.81)");
}

void async_batch_scenario(const Config&) {
  throw std::runtime_error("idem-bench was built without idem::async (Boost.Asio 1.81)");
}

#endif

}  // namespace bench::mysql_bench
