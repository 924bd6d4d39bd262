#pragma once
// The skeleton of a store, written once for every backend that keeps records on a server or
// in a file (idem::mysql, idem::sqlite, idem::redis): the claim loop, retries, finish with
// LeaseLost and the reconciliation of a write whose reply was lost, housekeeping in batches
// and claim_batch (in the order and widths of idem/backend/batch_plan.hpp). A backend
// provides only its statements and driver, as a Backend description:
//
//   struct Backend {
//     using Connection = ...;  // one connection (or session) to the store
//     using Native = ...;      // the driver's handle type (MYSQL, sqlite3, redisContext)
//     using Pool = ...;        // a BasicPool of Connections (idem/backend/pool.hpp)
//     using Ops = ...;         // the record operations on one connection, below
//     static constexpr std::string_view name = "idem::mysql";
//     static FailureKind classify(const StoreError&);   // the backend's error classification
//   };
//
// Ops, on one connection (`bound`: inside the caller's transaction, see
// idem/same_transaction/bound_sql_store.hpp):
//   std::optional<Record> insert(c, key, fp, options, token, bound)  the fresh claim written,
//                                                                   or nullopt: the key exists
//   std::optional<RecordRead> read(c, key, bound)                    the row and the store's now
//   bool write_takeover(c, decision, next, read_ticket)              guarded by takeover_holds
//   bool finish(c, key, ticket, snapshot, to, retryable)             guarded by holds()
//   std::size_t purge(c, batch)  std::size_t release(c, batch)       one batch each
//   bool write_repair(c, next, read_ticket)        writes repaired() guarded by the ticket read
//   bool write_points(c, key, ticket, before, after)  the recovery points, guarded by holds()
//                                                     and by the points read (`before`)
//   std::vector<Record> list(c, query)                               see idem/record_query.hpp
//   RecordStats stats(c)                                             see idem/record_stats.hpp
// and optionally, where one round trip can write a fresh claim or read the row it met:
//   InsertOrRead insert_or_read(c, key, fp, options, token)   in place of insert, then read
// and optionally, for claim_batch: static constexpr std::size_t max_batch_rows, and
//   std::vector<ClaimResult> claim_chunk(c, requests, tokens, options)
//
// The rules the skeleton applies come from idem/backend/record_rules.hpp, its algorithms from
// idem/backend/steps.hpp (shared with the coroutine skeleton, idem/backend/async_store_skeleton.hpp);
// tests/backend/store_skeleton_test.cpp drives it through a scripted backend, without a server.

#include <atomic>
#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/backend/batch_plan.hpp"
#include "idem/backend/housekeeping.hpp"
#include "idem/backend/record_rules.hpp"
#include "idem/backend/retry_loop.hpp"
#include "idem/backend/steps.hpp"
#include "idem/detail/checks.hpp"
#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/guard_state.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/record_stats.hpp"
#include "idem/repair.hpp"
#include "idem/retry_policy.hpp"
#include "idem/same_transaction/claim_ledger.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem::backend {

// The four types a Backend names, in one line of the backend's.
template <class C, class N, class P, class O>
struct BackendTypes {
  using Connection = C;
  using Native = N;
  using Pool = P;
  using Ops = O;
};

// One claim on one connection: ClaimSteps (idem/backend/steps.hpp) run by blocking calls. With
// `answered` (moved from), the claim's first step was taken already, by a batch: the steps go
// on from its answer.
template <class Ops, class Connection>
ClaimResult claim_on(std::string_view who, const Ops& ops, Connection& c, const Key& key,
                     std::string_view fp, const Options& o, const std::string& token, bool bound,
                     InsertOrRead* answered = nullptr) {
  using Step = ClaimSteps::Step;
  ClaimSteps steps(who, key, fp, o, token);
  for (Step step = answered ? steps.answered(std::move(*answered)) : steps.start();;) {
    switch (step) {
      case Step::insert:
        if constexpr (requires { ops.insert_or_read(c, key, fp, o, token); }) {
          step = steps.answered(ops.insert_or_read(c, key, fp, o, token));
        } else {
          step = steps.inserted(ops.insert(c, key, fp, o, token, bound));
        }
        break;
      case Step::read:
        step = steps.met(ops.read(c, key, bound));
        break;
      case Step::take_over:
        step = steps.written(
            ops.write_takeover(c, steps.decision(), steps.next(), steps.read_ticket()));
        break;
      case Step::done:
        return std::move(steps).result();
    }
  }
}

