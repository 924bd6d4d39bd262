#pragma once
// idem::Janitor: housekeeping on a schedule, for any Store. A background thread purges
// expired records (bounded batches, paced by purge_pause) and releases claims whose lease
// ran out, every `interval`, and stops promptly when the Janitor is destroyed. Failures are
// counted, never thrown: the next round tries again.
//
// With resolvers (idem/resolver.hpp), a stale claim is never released blindly: for a biz_type
// with a resolver the Janitor asks it and repairs the record by its answer (happened:
// succeeded with the response; not_happened: released; unknown: outcome_unknown), and asks
// again about outcome_unknown records every `unknown_retry`; a stale claim of any other
// biz_type is released by a fenced repair. That needs a store that can list and repair
// (idem::ListingStore, idem::RepairingStore); every store of idem's can.

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stop_token>
#include <thread>

#include "idem/detail/janitor_round.hpp"
#include "idem/errors.hpp"
#include "idem/janitor_params.hpp"
#include "idem/optional_operations.hpp"
#include "idem/repair.hpp"
#include "idem/store.hpp"

namespace idem {

template <Store S>
class Janitor {
 public:
  // Throws InvalidArgument when params.resolvers is set for a store that cannot list and
  // repair records, or resolve_batch is 0.
  explicit Janitor(S& store, JanitorParams params = {})
      : store_(store),
        params_(detail::checked_janitor_params(params, can_resolve)),
        tally_(params_.metrics),
        thread_([this](std::stop_token stop) { loop(stop); }) {}

  ~Janitor() {
    thread_.request_stop();
    cv_.notify_all();
  }  // jthread joins

  Janitor(const Janitor&) = delete;
  Janitor& operator=(const Janitor&) = delete;

  // Runs one round now, on the calling thread.
  void run_once() { round(std::stop_token{}); }

  JanitorStats stats() const noexcept { return tally_.stats(); }

 private:
  static constexpr bool can_resolve = ListingStore<S> && RepairingStore<S>;
  using Round = detail::JanitorRound;
  using Op = Round::Op;

  // The round's steps (idem/detail/janitor_round.hpp), carried out on the store until the
  // round ends or a stop is requested (destroyed mid-round: no new statement).
  void round(const std::stop_token& stop) {
    Round round(params_, tally_, ListingStore<S>);
    for (Round::Step step = round.start(); step.op != Op::done && !stop.stop_requested();) {
      if (step.op == Op::pause) {
        if (pause(stop, step.pause)) return;
        step = round.paused();
        continue;
      }
      std::exception_ptr failed;
      try {
        step = carry_out(round, step);
      } catch (...) {
        failed = std::current_exception();
      }
      if (failed) step = round.failed(failed);
    }
  }

  Round::Step carry_out(Round& round, const Round::Step& step) {
    switch (step.op) {
      case Op::purge:
        return round.purged(store_.purge_expired(step.batch, 1));
      case Op::release:
        return round.released(store_.release_stale(step.batch));
      case Op::list:
        if constexpr (ListingStore<S>) return round.listed(store_.list(step.query));
        break;
      case Op::resolve:
        return round.resolved(params_.resolvers->resolve(*step.record));
      case Op::repair:
        if constexpr (RepairingStore<S>) {
          try {
            store_.repair(step.record->key, step.repair);
          } catch (const RepairRefused&) {
            return round.repair_refused();
          }
          return round.repaired();
        }
        break;
      case Op::pause:
      case Op::done:
        break;
    }
    return {};  // not reached: the round asks only for what the store can do
  }

  // Waits for `d` or a stop request; true if stopped.
  bool pause(const std::stop_token& stop, std::chrono::milliseconds d) {
    std::mutex m;
    std::unique_lock lock(m);
    cv_.wait_for(lock, stop, d, [] { return false; });
    return stop.stop_requested();
  }

  void loop(std::stop_token stop) {
    while (!stop.stop_requested()) {
      round(stop);
      pause(stop, params_.interval);
    }
  }

  S& store_;
  JanitorParams params_;
  detail::JanitorTally tally_;
  std::condition_variable_any cv_;
  std::jthread thread_;  // last: starts after every other member exists, stops first
};

}  // namespace idem
