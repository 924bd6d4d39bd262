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
#include <utility>

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

namespace detail {

// The error a retry loop throws after its last try: retryable, with the last failure's text
// and diagnostics. `who` names the caller ("idem::mysql"), `what` the operation, if any.
inline StoreError gave_up(std::string_view who, std::string_view what, int tries,
                          const StoreError& last) {
  return StoreError(fmt::format("{}: {}{}gave up after {} tries: {}", who, what,
                                what.empty() ? "" : " ", tries, last.what()),
                    true, last.diagnostics());
}

// The rule of every retry loop, without the waiting: which try runs, the pause before the
// next one, and the error after the last. The drivers are a few lines each: retrying() below
// sleeps, idem::async::detail::retrying (idem/async/net.hpp) waits on a timer. `who` and
// `what` name the caller and its operation in the final error, and must outlive the loop.
class RetryLoop {
 public:
  RetryLoop(const RetryPolicy& policy, std::string_view who, std::string_view what)
      : max_attempts_(policy.max_attempts), backoff_(policy), who_(who), what_(what) {}

  // The try that runs now, from 1.
  int attempt() const noexcept { return attempt_; }
  bool last() const noexcept { return attempt_ >= max_attempts_; }
  // What the loop throws when the last try failed with `e`.
  StoreError gave_up(const StoreError& e) const {
    return detail::gave_up(who_, what_, attempt_, e);
  }
  // After the current try failed with `e`, judged worth another: the pause before the next
  // try. After the last try, throws gave_up(e).
  Duration failed(const StoreError& e) {
    if (last()) throw gave_up(e);
    ++attempt_;
    return backoff_.next();
  }

 private:
  int attempt_ = 1;
  int max_attempts_;
  Backoff backoff_;
  std::string_view who_;
  std::string_view what_;
};

// The blocking driver of a retry loop: one_try() until it returns. When it throws a
// StoreError, failed(error) (called in the handler, so it may rethrow with `throw;`) ends
// the loop by throwing or returns the pause before the next try.
template <class Try, class Failed>
auto retrying(Try&& one_try, Failed&& failed) -> decltype(one_try()) {
  for (;;) {
    Duration pause{};
    try {
      return one_try();
    } catch (const StoreError& e) {
      pause = failed(e);
    }
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace detail

// Runs attempt(n) for n = 1, 2, ... until it returns. When it throws a StoreError,
// on_failure(error, n) judges it: it returns to have the call tried again (after a backoff)
// or throws to end it. After max_attempts failed tries that were all judged worth another,
// throws detail::gave_up(who, what, ...).
template <class Attempt, class OnFailure>
auto retry(const RetryPolicy& policy, std::string_view who, std::string_view what,
           Attempt&& attempt, OnFailure&& on_failure) -> decltype(attempt(1)) {
  detail::RetryLoop loop(policy, who, what);
  return detail::retrying([&]() -> decltype(auto) { return attempt(loop.attempt()); },
                          [&](const StoreError& e) {
                            on_failure(e, loop.attempt());
                            return loop.failed(e);
                          });
}

// The same, trying again after each retryable StoreError and after nothing else: e.g. a
// service's own transaction (idem::mysql::Transaction), run again after a deadlock.
template <class Attempt>
auto retry(const RetryPolicy& policy, std::string_view who, std::string_view what,
           Attempt&& attempt) -> decltype(attempt(1)) {
  validate(policy, who);
  return retry(policy, who, what, std::forward<Attempt>(attempt), [](const StoreError& e, int) {
    if (!e.retryable()) throw;
  });
}

}  // namespace idem
