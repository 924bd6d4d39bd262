// idem::redis::AsyncStore and AsyncConnection on the fixture's Redis Cluster (3 masters and 3
// replicas): requests pipelined on one link per master from one loop thread, a timer beside
// them, links killed and requests cancelled at random, slots migrating under load (MOVED, ASK,
// TRYAGAIN), and a master SIGKILLed under load. The conformance suite runs on it in
// cluster_test.cpp.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <idem/redis/async.hpp>
#include <idem/redis/detail/slot.hpp>

#include "../support/async_scenarios.hpp"
#include "../support/redis_cluster.hpp"
#include "../support/workload.hpp"

using namespace std::chrono_literals;
using idem::redis::detail::key_slot;
using idem_test::run_on;
namespace net = idem::async::net;

namespace {

// Coroutine clients on a loop thread of their own, each sending request(k) for the next k
// until stop(): the load a test runs while it changes the cluster from its own thread.
class LoopLoad {
 public:
  template <class Request>
  LoopLoad(int clients, Request request) : clients_(clients) {
    for (int c = 0; c < clients; ++c) {
      net::co_spawn(
          loop_.io,
          [this, request]() -> net::awaitable<void> {
            while (!stop_.load()) {
              const int k = next_++;
              co_await request(k);
            }
            ++done_;
          },
          net::detached);
    }
  }
  ~LoopLoad() { stop(); }
  // Stops the clients after their current request, and waits for them.
  void stop() {
    stop_ = true;
    while (done_.load() < clients_)
      std::this_thread::sleep_for(1ms);
  }
  int sent() const { return next_.load(); }

 private:
  idem_test::LoopThread loop_;
  int clients_;
  std::atomic<bool> stop_{false};
  std::atomic<int> next_{0};
  std::atomic<int> done_{0};
};

idem::redis::ConnectionParams named(const idem_test::RedisCluster& cl, const char* what) {
  idem::redis::ConnectionParams p = cl.params();
  p.client_name = idem_test::unique_prefix(what);
  return p;
}

// The links named `name` on each live master, by port.
std::map<unsigned, std::vector<std::string>> links_named(const idem_test::RedisCluster& cl,
                                                         const std::string& name) {
  std::map<unsigned, std::vector<std::string>> out;
  for (const idem_test::NodeInfo& n : idem_test::cluster_nodes(cl, cl.ports()[0])) {
    if (!n.master || n.failed) continue;
    idem::redis::Connection admin(cl.node(n.port));
    out[n.port] = idem_test::clients_named(admin, name);
  }
  return out;
}

}  // namespace

TEST_CASE(
    "async redis cluster: one loop thread, 1,000 concurrent requests at 12% duplicates, one "
    "pipelined link per master - executions equal keys") {
  idem_test::RedisCluster cl;
  const idem::redis::ConnectionParams connect = named(cl, "async-cluster");
  idem_test::RedisAsyncClusterStore t(cl, idem_test::test_loop().get_executor(), 1, {}, connect);
  const auto storm = idem_test::storm_of(1000, 17);
  idem_test::Executions executions;
  const auto r = idem_test::async_storm(t.store, storm, executions);
  idem_test::check_storm(r, storm, executions);
  // The records lie on every master, and each master carried them on one link.
  std::set<unsigned> masters;
  for (int k = 0; k < storm.distinct; ++k) {
    const auto key = idem::Key{"PAY", "S-" + std::to_string(k)};
    const auto& layout = t.blocking.ops().layout();
    masters.insert(idem_test::master_of(cl, key_slot(layout.keys(layout.member(key)).record)));
  }
  CHECK(masters.size() == 3);
  for (const auto& [port, ids] : links_named(cl, connect.client_name)) {
    INFO("master " << port);
    CHECK(ids.size() == 1);
  }
}

TEST_CASE("async redis cluster: a 1 ms timer on the loop keeps firing while 64 claims are out") {
  idem_test::RedisCluster cl;
  idem_test::RedisAsyncClusterStore t(cl, idem_test::test_loop().get_executor());
  const auto r = idem_test::ticks_while_claiming(t.store, 64, 2000);
  std::printf("async redis cluster: %d ticks of 1 ms (%d with claims out), latest by %lld us\n",
              r.ticks, r.ticks_in_flight, r.latest_us);
  CHECK(r.done == 64);
  CHECK(r.most_in_flight > 1);
  CHECK(r.ticks_in_flight > 0);
}