// The answers of a batch claim whose first step was taken for every request at once:
// answers[i] (moved from) is what that step met for request i (its own row recognised, the
// same decision, a takeover written at once, a takeover lost claimed again), or none to claim
// it from the start; each request is settled by its single claim's steps from there, with its
// token. The keys are distinct, and request i's token is tokens[i].
template <class Ops, class Connection>
std::vector<ClaimResult> settle_batch(std::string_view who, const Ops& ops, Connection& c,
                                      std::span<const ClaimRequest* const> requests,
                                      std::span<const std::string> tokens, const Options& o,
                                      std::span<std::optional<InsertOrRead>> answers) {
  std::vector<ClaimResult> out;
  out.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const ClaimRequest& r = *requests[i];
    InsertOrRead* answered = answers[i] ? &*answers[i] : nullptr;
    out.push_back(claim_on(who, ops, c, r.key, r.fingerprint, o, tokens[i], false, answered));
  }
  return out;
}

// What a batch statement that read the keys' rows (`rows`, by key; their entries are moved
// from) met for each request, as settle_batch takes it: a key without a row (purged in
// between, or committed after the statement's snapshot) is claimed from the start.
inline std::vector<std::optional<InsertOrRead>> batch_answers(
    std::span<const ClaimRequest* const> requests, std::unordered_map<Key, RecordRead>& rows) {
  std::vector<std::optional<InsertOrRead>> answers(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (auto it = rows.find(requests[i]->key); it != rows.end())
      answers[i].emplace(InsertOrRead{std::nullopt, std::move(it->second)});
  }
  return answers;
}

// One repair on one connection: RepairSteps run by blocking calls.
template <class Ops, class Connection>
Record repair_on(std::string_view who, const Ops& ops, Connection& c, const Key& key,
                 const Repair& repair, const std::string& token, bool bound) {
  using Step = RepairSteps::Step;
  RepairSteps steps(who, key, repair, token);
  for (Step step = steps.start();;) {
    switch (step) {
      case Step::read:
        step = steps.met(ops.read(c, key, bound));
        break;
      case Step::write:
        step = steps.written(ops.write_repair(c, steps.next(), steps.read_ticket()));
        break;
      case Step::done:
        return std::move(steps).result();
    }
  }
}

// One step's recovery point on one connection: StepSteps run by blocking calls.
template <class Ops, class Connection>
std::string record_step_on(std::string_view who, const Ops& ops, Connection& c, const Key& key,
                           const Ticket& ticket, std::string_view step, std::string_view result,
                           bool bound, std::optional<std::string_view> known = std::nullopt) {
  using Step = StepSteps::Step;
  StepSteps steps(who, key, ticket, step, result, known);
  for (Step s = steps.start();;) {
    switch (s) {
      case Step::read:
        s = steps.met(ops.read(c, key, bound));
        break;
      case Step::write:
        s = steps.written(ops.write_points(c, key, ticket, steps.before(), steps.after()));
        break;
      case Step::done:
        return std::move(steps).result();
    }
  }
}

template <class Backend>
class StoreSkeleton {
 public:
  using Connection = typename Backend::Connection;
  using Pool = typename Backend::Pool;
  using Ops = typename Backend::Ops;

  StoreSkeleton(const StoreSkeleton&) = delete;
  StoreSkeleton& operator=(const StoreSkeleton&) = delete;

  ClaimResult claim(const Key& key, std::string_view fingerprint, const Options& options) {
    validate(options);
    detail::check_fingerprint(fingerprint);
    const std::string token = detail::new_owner_token();
    return with_retries("claim", [&](Connection& c, bool) {
      return backend::claim_on(Backend::name, ops_, c, key, fingerprint, options, token, false);
    });
  }

  // Many claims in few round trips (see idem/batch.hpp), for a backend whose Ops claim a chunk
  // of keys at once, in the order and widths of a BatchPlan (idem/backend/batch_plan.hpp):
  // results[i] is what claim() would have answered for requests[i] had the requests been
  // claimed one after another.
  std::vector<ClaimResult> claim_batch(std::span<const ClaimRequest> requests,
                                       const Options& options) requires
      requires(const Ops& ops, Connection& c, std::span<const ClaimRequest* const> r,
               std::span<const std::string> t) {
    { ops.claim_chunk(c, r, t, options) } -> std::same_as<std::vector<ClaimResult>>;
    Ops::max_batch_rows;
  }
  {
    backend::BatchPlan plan(requests, options, Ops::max_batch_rows);
    try {
      while (plan.more_chunks()) {
        plan.claimed(with_retries(
            "claim_batch",
            [&](Connection& c, bool) {
              const auto chunk = plan.chunk();
              return ops_.claim_chunk(c, chunk.requests, chunk.tokens, options);
            },
            [&] { plan.narrow(); }));
      }
      for (std::size_t i : plan.repeats())
        plan.answer(i, claim(requests[i].key, requests[i].fingerprint, options));
    } catch (...) {
      release_left_behind(plan);
      throw;
    }
    return std::move(plan).results();
  }

