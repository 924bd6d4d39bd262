#pragma once
// idem::async::consume and consume_batch: idem::consume (idem/consume.hpp) in a coroutine, with
// the same rules, the same Ack and the same ConsumerPolicy.
//
//   idem::Ack ack = co_await idem::async::consume(
//       store, idem::Key{"order.paid", msg.order_no}, idem::fingerprint(msg.body),
//       [&]() -> net::awaitable<void> { co_await apply(msg); }, options);
//   switch (ack.action) { ... }  // as with idem::consume
//
//   std::vector<idem::Ack> acks = co_await idem::async::consume_batch(
//       store, requests, [&](std::size_t i) -> net::awaitable<void> { co_await apply(batch[i]); });
//
// fn (and fn(i)) may return void, a value nlohmann_json serialises, or a net::awaitable of
// either. A standalone store's claim waits out a store outage on a timer of the coroutine's
// executor (ConsumerPolicy::store_outage), never by sleeping the thread.
//
// Cancellation: a consume cancelled while its business runs records the claim's retryable
// failure (as an abandoned guard does; the attempt is not a failure of the message) before it
// completes, and the cancellation propagates: do not acknowledge the message, its redelivery
// runs it. A cancellation that arrives after the business returned does not stop its result
// from being recorded and acknowledged. consume_batch cancelled between messages releases the
// claims of the messages not yet run before it completes.
//
// On a store inside the caller's transaction (idem::mysql::AsyncBoundStore bound through an
// idem::mysql::AsyncTransaction), a failed message rolls back with the business's writes (a
// batch's whole transaction is marked rollback-only) and its attempt is counted after the
// rollback, as the blocking bound stores do: ConsumerPolicy::max_attempts holds there too.

#include <chrono>
#include <cstddef>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "idem/async/batch.hpp"
#include "idem/async/guard.hpp"
#include "idem/async/net.hpp"
#include "idem/async/store.hpp"
#include "idem/consume.hpp"
#include "idem/consumer_policy.hpp"
#include "idem/errors.hpp"
#include "idem/guard_state.hpp"
#include "idem/key.hpp"
#include "idem/observer.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/serializable.hpp"
#include "idem/store.hpp"
#include "idem/verdict.hpp"

