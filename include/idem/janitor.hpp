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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "idem/backend/housekeeping.hpp"
#include "idem/errors.hpp"
#include "idem/metrics.hpp"
#include "idem/optional_operations.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/resolver.hpp"
#include "idem/status.hpp"
#include "idem/store.hpp"

namespace idem {

struct JanitorParams {
  std::chrono::milliseconds interval{std::chrono::seconds{60}};
  std::size_t purge_batch = 1000;       // rows per DELETE
  std::size_t purge_max_batches = 100;  // DELETEs per round
  // Pause between two DELETEs of a round, so that a backlog purge leaves the server to the
  // claims running alongside (measured: claim p99 2.6x slower during an unpaced purge of
  // 100,000 rows, 1.1x with 250 ms; docs/performance.md). Zero purges as fast as it can.
  std::chrono::milliseconds purge_pause{250};
  std::size_t release_batch = 1000;  // stale claims released per round
  // Not owned; must outlive the Janitor. Null: stale claims are released blindly.
  const Resolvers* resolvers = nullptr;
  // Records of each biz_type with a resolver asked about per round (stale, then unknown).
  std::size_t resolve_batch = 100;
  // An outcome_unknown record is asked about again once it was not updated for this long.
  std::chrono::milliseconds unknown_retry{std::chrono::minutes{5}};
  // Not owned; must outlive the Janitor. Each round's work and failures are counted there
  // (idem_janitor_*: rounds, purged, released, resolved by answer, errors by task and kind, the
  // time of the last round), with the gauge idem_stale_claims for a store that can list and,
  // with resolvers, idem_outcome_unknown_records per biz_type. Null: no metrics.
  Metrics* metrics = nullptr;
};

struct JanitorStats {
  std::uint64_t rounds = 0;
  std::uint64_t purged = 0;
  std::uint64_t released = 0;  // blindly or, with resolvers, by a fenced repair
  std::uint64_t errors = 0;
  std::uint64_t retryable_errors = 0;  // of errors: a StoreError that was retryable
  // With resolvers: the answers that repaired a record, by kind.
  std::uint64_t resolved_happened = 0;
  std::uint64_t resolved_not_happened = 0;
  std::uint64_t resolved_unknown = 0;
  // Records found in outcome_unknown by the last round (at most resolve_batch per biz_type): a
  // gauge to alert on; each needs a resolver's answer or an operator's repair.
  std::uint64_t outcome_unknown = 0;
  // Claims whose lease ran out as the last round found them (a store that can list, with
  // metrics or resolvers; at most a batch).
  std::uint64_t stale_claims = 0;
  // Rounds whose purge stopped at purge_max_batches with expired records left: when most
  // rounds do, the purge is falling behind.
  std::uint64_t purge_unfinished = 0;
};

template <Store S>
class Janitor {
 public:
  // Throws InvalidArgument when params.resolvers is set for a store that cannot list and
  // repair records, or resolve_batch is 0.
  explicit Janitor(S& store, JanitorParams params = {})
      : store_(store),
        params_(checked(params)),
        thread_([this](std::stop_token stop) { loop(stop); }) {}

  ~Janitor() {
    thread_.request_stop();
    cv_.notify_all();
  }  // jthread joins

  Janitor(const Janitor&) = delete;
  Janitor& operator=(const Janitor&) = delete;

  // Runs one round now, on the calling thread.
  void run_once() { round(std::stop_token{}); }

  JanitorStats stats() const noexcept {
    return {.rounds = rounds_.load(),
            .purged = purged_.load(),
            .released = released_.load(),
            .errors = retryable_errors_.load() + permanent_errors_.load(),
            .retryable_errors = retryable_errors_.load(),
            .resolved_happened = happened_.load(),
            .resolved_not_happened = not_happened_.load(),
            .resolved_unknown = unknown_.load(),
            .outcome_unknown = outcome_unknown_.load(),
            .stale_claims = stale_.load(),
            .purge_unfinished = purge_unfinished_.load()};
  }

