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

#include "idem/errors.hpp"
#include "idem/metrics.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/resolver.hpp"
#include "idem/status.hpp"
#include "idem/store.hpp"
#include "idem/store/abilities.hpp"

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
  // Not owned. With resolvers: the gauge idem_outcome_unknown_records is set per biz_type
  // after each resolver pass. Null: no gauge.
  Metrics* metrics = nullptr;
};

struct JanitorStats {
  std::uint64_t rounds = 0;
  std::uint64_t purged = 0;
  std::uint64_t released = 0;  // blindly or, with resolvers, by a fenced repair
  std::uint64_t errors = 0;
  // With resolvers: the answers that repaired a record, by kind.
  std::uint64_t resolved_happened = 0;
  std::uint64_t resolved_not_happened = 0;
  std::uint64_t resolved_unknown = 0;
  // Records found in outcome_unknown by the last round (at most resolve_batch per biz_type): a
  // gauge to alert on; each needs a resolver's answer or an operator's repair.
  std::uint64_t outcome_unknown = 0;
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
    return {rounds_.load(),   purged_.load(),       released_.load(), errors_.load(),
            happened_.load(), not_happened_.load(), unknown_.load(),  outcome_unknown_.load()};
  }

 private:
  static constexpr bool can_resolve = ListingStore<S> && RepairingStore<S>;

  static JanitorParams checked(JanitorParams p) {
    if (p.resolvers != nullptr && !can_resolve) {
      throw InvalidArgument(
          "idem::Janitor: resolvers need a store that can list and repair records");
    }
    if (p.resolve_batch == 0) throw InvalidArgument("idem::Janitor: resolve_batch must be >= 1");
    return p;
  }

  void round(const std::stop_token& stop) {
    // Each job on its own: a failed purge must not keep dead claims from being released.
    try {
      purge(stop);
    } catch (...) {
      ++errors_;
    }
    if (stop.stop_requested()) return;  // destroyed mid-purge: no new statement
    if constexpr (can_resolve) {
      if (params_.resolvers != nullptr) {
        resolve_and_release(stop);
        ++rounds_;
        return;
      }
    }
    try {
      released_ += store_.release_stale(params_.release_batch);
    } catch (...) {
      ++errors_;
    }
    ++rounds_;
  }

  // The resolver pass: stale claims and outcome_unknown records of each biz_type with a
  // resolver, then the fenced release of the other stale claims.
  void resolve_and_release(const std::stop_token& stop) requires can_resolve {
    const Resolvers& resolvers = *params_.resolvers;
    std::uint64_t unknown_seen = 0;
    for (const std::string& type : resolvers.biz_types()) {
      if (stop.stop_requested()) return;
      for (const Record& r : listed({.stale = true, .biz_type = type}, params_.resolve_batch)) {
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
      if (params_.metrics != nullptr) params_.metrics->outcome_unknown_records(type, waiting);
    }
    outcome_unknown_ = unknown_seen;
    if (params_.release_batch == 0) return;
    std::vector<Record> stale = listed({.stale = true}, params_.release_batch);
    for (const Record& r : stale) {
      if (stop.stop_requested()) return;
      if (resolvers.covers(r.key.biz_type())) continue;  // resolved above, or next round
      repaired(r,
               Repair{.action = RepairAction::release,
                      .fence = r.ticket.fence,
                      .reason = "janitor: lease ran out (no resolver for this biz_type)"},
               released_);
    }
  }

  // At most `limit` records of the query (a list answers at most max_list_limit at once).
  std::vector<Record> listed(RecordQuery query, std::size_t limit) requires can_resolve {
    query.limit = std::min(limit, max_list_limit);
    try {
      return store_.list(query);
    } catch (...) {
      ++errors_;
      return {};
    }
  }

  // Carries out the resolver's answer about `r`, read at its fence.
  void settle(const Record& r, const Resolution& answer) requires can_resolve {
    const std::optional<Repair> repair = detail::repair_for(answer, r.ticket.fence, false);
    switch (answer.kind()) {
      case Resolution::Kind::happened:
        return repaired(r, *repair, happened_);
      case Resolution::Kind::not_happened:
        return repaired(r, *repair, not_happened_);
      case Resolution::Kind::unknown:
        return repaired(r, *repair, unknown_);
    }
  }

  // A fenced repair; a record that moved on meanwhile (a claim took it over) is left alone.
  void repaired(const Record& r, const Repair& repair,
                std::atomic<std::uint64_t>& count) requires can_resolve {
    try {
      store_.repair(r.key, repair);
      ++count;
    } catch (const RepairRefused&) {
    } catch (...) {
      ++errors_;
    }
  }

  void purge(const std::stop_token& stop) {
    // One DELETE at a time, pausing in between; a stop request ends the round early.
    for (std::size_t i = 0; i < params_.purge_max_batches; ++i) {
      if (i > 0 && pause(stop, params_.purge_pause)) return;
      const std::size_t n = store_.purge_expired(params_.purge_batch, 1);
      purged_ += n;
      if (n == 0 || n < params_.purge_batch) return;
    }
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
  std::atomic<std::uint64_t> rounds_{0}, purged_{0}, released_{0}, errors_{0};
  std::atomic<std::uint64_t> happened_{0}, not_happened_{0}, unknown_{0}, outcome_unknown_{0};
  std::condition_variable_any cv_;
  std::jthread thread_;  // last: starts after every other member exists, stops first
};

}  // namespace idem
