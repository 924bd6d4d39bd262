// idem::claim_batch on MySQL: one multi-row INSERT IGNORE and one read per 128 keys, with the
// per-key answers of the single claim, under real connections racing real threads.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/batch.hpp>
#include <idem/mysql.hpp>

#include "../support/batch_states.hpp"
#include "../support/mysql_server.hpp"

using namespace std::chrono_literals;
using idem::ClaimRequest;
using idem::Verdict;

using idem_test::batch_key;

namespace {

idem::Key key(int i) {
  return batch_key(i);
}

std::vector<ClaimRequest> fresh_requests(int n, const std::string& fp = "fp") {
  std::vector<ClaimRequest> r;
  for (int i = 0; i < n; ++i)
    r.push_back({key(i), fp});
  return r;
}

}  // namespace

TEST_CASE("claim_batch acquires fresh keys across several statements, in request order",
          "[batch][mysql]") {
  const bool returning = GENERATE(true, false);  // INSERT ... RETURNING, or a read-back
  INFO("insert_returning = " << returning);
  idem_test::Table table(8, {.insert_returning = returning});
  const auto requests = fresh_requests(300);  // 128 + 128 + 44 rows
  const auto results = idem::claim_batch(table.store, requests, {});
  REQUIRE(results.size() == requests.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("request " << i);
    CHECK(results[i].verdict == Verdict::acquired);
    CHECK(results[i].record.key == requests[i].key);
    CHECK(results[i].record.status == idem::Status::processing);
    CHECK(results[i].record.ticket.fence == 1);
    CHECK(results[i].record.fingerprint == "fp");
  }
  CHECK(table.count() == 300);
  // Every ticket is live: complete() accepts each one.
  for (const auto& r : results)
    table.store.complete(r.record.key, r.record.ticket, "true");
  CHECK(table.count("status = 1") == 300);
}

TEST_CASE("claim_batch answers exactly what one claim after another answers", "[batch][mysql]") {
  const bool returning = GENERATE(true, false);
  INFO("insert_returning = " << returning);
  idem_test::Table batched(8, {.insert_returning = returning});
  idem_test::Table single(8, {.insert_returning = returning});
  idem_test::check_claim_batch_answers(batched.store, single.store);
}

TEST_CASE("claim_batch resumes stale claims after_crash with their steps, expired ones afresh",
          "[batch][mysql]") {
  const bool returning = GENERATE(true, false);
  INFO("insert_returning = " << returning);
  idem_test::Table table(8, {.insert_returning = returning});
  const idem::Options quick{.lease = 50ms, .ttl = 60s};
  const idem::Options expiring{.lease = 50ms, .ttl = 60ms};
  std::vector<ClaimRequest> batch;
  for (int i = 0; i < 6; ++i) {
    // Even keys: a worker that died after its first step; odd keys: the same, long expired.
    const auto c = table.store.claim(key(i), "fp", i % 2 == 0 ? quick : expiring);
    table.store.record_step(key(i), c.record.ticket, "reserve", std::to_string(i));
    batch.push_back({key(i), "fp"});
  }
  batch.push_back({key(6), "fp"});  // fresh
  std::this_thread::sleep_for(150ms);

  const auto got = idem::claim_batch(table.store, batch, {.lease = 60s, .ttl = 1h});
  REQUIRE(got.size() == 7);
  for (int i = 0; i < 6; ++i) {
    INFO("key " << i);
    const auto& r = got[static_cast<std::size_t>(i)];
    CHECK(r.verdict == Verdict::acquired);
    CHECK(r.record.ticket.fence == 2);
    if (i % 2 == 0) {
      CHECK(r.after_crash);
      CHECK(r.record.attempts == 2);
      CHECK(r.record.recovery_points == R"({"reserve":)" + std::to_string(i) + "}");
    } else {
      CHECK_FALSE(r.after_crash);  // expired: a new action, its old steps gone
      CHECK(r.record.attempts == 1);
      CHECK(r.record.recovery_points.empty());
    }
    CHECK(table.store.find(r.record.key) == r.record);  // the claim answers the row as stored
  }
  CHECK(got[6].verdict == Verdict::acquired);
  CHECK_FALSE(got[6].after_crash);
}

