#pragma once
// KILL CONNECTION at random under load: a server user of the test's own, whose connections a
// killer thread kills in the middle of their statements, so that the tests running beside it
// on the same server are never touched.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>

#include <idem/mysql.hpp>

#include "mysql_server.hpp"

namespace idem_test {

// A user of this test's own (`stem` and the process id), dropped at the end.
class KillableUser {
 public:
  explicit KillableUser(const std::string& stem)
      : name_(stem + "_" + std::to_string(::getpid())), admin_(server()) {
    admin_.query("CREATE USER IF NOT EXISTS '" + name_ + "'@'localhost'");
    admin_.query("GRANT ALL ON idem_test.* TO '" + name_ + "'@'localhost'");
  }
  ~KillableUser() {
    try {
      admin_.query("DROP USER IF EXISTS '" + name_ + "'@'localhost'");
    } catch (...) {
    }
  }
  KillableUser(const KillableUser&) = delete;
  KillableUser& operator=(const KillableUser&) = delete;

  const std::string& name() const noexcept { return name_; }
  // How a pool logs in as this user.
  idem::mysql::ConnectionParams params() const {
    idem::mysql::ConnectionParams p = server();
    p.user = name_;
    return p;
  }

 private:
  std::string name_;
  idem::mysql::Connection admin_;
};

// Kills one of the user's busy connections every 1-3 ms, on a thread and a connection of its
// own, until destroyed.
class ConnectionKiller {
 public:
  ConnectionKiller(const KillableUser& user, unsigned seed)
      : thread_([this, user = user.name(), seed] { run(user, seed); }) {}
  ~ConnectionKiller() { stop(); }
  ConnectionKiller(const ConnectionKiller&) = delete;
  ConnectionKiller& operator=(const ConnectionKiller&) = delete;

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int kills() const noexcept { return kills_.load(); }

 private:
  void run(const std::string& user, unsigned seed) {
    idem::mysql::Connection c(server());
    std::mt19937 rng(seed);
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1 + rng() % 3));
      try {
        const auto rows = c.select(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ? "
            "AND COMMAND NOT IN ('Sleep', 'Killed')",
            {user});
        if (rows.empty()) continue;
        const auto victim = rows[rng() % rows.size()].at(0).to_text().value();
        c.query("KILL CONNECTION " + victim);
        ++kills_;
      } catch (const idem::StoreError&) {
        // The victim ended meanwhile: pick again.
      }
    }
  }

  std::atomic<bool> stop_{false};
  std::atomic<int> kills_{0};
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace idem_test
