#pragma once
// idem::Janitor: housekeeping on a schedule, for any Store. A background thread purges
// expired records (bounded batches, paced by purge_pause) and releases claims whose lease
// ran out, every `interval`, and stops promptly when the Janitor is destroyed. Failures are
// counted, never thrown: the next round tries again.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stop_token>
#include <thread>

#include "idem/store.hpp"

namespace idem {

struct JanitorParams {
  std::chrono::milliseconds interval{std::chrono::seconds{60}};
  std::size_t purge_batch = 1000;       // rows per DELETE
  std::size_t purge_max_batches = 100;  // DELETEs per round
  // Pause between two DELETEs of a round, so that a backlog purge leaves the server to the
  // claims running alongside (measured: claim p99 2.6x slower during an unpaced purge of
  // 100,000 rows, 1.1x with 250 ms; docs/performance.md). Zero purges as fast as it can.
  std::chrono::milliseconds purge_pause{250};
  std::size_t release_batch = 1000;  // stale claims released per round
};

struct JanitorStats {
  std::uint64_t rounds = 0;
  std::uint64_t purged = 0;
  std::uint64_t released = 0;
  std::uint64_t errors = 0;
};

template <Store S>
class Janitor {
 public:
  explicit Janitor(S& store, JanitorParams params = {})
      : store_(store), params_(params), thread_([this](std::stop_token stop) { loop(stop); }) {}

  ~Janitor() {
    thread_.request_stop();
    cv_.notify_all();
  }  // jthread joins

  Janitor(const Janitor&) = delete;
  Janitor& operator=(const Janitor&) = delete;

  // Runs one round now, on the calling thread.
  void run_once() { round(std::stop_token{}); }

  JanitorStats stats() const noexcept {
    return {rounds_.load(), purged_.load(), released_.load(), errors_.load()};
  }

 private:
  void round(const std::stop_token& stop) {
    // Each job on its own: a failed purge must not keep dead claims from being released.
    try {
      purge(stop);
    } catch (...) {
      ++errors_;
    }
    if (stop.stop_requested()) return;  // destroyed mid-purge: no new statement
    try {
      released_ += store_.release_stale(params_.release_batch);
    } catch (...) {
      ++errors_;
    }
    ++rounds_;
  }

  void purge(const std::stop_token& stop) {
    // One DELETE at a time, pausing in between; a stop request ends the round early.
    for (std::size_t i = 0; i < params_.purge_max_batches; ++i) {
      if (i > 0 && pause(stop, params_.purge_pause)) return;
      const std::size_t n = store_.purge_expired(params_.purge_batch, 1);
      purged_ += n;
      if (n == 0 || n < params_.purge_batch) return;
    }
  }

  // Waits for `d` or a stop request; true if stopped.
  bool pause(const std::stop_token& stop, std::chrono::milliseconds d) {
    std::mutex m;
    std::unique_lock lock(m);
    cv_.wait_for(lock, stop, d, [] { return false; });
    return stop.stop_requested();
  }

  void loop(std::stop_token stop) {
    while (!stop.stop_requested()) {
      round(stop);
      pause(stop, params_.interval);
    }
  }

  S& store_;
  JanitorParams params_;
  std::atomic<std::uint64_t> rounds_{0}, purged_{0}, released_{0}, errors_{0};
  std::condition_variable_any cv_;
  std::jthread thread_;  // last: starts after every other member exists, stops first
};

}  // namespace idem
