#pragma once
// What the coroutine scenarios share (built with IDEM_BENCH_ASYNC only): a round's requests
// handed out to the coroutines that keep them in flight (the cycle's request is one for every
// store), run on the bench thread's io_context, and a 1 ms timer on that same loop, whose
// lateness says whether the loop ever stalled.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <idem/async/net.hpp>
#include <idem/async/run_once.hpp>
#include <idem/key.hpp>
#include <idem/options.hpp>
#include <nlohmann/json.hpp>

#include "common.hpp"

namespace bench {

// The requests of one round, handed out in order to the coroutines that keep them in flight
// (all on the one loop thread: no locking); `runs` counts the business's executions.
struct Feed {
  int round;
  std::size_t total;
  std::size_t next = 0;
  long runs = 0;
};

// One in-flight coroutine of a cycle scenario: run_once on the next fresh key of the round
// (claim, the no-op business, the commit), until the round's requests are all out. (The key and
// the business are built apart from the co_await: GCC 12 cannot keep a braced temporary alive
// across one.)
template <class Store>
idem::async::net::awaitable<void> cycle_requester(Store& store, Feed& feed, idem::Options options) {
  while (feed.next < feed.total) {
    const idem::Key key{"BENCH", key_id(feed.round, 0, feed.next++)};
    const PaidBusiness business{&feed.runs};
    const auto out =
        co_await idem::async::run_once(store, key, fixed_fingerprint(), business, options);
    if (!out) throw std::runtime_error("neither acquired nor replayed");
  }
}

// Opens every connection of a coroutine pool (connecting is not what is measured).
template <class Pool>
idem::async::net::awaitable<void> open_all(Pool& pool) {
  std::vector<typename Pool::Handle> handles;
  handles.reserve(pool.size());
  for (std::size_t i = 0; i < pool.size(); ++i)
    handles.push_back(co_await pool.acquire());
}

// How late a 1 ms timer on the loop fired while a round's requests were in flight, over every
// round it watched: a store call that blocked the loop would hold every firing behind it.
struct LoopLateness {
  std::vector<double> late_ms;  // one per firing

  nlohmann::json json() const {
    nlohmann::json j;
    j["firings"] = late_ms.size();
    if (late_ms.empty()) return j;
    j["p50_ms"] = round_to(percentile(late_ms, 0.50), 2);
    j["p99_ms"] = round_to(percentile(late_ms, 0.99), 2);
    j["max_ms"] = round_to(*std::max_element(late_ms.begin(), late_ms.end()), 2);
    return j;
  }
};

// A thread of its own that sleeps until the next millisecond, and does nothing else, for as long
// as it lives: how late the machine alone wakes a thread (one waiting for a core the server
// holds), to read a loop's lateness against. The blocking side of a scenario makes one for each
// of its rounds.
class IdleTicker {
 public:
  explicit IdleTicker(LoopLateness& lateness) : lateness_(lateness), thread_([this] { run(); }) {}
  ~IdleTicker() {
    stop_ = true;
    thread_.join();
  }
  IdleTicker(const IdleTicker&) = delete;
  IdleTicker& operator=(const IdleTicker&) = delete;

 private:
  void run() {
    while (!stop_) {
      const auto due = Clock::now() + std::chrono::milliseconds(1);
      std::this_thread::sleep_until(due);
      if (stop_) break;
      lateness_.late_ms.push_back(
          std::chrono::duration<double, std::milli>(Clock::now() - due).count());
    }
  }
  LoopLateness& lateness_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Runs the coroutines on `io` from this thread until all have ended; rethrows the first error.
// With `lateness`, a 1 ms timer also runs on `io` until the last of them ends, and adds how
// late each firing was.
inline void run_all(idem::async::net::io_context& io,
                    std::vector<idem::async::net::awaitable<void>> coroutines,
                    LoopLateness* lateness = nullptr) {
  namespace net = idem::async::net;
  std::exception_ptr failed;
  std::size_t running = coroutines.size();
  net::steady_timer timer(io);
  for (auto& c : coroutines)
    net::co_spawn(io, std::move(c), [&](std::exception_ptr e) {
      if (e && !failed) failed = e;
      if (--running == 0) timer.cancel();  // the ticker ends with the last request
    });
  if (lateness != nullptr && running > 0) {
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          for (;;) {
            const auto due = Clock::now() + std::chrono::milliseconds(1);
            timer.expires_at(due);
            try {
              co_await timer.async_wait(net::use_awaitable);
            } catch (const boost::system::system_error&) {
              co_return;  // cancelled: the round is over
            }
            if (running == 0) co_return;
            lateness->late_ms.push_back(
                std::chrono::duration<double, std::milli>(Clock::now() - due).count());
          }
        },
        net::detached);
  }
  io.restart();
  io.run();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace bench
