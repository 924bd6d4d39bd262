#pragma once
// Time as idem sees it: wall-clock milliseconds. The MySQL backend takes `now` from the database
// server so that application clock skew cannot break leases; MemoryStore and SQLite take it from an
// injectable function so that tests can move time without sleeping.

#include <atomic>
#include <chrono>
#include <cstdint>

namespace idem {

using Duration = std::chrono::milliseconds;
using TimePoint = std::chrono::sys_time<std::chrono::milliseconds>;

inline TimePoint system_now() {
  return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
}

// A clock that moves only when told to. Thread-safe. Pass it to MemoryStore as
// `idem::MemoryStore store{[&clock] { return clock.now(); }};`.
class ManualClock {
 public:
  explicit ManualClock(TimePoint start = system_now()) : ms_(start.time_since_epoch().count()) {}

  TimePoint now() const noexcept {
    return TimePoint{Duration{ms_.load(std::memory_order_acquire)}};
  }
  void advance(Duration by) noexcept { ms_.fetch_add(by.count(), std::memory_order_acq_rel); }
  void set(TimePoint to) noexcept {
    ms_.store(to.time_since_epoch().count(), std::memory_order_release);
  }

 private:
  std::atomic<std::int64_t> ms_;
};

}  // namespace idem
