#pragma once
// Shared set-up of the Redis tests: the throwaway redis-server that the CTest fixture started
// (its socket in IDEM_REDIS_SOCKET), and a store under a key prefix no other test uses.
#include <signal.h>
#include <unistd.h>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <idem/redis.hpp>
#include "paths.hpp"

namespace idem_test {

inline idem::redis::ConnectionParams redis_server() {
  const char* socket = std::getenv("IDEM_REDIS_SOCKET");
  if (socket == nullptr || *socket == '\0') {
    throw std::runtime_error(
        "IDEM_REDIS_SOCKET is not set: the Redis tests run against the redis-server that the "
        "CTest fixture 'redis.start' launches (run them through ctest or scripts/test)");
  }
  idem::redis::ConnectionParams p;
  p.unix_socket = socket;
  return p;
}

inline std::shared_ptr<idem::redis::Pool> make_redis_pool(std::size_t size = 8) {
  return std::make_shared<idem::redis::Pool>(redis_server(), idem::redis::PoolParams{.size = size});
}

// The ids of the clients named `name` in CLIENT LIST.
inline std::vector<std::string> clients_named(idem::redis::Connection& admin,
                                              const std::string& name) {
  std::vector<std::string> ids;
  std::istringstream lines{std::string(admin.command({"CLIENT", "LIST"}).text())};
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" name=" + name + " ") == std::string::npos) continue;
    const auto id = line.find("id=");
    if (id == 0) ids.push_back(line.substr(3, line.find(' ') - 3));
  }
  return ids;
}

// A key prefix no other test (or test process) uses: each test sees an empty store.
inline std::string unique_prefix(const std::string& stem = "t") {
  static std::atomic<int> counter{0};
  return stem + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

inline idem::redis::StoreParams fresh_params(idem::redis::StoreParams p = {}) {
  p.prefix = unique_prefix();
  return p;
}

// A store with a fresh prefix on its own pool.
struct RedisStore {
  std::shared_ptr<idem::redis::Pool> pool;
  idem::redis::Store store;

  explicit RedisStore(std::size_t pool_size = 8, idem::redis::StoreParams params = {})
      : pool(make_redis_pool(pool_size)), store(pool, fresh_params(std::move(params))) {}
};

}  // namespace idem_test

namespace idem_test {

// A redis-server of the test's own (scripts/redis in a directory of its own), for the tests
// that kill it; stopped when the test ends, also when it fails.
class OwnRedis {
 public:
  // `options`: extra server options, as IDEM_REDIS_OPTS takes them.
  explicit OwnRedis(const std::string& options) : dir_(own_dir()) {
    std::filesystem::create_directories(std::filesystem::path(dir_).parent_path());
    run("IDEM_REDIS_OPTS='" + options + "' " + script() + " start " + dir_);
  }
  ~OwnRedis() {
    std::system((script() + " stop " + dir_ + " >/dev/null 2>&1").c_str());
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    std::filesystem::remove(dir_ + ".log", ignored);
  }
  OwnRedis(const OwnRedis&) = delete;
  OwnRedis& operator=(const OwnRedis&) = delete;

  idem::redis::ConnectionParams params() const {
    idem::redis::ConnectionParams p;
    p.unix_socket = dir_ + "/redis.sock";
    return p;
  }
  void kill() { run(script() + " kill " + dir_); }      // SIGKILL: a crash
  void resume() { run(script() + " resume " + dir_); }  // loads what it had persisted

 private:
  static std::string script() {
    return std::string(idem_test::paths::source_dir) + "/scripts/redis";
  }
  static std::string own_dir() {
    static std::atomic<int> counter{0};
    return std::string(idem_test::paths::redis_work_dir) + "/own-" + std::to_string(::getpid()) +
           "-" + std::to_string(counter++);
  }
  // Runs a scripts/redis command; its messages go to DIR.log, quoted when it fails.
  void run(const std::string& cmd) const {
    const std::string log = dir_ + ".log";
    if (std::system((cmd + " >/dev/null 2>>" + log).c_str()) != 0) {
      std::ifstream in(log);
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      throw std::runtime_error("failed: " + cmd + "\n" + text);
    }
  }
  std::string dir_;
};

}  // namespace idem_test

namespace idem_test {

// The Redis Cluster that the CTest fixture 'redis_cluster.start' started (scripts/redis
// cluster-start IDEM_REDIS_CLUSTER_DIR): 3 masters and 3 replicas on loopback.
class RedisCluster {
 public:
  RedisCluster() {
    const char* d = std::getenv("IDEM_REDIS_CLUSTER_DIR");
    if (d == nullptr || *d == '\0') {
      throw std::runtime_error(
          "IDEM_REDIS_CLUSTER_DIR is not set: the cluster tests run against the cluster that "
          "the CTest fixture 'redis_cluster.start' launches (run them through ctest)");
    }
    dir_ = d;
    std::ifstream in(dir_ + "/ports");
    for (unsigned port = 0; in >> port;)
      ports_.push_back(port);
    if (ports_.size() != 6) throw std::runtime_error("no cluster in " + dir_);
  }

  // Connection parameters naming the given nodes (by default all), in that order.
  idem::redis::ConnectionParams params(std::vector<unsigned> seeds = {}) const {
    if (seeds.empty()) seeds = ports_;
    idem::redis::ConnectionParams p;
    for (const unsigned port : seeds)
      p.cluster_nodes.push_back("127.0.0.1:" + std::to_string(port));
    return p;
  }
  const std::vector<unsigned>& ports() const noexcept { return ports_; }
  // A connection to one node, for commands about the node itself.
  idem::redis::ConnectionParams node(unsigned port) const {
    idem::redis::ConnectionParams p;
    p.port = port;
    return p;
  }
  // SIGKILLs the node on `port` at once (a crash), from this process: the script would take
  // long enough for a fast load to end first.
  void kill(unsigned port) const {
    std::ifstream in(dir_ + "/node-" + std::to_string(port) + "/redis.pid");
    long pid = 0;
    if (!(in >> pid) || pid <= 0 || ::kill(static_cast<pid_t>(pid), SIGKILL) != 0) {
      throw std::runtime_error("cannot kill the node on port " + std::to_string(port));
    }
    run("cluster-kill " + dir_ + " " + std::to_string(port));  // waits until it is gone
  }
  void resume(unsigned port) const { run("cluster-resume " + dir_ + " " + std::to_string(port)); }
  // Runs redis-cli with the arguments (e.g. --cluster reshard ...); true on success.
  static bool cli(const std::string& args) {
    return std::system(("redis-cli " + args + " >/dev/null 2>&1").c_str()) == 0;
  }

 private:
  void run(const std::string& args) const {
    const std::string cmd = std::string(idem_test::paths::source_dir) + "/scripts/redis " + args;
    if (std::system((cmd + " >/dev/null 2>>" + dir_ + "/tests.log").c_str()) != 0) {
      throw std::runtime_error("failed: " + cmd);
    }
  }
  std::string dir_;
  std::vector<unsigned> ports_;
};

}  // namespace idem_test
