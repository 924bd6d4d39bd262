#pragma once
// idem::backend::RetryLoop: the rule of every retry loop without its waiting, and its blocking
// driver. Every retry of idem's (the stores, both skeletons, both with_transactions, retry())
// is this loop under a driver of a few lines.

#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/errors.hpp"
#include "idem/retry_policy.hpp"

namespace idem::backend {

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
    return backend::gave_up(who_, what_, attempt_, e);
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

}  // namespace idem::backend
