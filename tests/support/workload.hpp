#pragma once
// The articles' retry storm as a request order, shared by the race tests of every backend.
#include <algorithm>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

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

}  // namespace idem_test
