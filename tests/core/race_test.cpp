// Races with real threads: the business must run exactly once per key, whatever the timing.
#include <algorithm>
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/idem.hpp>

TEST_CASE("race: 64 threads, one key, 10,000 calls - the business runs once") {
  idem::MemoryStore store;
  const idem::Key key{"PAY", "storm-1"};
  const auto fp = idem::fingerprint(nlohmann::json{{"trade_no", "storm-1"}, {"amount", 299}});

  constexpr int threads = 64;
  constexpr int calls_per_thread = 10'000 / threads + 1;  // 10,048 calls in all
  std::atomic<int> executions{0};
  std::atomic<int> acquired{0}, replayed{0}, in_progress{0}, other{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      while (!go.load())
        std::this_thread::yield();
      for (int i = 0; i < calls_per_thread; ++i) {
        const auto out = idem::run_once(store, key, fp, [&] {
          executions.fetch_add(1);
          std::this_thread::sleep_for(std::chrono::milliseconds{5});  // keep the claim open a while
          return std::string("receipt-1");
        });
        switch (out.verdict()) {
          case idem::Verdict::acquired:
            ++acquired;
            break;
          case idem::Verdict::replayed:
            (out && out.value() == "receipt-1") ? ++replayed : ++other;
            break;
          case idem::Verdict::in_progress:
            ++in_progress;
            break;
          case idem::Verdict::conflict:
          case idem::Verdict::outcome_unknown:
            ++other;
            break;
        }
      }
    });
  }
  go = true;
  for (auto& th : pool)
    th.join();

  CHECK(executions == 1);
  CHECK(acquired == 1);
  CHECK(other == 0);
  CHECK(acquired + replayed + in_progress == threads * calls_per_thread);
  CHECK(replayed > 0);
}

TEST_CASE("race: 1,000 keys at 12% duplicates over 8 threads - executions equal distinct keys") {
  idem::MemoryStore store;
  constexpr int distinct = 1'000;
  // 12% of all requests are duplicates of an earlier key: 1,000 originals + 136 duplicates.
  std::vector<int> requests;
  for (int k = 0; k < distinct; ++k)
    requests.push_back(k);
  std::mt19937 rng(20261130);
  const int duplicates = distinct * 12 / 88;
  for (int d = 0; d < duplicates; ++d)
    requests.push_back(static_cast<int>(rng() % distinct));
  std::shuffle(requests.begin(), requests.end(), rng);

  std::vector<std::atomic<int>> runs_per_key(distinct);
  std::atomic<std::size_t> next{0};
  std::atomic<int> executions{0}, answered{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 8; ++t) {
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < requests.size(); i = next++) {
        const int k = requests[i];
        const idem::Key key{"ORDER", "order-" + std::to_string(k)};
        // Duplicates wait for the first to finish, as a consumer would on redelivery.
        const auto out = idem::run_once(
            store, key, idem::fingerprint(nlohmann::json{{"order", k}}),
            [&] {
              executions.fetch_add(1);
              runs_per_key[static_cast<std::size_t>(k)].fetch_add(1);
              return k;
            },
            idem::Options{.wait = std::chrono::seconds{10}});
        if (out && out.value() == k) ++answered;
      }
    });
  }
  for (auto& th : pool)
    th.join();

  CHECK(executions == distinct);
  CHECK(answered == static_cast<int>(requests.size()));
  for (int k = 0; k < distinct; ++k)
    REQUIRE(runs_per_key[static_cast<std::size_t>(k)] == 1);
}
