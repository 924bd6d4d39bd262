#pragma once
// idem::async::IdempotencyGuard: claim -> execute -> record in a coroutine, as
// idem::IdempotencyGuard (idem/guard.hpp) does it in a thread, with the same verdicts, reports and
// errors.
//
//   auto guard = co_await idem::async::IdempotencyGuard<Store>::claim(store, key, fp, options);
//   if (guard.acquired()) {
//     Receipt r = co_await charge();
//     co_await guard.commit(r);
//     co_return respond(r);
//   }
//   if (guard.verdict() == idem::Verdict::replayed) { auto replay = guard.replay<Receipt>(); ... }
//
// Options::wait polls an in-progress claim on a timer of the coroutine's executor, never by
// sleeping the thread. With options.resolvers, a claim that took over a crashed attempt is
// settled by the resolver of its biz_type as the blocking guard settles it (the verdict may
// then be replayed or outcome_unknown); the resolver runs on a thread of its own while the
// coroutine waits on its executor (idem/async/resolver.hpp). A claim cancelled during that
// wait leaves the resolver to finish: its answer is then applied as the Janitor applies it
// (not_happened releases the key, so the next duplicate runs at once), or, if that cannot be
// written, the lease runs out as after a crash. A claim the store made reaches its guard even
// when the coroutine is cancelled meanwhile, and the guard's records (commit, fail,
// mark_unknown, abandon) run to their end whatever happens to the coroutine. But Asio refuses
// every co_await of a cancelled coroutine before it starts: after a cancellation, co_await
// net::this_coro::throw_if_cancelled(false) before co_awaiting the guard's records, as
// run_once does (idem/async/detail/to_completion.hpp). A guard that goes out of scope still
// open (an exception, an early co_return) cannot co_await in its destructor: it starts the
// recording of a retryable failure on the executor it claimed on, and that runs to its end on
// its own (a store inside the caller's transaction only notes it: the transaction rolls back).
// co_await abandon() to record it before going on.

#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>
#include <nlohmann/json.hpp>

#include "idem/async/attempt.hpp"
#include "idem/async/detail/to_completion.hpp"
#include "idem/async/net.hpp"
#include "idem/async/resolver.hpp"
#include "idem/async/store.hpp"
#include "idem/detail/snapshot.hpp"
#include "idem/errors.hpp"
#include "idem/guard.hpp"
#include "idem/guard_state.hpp"
#include "idem/key.hpp"
#include "idem/observer.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/outcome.hpp"
#include "idem/record.hpp"
#include "idem/repair.hpp"
#include "idem/resolver.hpp"
#include "idem/serializable.hpp"
#include "idem/store.hpp"
#include "idem/verdict.hpp"

