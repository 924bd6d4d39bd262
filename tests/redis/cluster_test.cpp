// idem::redis::Store on a Redis Cluster of 3 masters and 3 replicas (the fixture's): the
// conformance suite (also on the coroutine AsyncStore; its own cases are
// async_cluster_test.cpp), services on different nodes racing the same keys, slots migrating under
// load (MOVED, ASK, TRYAGAIN), and a master SIGKILLed under load (the failover, and what
// asynchronous replication loses).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <idem/redis.hpp>
#include <idem/redis/detail/slot.hpp>
#include <idem/run_once.hpp>
#include <idem/testing/blocking_store.hpp>

#include "../support/admin_program.hpp"
#include "../support/batch_states.hpp"
#include "../support/redis_cluster.hpp"
#include "../support/redis_server.hpp"
#include "../support/threads.hpp"
#include "../support/workload.hpp"

using namespace std::chrono_literals;
using idem::redis::detail::key_slot;
using idem_test::operator+;
using idem_test::cluster_nodes;
using idem_test::NodeInfo;
using idem_test::wait_cluster_ok;
using idem_test::wait_replicas_synced;

namespace {

struct ClusterFixture {
  idem_test::RedisCluster cluster;
  std::shared_ptr<idem::redis::Pool> pool =
      std::make_shared<idem::redis::Pool>(cluster.params(), idem::redis::PoolParams{.size = 8});
  idem::redis::Store s{pool, idem_test::fresh_params()};
  // Stamped: every bucket's layout key, on every master, so records are packed.
  ClusterFixture() { s.ensure_schema(); }
  idem::redis::Store& store() { return s; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

// The coroutine store on the cluster, its sessions on a loop thread of their own, where each
// BlockingStore call runs while the test's thread waits.
struct AsyncClusterFixture {
  idem_test::RedisCluster cluster;
  idem_test::LoopThread loop;
  idem_test::RedisAsyncClusterStore s{cluster, loop.io.get_executor(), 2};
  idem::testing::BlockingStore<idem::redis::AsyncStore> blocking{s.store, loop.io.get_executor()};
  AsyncClusterFixture() { s.blocking.ensure_schema(); }
  idem::testing::BlockingStore<idem::redis::AsyncStore>& store() { return blocking; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

}  // namespace

#define IDEM_CONFORMANCE_FIXTURES std::tuple<ClusterFixture, AsyncClusterFixture>
#include <idem/testing/conformance.hpp>

TEST_CASE("claim_batch on the cluster answers as one claim after another, across the masters") {
  ClusterFixture batched;
  ClusterFixture single;
  idem_test::check_claim_batch_answers(batched.s, single.s);
  const auto fresh = idem_test::fresh_requests(300);  // on every master
  const auto results = idem::claim_batch(batched.s, fresh, {});
  idem_test::check_fresh_claims(results, fresh,
                                [&](const idem::Key& key) { return batched.s.find(key); });
}

TEST_CASE("3 services x 16 threads race the same keys on every master - each key runs once") {
  idem_test::RedisCluster cl;
  const idem::redis::StoreParams params = idem_test::fresh_params();
  // Three services, each knowing the cluster by a different node first.
  std::vector<std::unique_ptr<idem::redis::Store>> services;
  for (unsigned i = 0; i < 3; ++i) {
    auto seeds = cl.ports();
    std::rotate(seeds.begin(), seeds.begin() + i, seeds.end());
    services.push_back(std::make_unique<idem::redis::Store>(
        std::make_shared<idem::redis::Pool>(cl.params(seeds), idem::redis::PoolParams{.size = 16}),
        params));
  }
  constexpr int keys = 600;
  // The keys' records lie on all three masters.
  std::set<unsigned> masters;
  const auto nodes = cluster_nodes(cl, cl.ports()[0]);
  for (int k = 0; k < keys; ++k) {
    const auto& layout = services[0]->ops().layout();
    const auto slot = key_slot(layout.keys("PAY:k" + std::to_string(k)).record);
    for (const NodeInfo& n : nodes) {
      if (n.master && n.serves(slot)) masters.insert(n.port);
    }
  }
  CHECK(masters.size() == 3);

  idem_test::Executions runs;
  idem_test::Errors errors;
  std::atomic<int> answered{0};
  idem_test::run_threads(48, [&](int t) {
    idem::redis::Store& store = *services[static_cast<std::size_t>(t % 3)];
    std::vector<int> order(keys);
    for (int k = 0; k < keys; ++k)
      order[static_cast<std::size_t>(k)] = k;
    std::mt19937 rng(static_cast<unsigned>(t));
    std::shuffle(order.begin(), order.end(), rng);
    for (const int k : order) {
      const std::string id = "k" + std::to_string(k);
      try {
        const auto out = idem::run_once(
            store, idem::Key{"PAY", id}, "",
            [&] {
              runs.executed(id);
              return id;
            },
            idem::Options{.wait = 10s});
        if (out && out.value() == id) ++answered;
      } catch (const std::exception& e) {
        errors.add(e.what());
      }
    }
  });
  INFO("first error: " << (errors.first()));
  CHECK(errors.size() == 0);
  CHECK(runs.total() == keys);
  CHECK(runs.twice() == 0);
  CHECK(answered == 48 * keys);
}

TEST_CASE("list answers stale and outcome_unknown records from every master, in order") {
  idem_test::RedisCluster cl;
  auto pool = std::make_shared<idem::redis::Pool>(cl.params(), idem::redis::PoolParams{.size = 8});
  idem::redis::Store store(pool, idem_test::fresh_params());
  const auto nodes = cluster_nodes(cl, cl.ports()[0]);
  std::set<unsigned> masters;
  auto note_master = [&](const idem::Key& key) {
    const auto slot =
        key_slot(store.ops().layout().keys(idem::redis::detail::Layout::member(key)).record);
    for (const NodeInfo& n : nodes) {
      if (n.master && n.serves(slot)) masters.insert(n.port);
    }
  };
  constexpr int stale = 60, unknown = 12, done = 30;
  for (int i = 0; i < stale; ++i) {
    const idem::Key key{"PAY", "stale-" + std::to_string(i)};
    note_master(key);
    store.claim(key, "", idem::Options{.lease = idem::Duration{50 + (i * 7) % stale}, .ttl = 1h});
  }
  CHECK(masters.size() == 3);
  for (int i = 0; i < unknown; ++i) {
    const auto c = store.claim(idem::Key{"REFUND", "unknown-" + std::to_string(i)}, "", {});
    store.repair(c.record.key, {.action = idem::RepairAction::mark_unknown,
                                .fence = c.record.ticket.fence,
                                .reason = "test: unknown"});
  }
  for (int i = 0; i < done; ++i) {
    const auto c = store.claim(idem::Key{"PAY", "done-" + std::to_string(i)}, "", {});
    store.complete(c.record.key, c.record.ticket, "1");
  }
  std::this_thread::sleep_for(200ms);

  const auto all = store.list({.stale = true, .limit = 1'000});
  REQUIRE(all.size() == stale);
  CHECK(std::is_sorted(all.begin(), all.end(),
                       [](const auto& a, const auto& b) { return a.lease_until < b.lease_until; }));
  std::set<idem::Key> distinct;
  for (const auto& r : all)
    distinct.insert(r.key);
  CHECK(distinct.size() == stale);
  const auto first = store.list({.stale = true, .limit = 10});
  REQUIRE(first.size() == 10);
  for (std::size_t i = 0; i < first.size(); ++i)
    CHECK(first[i].lease_until == all[i].lease_until);
  const auto unknowns = store.list({.status = idem::Status::outcome_unknown});
  CHECK(unknowns.size() == unknown);
  CHECK(std::is_sorted(unknowns.begin(), unknowns.end(),
                       [](const auto& a, const auto& b) { return a.updated_at < b.updated_at; }));
  CHECK(store.list({.status = idem::Status::outcome_unknown, .biz_type = "PAY"}).empty());
  CHECK(store.list({.status = idem::Status::succeeded, .limit = 1'000}).size() == done);

  // What the Janitor does with them: a fenced repair of each record listed.
  for (const auto& r : all) {
    store.repair(r.key, {.action = idem::RepairAction::release,
                         .fence = r.ticket.fence,
                         .reason = "test: released"});
  }
  CHECK(store.list({.stale = true}).empty());
}

TEST_CASE("the idem program finds each key's bucket, slot and master, and counts every master") {
  idem_test::RedisCluster cl;
  auto pool = std::make_shared<idem::redis::Pool>(cl.params(), idem::redis::PoolParams{.size = 2});
  const idem::redis::StoreParams params = idem_test::fresh_params();
  idem::redis::Store store(pool, params);
  const auto nodes = cluster_nodes(cl, cl.ports()[0]);
  std::set<unsigned> masters;
  constexpr int keys = 30;
  for (int i = 0; i < keys; ++i) {
    const idem::Key key{"PAY", "k-" + std::to_string(i)};
    idem::run_once(store, key, "", [] { return 1; });
  }
  // One seed is enough: the program reads the slot map from it.
  const std::vector<std::string> where{"--redis-cluster",
                                       "127.0.0.1:" + std::to_string(cl.ports()[1]),
                                       "--redis-prefix", params.prefix};
  for (int i = 0; i < keys; ++i) {
    const std::string id = "k-" + std::to_string(i);
    const std::string record = store.ops().layout().keys("PAY:" + id).record;
    const auto ran =
        idem_test::run_admin(where + std::vector<std::string>{"inspect", "PAY", id, "--json"});
    INFO(ran.err);
    REQUIRE(ran.status == 0);
    const auto location = nlohmann::json::parse(ran.out).at("location");
    CHECK(location.at("redis key") == record);
    CHECK(location.at("slot") == std::to_string(key_slot(record)));
    unsigned serving = 0;
    for (const NodeInfo& n : nodes)
      if (n.master && n.serves(key_slot(record))) serving = n.port;
    CHECK(location.at("node") == "127.0.0.1:" + std::to_string(serving));
    masters.insert(serving);
  }
  CHECK(masters.size() == 3);
  const auto stats = idem_test::run_admin(where + std::vector<std::string>{"stats", "--json"});
  INFO(stats.err);
  REQUIRE(stats.status == 0);
  CHECK(nlohmann::json::parse(stats.out).at("total") == keys);
}

TEST_CASE("slots migrating under load - the store follows MOVED and ASK, each key runs once") {
  idem_test::RedisCluster cl;
  // Few buckets, so that the keys lie in a few slots, which the test moves.
  auto pool = std::make_shared<idem::redis::Pool>(cl.params(), idem::redis::PoolParams{.size = 8});
  idem::redis::Store store(
      pool,
      idem_test::fresh_params({.buckets = 4, .retry = {.max_attempts = 80, .max_backoff = 200ms}}));
  const auto& layout = store.ops().layout();
  std::vector<int> slots;
  for (std::uint32_t b = 0; b < 4; ++b)
    slots.push_back(key_slot(layout.leases(b)));

  idem_test::Executions runs;
  idem_test::Errors errors;
  std::atomic<bool> stop{false};
  std::atomic<int> next{0}, answered{0};
  std::thread load([&] {
    idem_test::run_threads(8, [&](int) {
      while (!stop.load()) {
        const int k = next++;
        // Each key twice: a fresh claim, and a duplicate that must replay.
        for (int pass = 0; pass < 2; ++pass) {
          const std::string id = "m" + std::to_string(k);
          try {
            const auto out = idem::run_once(store, idem::Key{"PAY", id}, "", [&] {
              runs.executed(id);
              return id;
            });
            if (out && out.value() == id) ++answered;
          } catch (const std::exception& e) {
            errors.add(e.what());
          }
        }
      }
    });
  });

  int moved_keys = 0;
  std::string migrate_error = "none";
  try {
    moved_keys = idem_test::migrate_slots(cl, slots);
  } catch (const std::exception& e) {
    migrate_error = e.what();
  }
  std::this_thread::sleep_for(200ms);
  stop = true;
  load.join();
  wait_cluster_ok(cl);

  INFO("migration: " << migrate_error << "; first error: " << (errors.first()));
  CHECK(migrate_error == "none");
  CHECK(moved_keys > 0);
  CHECK(errors.size() == 0);
  CHECK(runs.twice() == 0);
  CHECK(answered == 2 * next.load());
  // Every record is found on its slot's new master.
  for (int k = 0; k < std::min(next.load(), 200); ++k) {
    const auto r = store.find(idem::Key{"PAY", "m" + std::to_string(k)});
    CHECK((r && r->status == idem::Status::succeeded));
  }
}

TEST_CASE(
    "a master SIGKILLed under load - the store follows the failover: what asynchronous "
    "replication lost runs again, nothing else") {
  idem_test::RedisCluster cl;
  auto pool = std::make_shared<idem::redis::Pool>(cl.params(), idem::redis::PoolParams{.size = 16});
  // Enough tries to outlast a failover: the node timeout (2 s here) and an election.
  idem::redis::Store store(
      pool, idem_test::fresh_params(
                {.retry = {.max_attempts = 80, .backoff = 10ms, .max_backoff = 250ms}}));
  constexpr int requests = 20'000;
  const idem_test::Storm storm = idem_test::storm_of(requests, 9);
  const int distinct = storm.distinct;
  const std::vector<int>& order = storm.order;

  using Clock = std::chrono::steady_clock;
  idem_test::Executions runs;
  idem_test::Errors errors;
  std::mutex mutex;
  std::set<std::string> acked;
  // Claims the killed master took with it: a duplicate claimed the key afresh on the promoted
  // replica and ran it, and the first owner's commit was refused (LeaseLost).
  std::set<std::string> claims_lost;
  std::atomic<int> answered{0};
  Clock::duration slowest{};
  auto request = [&](const std::string& id) {
    const auto t0 = Clock::now();
    try {
      const auto out = idem::run_once(
          store, idem::Key{"ORDER", id}, "",
          [&] {
            runs.executed(id);
            return id;
          },
          idem::Options{.lease = 20s, .ttl = 1h, .wait = 20s});
      if (out && out.value() == id) {
        std::lock_guard lock(mutex);
        acked.insert(id);
      }
    } catch (const idem::LeaseLost&) {
      std::lock_guard lock(mutex);
      claims_lost.insert(id);
    } catch (const std::exception& e) {
      errors.add(id + ": " + e.what());
    }
    std::lock_guard lock(mutex);
    slowest = std::max(slowest, Clock::now() - t0);
    ++answered;
  };

  // The master that serves the first bucket dies once a third of the calls answered.
  const unsigned victim = idem_test::master_of(cl, key_slot(store.ops().layout().leases(0)));
  REQUIRE(victim != 0);
  wait_replicas_synced(cl);
  Clock::time_point killed_at{};
  std::thread killer([&] {
    while (answered.load() < requests / 3)
      std::this_thread::sleep_for(1ms);
    cl.kill(victim);
    killed_at = Clock::now();
  });
  std::atomic<std::size_t> next{0};
  idem_test::run_threads(16, [&](int) {
    for (std::size_t i = next++; i < order.size(); i = next++)
      request("order-" + std::to_string(order[i]));
  });
  killer.join();
  const auto storm_end = Clock::now();
  const auto storm_slowest = slowest;

  // Acknowledged results the promoted replica never received.
  int lost = 0;
  for (const std::string& id : acked) {
    const auto r = store.find(idem::Key{"ORDER", id});
    if (!r || r->status != idem::Status::succeeded) ++lost;
  }
  const int storm_errors = static_cast<int>(errors.size());
  // The gateway retries every key: what survived replays, what was lost runs again.
  for (int k = 0; k < distinct; ++k)
    request("order-" + std::to_string(k));
  cl.resume(victim);  // it rejoins as a replica of the promoted node
  wait_cluster_ok(cl);

  INFO("first error: " << (errors.first()));
  CHECK(killed_at < storm_end);
  CHECK(storm_errors == 0);
  CHECK(errors.size() == 0);
  // Only what the killed master lost ran again: an acknowledged record, or a claim.
  CHECK(runs.twice() <= lost + static_cast<int>(claims_lost.size()));
  for (int k = 0; k < distinct; ++k) {
    const auto r = store.find(idem::Key{"ORDER", "order-" + std::to_string(k)});
    CHECK((r && r->status == idem::Status::succeeded));
  }
  WARN("redis cluster failover: "
       << acked.size() << " acknowledged, " << lost << " lost with the killed master, "
       << claims_lost.size() << " claims lost with it, " << runs.twice()
       << " keys ran twice, slowest call "
       << std::chrono::duration_cast<std::chrono::milliseconds>(storm_slowest).count() << " ms");
}