  void complete(const Key& key, const Ticket& ticket, std::string_view snapshot) {
    finish(key, ticket, snapshot, Status::succeeded, false);
  }

  void fail(const Key& key, const Ticket& ticket, std::string_view error, bool retryable) {
    finish(key, ticket, error, Status::failed, retryable);
  }

  std::optional<Record> find(const Key& key) {
    return with_retries("find", [&](Connection& c, bool) -> std::optional<Record> {
      auto row = ops_.read(c, key, false);
      if (!row) return std::nullopt;
      return std::move(row->record);
    });
  }

  std::size_t purge_expired(std::size_t batch, std::size_t max_batches) {
    // One retried unit per batch, so that a deadlock in a later batch does not drop the count
    // of the batches already deleted (only a batch whose reply was lost goes uncounted).
    backend::HousekeepingBatches purge(batch, max_batches);
    while (purge.more()) {
      purge.done(
          with_retries("purge_expired", [&](Connection& c, bool) { return ops_.purge(c, batch); }));
    }
    return purge.total();
  }

  std::size_t release_stale(std::size_t batch) {
    backend::HousekeepingBatches release(batch, 1);
    if (release.more()) {
      release.done(with_retries("release_stale",
                                [&](Connection& c, bool) { return ops_.release(c, batch); }));
    }
    return release.total();
  }

  // A fenced repair (idem/repair.hpp): RepairRefused with the current record when the fence
  // moved on.
  Record repair(const Key& key, const Repair& repair) requires
      requires(const Ops& ops, Connection& c, const Record& r, const Ticket& t) {
    { ops.write_repair(c, r, t) } -> std::same_as<bool>;
  }
  {
    validate(repair);
    const std::string token = detail::new_owner_token();
    return with_retries("repair", [&](Connection& c, bool) {
      return backend::repair_on(Backend::name, ops_, c, key, repair, token, false);
    });
  }

  // A step's result kept with the key (idem/attempt.hpp); LeaseLost once the claim is not held.
  // `known`: the recovery points the caller believes are stored (see StepSteps).
  std::string record_step(const Key& key, const Ticket& ticket, std::string_view step,
                          std::string_view result,
                          std::optional<std::string_view> known = std::nullopt) requires
      requires(const Ops& ops, Connection& c, const Key& k, const Ticket& t, std::string_view v) {
    { ops.write_points(c, k, t, v, v) } -> std::same_as<bool>;
  }
  {
    return with_retries("record_step", [&](Connection& c, bool uncertain) {
      // After a lost reply the first write may have landed: look instead of trusting `known`.
      return backend::record_step_on(Backend::name, ops_, c, key, ticket, step, result, false,
                                     uncertain ? std::nullopt : known);
    });
  }

  std::vector<Record> list(const RecordQuery& query) requires
      requires(const Ops& ops, Connection& c, const RecordQuery& q) {
    { ops.list(c, q) } -> std::same_as<std::vector<Record>>;
  }
  {
    validate(query);
    return with_retries("list", [&](Connection& c, bool) { return ops_.list(c, query); });
  }

  RecordStats stats() requires requires(const Ops& ops, Connection& c) {
    { ops.stats(c) } -> std::same_as<RecordStats>;
  }
  {
    return with_retries("stats", [&](Connection& c, bool) { return ops_.stats(c); });
  }

  const Ops& ops() const noexcept { return ops_; }

 protected:
  StoreSkeleton(Ops ops, RetryPolicy retry) : ops_(std::move(ops)), retry_(retry) {
    validate(retry_, fmt::format("{}::Store", Backend::name));
  }
  ~StoreSkeleton() = default;

  // The pool the standalone operations take their connections from (none: a store that is
  // only ever bound).
  void attach(Pool* pool) noexcept { pool_ = pool; }
  bool has_pool() const noexcept { return pool_ != nullptr; }
  Pool& pool() const {
    if (pool_ == nullptr) {
      throw UsageError(
          fmt::format("{}::Store: this store has no pool (it is only bound)", Backend::name));
    }
    return *pool_;
  }