namespace idem::async {

namespace detail {

// As idem::detail::MarksUnknown: a store whose guard can mark its own record outcome_unknown.
template <class S>
concept MarksUnknown = RepairingAsyncStore<S> && !in_caller_transaction_v<S>;

// After a claim cancelled while its resolver ran: the resolver's answer, applied as the
// Janitor's resolver pass applies it (the claimer no longer runs the business). Refused: the
// record moved on; any other failure: the lease runs out instead.
template <RepairingAsyncStore S>
net::awaitable<void> settle_abandoned_resolution(S& store, ResolverCall call, Record claimed) {
  try {
    const Resolution answer = co_await call.answer();
    if (const std::optional<Repair> repair =
            idem::detail::repair_for(answer, claimed.ticket.fence, /*claiming=*/false)) {
      co_await store.repair(claimed.key, *repair);
    }
  } catch (...) {
  }
}

// GCC 12 at -O2 reports -Wmismatched-new-delete in resolve_crashed: it pairs Asio's coroutine
// frame operator delete with an operator new the frame never used (a known false positive of
// Asio's frame allocator). Kept out of users' builds here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
// idem::detail::resolve_crashed for coroutines: the same steps, the resolver run off the loop.
template <AwaitableStore S>
net::awaitable<ClaimResult> resolve_crashed(S& store, ClaimResult claim, const Options& options) {
  if constexpr (RepairingAsyncStore<S>) {
    if (!idem::detail::resolver_settles(claim, options)) co_return claim;
    const auto executor = co_await net::this_coro::executor;
    ResolverCall call(*options.resolvers, claim.record, executor);
    std::optional<Resolution> answer;
    std::exception_ptr interrupted;
    try {
      answer.emplace(co_await call.answer());
    } catch (...) {
      interrupted = std::current_exception();  // no co_await inside a handler
    }
    if (interrupted) {
      net::co_spawn(executor, settle_abandoned_resolution(store, std::move(call), claim.record),
                    net::detached);
      std::rethrow_exception(interrupted);
    }
    const std::optional<Repair> repair = idem::detail::crash_repair(*answer, claim);
    if (!repair) co_return claim;
    std::optional<Record> settled;
    std::optional<RepairRefused> refused;
    try {
      settled.emplace(co_await store.repair(claim.record.key, *repair));
    } catch (const RepairRefused& e) {
      refused.emplace(e);
    }
    if (refused) co_return idem::detail::refused_claim(*refused, claim);
    co_return idem::detail::settled_claim(std::move(*settled));
  } else {
    co_return claim;
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Claims; while the answer is in_progress and options.wait allows, waits on a timer and claims
// again (see ClaimWait); then settles a resumed crashed attempt (resolve_crashed); reported to
// options.observer.
template <AwaitableStore S>
net::awaitable<ClaimResult> observed_claim(S& store, const Key& key, std::string_view fingerprint,
                                           const Options& options) {
  validate(options);
  const idem::detail::ClaimReport report(idem::detail::observer_for(store, options.observer), key,
                                         idem::detail::store_failure_event<S>(), options.context);
  // A claim the store made must reach its guard: were Asio to refuse a co_await after it (a
  // cancellation that arrived meanwhile), the claim would block its key for the lease. A
  // cancellation still ends a wait for another caller's claim (its timer is cancelled).
  const bool throws = co_await net::this_coro::throw_if_cancelled();
  co_await net::this_coro::throw_if_cancelled(false);
  std::optional<ClaimResult> result;
  std::exception_ptr failed;
  try {
    result.emplace(co_await store.claim(key, fingerprint, options));
    idem::detail::ClaimWait wait(options, supports_wait_v<S>);
    while (const std::optional<Duration> pause = wait.pause(*result)) {
      // Nothing of ours to settle yet: a caller cancelled meanwhile stops waiting, as Asio
      // would have stopped it.
      const net::cancellation_state state = co_await net::this_coro::cancellation_state;
      if (throws && state.cancelled() != net::cancellation_type::none) {
        throw boost::system::system_error(net::error::operation_aborted, "co_await");
      }
      co_await sleep_for(*pause);
      *result = co_await store.claim(key, fingerprint, options);
    }
    *result = co_await async::detail::resolve_crashed(store, std::move(*result), options);
    report.answered(*result);
  } catch (const StoreError& e) {
    report.failed(e);
    failed = std::current_exception();
  } catch (...) {
    failed = std::current_exception();
  }
  co_await net::this_coro::throw_if_cancelled(throws);
  if (failed) std::rethrow_exception(failed);
  co_return std::move(*result);
}

}  // namespace detail

template <AwaitableStore S>
class IdempotencyGuard {
 public:
  // Claims key for the calling coroutine.
  static net::awaitable<IdempotencyGuard> claim(S& store, Key key, std::string fingerprint,
                                                Options options = {}) {
    ClaimResult r = co_await detail::observed_claim(store, key, fingerprint, options);
    co_return IdempotencyGuard(store, std::move(r), options.observer,
                               co_await net::this_coro::executor, options.context);
  }

  // Adopts a claim made elsewhere (see idem::IdempotencyGuard's); an abandoned one is recorded on
  // `executor`.
  IdempotencyGuard(S& store, ClaimResult claimed, Observer* observer, net::any_io_executor executor,
                   std::string_view context = {})
      : store_(&store),
        state_("idem::async::IdempotencyGuard", std::move(claimed),
               idem::detail::observer_for(store, observer), idem::detail::store_failure_event<S>(),
               context),
        executor_(std::move(executor)) {}

  IdempotencyGuard(IdempotencyGuard&& other) noexcept
      : store_(other.store_), state_(other.state_), executor_(other.executor_) {
    other.state_.close();
  }
  IdempotencyGuard& operator=(IdempotencyGuard&&) = delete;
  IdempotencyGuard(const IdempotencyGuard&) = delete;
  IdempotencyGuard& operator=(const IdempotencyGuard&) = delete;

  ~IdempotencyGuard() {
    if (!state_.open()) return;
    if constexpr (NotingAsyncStore<S>) {
      store_->note_abandoned(state_.key(), state_.ticket());
      state_.report(EventKind::failed, nullptr, idem::detail::abandoned_reason);
      return;
    }
    try {
      net::co_spawn(executor_, record_abandoned(*store_, state_), net::detached);
    } catch (...) {
      // The lease runs out and the next duplicate takes over.
    }
  }

  Verdict verdict() const noexcept { return state_.verdict(); }
  bool acquired() const noexcept { return state_.acquired(); }
  const Record& record() const noexcept { return state_.record(); }

  // As idem::IdempotencyGuard::after_crash: this claim resumed an attempt whose worker died (and no
  // resolver settled it).
  bool after_crash() const noexcept { return state_.after_crash(); }

  // The business's view of this acquired claim (idem/async/attempt.hpp). Valid while the guard
  // lives, and not across a move of the guard.
  Attempt<S> attempt() { return Attempt<S>(*store_, state_); }

  // As idem::IdempotencyGuard::commit.
  template <Serializable T>
  net::awaitable<void> commit(const T& response) {
    state_.require_open("commit");
    std::string snapshot = idem::detail::encode_snapshot(response);
    co_await finish(store_->complete(state_.key(), state_.ticket(), snapshot));
    state_.recorded_success(std::move(snapshot));
  }

  // As idem::IdempotencyGuard::fail.
  net::awaitable<void> fail(const nlohmann::json& error, bool retryable) {
    state_.require_open("fail");
    std::string snapshot = idem::detail::encode_error(error);
    co_await finish(store_->fail(state_.key(), state_.ticket(), snapshot, retryable));
    state_.recorded_failure(error, std::move(snapshot), retryable);
  }

  // As idem::IdempotencyGuard::mark_unknown.
  net::awaitable<void> mark_unknown(std::string_view what) requires detail::MarksUnknown<S> {
    state_.require_open("mark_unknown");
    const Repair repair = idem::detail::unknown_effect_repair(state_.ticket(), what);
    std::optional<Record> written;
    std::exception_ptr failed;
    try {
      written.emplace(co_await detail::to_completion(store_->repair(state_.key(), repair)));
    } catch (...) {
      failed = std::current_exception();  // no co_await inside a handler
    }
    if (failed) state_.mark_unknown_failed(failed);
    state_.marked_unknown(std::move(*written));
  }

  // Records now the retryable failure the destructor would record later (so the next
  // duplicate runs again at once). Never throws: a failure to write is reported to the
  // observer, and the lease runs out instead.
  net::awaitable<void> abandon() {
    if (!state_.open()) co_return;
    co_await record_abandoned(*store_, state_);
    state_.close();
  }

  template <Deserializable T>
  Outcome<T> replay() const {
    return state_.replay<T>();
  }

  const idem::detail::GuardState& state() const noexcept { return state_; }

 private:
  net::awaitable<void> finish(net::awaitable<void> write) {
    try {
      co_await detail::to_completion(std::move(write));
    } catch (...) {
      state_.write_failed(std::current_exception());
      throw;
    }
  }

  // The state is a copy: a detached recording outlives the guard.
  static net::awaitable<void> record_abandoned(S& store, idem::detail::GuardState state) {
    using idem::detail::abandoned_snapshot;
    std::exception_ptr error;
    try {
      if constexpr (AbandoningAsyncStore<S>) {
        co_await detail::to_completion(
            store.abandon(state.key(), state.ticket(), abandoned_snapshot));
      } else {
        co_await detail::to_completion(
            store.fail(state.key(), state.ticket(), abandoned_snapshot, true));
      }
    } catch (...) {
      error = std::current_exception();
    }
    state.abandoned(error);
  }

  S* store_;
  idem::detail::GuardState state_;
  net::any_io_executor executor_;
};

// The name before the coroutine guard took the blocking one's (docs/changes.md).
template <AwaitableStore S>
using Guard [[deprecated("use idem::async::IdempotencyGuard")]] = IdempotencyGuard<S>;

}  // namespace idem::async
