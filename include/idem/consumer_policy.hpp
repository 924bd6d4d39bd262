#pragma once
// idem::ConsumerPolicy: what a consumer (idem::consume, idem::consume_batch) does with a message
// whose business failed: how long its redelivery should wait, and after how many attempts the
// key gives up, so that a poison message ends in the dead-letter queue instead of spinning.
//
//   idem::ConsumerPolicy policy{.max_attempts = 5, .max_attempts_by_biz_type = {{"refund", 10}}};
//   idem::Ack ack = idem::consume(store, key, fp, apply, {.consumer = &policy});
//   // ack.action: commit, retry_later after ack.delay, or dead_letter
//
// through_store_outage(policy, f) runs f again while a database restarts (see below).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/errors.hpp"

namespace idem {

struct ConsumerPolicy {
  // The attempts a key may have (deliveries that ran the business, as the record counts them)
  // before its message is given up: when the business fails retryably on the last one, the key
  // records a permanent failure with the last error and the message is answered dead_letter.
  // 0: no limit.
  std::uint32_t max_attempts = 0;
  // The same per biz_type, in place of max_attempts.
  std::map<std::string, std::uint32_t, std::less<>> max_attempts_by_biz_type{};
  // How long a redelivery should wait (Ack::delay) after the n-th attempt failed:
  // first_delay * 2^(n-1), at most max_delay. A message another consumer is processing waits
  // first_delay.
  Duration first_delay = std::chrono::seconds{1};
  Duration max_delay = std::chrono::minutes{5};
  // How long through_store_outage() (and consume and consume_batch on a standalone store,
  // around their claim) wait out a store that fails transiently (a retryable StoreError once
  // the store's own retries are spent: a database restarting), before they throw. A short
  // outage then costs the message no delivery attempt. 0: throw at once.
  Duration store_outage = Duration::zero();

  std::uint32_t max_attempts_for(std::string_view biz_type) const {
    const auto it = max_attempts_by_biz_type.find(biz_type);
    return it == max_attempts_by_biz_type.end() ? max_attempts : it->second;
  }

  Duration delay_after(std::uint32_t attempts) const {
    Duration d = first_delay;
    for (std::uint32_t i = 1; i < attempts && d > Duration::zero() && d < max_delay; ++i)
      d *= 2;
    return d < max_delay ? d : max_delay;
  }
};

// Throws idem::InvalidArgument when a field breaks its rule.
inline void validate(const ConsumerPolicy& p) {
  if (p.first_delay < Duration::zero()) {
    throw InvalidArgument(
        fmt::format("idem::ConsumerPolicy: first_delay must not be negative, got {} ms",
                    p.first_delay.count()));
  }
  if (p.store_outage < Duration::zero()) {
    throw InvalidArgument(
        fmt::format("idem::ConsumerPolicy: store_outage must not be negative, got {} ms",
                    p.store_outage.count()));
  }
  if (p.max_delay < p.first_delay) {
    throw InvalidArgument(
        fmt::format("idem::ConsumerPolicy: max_delay ({} ms) must be at least first_delay ({} ms)",
                    p.max_delay.count(), p.first_delay.count()));
  }
}

// Runs f() and, while it throws a retryable StoreError, runs it again after a pause (50 ms,
// doubling up to 2 s) until policy.store_outage has passed since the first try; then the error
// propagates. For what may run again as a whole, like an immediate redelivery would run it:
// a standalone consume's claim (consume does this itself), or a with_transaction whose body
// consumes on a bound store:
//   idem::Ack ack = idem::through_store_outage(policy, [&] {
//     return idem::mysql::with_transaction(pool, [&](auto& c) {
//       auto tx = store.bind(c);
//       return idem::consume(tx, key, fp, [&] { credit(c, msg); }, {.consumer = &policy});
//     });
//   });
namespace detail {

// through_store_outage's schedule, for its blocking and coroutine forms: after a failed try,
// the pause before the next one, or none when the error must propagate.
class StoreOutageWait {
 public:
  explicit StoreOutageWait(const ConsumerPolicy& policy)
      : deadline_(std::chrono::steady_clock::now() + policy.store_outage) {}

  std::optional<Duration> pause_after(const StoreError& e) {
    const auto now = std::chrono::steady_clock::now();
    if (!e.retryable() || now >= deadline_) return std::nullopt;
    const Duration left = std::chrono::duration_cast<Duration>(deadline_ - now);
    const Duration pause = std::min(next_, left);
    next_ = std::min<Duration>(next_ * 2, std::chrono::seconds{2});
    return pause;
  }

 private:
  std::chrono::steady_clock::time_point deadline_;
  Duration next_ = std::chrono::milliseconds{50};
};

}  // namespace detail

template <class F>
auto through_store_outage(const ConsumerPolicy& policy, F&& f) -> decltype(f()) {
  detail::StoreOutageWait outage(policy);
  for (;;) {
    std::optional<Duration> pause;
    try {
      return f();
    } catch (const StoreError& e) {
      pause = outage.pause_after(e);
      if (!pause) throw;
    }
    std::this_thread::sleep_for(*pause);
  }
}

}  // namespace idem
