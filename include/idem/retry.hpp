#pragma once
// idem::retry(): runs a call again after a transient failure, under a RetryPolicy
// (idem/retry_policy.hpp), e.g. a service's own transaction after a deadlock.

#include <string_view>
#include <utility>

#include "idem/backend/retry_loop.hpp"
#include "idem/errors.hpp"
#include "idem/retry_policy.hpp"

namespace idem {

// Runs attempt(n) for n = 1, 2, ... until it returns. When it throws a StoreError,
// on_failure(error, n) judges it: it returns to have the call tried again (after a backoff)
// or throws to end it. After max_attempts failed tries that were all judged worth another,
// throws backend::gave_up(who, what, ...).
template <class Attempt, class OnFailure>
auto retry(const RetryPolicy& policy, std::string_view who, std::string_view what,
           Attempt&& attempt, OnFailure&& on_failure) -> decltype(attempt(1)) {
  backend::RetryLoop loop(policy, who, what);
  return backend::retrying([&]() -> decltype(auto) { return attempt(loop.attempt()); },
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