 private:
  static constexpr bool can_resolve = ListingStore<S> && RepairingStore<S>;
  using Task = Metrics::JanitorCounters::Task;
  using Answer = Metrics::JanitorCounters::Answer;

  static JanitorParams checked(JanitorParams p) {
    if (p.resolvers != nullptr && !can_resolve) {
      throw InvalidArgument(
          "idem::Janitor: resolvers need a store that can list and repair records");
    }
    if (p.resolve_batch == 0) throw InvalidArgument("idem::Janitor: resolve_batch must be >= 1");
    return p;
  }

  void round(const std::stop_token& stop) {
    listing_failed_.store(false, std::memory_order_relaxed);
    // Each job on its own: a failed purge must not keep dead claims from being released.
    try {
      purge(stop);
    } catch (...) {
      failed(Task::purge);
    }
    if (stop.stop_requested()) return;  // destroyed mid-purge: no new statement
    if constexpr (can_resolve) {
      if (params_.resolvers != nullptr) {
        resolve_and_release(stop);
        return round_ended();
      }
    }
    if constexpr (ListingStore<S>) {
      // Only for the gauge: release_stale below releases them whether counted or not.
      if (params_.metrics != nullptr && params_.release_batch > 0)
        stale_seen(listed({.stale = true}, params_.release_batch).size());
    }
    try {
      const std::size_t n = store_.release_stale(params_.release_batch);
      released_ += n;
      if (params_.metrics != nullptr) params_.metrics->janitor().released(n);
    } catch (...) {
      failed(Task::release);
    }
    round_ended();
  }

  // The metrics first: a reader that sees stats().rounds move finds the round in them too.
  void round_ended() {
    if (params_.metrics != nullptr) {
      params_.metrics->janitor().round_ended(std::chrono::system_clock::now());
    }
    ++rounds_;
  }

  // Counts the failure being handled (call from a catch block), retryable or permanent.
  void failed(Task task) noexcept {
    bool retryable = false;
    try {
      throw;
    } catch (const StoreError& e) {
      retryable = e.retryable();
    } catch (...) {
    }
    ++(retryable ? retryable_errors_ : permanent_errors_);
    if (params_.metrics != nullptr) params_.metrics->janitor().failed(task, retryable);
  }

  // A round whose listing failed saw nothing: the gauges keep what the last full look saw.
  void stale_seen(std::uint64_t n) noexcept {
    if (listing_failed_.load(std::memory_order_relaxed)) return;
    stale_ = n;
    if (params_.metrics != nullptr) params_.metrics->janitor().stale_claims(n);
  }

  // The resolver pass: stale claims and outcome_unknown records of each biz_type with a
  // resolver, then the fenced release of the other stale claims.
  void resolve_and_release(const std::stop_token& stop) requires can_resolve {
    const Resolvers& resolvers = *params_.resolvers;
    std::uint64_t unknown_seen = 0;
    std::uint64_t stale_seen_now = 0;
    for (const std::string& type : resolvers.biz_types()) {
      if (stop.stop_requested()) return;
      const auto stale = listed({.stale = true, .biz_type = type}, params_.resolve_batch);
      stale_seen_now += stale.size();
      for (const Record& r : stale) {
        if (stop.stop_requested()) return;
        settle(r, resolvers.resolve(r));
      }
      const auto unknown = listed({.status = Status::outcome_unknown,
                                   .biz_type = type,
                                   .not_updated_for = params_.unknown_retry},
                                  params_.resolve_batch);
      for (const Record& r : unknown) {
        if (stop.stop_requested()) return;
        settle(r, resolvers.resolve(r));
      }
      const std::size_t waiting =
          listed({.status = Status::outcome_unknown, .biz_type = type}, params_.resolve_batch)
              .size();
      unknown_seen += waiting;
      if (params_.metrics != nullptr && !listing_failed_.load(std::memory_order_relaxed))
        params_.metrics->outcome_unknown_records(type, waiting);
    }
    outcome_unknown_ = unknown_seen;
    if (params_.release_batch == 0) return stale_seen(stale_seen_now);
    std::vector<Record> stale = listed({.stale = true}, params_.release_batch);
    stale_seen(stale_seen_now + static_cast<std::uint64_t>(
                                    std::count_if(stale.begin(), stale.end(), [&](const Record& r) {
                                      return !resolvers.covers(r.key.biz_type());
                                    })));
    for (const Record& r : stale) {
      if (stop.stop_requested()) return;
      if (resolvers.covers(r.key.biz_type())) continue;  // resolved above, or next round
      repaired(r,
               Repair{.action = RepairAction::release,
                      .fence = r.ticket.fence,
                      .reason = "janitor: lease ran out (no resolver for this biz_type)"},
               std::nullopt);
    }
  }

