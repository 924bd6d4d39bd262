// Connections killed at random (KILL CONNECTION from a killer thread) under sustained load, in
// standalone mode: claims and record writes whose reply was lost with their connection must be
// reconciled (the owner token says whether the write was ours), never run twice.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
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
    "connections killed at random during a sustained load - nothing runs twice, ambiguous "
    "outcomes are reconciled") {
  idem_test::Table t(16);
  // The business writes go through a pool of their own: the killer aims at idem's statements
  // only (a killed business INSERT would be the business's own ambiguity, not idem's).
  BusinessTable biz(idem_test::make_pool(16));
  constexpr int requests = 3'000;
  const idem_test::Storm storm = idem_test::storm_of(requests, 31);
  const int distinct = storm.distinct;
  const std::vector<int>& order = storm.order;

  // A lease far longer than any call (retries included): no takeover can happen mid-call.
  const idem::Options options{.lease = 5s, .ttl = 1h, .wait = 10s};
  auto request = [&](const std::string& id, Tally& tally) {
    tally.call(id, [&] {
      return idem::run_once(
          t.store, idem::Key{"ORDER", id}, idem::fingerprint(nlohmann::json{{"order", id}}),
          [&] {
            ++tally.executed;
            auto c = biz.pool->acquire();
            biz.insert(*c, id);
            return id;
          },
          options);
    });
  };

  Tally tally;
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::map<std::string, long> kills;  // by the kind of statement that was killed
  std::string killer_error = "none";
  std::thread killer([&] {
    try {
      auto admin = std::make_unique<idem::mysql::Connection>(idem_test::server());
      std::mt19937 pick(7);
      while (!stop.load()) {
        const auto rows = admin->select(
            "SELECT ID, CASE WHEN INFO LIKE 'INSERT%' THEN 'claim-insert' WHEN INFO LIKE "
            "'SELECT%' THEN 'claim-read' WHEN INFO LIKE '%SET status = ?, response_snapshot%' THEN "
            "'finish' ELSE 'takeover' END "
            "FROM information_schema.PROCESSLIST WHERE INSTR(INFO, ?) > 0 AND ID <> "
            "CONNECTION_ID()",
            {t.name});
        if (!rows.empty()) {
          const auto& row = rows[pick() % rows.size()];
          try {
            admin->query("KILL CONNECTION " + *row.at(0).to_text());
            ++kills[row.at(1).to_text().value_or("?")];
          } catch (const idem::StoreError&) {
            // the statement finished first (unknown thread id): fine
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds{5 + pick() % 10});
      }
    } catch (const std::exception& e) {
      killer_error = e.what();
    }
  });
  idem_test::run_threads(16, [&](int) {
    for (std::size_t i = next++; i < order.size(); i = next++)
      request("order-" + std::to_string(order[i]), tally);
  });
  stop = true;
  killer.join();
  idem_fault::drop_killed_connections(*t.pool);
  const long storm_errors = tally.typed_errors.load();

  // Calls that gave up left their record processing or failed-retryable; once the janitor
  // released them, the gateway's retry runs each such key to the end.
  std::vector<std::string> failed;
  {
    std::lock_guard lock(tally.mutex);
    failed = tally.failed;
  }
  if (t.count("status = 0") > 0) std::this_thread::sleep_for(options.lease + 200ms);
  idem::Janitor janitor(t.store, {.interval = std::chrono::hours{1}});
  janitor.run_once();
  CHECK(idem_fault::processing_past_lease(t) == 0);
  Tally retry;
  for (const auto& id : failed)
    request(id, retry);

  long total_kills = 0;
  std::string by_kind;
  for (const auto& [kind, n] : kills) {
    total_kills += n;
    by_kind += " " + kind + ":" + std::to_string(n);
  }
  INFO("killer: " << killer_error << ", untyped: " << tally.first_untyped);
  CHECK(killer_error == "none");
  CHECK(total_kills > 0);
  CHECK(tally.untyped_errors == 0);
  CHECK(tally.lease_lost == 0);  // a write whose reply was lost is recognised as ours
  CHECK(tally.calls == requests);
  CHECK(retry.untyped_errors == 0);
  CHECK(retry.typed_errors == 0);
  CHECK(biz.keys_executed_twice() == 0);
  CHECK(biz.distinct_keys() == distinct);
  CHECK(idem_fault::missing_succeeded(t, tally.acknowledged, "ORDER") == 0);
  CHECK(t.count("status = 1") == distinct);
  janitor.run_once();
  CHECK(t.count("status = 0") == 0);

  idem_fault::figures("kill", "requests " + std::to_string(requests) + ", connections killed " +
                                  std::to_string(total_kills) + " (" + by_kind +
                                  " ), calls failed with a typed error " +
                                  std::to_string(storm_errors) + " (first: " + tally.first_typed +
                                  ")" + ", retried afterwards " + std::to_string(failed.size()) +
                                  ", business rows " + std::to_string(biz.rows()) + " for " +
                                  std::to_string(distinct) + " keys");
}
