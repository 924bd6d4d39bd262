#pragma once
// What the Redis Cluster tests (tests/redis/cluster_test.cpp, async_cluster_test.cpp) ask the
// fixture's cluster (idem_test::RedisCluster): its nodes and slots, and waits for it to be whole.
#include <algorithm>
#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include <idem/redis.hpp>
#include <idem/redis/async.hpp>

#include "redis_async.hpp"
#include "redis_server.hpp"

namespace idem_test {

// What CLUSTER NODES says of one node.
struct NodeInfo {
  std::string id;
  unsigned port = 0;
  bool master = false;
  bool failed = false;
  std::vector<std::pair<int, int>> slots;  // ranges a master serves
  bool serves(int slot) const {
    return std::any_of(slots.begin(), slots.end(),
                       [&](auto r) { return slot >= r.first && slot <= r.second; });
  }
};

inline std::vector<NodeInfo> cluster_nodes(const idem_test::RedisCluster& cl, unsigned ask_port) {
  idem::redis::Connection c(cl.node(ask_port));
  std::vector<NodeInfo> out;
  std::istringstream lines{std::string(c.command({"CLUSTER", "NODES"}).text())};
  for (std::string line; std::getline(lines, line);) {
    std::istringstream f(line);
    NodeInfo n;
    std::string addr, flags, master, ping, pong, epoch, link;
    f >> n.id >> addr >> flags >> master >> ping >> pong >> epoch >> link;
    n.port = static_cast<unsigned>(std::stoul(addr.substr(addr.find(':') + 1)));
    n.master = flags.find("master") != std::string::npos;
    n.failed = flags.find("fail") != std::string::npos;
    for (std::string range; f >> range;) {
      if (range.front() == '[') continue;  // a slot being migrated
      const auto dash = range.find('-');
      const int a = std::stoi(range.substr(0, dash));
      n.slots.emplace_back(a, dash == std::string::npos ? a : std::stoi(range.substr(dash + 1)));
    }
    out.push_back(std::move(n));
  }
  return out;
}

// Waits until every live node says cluster_state:ok and sees 3 masters with slots.
inline void wait_cluster_ok(const idem_test::RedisCluster& cl) {
  for (int i = 0; i < 300; ++i) {
    bool ok = true;
    for (const unsigned port : cl.ports()) {
      try {
        idem::redis::Connection c(cl.node(port));
        ok = ok && std::string(c.command({"CLUSTER", "INFO"}).text()).find("cluster_state:ok") !=
                       std::string::npos;
      } catch (const idem::StoreError&) {
        // a node that is down is not asked
      }
    }
    if (ok) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  FAIL("the cluster did not return to cluster_state:ok");
}

// Waits until every replica's link to its master is up (a replica that never synced cannot be
// promoted: right after the cluster starts, a killed master would stay failed).
inline void wait_replicas_synced(const idem_test::RedisCluster& cl) {
  for (int i = 0; i < 300; ++i) {
    bool ok = true;
    for (const unsigned port : cl.ports()) {
      idem::redis::Connection c(cl.node(port));
      const std::string info(c.command({"INFO", "replication"}).text());
      if (info.find("role:slave") != std::string::npos) {
        ok = ok && info.find("master_link_status:up") != std::string::npos;
      }
    }
    if (ok) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  FAIL("the replicas did not sync with their masters");
}

// Moves each slot to another master, key by key, as redis-cli --cluster reshard does, while
// the caller's load runs; answers how many keys moved. Throws on a node's refusal.
inline int migrate_slots(const RedisCluster& cl, const std::vector<int>& slots) {
  int moved_keys = 0;
  for (const int slot : slots) {
    const auto nodes = cluster_nodes(cl, cl.ports()[0]);
    const NodeInfo* from = nullptr;
    const NodeInfo* to = nullptr;
    for (const NodeInfo& n : nodes) {
      if (!n.master || n.failed) continue;
      if (n.serves(slot)) {
        from = &n;
      } else if (to == nullptr) {
        to = &n;
      }
    }
    REQUIRE(from != nullptr);
    REQUIRE(to != nullptr);
    idem::redis::Connection src(cl.node(from->port));
    idem::redis::Connection dst(cl.node(to->port));
    const std::string s = std::to_string(slot);
    dst.command({"CLUSTER", "SETSLOT", s, "IMPORTING", from->id});
    src.command({"CLUSTER", "SETSLOT", s, "MIGRATING", to->id});
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // claims meet it half-moved
    // 100 keys per MIGRATE, as redis-cli --cluster reshard's default pipeline does: while
    // some of a bucket's keys have moved and others not, its scripts get TRYAGAIN.
    const std::string to_port = std::to_string(to->port);
    for (;;) {
      const auto keys = src.command({"CLUSTER", "GETKEYSINSLOT", s, "100"});
      if (keys.size() == 0) break;
      std::vector<std::string_view> migrate = {"MIGRATE", "127.0.0.1", to_port, "",
                                               "0",       "5000",      "KEYS"};
      for (std::size_t k = 0; k < keys.size(); ++k)
        migrate.push_back(keys[k].text());
      src.command(migrate);
      moved_keys += static_cast<int>(keys.size());
    }
    for (const NodeInfo& n : nodes) {
      if (n.master && !n.failed) {
        idem::redis::Connection c(cl.node(n.port));
        c.command({"CLUSTER", "SETSLOT", s, "NODE", to->id});
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return moved_keys;
}

// A count from the INFO of every live master, summed: `field` of section `section` (e.g.
// "errorstats", "errorstat_MOVED:count=").
inline long long masters_info_sum(const RedisCluster& cl, const std::string& section,
                                  const std::string& field) {
  long long sum = 0;
  for (const NodeInfo& n : cluster_nodes(cl, cl.ports()[0])) {
    if (!n.master || n.failed) continue;
    idem::redis::Connection c(cl.node(n.port));
    const std::string info(c.command({"INFO", section}).text());
    const auto at = info.find(field);
    if (at != std::string::npos) sum += std::stoll(info.substr(at + field.size()));
  }
  return sum;
}

// idem::redis::AsyncStore on the cluster, under a fresh prefix, on a pool of `connections`
// cluster sessions living on `executor`; beside a blocking store on the same prefix, for set-up
// and counting.
struct RedisAsyncClusterStore {
  idem::redis::StoreParams params;
  std::shared_ptr<idem::redis::AsyncPool> pool;
  idem::redis::AsyncStore store;
  idem::redis::Store blocking;

  RedisAsyncClusterStore(const RedisCluster& cl, boost::asio::any_io_executor executor,
                         std::size_t connections = 1, idem::redis::StoreParams p = {},
                         std::optional<idem::redis::ConnectionParams> connect = {})
      : params(fresh_params(std::move(p))),
        pool(std::make_shared<idem::redis::AsyncPool>(
            std::move(executor), connect ? std::move(*connect) : cl.params(),
            idem::redis::PoolParams{.size = connections})),
        store(pool, params),
        blocking(
            std::make_shared<idem::redis::Pool>(cl.params(), idem::redis::PoolParams{.size = 2}),
            params) {}
};

// The port of the master serving `slot` now, or 0.
inline unsigned master_of(const RedisCluster& cl, int slot) {
  for (const NodeInfo& n : cluster_nodes(cl, cl.ports()[0])) {
    if (n.master && !n.failed && n.serves(slot)) return n.port;
  }
  return 0;
}

}  // namespace idem_test