TEST_CASE("async redis cluster: links killed at random on every master - nothing runs twice") {
  idem_test::RedisCluster cl;
  const idem::redis::ConnectionParams connect = named(cl, "async-cluster-killed");
  // Enough tries that a call outlives the killer's aim at its links, also in a sanitizer build.
  idem_test::RedisAsyncClusterStore t(cl, idem_test::test_loop().get_executor(), 2,
                                      {.retry = {.max_attempts = 100, .max_backoff = 50ms}},
                                      connect);
  const auto storm = idem_test::storm_of(4000, 29);
  idem_test::Executions executions;
  std::atomic<bool> stop{false};
  std::atomic<long> kills{0};
  std::thread killer([&] {
    std::mt19937 pick(5);
    while (!stop) {
      for (const auto& [port, ids] : links_named(cl, connect.client_name)) {
        if (ids.empty() || pick() % 2 == 0) continue;
        idem::redis::Connection admin(cl.node(port));
        kills += admin.command({"CLIENT", "KILL", "ID", ids[pick() % ids.size()]}).integer();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + pick() % 10));
    }
  });
  const auto r = idem_test::retrying_clients(t.store, storm, 64, executions);
  stop = true;
  killer.join();
  std::printf("async redis cluster kill: %ld kills, %d failed calls (retried by the client)%s%s\n",
              kills.load(), r.failed_calls, r.failed_calls > 0 ? ", first: " : "",
              r.first_failure.c_str());
  CHECK(kills > 10);
  CHECK(executions.max_per_key() == 1);
  CHECK(executions.total() == storm.distinct);
}

TEST_CASE("async redis cluster: a request cancelled at any point leaves no processing claim") {
  idem_test::RedisCluster cl;
  idem_test::RedisAsyncClusterStore t(cl, idem_test::test_loop().get_executor(), 2);
  const auto r = idem_test::cancel_at_random(t.store, 400, 11);
  std::printf("async redis cluster cancel: %d of %d requests cancelled in %d rounds\n", r.cancelled,
              r.requests, r.rounds);
  CHECK(r.cancelled > 20);
  CHECK(r.finished > 0);
  CHECK(r.processing_after == 0);
  CHECK(idem_test::replayed_or_ran(t.store, r, 400) == r.requests);
}

TEST_CASE("async redis cluster: claim_batch answers as one claim after another, across nodes") {
  idem_test::RedisCluster cl;
  idem_test::RedisAsyncClusterStore batched(cl, idem_test::test_loop().get_executor(), 2);
  idem_test::RedisAsyncClusterStore single(cl, idem_test::test_loop().get_executor(), 1);
  idem_test::check_batch_answers(batched.store, batched.blocking, single.blocking);

  const auto fresh = idem_test::fresh_requests(300);  // on every master
  const auto results =
      run_on(idem_test::test_loop(), idem::async::claim_batch(batched.store, fresh));
  idem_test::check_fresh_claims(results, fresh,
                                [&](const idem::Key& key) { return batched.blocking.find(key); });
}

TEST_CASE("async redis cluster: a batch cancelled at any point leaves no processing claim") {
  idem_test::RedisCluster cl;
  idem_test::RedisAsyncClusterStore t(cl, idem_test::test_loop().get_executor(), 2);
  const auto r = idem_test::cancel_batches_at_random(t.store, 8, 150, 37);
  const auto left = idem_test::batch_keys_left(t.store, r, 8, 150);
  idem_test::check_cancelled_batches("async redis cluster", r, 8, left.processing, left.cut_off,
                                     left.made_before);
}

