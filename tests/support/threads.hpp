#pragma once
// Thread helpers shared by the race tests of every backend.
#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace idem_test {

// Catch2 assertions are not thread-safe: worker threads report here, the test thread checks.
struct Errors {
  std::mutex mutex;
  std::vector<std::string> messages;
  void add(const std::string& m) {
    std::lock_guard lock(mutex);
    messages.push_back(m);
  }
  std::size_t size() {
    std::lock_guard lock(mutex);
    return messages.size();
  }
  std::string first() {
    std::lock_guard lock(mutex);
    return messages.empty() ? std::string("none") : messages.front();
  }
};

// Starts n threads; each runs prepare(t) first (opening its connection, say), then all wait
// for each other and run go(t, prepared) at once, so that the race starts together.
template <class Prepare, class Go>
void run_threads(int n, Prepare&& prepare, Go&& go) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      auto state = prepare(t);
      ++ready;
      while (ready.load() < n)
        std::this_thread::yield();
      go(t, state);
    });
  }
  for (auto& th : threads)
    th.join();
}

// Starts n threads that wait for each other, runs f(t) on each, joins them.
template <class F>
void run_threads(int n, F&& f) {
  run_threads(
      n, [](int) { return 0; }, [&f](int t, int) { f(t); });
}

}  // namespace idem_test
