// Redis connections killed at random (CLIENT KILL from a killer thread) under sustained load:
// a script whose reply was lost with its connection must be reconciled by the owner token
// (a claim recognises its own record, a complete its own result), never run twice.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <idem/redis.hpp>

#include "../support/redis_server.hpp"
#include "../support/threads.hpp"
#include "../support/workload.hpp"

using namespace std::chrono_literals;
using idem_test::clients_named;

TEST_CASE(
    "connections killed at random during a sustained load - nothing runs twice, lost replies "
    "are reconciled") {
  idem::redis::ConnectionParams params = idem_test::redis_server();
  params.client_name = idem_test::unique_prefix("killed");
  auto pool = std::make_shared<idem::redis::Pool>(params, idem::redis::PoolParams{.size = 16});
  // Enough tries that a call outlives the killer's aim at its connection, also under a
  // sanitizer on a loaded machine (30 tries ran out for 16 calls of 20,000 under TSan).
  idem::redis::Store store(
      pool, idem_test::fresh_params({.retry = {.max_attempts = 100, .max_backoff = 50ms}}));

  constexpr int requests = 20'000;
  const idem_test::Storm storm = idem_test::storm_of(requests, 31);
  const int distinct = storm.distinct;
  const std::vector<int>& order = storm.order;

  std::mutex mutex;
  idem_test::Executions executions;
  std::vector<std::string> errors;
  std::atomic<int> answered{0};
  const idem::Options options{.lease = 10s, .ttl = 1h, .wait = 10s};
  auto request = [&](const std::string& id) {
    try {
      const auto out = idem::run_once(
          store, idem::Key{"ORDER", id}, idem::fingerprint(nlohmann::json{{"order", id}}),
          [&] {
            executions.executed(id);
            return id;
          },
          options);
      if (out && out.value() == id) ++answered;
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex);
      errors.push_back(id + ": " + e.what());
    }
  };

  std::atomic<bool> stop{false};
  std::atomic<long> kills{0};
  std::string killer_error = "none";
  std::thread killer([&] {
    try {
      idem::redis::Connection admin(idem_test::redis_server());
      std::mt19937 pick(7);
      // A kill every 1-3 ms, but at most one per 20 answered requests: a machine slowed down
      // (a sanitizer, a busy CI) meets the same kills per request, not more.
      int answered_at_kill = -20;
      while (!stop.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds{1 + pick() % 3});
        if (answered.load() < answered_at_kill + 20) continue;
        const auto ids = clients_named(admin, params.client_name);
        if (!ids.empty()) {
          kills += admin.command({"CLIENT", "KILL", "ID", ids[pick() % ids.size()]}).integer();
          answered_at_kill = answered.load();
        }
      }
    } catch (const std::exception& e) {
      killer_error = e.what();
    }
  });
  std::atomic<std::size_t> next{0};
  idem_test::run_threads(16, [&](int) {
    for (std::size_t i = next++; i < order.size(); i = next++)
      request("order-" + std::to_string(order[i]));
  });
  stop = true;
  killer.join();

  const int executed = executions.total();
  const int twice = executions.twice();
  INFO("killer: " << killer_error
                  << "; first error: " << (errors.empty() ? std::string("none") : errors.front()));
  CHECK(killer_error == "none");
  CHECK(kills > 100);
  CHECK(errors.empty());
  CHECK(twice == 0);
  CHECK(executed == distinct);
  CHECK(answered == requests);
  WARN("redis kill: " << requests << " requests, " << kills.load() << " connections killed, "
                      << errors.size() << " calls failed");
}

TEST_CASE(
    "connections killed at random during repairs - each repair applied once, lost replies "
    "recognised by the owner token") {
  idem::redis::ConnectionParams params = idem_test::redis_server();
  params.client_name = idem_test::unique_prefix("killed-repairs");
  auto pool = std::make_shared<idem::redis::Pool>(params, idem::redis::PoolParams{.size = 16});
  idem::redis::Store store(
      pool, idem_test::fresh_params({.retry = {.max_attempts = 30, .max_backoff = 50ms}}));

  // Claims whose workers "died": each is repaired once, on the fence it was claimed with.
  constexpr int keys = 10'000;
  std::atomic<int> next{0};
  idem_test::run_threads(16, [&](int) {
    for (int k = next++; k < keys; k = next++) {
      store.claim(idem::Key{"PAY", "r-" + std::to_string(k)}, "",
                  idem::Options{.lease = 100ms, .ttl = 1h});
    }
  });
  std::this_thread::sleep_for(150ms);

  std::mutex mutex;
  std::vector<std::string> errors;
  std::map<int, std::string> owners;  // the owner token each repair answered
  std::atomic<bool> stop{false};
  std::atomic<long> kills{0};
  std::string killer_error = "none";
  std::thread killer([&] {
    try {
      idem::redis::Connection admin(idem_test::redis_server());
      std::mt19937 pick(11);
      while (!stop.load()) {
        const auto ids = clients_named(admin, params.client_name);
        if (!ids.empty()) {
          kills += admin.command({"CLIENT", "KILL", "ID", ids[pick() % ids.size()]}).integer();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds{1 + pick() % 2});
      }
    } catch (const std::exception& e) {
      killer_error = e.what();
    }
  });
  next = 0;
  idem_test::run_threads(16, [&](int) {
    for (int k = next++; k < keys; k = next++) {
      try {
        const idem::Record r = store.repair(idem::Key{"PAY", "r-" + std::to_string(k)},
                                            idem::Repair{.action = idem::RepairAction::release,
                                                         .fence = 1,
                                                         .reason = "resolver: not charged"});
        std::lock_guard lock(mutex);
        owners.emplace(k, r.ticket.owner);
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex);
        errors.push_back(std::to_string(k) + ": " + e.what());
      }
    }
  });
  stop = true;
  killer.join();

  INFO("killer: " << killer_error
                  << "; first error: " << (errors.empty() ? std::string("none") : errors.front()));
  CHECK(killer_error == "none");
  CHECK(kills > 50);
  CHECK(errors.empty());  // no RepairRefused of a repair by its own write
  REQUIRE(owners.size() == keys);
  int wrong = 0;
  for (const auto& [k, owner] : owners) {
    const auto r = store.find(idem::Key{"PAY", "r-" + std::to_string(k)});
    if (!r || r->ticket.fence != 2 || r->ticket.owner != owner ||
        r->status != idem::Status::failed) {
      ++wrong;
    }
  }
  CHECK(wrong == 0);
  WARN("redis kill during repairs: " << keys << " repairs, " << kills.load()
                                     << " connections killed, " << errors.size() << " failed");
}