TEST_CASE(
    "async redis cluster: a link lost with a command out is remembered by its session, one "
    "closed idle is not") {
  idem_test::RedisCluster cl;
  const idem::redis::ConnectionParams connect = named(cl, "async-cluster-lost");
  net::io_context io;
  auto c = run_on(io, idem::redis::AsyncConnection::open(connect));
  REQUIRE(c->cluster());
  const std::string key = idem_test::unique_prefix("lost-link");
  const unsigned port = idem_test::master_of(cl, key_slot(key));
  // A command that waits on its node (the node serves others meanwhile); its link is killed.
  std::thread killer([&] {
    idem::redis::Connection admin(cl.node(port));
    for (int i = 0; i < 500; ++i) {
      std::this_thread::sleep_for(10ms);
      const auto ids = idem_test::clients_named(admin, connect.client_name);
      if (!ids.empty() && admin.command({"CLIENT", "KILL", "ID", ids.front()}).integer() == 1)
        return;
    }
  });
  const std::vector<std::string_view> wait{"BLPOP", key, "3"};
  std::string failure;
  try {
    (void)run_on(io, c->command(wait));
  } catch (const idem::StoreError& e) {
    failure = e.what();
  }
  killer.join();
  INFO(failure);
  CHECK_FALSE(failure.empty());
  CHECK_FALSE(c->broken());  // a cluster session opens again what it needs
  const auto lost = c->lost_links(c->id());
  REQUIRE(lost.size() == 1);
  CHECK(lost.front().node.port == port);
  c->settled_links(c->id(), lost);
  // The session answers again, on a new link to that node; closed with nothing out, its links
  // leave nothing to wait for.
  const std::vector<std::string_view> exists{"EXISTS", key};
  CHECK(run_on(io, c->command(exists)).integer() == 0);
  c->close();
  CHECK(run_on(io, c->command(exists)).integer() == 0);
  CHECK(c->lost_links(c->id()).empty());
}

TEST_CASE(
    "async redis cluster: a cancelled claim's clean-up waits out each lost link on its node, "
    "skips a node where nothing listens, and stops at any other failure") {
  idem_test::RedisCluster cl;
  idem::redis::ConnectionParams connect = cl.params();
  connect.read_timeout = 300ms;
  net::io_context io;
  auto c = run_on(io, idem::redis::AsyncConnection::open(connect));
  idem::redis::AsyncStore store(
      std::make_shared<idem::redis::AsyncPool>(io.get_executor(), connect),
      idem_test::fresh_params());
  idem::redis::detail::LostLinks& registry = idem::redis::detail::LostLinks::of_process();
  using idem::redis::detail::Address;

  // A lost link the node still lists (here a connection of the test's): waited for, then
  // killed after a second.
  const unsigned port = cl.ports()[0];
  idem::redis::Connection still_there(cl.node(port));
  const auto client = static_cast<unsigned long>(still_there.command({"CLIENT", "ID"}).integer());
  // And one on a port where nothing listens any more (a node that died).
  const unsigned dead_port = [] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), len);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return static_cast<unsigned>(ntohs(a.sin_port));
  }();
  registry.add(c->id(), {Address{"127.0.0.1", port, {}}, client});
  registry.add(c->id(), {Address{"127.0.0.1", dead_port, {}}, 7});
  const auto start = std::chrono::steady_clock::now();
  CHECK(run_on(io, store.ops().settled(*c, c->id())));
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= 900ms);                       // it waited for the listed link,
  CHECK_THROWS(still_there.command({"PING"}));  // then killed it,
  CHECK(c->lost_links(c->id()).empty());        // and forgot both

  // A node that accepts and never answers: the clean-up fails, and remembers the link.
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(silent, reinterpret_cast<sockaddr*>(&a), len) == 0);
  REQUIRE(::listen(silent, 8) == 0);
  ::getsockname(silent, reinterpret_cast<sockaddr*>(&a), &len);
  registry.add(c->id(), {Address{"127.0.0.1", static_cast<unsigned>(ntohs(a.sin_port)), {}}, 7});
  CHECK_THROWS_AS(run_on(io, store.ops().settled(*c, c->id())), idem::StoreError);
  CHECK(c->lost_links(c->id()).size() == 1);
  ::close(silent);
  registry.forget(c->id());
}

