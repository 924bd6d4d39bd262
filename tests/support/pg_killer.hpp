#pragma once
// Terminating PostgreSQL connections at random under load, for the tests that check nothing runs
// twice when connections die (blocking store, coroutine store, coroutine batches).
#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include <idem/pg.hpp>

#include "pg_server.hpp"
#include "threads.hpp"
#include "workload.hpp"

namespace idem_test {

// From a thread of its own, until stop(): every 10-30 ms, terminates (pg_terminate_backend)
// one connection whose application_name is `app`, at random, so that the connections of the
// tests running beside it are never touched. Not faster: a PostgreSQL connection is a server
// process, and opening one takes milliseconds on a loaded machine (tens under a sanitizer), so
// a faster killer starves the workers of connections and the test measures fork() rather
// than idem. With `paced_by`, a kill also waits for two more executions than at the one
// before: on a machine slowed enough (a sanitizer, two such tests side by side) that a
// connection cannot do its work between kills, the workers would otherwise only reconnect.
class PgConnectionKiller {
 public:
  PgConnectionKiller(std::string app, unsigned seed, Executions* paced_by = nullptr)
      : paced_by_(paced_by), thread_([this, app = std::move(app), seed] { run(app, seed); }) {}
  ~PgConnectionKiller() { stop(); }
  PgConnectionKiller(const PgConnectionKiller&) = delete;
  PgConnectionKiller& operator=(const PgConnectionKiller&) = delete;

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int kills() const noexcept { return kills_.load(); }
  // What made the killer stop early (none: it ran to stop()).
  Errors& errors() noexcept { return errors_; }

 private:
  void run(const std::string& app, unsigned seed) {
    std::mt19937 rng(seed);
    try {
      idem::pg::Connection admin(idem::pg::ConnectionParams{.conninfo = pg_conninfo()});
      int executed_at_last_kill = 0;
      while (!stop_) {
        if (paced_by_ != nullptr) {
          const int executed = paced_by_->total();
          if (executed < executed_at_last_kill + 2) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            continue;
          }
          executed_at_last_kill = executed;
        }
        const idem::pg::Result r = admin.exec(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 "
            "AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1",
            {app});
        if (r.rows() == 1) ++kills_;
        std::this_thread::sleep_for(std::chrono::milliseconds(10 + rng() % 21));
      }
    } catch (const std::exception& e) {
      errors_.add(e.what());
    }
  }

  Executions* paced_by_;
  std::atomic<bool> stop_{false};
  std::atomic<int> kills_{0};
  Errors errors_;
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace idem_test
