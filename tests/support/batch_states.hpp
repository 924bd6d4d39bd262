#pragma once
// The stored states a batch claim meets, prepared on any store by single claims, shared by the
// claim_batch tests of every backend: a batch must answer each request exactly as one claim
// after another would.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/batch.hpp>
#include <idem/store.hpp>

#include "threads.hpp"

namespace idem_test {

inline idem::Key batch_key(int i) {
  return idem::Key{"mq.order", "msg-" + std::to_string(i)};
}

// What a claim answered: verdict + status + fence + attempts + whether a crashed attempt was
// taken over.
struct Seen {
  idem::Verdict verdict;
  idem::Status status;
  std::uint64_t fence;
  std::uint32_t attempts;
  bool after_crash;
  bool operator==(const Seen&) const = default;
};

inline Seen seen(const idem::ClaimResult& r) {
  return {r.verdict, r.record.status, r.record.ticket.fence, r.record.attempts, r.after_crash};
}

// Prepares, on a fresh table, one key per interesting stored state; returns the batch that
// visits every state, twice for some keys and with a foreign fingerprint for others.
template <class Store>
std::vector<idem::ClaimRequest> prepare_batch_states(Store& store) {
  using namespace std::chrono_literals;
  const auto key = batch_key;
  const idem::Options quick{.lease = 50ms, .ttl = 60s};
  const idem::Options expiring{.lease = 50ms, .ttl = 60ms};
  // 0: succeeded -> replay; 1: processing, live lease -> in_progress; 2: failed retryable ->
  // takeover; 3: failed permanent -> replay; 4: processing, lease run out -> takeover;
  // 5: expired -> takeover as new; 6..: absent -> acquired.
  auto c0 = store.claim(key(0), "fp", {});
  store.complete(key(0), c0.record.ticket, R"({"ok":true})");
  store.claim(key(1), "fp", {});
  auto c2 = store.claim(key(2), "fp", {});
  store.fail(key(2), c2.record.ticket, R"({"error":"timeout"})", true);
  auto c3 = store.claim(key(3), "fp", {});
  store.fail(key(3), c3.record.ticket, R"({"error":"declined"})", false);
  store.claim(key(4), "fp", quick);
  auto c5 = store.claim(key(5), "fp", expiring);
  store.complete(key(5), c5.record.ticket, R"({"old":true})");
  std::this_thread::sleep_for(150ms);  // key 4's lease and key 5's ttl run out

  std::vector<idem::ClaimRequest> batch;
  for (int i = 0; i < 8; ++i)
    batch.push_back({key(i), "fp"});
  batch.push_back({key(0), "other"});  // conflict with a stored success
  batch.push_back({key(6), "fp"});     // repeat of a key this batch acquires: in_progress
  batch.push_back({key(7), "other"});  // repeat with another payload: conflict
  batch.push_back({key(8), ""});       // no fingerprint: never a conflict
  batch.push_back({key(2), "fp"});     // repeat of a takeover: in_progress
  return batch;
}

// The verdicts of prepare_batch_states' batch, in its order.
inline const std::vector<idem::Verdict>& batch_state_verdicts() {
  using idem::Verdict;
  static const std::vector<Verdict> verdicts{
      Verdict::replayed,   Verdict::in_progress, Verdict::acquired, Verdict::replayed,
      Verdict::acquired,   Verdict::acquired,    Verdict::acquired, Verdict::acquired,
      Verdict::conflict,   Verdict::in_progress, Verdict::conflict, Verdict::acquired,
      Verdict::in_progress};
  return verdicts;
}

// `got`, what a batch claim answered for prepare_batch_states' `batch`, is exactly `want`, what
// one claim after another answered on a store of the same backend with the same states.
inline void check_batch_results(const std::vector<idem::ClaimResult>& got,
                                const std::vector<idem::ClaimRequest>& batch,
                                const std::vector<idem::ClaimResult>& want) {
  REQUIRE(got.size() == want.size());
  const auto& verdicts = batch_state_verdicts();
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("request " << i << " " << batch[i].key.id() << " fp=" << batch[i].fingerprint);
    CHECK(seen(got[i]) == seen(want[i]));
    CHECK(got[i].record.key == batch[i].key);
    CHECK(got[i].record.snapshot == want[i].record.snapshot);
    CHECK(got[i].verdict == verdicts[i]);
  }
  CHECK(got[2].record.attempts == 2);  // the retryable failure ran again
  CHECK_FALSE(got[2].after_crash);
  CHECK(got[4].after_crash);           // the lease of key 4's worker ran out: it crashed mid-flight
  CHECK(got[5].record.attempts == 1);  // an expired record starts over
  CHECK_FALSE(got[5].after_crash);
}