TEST_CASE("async redis cluster: the lost links kept per session are its latest 32") {
  idem::redis::detail::LostLinks& lost = idem::redis::detail::LostLinks::of_process();
  const unsigned long session = 0x7fff0000UL;  // not a session's number in these tests
  for (unsigned long client = 1; client <= 40; ++client)
    lost.add(session, {idem::redis::detail::Address{"127.0.0.1", 7000, {}}, client});
  const auto kept = lost.of(session);
  REQUIRE(kept.size() == 32);
  CHECK(kept.front().client == 9);
  CHECK(kept.back().client == 40);
  // What was waited out goes; what came meanwhile stays.
  lost.add(session, {idem::redis::detail::Address{"127.0.0.1", 7001, {}}, 41});
  lost.settled(session, kept);
  const auto left = lost.of(session);
  REQUIRE(left.size() == 1);
  CHECK(left.front().client == 41);
  lost.forget(session);
  CHECK(lost.of(session).empty());
}

TEST_CASE(
    "async redis cluster: slots migrating under load - the coroutine store follows MOVED and "
    "ASK, each key runs once") {
  idem_test::RedisCluster cl;
  // Few buckets, so that the keys lie in a few slots, which the test moves.
  idem_test::LoopThread loop;
  idem_test::RedisAsyncClusterStore t(
      cl, loop.io.get_executor(), 2,
      {.buckets = 4, .retry = {.max_attempts = 80, .max_backoff = 200ms}});
  std::vector<int> slots;
  for (std::uint32_t b = 0; b < 4; ++b)
    slots.push_back(key_slot(t.blocking.ops().layout().leases(b)));
  const long long moved_before =
      idem_test::masters_info_sum(cl, "errorstats", "errorstat_MOVED:count=");
  const long long asking_before =
      idem_test::masters_info_sum(cl, "commandstats", "cmdstat_asking:calls=");

  idem_test::Executions runs;
  idem_test::Errors errors;
  std::atomic<int> answered{0};
  auto request = [&](int k) -> net::awaitable<void> {
    // Each key twice: a fresh claim, and a duplicate that must replay.
    const std::string id = "m" + std::to_string(k);
    for (int pass = 0; pass < 2; ++pass) {
      auto body = [&]() -> net::awaitable<std::string> {
        runs.executed(id);
        co_return id;
      };
      try {
        const idem::Key key{"PAY", id};
        const auto out = co_await idem::async::run_once(t.store, key, "", body);
        if (out && out.value() == id) ++answered;
      } catch (const std::exception& e) {
        errors.add(e.what());
      }
    }
  };
  LoopLoad load(32, request);
  int moved_keys = 0;
  std::string migrate_error = "none";
  try {
    moved_keys = idem_test::migrate_slots(cl, slots);
  } catch (const std::exception& e) {
    migrate_error = e.what();
  }
  std::this_thread::sleep_for(200ms);
  load.stop();
  idem_test::wait_cluster_ok(cl);
  const long long moved =
      idem_test::masters_info_sum(cl, "errorstats", "errorstat_MOVED:count=") - moved_before;
  const long long asking =
      idem_test::masters_info_sum(cl, "commandstats", "cmdstat_asking:calls=") - asking_before;
  std::printf(
      "async redis cluster migration: %d keys moved, %d requests, %lld MOVED, %lld ASKING\n",
      moved_keys, load.sent(), moved, asking);

  INFO("migration: " << migrate_error << "; first error: " << errors.first());
  CHECK(migrate_error == "none");
  CHECK(moved_keys > 0);
  CHECK(moved > 0);   // the map changed under the store
  CHECK(asking > 0);  // and it met slots half-moved
  CHECK(errors.size() == 0);
  CHECK(runs.twice() == 0);
  CHECK(answered == 2 * load.sent());
  for (int k = 0; k < std::min(load.sent(), 200); ++k) {
    const auto r = t.blocking.find(idem::Key{"PAY", "m" + std::to_string(k)});
    CHECK((r && r->status == idem::Status::succeeded));
  }
}

