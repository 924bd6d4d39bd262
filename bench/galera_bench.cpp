// galera.cycle: what certification costs. run_once on fresh keys spread over the three nodes
// of a Galera cluster (a pool and a Store per node) against the same run_once on the single
// server of mysql.cycle, same thread count, same table shape. The ratio is cluster / single.
#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <idem/idem.hpp>
#include <idem/mysql.hpp>

#include "common.hpp"
#include "scenarios.hpp"

namespace bench {
namespace {

constexpr const char* table = "bench_galera";

idem::mysql::ConnectionParams params(const Config& config, const std::string& socket) {
  idem::mysql::ConnectionParams p;
  p.unix_socket = socket;
  p.user = config.user;
  p.password = config.password;
  p.database = config.database;
  return p;
}

// A pool and a Store on one endpoint, every connection opened up front (connecting is not
// what is measured).
struct Endpoint {
  std::shared_ptr<idem::mysql::Pool> pool;
  std::unique_ptr<idem::mysql::Store> store;
  Endpoint(const Config& config, const std::string& socket, int connections) {
    pool = std::make_shared<idem::mysql::Pool>(
        params(config, socket),
        idem::mysql::PoolParams{.size = static_cast<std::size_t>(connections)});
    store = std::make_unique<idem::mysql::Store>(pool, idem::mysql::StoreParams{.table = table});
    store->ensure_schema();
    std::vector<idem::mysql::Pool::Handle> handles;
    for (int i = 0; i < connections; ++i)
      handles.push_back(pool->acquire());
  }
  void truncate() { pool->acquire()->query(fmt::format("TRUNCATE TABLE {}", table)); }
};

void galera_cycle(const Config& config) {
  const int threads = config.threads > 0 ? config.threads : 32;
  const int nodes = static_cast<int>(config.galera_sockets.size());
  Endpoint single(config, config.socket, threads);
  std::vector<std::unique_ptr<Endpoint>> cluster;
  for (const auto& socket : config.galera_sockets)
    cluster.push_back(std::make_unique<Endpoint>(config, socket, (threads + nodes - 1) / nodes));
  const std::size_t per = config.ops(5'000, 1'500) / static_cast<std::size_t>(threads);
  const std::size_t total = per * static_cast<std::size_t>(threads);
  const idem::Options options{};
  std::atomic<long> cluster_runs{0}, single_runs{0};

  auto cycle = [&](idem::mysql::Store& store, int t, int r, std::atomic<long>& counter) {
    long runs = 0;
    for (std::size_t i = 0; i < per; ++i) {
      auto out = idem::run_once(
          store, idem::Key{"BENCH", key_id(r, t, i)}, fixed_fingerprint(),
          [&] {
            ++runs;
            return nlohmann::json{{"status", "paid"}};
          },
          options);
      if (!out) throw std::runtime_error("neither acquired nor replayed");
    }
    counter += runs;
  };
  Side library{[&](int) { cluster.front()->truncate(); },
               [&](int t, int r) {
                 cycle(*cluster[static_cast<std::size_t>(t % nodes)]->store, t, r, cluster_runs);
               }};
  Side baseline{[&](int) { single.truncate(); },
                [&](int t, int r) { cycle(*single.store, t, r, single_runs); }};
  const auto t =
      alternate("galera.cycle", config.rounds_per_side(), threads, total, library, baseline);
  auto j = throughput_json("galera.cycle", threads, total, t,
                           "reported (no goal: what certification costs)");
  j["nodes"] = nodes;
  j["connections"] = threads;
  j["library_executions"] = cluster_runs.load() / config.rounds_per_side();
  j["baseline_executions"] = single_runs.load() / config.rounds_per_side();
  j["library"] = "run_once on fresh keys, threads spread over the Galera nodes (a Store each)";
  j["baseline"] = "the same run_once on the single server of mysql.cycle";
  j["ratio_of"] = "cluster ops/s / single-server ops/s";
  emit(j);
  cluster.front()->pool->acquire()->query(std::string("DROP TABLE IF EXISTS ") + table);
  single.pool->acquire()->query(std::string("DROP TABLE IF EXISTS ") + table);
}

}  // namespace

int run_galera(const Config& config, const Selected& selected) {
  if (!selected("galera.cycle")) return 0;
  if (config.galera_sockets.empty()) {
    // Only a run that asked for it by name needs a cluster; the full run goes on without.
    if (config.only.empty()) {
      progress(
          "galera.cycle: skipped (no --galera-sockets; scripts/bench --only galera.cycle "
          "starts a cluster)");
      return 0;
    }
    progress("galera.cycle: error: needs --galera-sockets (scripts/bench starts a cluster)");
    return 1;
  }
  if (config.socket.empty()) {
    progress("galera.cycle: error: needs --socket for the single-server baseline");
    return 1;
  }
  return attempt("galera.cycle", [&] { galera_cycle(config); });
}

}  // namespace bench