  // At most `limit` records of the query (a list answers at most max_list_limit at once).
  std::vector<Record> listed(RecordQuery query, std::size_t limit) requires ListingStore<S> {
    query.limit = std::min(limit, max_list_limit);
    try {
      return store_.list(query);
    } catch (...) {
      failed(Task::list);
      listing_failed_.store(true, std::memory_order_relaxed);
      return {};
    }
  }

  // Carries out the resolver's answer about `r`, read at its fence.
  void settle(const Record& r, const Resolution& answer) requires can_resolve {
    const std::optional<Repair> repair = detail::repair_for(answer, r.ticket.fence, false);
    switch (answer.kind()) {
      case Resolution::Kind::happened:
        return repaired(r, *repair, Answer::happened);
      case Resolution::Kind::not_happened:
        return repaired(r, *repair, Answer::not_happened);
      case Resolution::Kind::unknown:
        return repaired(r, *repair, Answer::unknown);
    }
  }

  // A fenced repair, counted as the resolver's answer or (none) as a release; a record that
  // moved on meanwhile (a claim took it over) is left alone.
  void repaired(const Record& r, const Repair& repair,
                std::optional<Answer> answer) requires can_resolve {
    try {
      store_.repair(r.key, repair);
    } catch (const RepairRefused&) {
      return;
    } catch (...) {
      return failed(Task::repair);
    }
    if (!answer) {
      ++released_;
      if (params_.metrics != nullptr) params_.metrics->janitor().released(1);
      return;
    }
    ++(*answer == Answer::happened       ? happened_
       : *answer == Answer::not_happened ? not_happened_
                                         : unknown_);
    if (params_.metrics != nullptr) params_.metrics->janitor().resolved(*answer);
  }

  void purge(const std::stop_token& stop) {
    // One DELETE at a time, pausing in between; a stop request ends the round early.
    backend::HousekeepingBatches batches(params_.purge_batch, params_.purge_max_batches);
    while (batches.more()) {
      if (batches.started() && pause(stop, params_.purge_pause)) return;
      const std::size_t n = store_.purge_expired(batches.batch(), 1);
      batches.done(n);
      purged_ += n;
      if (params_.metrics != nullptr) params_.metrics->janitor().purged(n);
    }
    // Every batch was full: expired records are left for the next round. Round after round,
    // the purge falls behind (raise purge_max_batches or purge_batch, or shorten interval).
    if (!batches.unfinished()) return;
    ++purge_unfinished_;
    if (params_.metrics != nullptr) params_.metrics->janitor().purge_unfinished();
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
  std::atomic<std::uint64_t> rounds_{0}, purged_{0}, released_{0};
  std::atomic<std::uint64_t> retryable_errors_{0}, permanent_errors_{0};
  std::atomic<std::uint64_t> happened_{0}, not_happened_{0}, unknown_{0}, outcome_unknown_{0};
  std::atomic<std::uint64_t> stale_{0}, purge_unfinished_{0};
  std::atomic<bool> listing_failed_{false};  // in the current round
  std::condition_variable_any cv_;
  std::jthread thread_;  // last: starts after every other member exists, stops first
};

}  // namespace idem