TEST_CASE(
    "async redis cluster: a master SIGKILLed under load - the coroutine store follows the "
    "failover: what asynchronous replication lost runs again, nothing else") {
  idem_test::RedisCluster cl;
  idem_test::LoopThread loop;
  // Enough tries to outlast a failover: the node timeout (2 s here) and an election.
  idem_test::RedisAsyncClusterStore t(
      cl, loop.io.get_executor(), 2,
      {.retry = {.max_attempts = 80, .backoff = 10ms, .max_backoff = 250ms}});
  constexpr int requests = 10'000;
  const idem_test::Storm storm = idem_test::storm_of(requests, 9);

  idem_test::Executions runs;
  idem_test::Errors errors;
  std::mutex mutex;
  std::set<std::string> acked;
  // Claims the killed master took with it: a duplicate claimed the key afresh on the promoted
  // replica and ran it, and the first owner's record was refused (LeaseLost).
  std::set<std::string> claims_lost;
  std::atomic<int> answered{0};
  auto request = [&](int k) -> net::awaitable<void> {
    const std::string id = "order-" + std::to_string(k);
    auto body = [&]() -> net::awaitable<std::string> {
      runs.executed(id);
      co_return id;
    };
    try {
      const idem::Key key{"ORDER", id};
      const idem::Options options{.lease = 20s, .ttl = 1h, .wait = 20s};
      const auto out = co_await idem::async::run_once(t.store, key, "", body, options);
      if (out && out.value() == id) {
        const std::lock_guard lock(mutex);
        acked.insert(id);
      }
    } catch (const idem::LeaseLost&) {
      const std::lock_guard lock(mutex);
      claims_lost.insert(id);
    } catch (const std::exception& e) {
      errors.add(id + ": " + e.what());
    }
    ++answered;
  };

  // The master that serves the first bucket dies once a third of the calls answered.
  const unsigned victim = idem_test::master_of(cl, key_slot(t.blocking.ops().layout().leases(0)));
  REQUIRE(victim != 0);
  idem_test::wait_replicas_synced(cl);
  std::atomic<bool> killed{false};
  std::thread killer([&] {
    while (answered.load() < requests / 3)
      std::this_thread::sleep_for(1ms);
    cl.kill(victim);
    killed = true;
  });
  {
    // 64 clients share the storm's requests, each sending its next once the last answered.
    std::atomic<std::size_t> next{0};
    std::atomic<int> done{0};
    for (int c = 0; c < 64; ++c) {
      net::co_spawn(
          loop.io,
          [&]() -> net::awaitable<void> {
            for (std::size_t i = next++; i < storm.order.size(); i = next++)
              co_await request(storm.order[i]);
            ++done;
          },
          net::detached);
    }
    while (done.load() < 64)
      std::this_thread::sleep_for(1ms);
  }
  killer.join();
  const bool killed_during_storm = killed.load();

  // Acknowledged results the promoted replica never received.
  int lost = 0;
  for (const std::string& id : acked) {
    const auto r = t.blocking.find(idem::Key{"ORDER", id});
    if (!r || r->status != idem::Status::succeeded) ++lost;
  }
  const int storm_errors = static_cast<int>(errors.size());
  // The gateway retries every key: what survived replays, what was lost runs again.
  for (int k = 0; k < storm.distinct; ++k) {
    std::promise<void> answered_once;
    net::co_spawn(loop.io, request(k), [&](std::exception_ptr) { answered_once.set_value(); });
    answered_once.get_future().wait();
  }
  cl.resume(victim);  // it rejoins as a replica of the promoted node
  idem_test::wait_cluster_ok(cl);

  INFO("first error: " << errors.first());
  CHECK(killed_during_storm);
  CHECK(storm_errors == 0);
  CHECK(errors.size() == 0);
  // Only what the killed master lost ran again: an acknowledged record, or a claim.
  CHECK(runs.twice() <= lost + static_cast<int>(claims_lost.size()));
  for (int k = 0; k < storm.distinct; ++k) {
    const auto r = t.blocking.find(idem::Key{"ORDER", "order-" + std::to_string(k)});
    CHECK((r && r->status == idem::Status::succeeded));
  }
  std::printf(
      "async redis cluster failover: %zu acknowledged, %d lost with the killed master, "
      "%zu claims lost with it, %d keys ran twice\n",
      acked.size(), lost, claims_lost.size(), runs.twice());
}