namespace idem::async {

namespace detail {

// A claim made before anything of the message ran: a standalone store's outage is waited out
// on a timer (idem::through_store_outage's schedule); a bound store's transaction is
// with_transaction's to run again.
template <class S, class Claim>
auto claim_message(const ConsumerPolicy& policy, Claim claim) -> decltype(claim()) {
  using R = typename Awaited<decltype(claim())>::type;
  if constexpr (RollbackOnlyAsyncStore<S>) {
    co_return co_await claim();
  } else {
    idem::detail::StoreOutageWait outage(policy);
    co_return co_await retrying<R>(claim, [&](const StoreError& e) -> Duration {
      const std::optional<Duration> pause = outage.pause_after(e);
      if (!pause) throw;
      return *pause;
    });
  }
}

// fn() for a business that may return void, co_awaited when it is a coroutine.
template <class F>
net::awaitable<idem::detail::Produced<response_of<F>>> produce(F& fn) {
  if constexpr (std::is_void_v<response_of<F>>) {
    co_await invoke_awaiting(fn);
    co_return idem::detail::Produced<void>{};
  } else {
    // (Named first: GCC 12 builds a braced initialiser holding a co_await wrongly.)
    response_of<F> value = co_await invoke_awaiting(fn);
    co_return idem::detail::Produced<response_of<F>>{std::move(value)};
  }
}

// A failed attempt recorded (idem::detail::FailedAttempt), as idem::detail::run_acquired
// records it.
template <AwaitableStore S>
net::awaitable<Ack> record_failed_attempt(S& store, IdempotencyGuard<S>& guard,
                                          const ConsumerPolicy& policy, const Options& options,
                                          std::string what) {
  const Key key = guard.record().key;
  const std::string fingerprint = guard.record().fingerprint;
  const idem::detail::FailedAttempt f =
      idem::detail::failed_attempt(policy, key, guard.record().attempts, std::move(what));
  if constexpr (RollbackOnlyAsyncStore<S>) {
    // The transaction rolls back, this claim with the business's writes; the store writes the
    // attempt once it has, or nobody counts it.
    co_await guard.fail(f.retry, true);
    bool counted = false;
    if constexpr (AttemptCountingAsyncStore<S>) {
      counted = store.fail_after_rollback(key, fingerprint, options, f.error().dump(), !f.last);
    }
    co_return f.ack(counted);
  } else {
    co_await guard.fail(f.error(), !f.last);
    co_return f.ack(true);
  }
}

// What the business did, recorded as idem::detail::run_acquired records it; a cancelled business
// releases its claim and the cancellation propagates.
template <AwaitableStore S, class R>
net::awaitable<Ack> record_message(S& store, IdempotencyGuard<S>& guard,
                                   const ConsumerPolicy& policy, const Options& options,
                                   std::optional<idem::detail::Produced<R>> produced,
                                   std::exception_ptr thrown, bool cancelled) {
  using idem::detail::BusinessFailure;
  if (thrown) {
    BusinessFailure failure = idem::detail::business_failure(thrown);
    if (cancelled || failure.kind == BusinessFailure::transient) {
      // (A store inside the caller's transaction only notes it: the transaction rolls back.)
      if constexpr (!NotingAsyncStore<S>) co_await guard.abandon();
      std::rethrow_exception(thrown);
    }
    switch (failure.kind) {
      case BusinessFailure::permanent:
        co_await guard.fail(failure.error, false);
        co_return Ack{Ack::commit, Verdict::acquired, std::move(failure.what)};
      case BusinessFailure::unknown:
        if constexpr (MarksUnknown<S>) {
          co_await guard.mark_unknown(failure.what);
          co_return Ack{Ack::retry_later, Verdict::acquired, std::move(failure.what),
                        policy.delay_after(guard.record().attempts)};
        }
        break;
      case BusinessFailure::transient:
      case BusinessFailure::failed:
        break;
    }
    co_return co_await record_failed_attempt(store, guard, policy, options,
                                             std::move(failure.what));
  }
  std::optional<nlohmann::json> unstorable;
  try {
    co_await guard.commit(produced->value);
  } catch (const InvalidArgument& e) {
    // Ran, but its result cannot be stored: recorded as permanent, as idem::consume does.
    unstorable = idem::detail::unstorable_response(e);
    thrown = std::current_exception();
  }
  if (unstorable) {
    co_await guard.fail(*unstorable, false);
    std::rethrow_exception(thrown);
  }
  co_return Ack{Ack::commit, Verdict::acquired, ""};
}

// Runs fn under an acquired guard and records its result before completing, whatever happens to
// the coroutine meanwhile (as run_once does).
template <AwaitableStore S, class F>
net::awaitable<Ack> run_acquired(S& store, IdempotencyGuard<S>& guard, F& fn,
                                 const ConsumerPolicy& policy, const Options& options) {
  using R = response_of<F>;
  std::optional<idem::detail::Produced<R>> produced;
  std::exception_ptr thrown;
  try {
    produced.emplace(co_await produce(fn));
  } catch (...) {
    thrown = std::current_exception();
  }
  const bool throws = co_await net::this_coro::throw_if_cancelled();
  co_await net::this_coro::throw_if_cancelled(false);
  const net::cancellation_state state = co_await net::this_coro::cancellation_state;
  const bool cancelled = state.cancelled() != net::cancellation_type::none;
  std::optional<Ack> ack;
  std::exception_ptr failed;
  try {
    ack.emplace(co_await record_message(store, guard, policy, options, std::move(produced), thrown,
                                        cancelled));
  } catch (...) {
    failed = std::current_exception();
  }
  co_await net::this_coro::throw_if_cancelled(throws);
  if (failed) std::rethrow_exception(failed);
  co_return std::move(*ack);
}

}  // namespace detail

template <AwaitableStore S, class F>
requires std::invocable<F&> net::awaitable<Ack> consume(S& store, Key key, std::string fingerprint,
                                                        F fn, Options options = {}) {
  using R = detail::response_of<F>;
  static_assert(std::is_void_v<R> || Serializable<R>,
                "idem::async::consume: fn must return void or a value nlohmann_json can "
                "serialise, or an awaitable of it");
  const ConsumerPolicy& policy = idem::detail::consumer_policy(options);
  validate(policy);
  auto guard = co_await detail::claim_message<S>(
      policy, [&] { return IdempotencyGuard<S>::claim(store, key, fingerprint, options); });
  if (!guard.acquired()) {
    co_return idem::detail::ack_without_running(guard.verdict(), guard.record(), policy);
  }
  co_return co_await detail::run_acquired(store, guard, fn, policy, options);
}

// The same after `check()` (void, or an awaitable of void), which runs first and may throw
// idem::InvalidMessage: the message is then dead-lettered without claiming its key (see
// idem::consume's overload with check).
template <AwaitableStore S, class C, class F>
requires std::invocable<C&> && std::invocable<F&> net::awaitable<Ack> consume(
    S& store, Key key, std::string fingerprint, C check, F fn, Options options = {}) {
  validate(idem::detail::consumer_policy(options));
  std::optional<Ack> refused;
  try {
    co_await detail::invoke_awaiting(check);
  } catch (const InvalidMessage& e) {
    refused.emplace(Ack{Ack::dead_letter, std::nullopt, e.what()});
  }
  if (refused) co_return std::move(*refused);
  co_return co_await consume(store, std::move(key), std::move(fingerprint), std::move(fn),
                             std::move(options));
}

// The batch form: acks[i] answers messages[i] with exactly the rules of consume(), after one
// idem::async::claim_batch for the whole batch; fn(i) runs message i, in order. `messages`
// must stay alive until it completes. As idem::consume_batch: a message reached with less
// than half of its lease left is released, not run; a store failure that escapes for
// one message releases the claims of the messages not yet run; on a store inside the caller's
// transaction, a message that fails rolls the batch back (every ack retry_later, the
// transaction rollback-only).
template <AwaitableStore S, class F>
requires std::invocable<F&, std::size_t> net::awaitable<std::vector<Ack>> consume_batch(
    S& store, std::span<const ClaimRequest> messages, F fn, Options options = {}) {
  using R = detail::response_of<F, std::size_t>;
  static_assert(std::is_void_v<R> || Serializable<R>,
                "idem::async::consume_batch: fn must return void or a value nlohmann_json can "
                "serialise, or an awaitable of it");
  const ConsumerPolicy& policy = idem::detail::consumer_policy(options);
  validate(policy);
  const auto start = std::chrono::steady_clock::now();
  Observer* const observer = idem::detail::observer_for(store, options.observer);
  idem::detail::BatchWindow window(options.lease);
  std::vector<ClaimResult> claims;
  try {
    claims = co_await detail::claim_message<S>(policy, [&] {
      window.claiming();
      return claim_batch(store, messages, options);
    });
  } catch (const StoreError& e) {
    idem::detail::report_batch_failure<S>(
        observer, messages, std::chrono::steady_clock::now() - start, options.context, e);
    throw;
  }
  idem::detail::report_batch_claims(observer, claims, std::chrono::steady_clock::now() - start,
                                    options.context);

  // Every acquired claim gets its guard before anything runs, so that an escaping exception
  // releases the claims of the messages not yet run.
  const auto executor = co_await net::this_coro::executor;
  std::vector<std::optional<IdempotencyGuard<S>>> guards(claims.size());
  std::vector<Ack> acks(claims.size());
  for (std::size_t i = 0; i < claims.size(); ++i) {
    if (claims[i].verdict == Verdict::acquired) {
      guards[i].emplace(store, std::move(claims[i]), options.observer, executor, options.context);
    } else {
      acks[i] = idem::detail::ack_without_running(claims[i].verdict, claims[i].record, policy);
    }
  }
  std::exception_ptr escaped;
  try {
    for (std::size_t i = 0; i < claims.size(); ++i) {
      if (!guards[i]) continue;
      if constexpr (!in_caller_transaction_v<S>) {
        if (!window.open()) {
          try {
            co_await guards[i]->fail(idem::detail::past_window_error(), true);
          } catch (const LeaseLost&) {   // taken over: the new owner runs it
          } catch (const StoreError&) {  // left to its guard's last try, or to its lease
          }
          acks[i] = idem::detail::ack_past_window();
          continue;
        }
      }
      auto run = [&fn, i] { return std::invoke(fn, i); };
      acks[i] = co_await detail::run_acquired(store, *guards[i], run, policy, options);
      if constexpr (RollbackOnlyAsyncStore<S>) {
        if (acks[i] != Ack::commit) {
          store.set_rollback_only();
          const std::string why = idem::detail::batch_rollback_reason(acks, i);
          for (std::size_t j = i + 1; j < acks.size(); ++j) {
            if (guards[j]) co_await guards[j]->fail(idem::detail::batch_rollback_error(why), true);
          }
          idem::detail::answer_rolled_back_batch(guards, acks, i, why);
          break;
        }
      }
    }
  } catch (...) {
    escaped = std::current_exception();
  }
  if constexpr (!NotingAsyncStore<S>) {
    if (escaped) {
      // The messages not yet run are released before the error (or the cancellation) reaches
      // the caller. (A store inside the caller's transaction only notes them: it rolls back.)
      const bool throws = co_await net::this_coro::throw_if_cancelled();
      co_await net::this_coro::throw_if_cancelled(false);
      for (auto& guard : guards) {
        if (guard) co_await guard->abandon();
      }
      co_await net::this_coro::throw_if_cancelled(throws);
    }
  }
  if (escaped) std::rethrow_exception(escaped);
  co_return acks;
}

}  // namespace idem::async