// One claim after another on `single`, for the requests of prepare_batch_states' batch.
template <class Store>
std::vector<idem::ClaimResult> claimed_one_by_one(Store& single,
                                                  const std::vector<idem::ClaimRequest>& batch) {
  std::vector<idem::ClaimResult> out;
  for (const auto& r : batch)
    out.push_back(single.claim(r.key, r.fingerprint, {}));
  return out;
}

// idem::claim_batch on `batched` answers each request of prepare_batch_states' batch exactly as
// one claim after another answers on `single`, a store of the same backend with the same
// states prepared.
template <class Store>
void check_claim_batch_answers(Store& batched, Store& single) {
  const auto batch = prepare_batch_states(batched);
  const auto same = prepare_batch_states(single);
  const auto got = idem::claim_batch(batched, batch, {});
  check_batch_results(got, batch, claimed_one_by_one(single, same));
}

// `n` requests for fresh keys (biz type FRESH); 300 take three chunks of a batch claim.
inline std::vector<idem::ClaimRequest> fresh_requests(int n) {
  std::vector<idem::ClaimRequest> out;
  for (int i = 0; i < n; ++i)
    out.push_back({{"FRESH", std::to_string(i)}, "fp"});
  return out;
}

// A batch claim of fresh `requests` acquired each, in order, and each record is stored with its
// claim's ticket (`find(key)`: the record now, read through a blocking store).
template <class Find>
void check_fresh_claims(const std::vector<idem::ClaimResult>& results,
                        const std::vector<idem::ClaimRequest>& requests, Find find) {
  REQUIRE(results.size() == requests.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("request " << i);
    CHECK(results[i].verdict == idem::Verdict::acquired);
    CHECK(results[i].record.key == requests[i].key);
    const auto stored = find(requests[i].key);
    REQUIRE(stored);
    CHECK(stored->ticket == results[i].record.ticket);
  }
}

// How many of the keys key_of(0) .. key_of(keys - 1) the store holds as succeeded.
template <class Store, class KeyOf>
long long count_succeeded(Store& store, int keys, KeyOf key_of) {
  long long n = 0;
  for (int i = 0; i < keys; ++i) {
    const auto stored = store.find(key_of(i));
    n += stored && stored->status == idem::Status::succeeded ? 1 : 0;
  }
  return n;
}

struct BatchRaceResult {
  int twice = 0;  // keys that two consumers acquired
  std::size_t failures = 0;
  std::string first_failure;
};

// 6 consumers poll overlapping batches of 100 messages out of `keys` keys (batch_key), 4 more
// claim the same keys one at a time, walking them backwards between them (so every key is
// visited); each completes what it acquired.
template <class Store>
BatchRaceResult race_batches_and_claims(Store& store, int keys) {
  std::vector<std::atomic<int>> owners(static_cast<std::size_t>(keys));
  Errors failures;
  std::vector<std::thread> threads;
  for (int th = 0; th < 6; ++th) {
    threads.emplace_back([&, th] {
      std::mt19937 rng(static_cast<unsigned>(th) + 11u);
      try {
        for (int b = 0; b < 20; ++b) {
          std::vector<idem::ClaimRequest> batch;
          std::vector<int> ids;
          for (int m = 0; m < 100; ++m) {
            ids.push_back(static_cast<int>(rng() % static_cast<unsigned>(keys)));
            batch.push_back({batch_key(ids.back()), "fp"});
          }
          const auto results = idem::claim_batch(store, batch, {});
          for (std::size_t i = 0; i < results.size(); ++i) {
            if (results[i].verdict != idem::Verdict::acquired) continue;
            ++owners[static_cast<std::size_t>(ids[i])];
            store.complete(results[i].record.key, results[i].record.ticket, "true");
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
          const auto r = store.claim(batch_key(i), "fp", {});
          if (r.verdict != idem::Verdict::acquired) continue;
          ++owners[static_cast<std::size_t>(i)];
          store.complete(r.record.key, r.record.ticket, "true");
        }
      } catch (const std::exception& e) {
        failures.add(e.what());
      }
    });
  }
  for (auto& th : threads)
    th.join();
  BatchRaceResult r;
  for (auto& o : owners)
    r.twice += o > 1 ? 1 : 0;
  r.failures = failures.size();
  r.first_failure = failures.first();
  return r;
}

// race_batches_and_claims, and what it must show: no error, no key acquired twice, and every
// key recorded succeeded (the single consumers visit every key).
template <class Store>
void check_race(Store& store, int keys) {
  const auto r = race_batches_and_claims(store, keys);
  INFO("first error: " << r.first_failure);
  CHECK(r.failures == 0);
  CHECK(r.twice == 0);
  CHECK(count_succeeded(store, keys, batch_key) == keys);
}

}  // namespace idem_test
