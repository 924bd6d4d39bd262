#pragma once
// idem::RetryPolicy: how often, and how far apart, a store or with_transaction tries again
// after a transient failure (a deadlock, a lock wait, a busy file, a lost connection). One
// validation and one jittered exponential backoff serve every store, every with_transaction
// and the guard's wait for an in-progress claim.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/errors.hpp"

namespace idem {

struct RetryPolicy {
  // Tries in all, the first included (at least 1).
  int max_attempts = 8;
  // The first pause between tries (at least 1 ms: a zero pause turns a deadlock storm into a
  // busy loop); it doubles, with jitter, up to max_backoff.
  Duration backoff{5};
  Duration max_backoff{500};
};

// The retry budget of a with_transaction (idem::mysql, idem::sqlite): how often the whole
// body runs again after a transient failure rolled its transaction back.
struct TransactionParams {
  RetryPolicy retry{.max_attempts = 5};
};

// Throws InvalidArgument, prefixed with `who`, when a field breaks its rule.
inline void validate(const RetryPolicy& p, std::string_view who) {
  if (p.max_attempts < 1) {
    throw InvalidArgument(
        fmt::format("{}: max_attempts must be at least 1, got {}", who, p.max_attempts));
  }
  if (p.backoff < Duration{1} || p.max_backoff < p.backoff) {
    throw InvalidArgument(fmt::format(
        "{}: backoff must be at least 1 ms and max_backoff at least backoff, got {} ms and {} ms",
        who, p.backoff.count(), p.max_backoff.count()));
  }
}

// The pauses between tries: each is the current step plus a random share of it (up to as
// much again), so that callers that failed together do not retry together; the step doubles
// up to the cap.
class Backoff {
 public:
  Backoff(Duration first, Duration cap) : step_(first), cap_(std::max(cap, first)) {}
  explicit Backoff(const RetryPolicy& p) : Backoff(p.backoff, p.max_backoff) {}

  Duration next() {
    thread_local std::minstd_rand jitter{std::random_device{}()};
    const auto spread = static_cast<std::uint64_t>(step_.count()) + 1;
    const Duration nap = step_ + Duration{static_cast<Duration::rep>(jitter() % spread)};
    step_ = std::min(step_ * 2, cap_);
    return nap;
  }
  void sleep() { std::this_thread::sleep_for(next()); }

 private:
  Duration step_;
  Duration cap_;
};

}  // namespace idem
