// The database dies under load: mariadbd is SIGKILLed in the middle of a 32-thread storm and
// started again on the same datadir. The pool must recover without restarting the process,
// and nothing may run twice or be lost.
#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/fault_server.hpp"
#include "../support/workload.hpp"

using namespace std::chrono_literals;
using idem_fault::BusinessTable;
using idem_fault::Tally;

TEST_CASE(
    "database restart under load - 32 threads at 12% duplicates, mariadbd SIGKILLed and resumed "
    "on its datadir") {
  using steady = std::chrono::steady_clock;
  idem_test::Table t(32);
  BusinessTable biz(t.pool);
  constexpr int requests = 4'000;
  const idem_test::Storm storm = idem_test::storm_of(requests, 8);
  const int distinct = storm.distinct;  // 3,520 keys, 480 duplicate requests
  const std::vector<int>& order = storm.order;

  // One request: the business write, the claim and the record commit in one transaction
  // (same-transaction mode), so a crash rolls all three back together.
  auto request = [&](const std::string& id, Tally& tally) {
    return tally.call(id, [&] {
      return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
        auto tx = t.store.bind(c);
        idem::IdempotencyGuard guard{tx, idem::Key{"ORDER", id}, ""};
        if (guard.acquired()) {
          ++tally.executed;
          biz.insert(c, id);
          guard.commit(id);
          return idem::Outcome<std::string>::success(idem::Verdict::acquired, id, guard.record());
        }
        if (guard.verdict() == idem::Verdict::replayed) return guard.replay<std::string>();
        return idem::Outcome<std::string>::none(guard.verdict(), guard.record());
      });
    });
  };

  Tally tally;
  std::atomic<std::size_t> next{0};
  std::atomic<long> done{0};
  long done_at_crash = -1, errors_before_crash = -1;
  pid_t crashed = -1;
  bool resumed = false;
  steady::time_point crash_at{}, up_at{};
  // Calls that began once the server was dead and settled: they can only have reached the
  // restarted server, through the same pool. (Counted from the crash, not from the moment
  // resume_server returns: under a sanitizer the storm can finish in that gap.)
  std::atomic<bool> down{false};
  std::atomic<long> settled_after_crash{0};
  std::thread chaos([&] {
    while (done.load() < requests / 4)
      std::this_thread::sleep_for(1ms);
    done_at_crash = done.load();
    errors_before_crash = tally.typed_errors.load();
    crash_at = steady::now();
    crashed = idem_fault::crash_server();
    down = true;
    std::this_thread::sleep_for(300ms);  // the outage: nothing listens on the socket
    resumed = idem_fault::resume_server();
    up_at = steady::now();
  });
  idem_test::run_threads(32, [&](int) {
    for (std::size_t i = next++; i < order.size(); i = next++) {
      const bool after_crash = down.load();
      if (request("order-" + std::to_string(order[i]), tally)) {
        if (after_crash) ++settled_after_crash;
      } else {
        std::this_thread::sleep_for(100ms);  // a client backs off after an error
      }
      ++done;
    }
  });
  chaos.join();
  const long storm_errors = tally.typed_errors.load();

  // The gateway retries what failed; after the restart every retry must settle.
  Tally retry;
  std::vector<std::string> failed;
  {
    std::lock_guard lock(tally.mutex);
    failed = tally.failed;
  }
  for (const auto& id : failed)
    request(id, retry);

  INFO("first untyped error: " << tally.first_untyped << " / " << retry.first_untyped);
  REQUIRE(crashed > 0);
  REQUIRE(resumed);
  CHECK(idem_fault::server_pid() != crashed);
  CHECK(done_at_crash < requests);  // the crash hit the storm, not its end
  CHECK(settled_after_crash > 0);   // the same pool served the storm again after the restart
  CHECK(errors_before_crash == 0);
  CHECK(tally.untyped_errors == 0);
  CHECK(tally.calls == requests);
  CHECK(tally.acquired + tally.replayed + tally.in_progress + tally.conflict + tally.typed_errors ==
        requests);
  CHECK(retry.typed_errors == 0);
  CHECK(retry.acquired + retry.replayed == static_cast<long>(failed.size()));
  CHECK(retry.untyped_errors == 0);

  // Nothing ran twice, nothing acknowledged was lost, every key ran exactly once in the end.
  CHECK(biz.keys_executed_twice() == 0);
  CHECK(biz.rows() == distinct);
  CHECK(biz.distinct_keys() == distinct);
  CHECK(idem_fault::missing_succeeded(t, tally.acknowledged, "ORDER") == 0);
  CHECK(t.count("status = 1") == distinct);
  idem::Janitor janitor(t.store, {.interval = std::chrono::hours{1}});
  janitor.run_once();
  CHECK(idem_fault::processing_past_lease(t) == 0);
  CHECK(t.count("status = 0") == 0);

  using ms = std::chrono::milliseconds;
  idem_fault::figures(
      "restart",
      "requests " + std::to_string(requests) + ", crash after " + std::to_string(done_at_crash) +
          " calls, outage " +
          std::to_string(std::chrono::duration_cast<ms>(up_at - crash_at).count()) +
          " ms, calls failed with a typed error " + std::to_string(storm_errors) + " (first: " +
          tally.first_typed + ")" + " (retryable " + std::to_string(tally.retryable_errors.load()) +
          "), untyped 0 expected: " + std::to_string(tally.untyped_errors.load()) +
          ", begun after the crash and settled " + std::to_string(settled_after_crash.load()) +
          ", retried afterwards " + std::to_string(failed.size()) +
          " all settled: " + std::to_string(retry.acquired + retry.replayed) + ", business rows " +
          std::to_string(biz.rows()) + " for " + std::to_string(distinct) + " keys");
}
