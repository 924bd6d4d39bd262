// idem::claim_batch on PostgreSQL: one statement per 128 keys (the INSERT and the rows it met),
// with the per-key answers of the single claim, under real connections racing real threads.
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/batch.hpp>

#include "../support/batch_states.hpp"
#include "../support/pg_server.hpp"
#include "../support/threads.hpp"

using idem::ClaimRequest;
using idem::Verdict;
using idem_test::batch_key;

TEST_CASE("pg claim_batch acquires fresh keys across several statements - in request order") {
  idem_test::PgTable t;
  std::vector<ClaimRequest> requests;
  for (int i = 0; i < 300; ++i)  // 128 + 128 + 44 keys
    requests.push_back({batch_key(i), "fp"});
  // Keys that a text[] literal must escape, and one PostgreSQL would fold if it were unquoted.
  for (const char* id : {"quote\"d", "back\\slash", "comma,brace}{", "NULL", " spaced "})
    requests.push_back({idem::Key{"mq.order", id}, "fp"});
  const auto results = idem::claim_batch(t.store, requests, {});
  REQUIRE(results.size() == requests.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("request " << i);
    CHECK(results[i].verdict == Verdict::acquired);
    CHECK(results[i].record.key == requests[i].key);
    CHECK(results[i].record.ticket.fence == 1);
  }
  CHECK(t.count("status = 0") == static_cast<long long>(requests.size()));
  for (const char* id : {"quote\"d", "back\\slash", "comma,brace}{", "NULL", " spaced "}) {
    const auto found = t.store.find(idem::Key{"mq.order", id});
    REQUIRE(found);
    CHECK(found->key.id() == id);
  }
  // Run again, every key is a live claim of someone else.
  for (const auto& r : idem::claim_batch(t.store, requests, {}))
    CHECK(r.verdict == Verdict::in_progress);
}

TEST_CASE("pg claim_batch answers exactly what one claim after another answers") {
  idem_test::PgTable batched;
  idem_test::PgTable single;
  const auto batch = idem_test::prepare_batch_states(batched.store);
  const auto same = idem_test::prepare_batch_states(single.store);

  const auto got = idem::claim_batch(batched.store, batch, {});
  std::vector<idem::ClaimResult> want;
  for (const auto& r : same)
    want.push_back(single.store.claim(r.key, r.fingerprint, {}));

  REQUIRE(got.size() == want.size());
  const auto& verdicts = idem_test::batch_state_verdicts();
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("request " << i << " " << batch[i].key.id() << " fp=" << batch[i].fingerprint);
    CHECK(idem_test::seen(got[i]) == idem_test::seen(want[i]));
    CHECK(got[i].record.key == batch[i].key);
    CHECK(got[i].record.snapshot == want[i].record.snapshot);
    CHECK(got[i].verdict == verdicts[i]);
  }
  CHECK(got[2].record.attempts == 2);  // the retryable failure ran again
  CHECK(got[4].after_crash);           // key 4's worker let its lease run out mid-flight
  CHECK(got[5].record.attempts == 1);  // an expired record starts over
}

TEST_CASE("pg racing batches and single claims over shared keys - one owner per key") {
  // 6 consumers poll overlapping batches of 100 messages out of 800 keys, 4 more claim the
  // same keys one at a time; each completes what it acquired.
  idem_test::PgTable t(16);
  constexpr int keys = 800;
  std::vector<std::atomic<int>> owners(keys);
  idem_test::Errors failures;
  std::vector<std::thread> threads;
  for (int th = 0; th < 6; ++th) {
    threads.emplace_back([&, th] {
      std::mt19937 rng(static_cast<unsigned>(th) + 11u);
      try {
        for (int b = 0; b < 20; ++b) {
          std::vector<ClaimRequest> batch;
          std::vector<int> ids;
          for (int m = 0; m < 100; ++m) {
            ids.push_back(static_cast<int>(rng() % keys));
            batch.push_back({batch_key(ids.back()), "fp"});
          }
          const auto results = idem::claim_batch(t.store, batch, {});
          for (std::size_t i = 0; i < results.size(); ++i) {
            if (results[i].verdict != Verdict::acquired) continue;
            ++owners[static_cast<std::size_t>(ids[i])];
            t.store.complete(results[i].record.key, results[i].record.ticket, "true");
          }
        }
      } catch (const std::exception& e) {
        failures.add(e.what());
      }
    });
  }
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      try {
        for (int i = keys - 1 - th; i >= 0; i -= 4) {
          const auto r = t.store.claim(batch_key(i), "fp", {});
          if (r.verdict != Verdict::acquired) continue;
          ++owners[static_cast<std::size_t>(i)];
          t.store.complete(r.record.key, r.record.ticket, "true");
        }
      } catch (const std::exception& e) {
        failures.add(e.what());
      }
    });
  }
  for (auto& th : threads)
    th.join();
  INFO("first error: " << failures.first());
  CHECK(failures.size() == 0);
  int twice = 0;
  for (auto& o : owners)
    twice += o > 1 ? 1 : 0;
  CHECK(twice == 0);
  CHECK(t.count() == keys);  // the single consumers visited every key
  CHECK(t.count("status = 1") == keys);
}
