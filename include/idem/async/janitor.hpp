#pragma once
// idem::async::Janitor: the Janitor (idem/janitor.hpp) as a coroutine on the service's loop,
// for an awaitable store: the same rounds (idem/detail/janitor_round.hpp), JanitorParams and
// JanitorStats, without a thread of its own. Resolvers are asked through idem::async::resolve
// (each call on a thread of its own, bounded by the resolver's time limit), so the loop never
// waits on one.
//
//   idem::async::Janitor janitor(store, {.interval = 30s, .resolvers = &resolvers});
//   net::cancellation_signal stop;
//   net::co_spawn(io, janitor.run(), net::bind_cancellation_slot(stop.slot(), net::detached));
//   ...
//   stop.emit(net::cancellation_type::terminal);  // at shutdown
//
// run() runs a round every `interval` until it is cancelled. Failures are counted, never
// thrown: the next round tries again. A cancellation ends run() and run_once() with the
// cancellation's exception, mid-round if it comes mid-round (a statement interrupted there
// breaks its connection, which the store's pool replaces); it is not counted as a failure.
// The Janitor must outlive the coroutines it runs; stats() may be read from any thread.

#include <exception>
#include <utility>
#include <vector>

#include "idem/async/net.hpp"
#include "idem/async/resolver.hpp"
#include "idem/async/store.hpp"
#include "idem/detail/janitor_round.hpp"
#include "idem/errors.hpp"
#include "idem/janitor_params.hpp"
#include "idem/record.hpp"
#include "idem/repair.hpp"

IDEM_ASYNC_FRAMES_BEGIN

namespace idem::async {

template <AwaitableStore S>
class Janitor {
 public:
  // Throws InvalidArgument as idem::Janitor's constructor does.
  explicit Janitor(S& store, JanitorParams params = {})
      : store_(store),
        params_(idem::detail::checked_janitor_params(params, can_resolve)),
        tally_(params_.metrics) {}

  Janitor(const Janitor&) = delete;
  Janitor& operator=(const Janitor&) = delete;

  // A round, then a pause of `interval`, until cancelled.
  net::awaitable<void> run() {
    for (;;) {
      co_await run_once();
      co_await sleep_for(params_.interval);
    }
  }

  // One round now.
  net::awaitable<void> run_once() {
    Round round(params_, tally_, ListingAsyncStore<S>);
    for (Round::Step step = round.start(); step.op != Op::done;) {
      if (step.op == Op::pause) {
        co_await sleep_for(step.pause);
        step = round.paused();
        continue;
      }
      std::exception_ptr failed;
      try {
        step = co_await carry_out(round, step);
      } catch (...) {
        failed = std::current_exception();
      }
      if (failed) {
        // A cancellation ends the round; it is no failure of the task it interrupted.
        const net::cancellation_state state = co_await net::this_coro::cancellation_state;
        if (state.cancelled() != net::cancellation_type::none) std::rethrow_exception(failed);
        step = round.failed(failed);
      }
    }
  }

  JanitorStats stats() const noexcept { return tally_.stats(); }

 private:
  static constexpr bool can_resolve = ListingAsyncStore<S> && RepairingAsyncStore<S>;
  using Round = idem::detail::JanitorRound;
  using Op = Round::Op;

  // (The step by value: the round's next step replaces the caller's once this completes.)
  net::awaitable<Round::Step> carry_out(Round& round, Round::Step step) {
    switch (step.op) {
      case Op::purge: {
        const std::size_t n = co_await store_.purge_expired(step.batch, 1);
        co_return round.purged(n);
      }
      case Op::release: {
        const std::size_t n = co_await store_.release_stale(step.batch);
        co_return round.released(n);
      }
      case Op::list:
        if constexpr (ListingAsyncStore<S>) {
          std::vector<Record> records = co_await store_.list(step.query);
          co_return round.listed(std::move(records));
        }
        break;
      case Op::resolve: {
        const Resolution answer = co_await resolve(*params_.resolvers, *step.record);
        co_return round.resolved(answer);
      }
      case Op::repair:
        if constexpr (RepairingAsyncStore<S>) {
          bool refused = false;
          try {
            (void)co_await store_.repair(step.record->key, step.repair);
          } catch (const RepairRefused&) {
            refused = true;
          }
          co_return refused ? round.repair_refused() : round.repaired();
        }
        break;
      case Op::pause:
      case Op::done:
        break;
    }
    co_return Round::Step{};  // not reached: the round asks only for what the store can do
  }

  S& store_;
  JanitorParams params_;
  idem::detail::JanitorTally tally_;
};

}  // namespace idem::async

IDEM_ASYNC_FRAMES_END
