#pragma once
// idem::Options: the timing of one claim, and who watches it.

#include <chrono>
#include <string_view>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/errors.hpp"
#include "idem/observer.hpp"

namespace idem {

class Resolvers;        // idem/resolver.hpp
struct ConsumerPolicy;  // idem/consumer_policy.hpp

struct Options {
  // How long a processing claim is honoured. Past it, a duplicate takes the claim over
  // (the first worker is presumed dead). Pick it longer than the business can take.
  Duration lease = std::chrono::seconds{30};
  // How long the record counts. Past it, the key behaves as never seen and may be purged.
  // Must be at least the lease, or a live claim could expire under its worker.
  Duration ttl = std::chrono::hours{24 * 7};
  // Used by IdempotencyGuard and run_once (a store's claim() never waits):
  // how long a duplicate waits for an in-progress claim to finish (polling with backoff)
  // before it answers in_progress. If the claim finishes meanwhile, the duplicate replays.
  Duration wait = Duration::zero();
  // Used by IdempotencyGuard, run_once and consume: told of every verdict, record, lease loss
  // and store failure (idem/observer.hpp). Not owned; must outlive the calls. Null: no hook.
  Observer* observer = nullptr;
  // Used by IdempotencyGuard, run_once and consume: when a claim takes over an attempt whose
  // worker died mid-flight (ClaimResult::after_crash), the resolver of its biz_type says
  // whether the effect happened before anything runs again (idem/resolver.hpp). Not owned;
  // must outlive the calls. Null, or no resolver for the biz_type: the business runs again.
  const Resolvers* resolvers = nullptr;
  // Used with `observer`: passed on in every event of the request (Event::context), to tie
  // them to your logs and traces, e.g. a request id. A value of the request, not of the
  // thread, so it follows a coroutine across threads. Not owned: it must outlive the call
  // (a guard keeps its own copy for the events after).
  std::string_view context{};
  // Used by consume and consume_batch: how long a failed message's redelivery should wait and
  // after how many attempts its key gives up (idem/consumer_policy.hpp). Not owned; must
  // outlive the calls. Null: the default policy (no limit on attempts).
  const ConsumerPolicy* consumer = nullptr;
};

// The longest ttl (and so lease) a claim may ask for: a century keeps every expiry far inside
// what the backends' date types hold (MySQL's DATETIME ends in 9999).
inline constexpr Duration max_ttl = std::chrono::days{36'525};

// Throws idem::InvalidArgument when a field breaks its rule.
inline void validate(const Options& o) {
  if (o.lease <= Duration::zero()) {
    throw InvalidArgument(
        fmt::format("idem::Options: lease must be positive, got {} ms", o.lease.count()));
  }
  if (o.ttl <= Duration::zero()) {
    throw InvalidArgument(
        fmt::format("idem::Options: ttl must be positive, got {} ms", o.ttl.count()));
  }
  if (o.ttl > max_ttl) {
    throw InvalidArgument(
        fmt::format("idem::Options: ttl must be at most {} ms (100 years), got {} ms",
                    max_ttl.count(), o.ttl.count()));
  }
  if (o.ttl < o.lease) {
    throw InvalidArgument(
        fmt::format("idem::Options: ttl ({} ms) must be at least the lease ({} ms)", o.ttl.count(),
                    o.lease.count()));
  }
  if (o.wait < Duration::zero()) {
    throw InvalidArgument(
        fmt::format("idem::Options: wait must not be negative, got {} ms", o.wait.count()));
  }
}

}  // namespace idem
