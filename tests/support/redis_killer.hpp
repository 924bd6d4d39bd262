#pragma once
// Killing Redis connections at random under load, for the tests that check nothing runs twice
// when a connection dies with commands out.
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>

#include <idem/redis.hpp>

#include "redis_server.hpp"

namespace idem_test {

// From a thread of its own, until stop(): every 5-14 ms, kills (CLIENT KILL) one connection of
// the test server whose client name is `client_name`, at random, so that the connections of
// the tests running beside it are never touched.
class RedisConnectionKiller {
 public:
  RedisConnectionKiller(std::string client_name, unsigned seed)
      : thread_([this, name = std::move(client_name), seed] { run(name, seed); }) {}
  ~RedisConnectionKiller() { stop(); }
  RedisConnectionKiller(const RedisConnectionKiller&) = delete;
  RedisConnectionKiller& operator=(const RedisConnectionKiller&) = delete;

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  long kills() const noexcept { return kills_.load(); }

 private:
  void run(const std::string& name, unsigned seed) {
    idem::redis::Connection admin(redis_server());
    std::mt19937 pick(seed);
    while (!stop_) {
      const auto ids = clients_named(admin, name);
      if (!ids.empty()) {
        kills_ += admin.command({"CLIENT", "KILL", "ID", ids[pick() % ids.size()]}).integer();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + pick() % 10));
    }
  }

  std::atomic<bool> stop_{false};
  std::atomic<long> kills_{0};
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace idem_test