TEST_CASE("claim_batch refuses a bad request before writing anything", "[batch][mysql]") {
  idem_test::Table table;
  auto requests = fresh_requests(20);
  requests[13].fingerprint = "has space";
  CHECK_THROWS_AS(idem::claim_batch(table.store, requests, {}), idem::InvalidArgument);
  CHECK(table.count() == 0);
  CHECK_THROWS_AS(idem::claim_batch(table.store, fresh_requests(3), {.lease = 0ms}),
                  idem::InvalidArgument);
  CHECK(table.count() == 0);
  CHECK(idem::claim_batch(table.store, std::vector<ClaimRequest>{}, {}).empty());
}

TEST_CASE("racing batches over shared keys execute every key exactly once", "[batch][mysql]") {
  // 8 consumers poll overlapping batches of 100 messages out of 1,000 business keys (each key
  // is delivered to several consumers); each runs the business for what it acquired.
  const bool returning = GENERATE(true, false);
  INFO("insert_returning = " << returning);
  idem_test::Table table(16, {.insert_returning = returning});
  constexpr int keys = 1000;
  constexpr int threads = 8;
  constexpr int batches_per_thread = 25;
  std::vector<std::atomic<int>> executions(keys);
  std::atomic<int> errors{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int b = 0; b < batches_per_thread; ++b) {
        std::vector<ClaimRequest> batch;
        std::vector<int> ids;
        for (int m = 0; m < 100; ++m) {
          const int id = static_cast<int>(rng() % keys);
          ids.push_back(id);
          batch.push_back({key(id), "fp"});
        }
        try {
          const auto results = idem::claim_batch(table.store, batch, {});
          for (std::size_t i = 0; i < results.size(); ++i) {
            if (results[i].verdict != Verdict::acquired) continue;
            executions[static_cast<std::size_t>(ids[i])]++;
            table.store.complete(results[i].record.key, results[i].record.ticket, "true");
          }
        } catch (const std::exception&) {
          errors++;
        }
      }
    });
  }
  for (auto& th : pool)
    th.join();
  CHECK(errors == 0);
  int twice = 0;
  int executed = 0;
  for (auto& e : executions) {
    twice += e > 1 ? 1 : 0;
    executed += e > 0 ? 1 : 0;
  }
  CHECK(twice == 0);
  CHECK(executed == table.count());
  CHECK(table.count("status = 1") == table.count());
}

TEST_CASE("claim_batch and single claims race on the same keys: one owner each", "[batch][mysql]") {
  idem_test::Table table(16);
  constexpr int keys = 400;
  std::vector<std::atomic<int>> owners(keys);
  std::atomic<int> errors{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t) {
    pool.emplace_back([&] {  // batch consumers
      try {
        for (int begin = 0; begin < keys; begin += 50) {
          std::vector<ClaimRequest> batch;
          for (int i = begin; i < begin + 50; ++i)
            batch.push_back({key(i), "fp"});
          const auto results = idem::claim_batch(table.store, batch, {});
          for (int i = 0; i < 50; ++i)
            if (results[static_cast<std::size_t>(i)].verdict == Verdict::acquired)
              owners[static_cast<std::size_t>(begin + i)]++;
        }
      } catch (const std::exception&) {
        errors++;
      }
    });
    pool.emplace_back([&] {  // single-message consumers, walking the keys backwards
      try {
        for (int i = keys - 1; i >= 0; --i) {
          if (table.store.claim(key(i), "fp", {}).verdict == Verdict::acquired)
            owners[static_cast<std::size_t>(i)]++;
        }
      } catch (const std::exception&) {
        errors++;
      }
    });
  }
  for (auto& th : pool)
    th.join();
  CHECK(errors == 0);
  for (int i = 0; i < keys; ++i) {
    INFO("key " << i);
    CHECK(owners[static_cast<std::size_t>(i)] == 1);
  }
}
