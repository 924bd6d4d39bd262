#pragma once
// The articles' retry storm as a request order, and the races run on it, shared by the race
// tests of every backend.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <idem/idem.hpp>

#include "threads.hpp"

namespace idem_test {

struct Storm {
  int distinct = 0;        // keys: 88% of the requests
  std::vector<int> order;  // the key of each request: every key once, 12% duplicates at random
};

// `requests` requests over requests * 88 / 100 keys, shuffled by `seed`.
inline Storm storm_of(int requests, unsigned seed) {
  Storm s;
  s.distinct = requests * 88 / 100;
  for (int k = 0; k < s.distinct; ++k)
    s.order.push_back(k);
  std::mt19937 rng(seed);
  while (static_cast<int>(s.order.size()) < requests)
    s.order.push_back(static_cast<int>(rng() % static_cast<unsigned>(s.distinct)));
  std::shuffle(s.order.begin(), s.order.end(), rng);
  return s;
}

// Executions per key, counted by the business itself, from any thread.
class Executions {
 public:
  void executed(const std::string& id) {
    std::lock_guard lock(mutex_);
    ++per_key_[id];
  }
  int total() {
    std::lock_guard lock(mutex_);
    int n = 0;
    for (const auto& [id, count] : per_key_)
      n += count;
    return n;
  }
  int max_per_key() {
    std::lock_guard lock(mutex_);
    int m = 0;
    for (const auto& [id, count] : per_key_)
      m = std::max(m, count);
    return m;
  }
  // Keys that ran more than once.
  int twice() {
    std::lock_guard lock(mutex_);
    return static_cast<int>(
        std::count_if(per_key_.begin(), per_key_.end(), [](auto& e) { return e.second > 1; }));
  }

 private:
  std::mutex mutex_;
  std::map<std::string, int> per_key_;
};

// The two races every backend runs, one copy for all: the backend brings its store and what its
// business writes, business(id), and checks that write itself after the call.

// `threads` callers of one key at once: the business runs once, every other caller gets the
// record (replayed or in progress), none an error, and the record ends succeeded at fence 1.
template <idem::Store S, class Business>
void race_one_key(S& store, int threads, Business&& business) {
  const std::string trade_no = "CH-race-" + std::to_string(threads);
  const idem::Key key{"PAY", trade_no};
  const auto fp = idem::fingerprint(nlohmann::json{{"trade_no", trade_no}, {"amount", 29900}});
  Executions runs;
  std::atomic<int> replayed{0}, in_progress{0}, errors{0};
  Errors failures;
  run_threads(threads, [&](int) {
    try {
      const auto out = idem::run_once(store, key, fp, [&] {
        runs.executed(key.id());
        business(key.id());
        // Held long enough that every other caller arrives while the first one runs.
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return std::string("paid");
      });
      if (out.verdict() == idem::Verdict::replayed) ++replayed;
      if (out.verdict() == idem::Verdict::in_progress) ++in_progress;
    } catch (const std::exception& e) {
      ++errors;
      failures.add(e.what());
    }
  });
  INFO("first error: " << failures.first());
  CHECK(errors == 0);
  CHECK(runs.total() == 1);
  CHECK(replayed + in_progress == threads - 1);
  const auto r = store.find(key);
  REQUIRE(r);
  CHECK(r->status == idem::Status::succeeded);
  CHECK(r->ticket.fence == 1);
}

// storm.order's requests taken by `threads` workers: the business runs once per key, every
// request gets its own key's answer, none an error.
template <idem::Store S, class Business>
void run_storm(S& store, int threads, const Storm& storm, Business&& business) {
  std::atomic<std::size_t> next{0};
  std::atomic<int> answered{0}, errors{0};
  Executions runs;
  Errors failures;
  run_threads(threads, [&](int) {
    for (std::size_t i = next++; i < storm.order.size(); i = next++) {
      const std::string id = "order-" + std::to_string(storm.order[i]);
      try {
        const auto out = idem::run_once(
            store, idem::Key{"ORDER", id}, "",
            [&] {
              runs.executed(id);
              business(id);
              return id;
            },
            idem::Options{.wait = std::chrono::seconds(10)});
        if (out && out.value() == id) ++answered;
      } catch (const std::exception& e) {
        ++errors;
        failures.add(e.what());
      }
    }
  });
  INFO("first error: " << failures.first());
  CHECK(errors == 0);
  CHECK(runs.total() == storm.distinct);
  CHECK(runs.max_per_key() == 1);
  CHECK(answered == static_cast<int>(storm.order.size()));
}

}  // namespace idem_test
