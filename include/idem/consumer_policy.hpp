#pragma once
// idem::ConsumerPolicy: what a consumer (idem::consume, idem::consume_batch) does with a message
// whose business failed: how long its redelivery should wait, and after how many attempts the
// key gives up, so that a poison message ends in the dead-letter queue instead of spinning.
//
//   idem::ConsumerPolicy policy{.max_attempts = 5, .max_attempts_by_biz_type = {{"refund", 10}}};
//   idem::Ack ack = idem::consume(store, key, fp, apply, {.consumer = &policy});
//   // ack.action: commit, retry_later after ack.delay, or dead_letter

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

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
  // How long consume and consume_batch on a standalone store wait out a store that fails
  // transiently before the claim (a retryable StoreError once the store's own retries are
  // spent: a database restarting), trying the claim again with backoff, before they throw.
  // A short outage then costs the message no delivery attempt. 0: throw at once.
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

}  // namespace idem