  // The check of the table that the first operation runs, once per store, on the connection it
  // took (a table not as idem expects then fails with SchemaMismatch before any claim). Until
  // it passes, every operation runs it again; a store that checks by other means (ensure_schema,
  // check_schema) calls table_checked() instead.
  void check_table_first(std::function<void(Connection&)> check) {
    check_table_ = std::move(check);
  }
  void table_checked() noexcept { table_checked_.store(true, std::memory_order_release); }

  // Runs op(connection, uncertain) on a pooled connection; on a transient failure backs off
  // and tries again on a (possibly new) connection. `uncertain` tells op that an earlier try
  // lost its connection after sending a statement, so its outcome must be looked up, not
  // assumed. before_retry() runs after each failed try that will be tried again.
  template <class Op, class BeforeRetry>
  auto with_retries(std::string_view what, Op&& op, BeforeRetry&& before_retry)
      -> decltype(op(std::declval<Connection&>(), false)) {
    return retry_on_pool(what, true, std::forward<Op>(op), std::forward<BeforeRetry>(before_retry));
  }
  template <class Op>
  auto with_retries(std::string_view what, Op&& op)
      -> decltype(op(std::declval<Connection&>(), false)) {
    return retry_on_pool(what, true, std::forward<Op>(op), [] {});
  }
  // The same without the first-use check of the table: for the operations that create or check
  // the table themselves.
  template <class Op>
  auto with_retries_unchecked(std::string_view what, Op&& op)
      -> decltype(op(std::declval<Connection&>(), false)) {
    return retry_on_pool(what, false, std::forward<Op>(op), [] {});
  }

 private:
  template <class Op, class BeforeRetry>
  auto retry_on_pool(std::string_view what, bool check_table, Op&& op, BeforeRetry&& before_retry)
      -> decltype(op(std::declval<Connection&>(), false)) {
    backend::OperationTries tries(retry_, Backend::name, what, &Backend::classify);
    return backend::retrying(
        [&]() -> decltype(auto) {
          auto handle = pool().acquire();
          if (check_table && check_table_ && !table_checked_.load(std::memory_order_acquire)) {
            check_table_(*handle);
            table_checked();
          }
          return op(*handle, tries.uncertain());
        },
        [&](const StoreError& e) {
          const Duration pause = tries.failed(e);
          before_retry();
          return pause;
        });
  }

  // After a batch failed midway: the claims it made are failed retryably (as an abandoned guard
  // records), and so is each key it sent without an answer whose row is a claim of the batch's
  // token that nobody finished (a statement that wrote it, then failed). The first failure of
  // the store ends it: the lease runs out instead.
  void release_left_behind(const backend::BatchPlan& plan) noexcept {
    try {
      for (const ClaimResult& c : plan.acquired()) {
        try {
          fail(c.record.key, c.record.ticket, detail::abandoned_snapshot, true);
        } catch (const LeaseLost&) {
          // Taken over meanwhile: no longer ours to release.
        }
      }
      for (const auto& [key, token] : plan.in_flight()) {
        const std::optional<Record> stored = find(key);
        if (!backend::unfinished_claim_of(stored, token)) continue;
        try {
          fail(key, stored->ticket, detail::abandoned_snapshot, true);
        } catch (const LeaseLost&) {
        }
      }
    } catch (...) {
    }
  }

  void finish(const Key& key, const Ticket& ticket, std::string_view snapshot, Status to,
              bool retryable) {
    detail::check_snapshot(snapshot);
    const bool held = with_retries("record", [&](Connection& c, bool uncertain) {
      using Step = backend::FinishSteps::Step;
      backend::FinishSteps steps(uncertain);
      for (Step step = steps.start();;) {
        switch (step) {
          case Step::look:
            step = steps.looked(
                backend::finished_by(ops_.read(c, key, false), ticket, to, snapshot, retryable));
            break;
          case Step::write:
            step = steps.wrote(ops_.finish(c, key, ticket, snapshot, to, retryable));
            break;
          case Step::done:
            return steps.held();
        }
      }
    });
    if (!held) throw lease_lost(Backend::name, key, ticket);
  }

  Ops ops_;
  RetryPolicy retry_;
  Pool* pool_ = nullptr;
  std::function<void(Connection&)> check_table_;
  std::atomic<bool> table_checked_{false};
};

}  // namespace idem::backend
