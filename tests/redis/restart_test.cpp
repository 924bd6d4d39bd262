// redis-server SIGKILLed under load and started again on what it persisted: what an
// acknowledged request keeps depends on the server's persistence (docs/redis.md,
// "Durability"). Each test runs a server of its own (idem_test::OwnRedis).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
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

namespace {

using Clock = std::chrono::steady_clock;

struct CrashRun {
  int requests = 0;
  int distinct = 0;
  int executed_twice = 0;
  int acknowledged = 0;
  int errors = 0;      // other than lease_lost
  int lease_lost = 0;  // a claim the restarted server had lost was taken over meanwhile
  std::string first_error = "none";
  // Acknowledged keys whose record the restarted server did not have, and how long before
  // the kill the latest of them was acknowledged.
  int lost = 0;
  Clock::duration lost_latest_before_kill{};
};

// 16 threads run `requests` calls at 12% duplicates; when a third of them have answered, the
// server is SIGKILLed, and started again 200 ms later. The calls ride the outage out on the
// store's retries. Then every acknowledged key is looked up, and run again.
CrashRun crash_under_load(idem_test::OwnRedis& server, int requests) {
  auto pool =
      std::make_shared<idem::redis::Pool>(server.params(), idem::redis::PoolParams{.size = 16});
  idem::redis::Store store(
      pool, idem_test::fresh_params({.retry = {.max_attempts = 40, .max_backoff = 100ms}}));
  CrashRun run;
  run.requests = requests;
  const idem_test::Storm storm = idem_test::storm_of(requests, 5);
  run.distinct = storm.distinct;
  const std::vector<int>& order = storm.order;

  std::mutex mutex;
  idem_test::Executions executions;
  std::map<std::string, Clock::time_point> acked;
  std::atomic<int> answered{0};
  const idem::Options options{.lease = 10s, .ttl = 1h, .wait = 10s};
  auto request = [&](const std::string& id) {
    try {
      const auto out = idem::run_once(
          store, idem::Key{"ORDER", id}, "",
          [&] {
            executions.executed(id);
            return id;
          },
          options);
      if (out && out.value() == id) {
        std::lock_guard lock(mutex);
        acked.emplace(id, Clock::now());
      }
    } catch (const idem::LeaseLost&) {
      std::lock_guard lock(mutex);
      ++run.lease_lost;
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex);
      if (run.errors++ == 0) run.first_error = e.what();
    }
    ++answered;
  };

  Clock::time_point killed_at{};
  std::thread crasher([&] {
    while (answered.load() < requests / 3)
      std::this_thread::sleep_for(1ms);
    server.kill();
    killed_at = Clock::now();
    std::this_thread::sleep_for(200ms);
    server.resume();
  });
  std::atomic<std::size_t> next{0};
  idem_test::run_threads(16, [&](int) {
    for (std::size_t i = next++; i < order.size(); i = next++)
      request("order-" + std::to_string(order[i]));
  });
  crasher.join();

  for (const auto& [id, at] : acked) {
    const auto r = store.find(idem::Key{"ORDER", id});
    if (!r || r->status != idem::Status::succeeded) {
      ++run.lost;
      if (at < killed_at) {
        run.lost_latest_before_kill = std::max(run.lost_latest_before_kill, killed_at - at);
      }
    }
  }
  run.acknowledged = static_cast<int>(acked.size());
  // The gateway retries every key once more: a key whose record survived replays.
  for (int k = 0; k < run.distinct; ++k)
    request("order-" + std::to_string(k));
  run.executed_twice = executions.twice();
  return run;
}

}  // namespace

TEST_CASE("appendfsync always: a SIGKILLed server loses nothing acknowledged, nothing runs twice") {
  idem_test::OwnRedis server("--appendonly yes --appendfsync always");
  const CrashRun run = crash_under_load(server, 3'000);
  INFO("first error: " << run.first_error);
  CHECK(run.errors == 0);
  CHECK(run.lease_lost == 0);
  CHECK(run.acknowledged == run.distinct);
  CHECK(run.lost == 0);
  CHECK(run.executed_twice == 0);
}

TEST_CASE(
    "appendfsync everysec: a SIGKILLed server process loses at most its last seconds, and only "
    "what it lost runs again") {
  // everysec writes the append-only file before the replies go out and fsyncs it once a
  // second, so a killed process usually leaves every acknowledged write to the kernel. But
  // while an fsync is still running (a busy disk) Redis postpones the next write by up to two
  // seconds and answers meanwhile: a kill then loses what it acknowledged in that time. So the
  // losses are bounded in time, and only what was lost may run again.
  idem_test::OwnRedis server("--appendonly yes --appendfsync everysec");
  const CrashRun run = crash_under_load(server, 3'000);
  INFO("first error: " << run.first_error);
  CHECK(run.errors == 0);
  CHECK(run.lost_latest_before_kill <= 3s);
  CHECK(run.executed_twice <= run.lost + run.lease_lost);
  WARN("redis everysec: " << run.acknowledged << " acknowledged, " << run.lost << " lost, "
                          << run.lease_lost << " claims lost and taken over, " << run.executed_twice
                          << " ran twice");
}

TEST_CASE("without persistence a restarted server forgets every key, and duplicates run again") {
  idem_test::OwnRedis server("--appendonly no");
  const CrashRun run = crash_under_load(server, 1'500);
  // What docs/redis.md warns of: the records are gone, so the gateway's retries run again.
  CHECK(run.lost > 0);
  CHECK(run.executed_twice > 0);
}
