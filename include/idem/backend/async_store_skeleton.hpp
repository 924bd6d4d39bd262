#pragma once
// AsyncStoreSkeleton: the store skeleton of idem/backend/store_skeleton.hpp for
// coroutines.
// It runs the same steps (idem/backend/steps.hpp: the claim's rounds, the finish that reconciles a
// lost reply, the judging of a failed try) with co_await where the blocking skeleton calls, and
// waits between tries on a timer. A backend provides its coroutine statements:
//
//   struct Backend {
//     using Connection = ...;  // a non-blocking connection
//     using Pool = ...;        // an AsyncBasicPool of them (idem/backend/async_pool.hpp)
//     using Ops = ...;         // as the blocking skeleton's Ops, each returning net::awaitable
//                              // (insert_or_read in place of insert when the Ops have it;
//                              // repair, record_step and list exist when the Ops have
//                              // write_repair, write_points and list)
//     static constexpr std::string_view name = "idem::mysql";
//     static FailureKind classify(const StoreError&);
//   };
//
// A claim cancelled while its statement was on the wire may still land on the server: the
// skeleton then starts, on the claim's executor, a cleanup that waits until the server is done
// with that statement (Ops::settled) and records a retryable failure if the claim is there
// and ours, so the next duplicate runs at once. If that cleanup cannot run, the lease runs out.

#include <atomic>
#include <concepts>
#include <cstddef>
#include <exception>
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
#include <boost/container/small_vector.hpp>
#include <boost/system/system_error.hpp>

#include "idem/async/detail/to_completion.hpp"
#include "idem/async/net.hpp"
#include "idem/backend/batch_plan.hpp"
#include "idem/backend/housekeeping.hpp"
#include "idem/backend/record_rules.hpp"
#include "idem/backend/steps.hpp"
#include "idem/detail/checks.hpp"
#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/guard_state.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/retry_policy.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"

IDEM_ASYNC_FRAMES_BEGIN

namespace idem::async::detail {

// One claim on one connection: backend::ClaimSteps run by coroutine calls (`answered`: as for
// backend::claim_on; the caller keeps it alive until the claim answers).
template <class Ops, class Connection>
net::awaitable<ClaimResult> claim_on(std::string_view who, const Ops& ops, Connection& c,
                                     const Key& key, std::string_view fp, const Options& o,
                                     const std::string& token, bool bound,
                                     backend::InsertOrRead* answered = nullptr) {
  using Step = backend::ClaimSteps::Step;
  backend::ClaimSteps steps(who, key, fp, o, token);
  for (Step step = answered ? steps.answered(std::move(*answered)) : steps.start();;) {
    switch (step) {
      case Step::insert:
        if constexpr (requires { ops.insert_or_read(c, key, fp, o, token); }) {
          step = steps.answered(co_await ops.insert_or_read(c, key, fp, o, token));
        } else {
          step = steps.inserted(co_await ops.insert(c, key, fp, o, token, bound));
        }
        break;
      case Step::read:
        step = steps.met(co_await ops.read(c, key, bound));
        break;
      case Step::take_over:
        step = steps.written(
            co_await ops.write_takeover(c, steps.decision(), steps.next(), steps.read_ticket()));
        break;
      case Step::done:
        co_return std::move(steps).result();
    }
  }
}

// backend::settle_batch (idem/backend/store_skeleton.hpp) by coroutine calls: each request of
// a batch claim settled from what the batch's first step met for it (`answers`, moved from;
// backend::batch_answers makes them from the rows a statement read), or claimed from the start.
template <class Ops, class Connection>
net::awaitable<std::vector<ClaimResult>> settle_batch(
    std::string_view who, const Ops& ops, Connection& c,
    std::span<const ClaimRequest* const> requests, std::span<const std::string> tokens,
    const Options& o, std::span<std::optional<backend::InsertOrRead>> answers) {
  std::vector<ClaimResult> out;
  out.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const ClaimRequest& r = *requests[i];
    backend::InsertOrRead* answered = answers[i] ? &*answers[i] : nullptr;
    ClaimResult claimed =
        co_await detail::claim_on(who, ops, c, r.key, r.fingerprint, o, tokens[i], false, answered);
    out.push_back(std::move(claimed));
  }
  co_return out;
}

// One repair on one connection: backend::RepairSteps run by coroutine calls.
template <class Ops, class Connection>
net::awaitable<Record> repair_on(std::string_view who, const Ops& ops, Connection& c,
                                 const Key& key, const Repair& repair, const std::string& token,
                                 bool bound) {
  using Step = backend::RepairSteps::Step;
  backend::RepairSteps steps(who, key, repair, token);
  for (Step step = steps.start();;) {
    switch (step) {
      case Step::read:
        step = steps.met(co_await ops.read(c, key, bound));
        break;
      case Step::write:
        step = steps.written(co_await ops.write_repair(c, steps.next(), steps.read_ticket()));
        break;
      case Step::done:
        co_return std::move(steps).result();
    }
  }
}

// One step's recovery point on one connection: backend::StepSteps run by coroutine calls.
template <class Ops, class Connection>
net::awaitable<std::string> record_step_on(std::string_view who, const Ops& ops, Connection& c,
                                           const Key& key, const Ticket& ticket,
                                           std::string_view step, std::string_view result,
                                           bool bound,
                                           std::optional<std::string_view> known = std::nullopt) {
  using Step = backend::StepSteps::Step;
  backend::StepSteps steps(who, key, ticket, step, result, known);
  for (Step s = steps.start();;) {
    switch (s) {
      case Step::read:
        s = steps.met(co_await ops.read(c, key, bound));
        break;
      case Step::write:
        s = steps.written(co_await ops.write_points(c, key, ticket, steps.before(), steps.after()));
        break;
      case Step::done:
        co_return std::move(steps).result();
    }
  }
}

// An Ops::settled for a server that lists its sessions: co_await alive() (is the cancelled
// claim's session still there?) until it answers false, every 10 ms; after a second of that,
// co_await end() once (kill the session: its statement then ends at once).
template <class Alive, class End>
net::awaitable<bool> wait_until_session_ends(Alive alive, End end) {
  for (int look = 0; co_await alive(); ++look) {
    if (look == 100) co_await end();
    co_await sleep_for(Duration{10});
  }
  co_return true;
}

// The connections whose statements an operation cut off may have left running (see
// AsyncStoreSkeleton::tracked): almost always none or one, so kept without a heap allocation
// on every claim.
using Unsettled = boost::container::small_vector<unsigned long, 2>;

inline constexpr std::string_view cancelled_snapshot =
    R"({"error":"idem.cancelled","detail":"the claim was cancelled before it answered"})";

}  // namespace idem::async::detail

namespace idem::backend {

namespace net = async::net;

template <class Backend>
class AsyncStoreSkeleton {
 public:
  using Connection = typename Backend::Connection;
  using Pool = typename Backend::Pool;
  using Ops = typename Backend::Ops;

  AsyncStoreSkeleton(const AsyncStoreSkeleton&) = delete;
  AsyncStoreSkeleton& operator=(const AsyncStoreSkeleton&) = delete;

  net::awaitable<ClaimResult> claim(const Key& key, std::string_view fingerprint,
                                    const Options& options) {
    validate(options);
    idem::detail::check_fingerprint(fingerprint);
    const std::string token = idem::detail::new_owner_token();
    async::detail::Unsettled unsettled;  // see tracked()
    bool sent = false;                   // a try reached a connection
    std::exception_ptr interrupted;
    try {
      co_return co_await with_retries<ClaimResult>("claim", [&](Connection& c, bool) {
        sent = true;
        return tracked<ClaimResult>(unsettled, c, [&] {
          return async::detail::claim_on(Backend::name, ops_, c, key, fingerprint, options, token,
                                         false);
        });
      });
    } catch (const StoreError&) {
      throw;
    } catch (...) {
      if (!sent) throw;
      interrupted = std::current_exception();  // no co_await inside a handler
    }
    // The clean-up ends before the cancelled claim answers its caller, so that a read right
    // after it finds no processing claim of this call's (idem/async/detail/to_completion.hpp).
    const bool throws = co_await net::this_coro::throw_if_cancelled();
    co_await net::this_coro::throw_if_cancelled(false);
    std::vector<ClaimResult> none;
    std::vector<std::pair<Key, std::string>> mine{{key, token}};
    co_await async::detail::to_completion(release_left_behind(
        std::move(none), std::move(mine), std::move(unsettled), async::detail::cancelled_snapshot));
    co_await net::this_coro::throw_if_cancelled(throws);
    std::rethrow_exception(interrupted);
  }

  // Many claims in few round trips, as the blocking skeleton's claim_batch (the order and
  // widths of idem/backend/batch_plan.hpp). A batch that fails or is cancelled midway releases,
  // before it completes to its caller, the claims it made (a retryable failure, as an abandoned
  // guard records) and, once the server is done with the statements it cut off, those of the
  // keys sent but not answered that carry the batch's token. A cancellation that reaches it
  // between statements stops it there. (idem::async::claim_batch, idem/async/batch.hpp, also
  // releases the claims of a batch that ended after its caller was cancelled.)
  net::awaitable<std::vector<ClaimResult>> claim_batch(std::span<const ClaimRequest> requests,
                                                       const Options& options) requires
      requires(const Ops& ops, Connection& c, std::span<const ClaimRequest* const> r,
               std::span<const std::string> t) {
    { ops.claim_chunk(c, r, t, options) } -> std::same_as<net::awaitable<std::vector<ClaimResult>>>;
    Ops::max_batch_rows;
  }
  {
    BatchPlan plan(requests, options, Ops::max_batch_rows);
    async::detail::Unsettled unsettled;  // see tracked()
    std::exception_ptr failed;
    bool cut_off = false;  // by a cancellation, not a store failure
    try {
      while (plan.more_chunks()) {
        const net::cancellation_state state = co_await net::this_coro::cancellation_state;
        if (state.cancelled() != net::cancellation_type::none) {
          throw boost::system::system_error(net::error::operation_aborted, "claim_batch");
        }
        std::vector<ClaimResult> answers = co_await with_retries<std::vector<ClaimResult>>(
            "claim_batch",
            [&](Connection& c, bool) {
              return tracked<std::vector<ClaimResult>>(unsettled, c, [&] {
                const auto chunk = plan.chunk();
                return ops_.claim_chunk(c, chunk.requests, chunk.tokens, options);
              });
            },
            [&] { plan.narrow(); });
        plan.claimed(std::move(answers));
        unsettled.clear();  // the answered keys were recognised, whatever an earlier try left
      }
      for (std::size_t i : plan.repeats()) {  // a repeat's claim cleans up after itself
        ClaimResult answer = co_await claim(requests[i].key, requests[i].fingerprint, options);
        plan.answer(i, std::move(answer));
      }
    } catch (const StoreError&) {
      failed = std::current_exception();
    } catch (...) {
      failed = std::current_exception();  // no co_await inside a handler
      cut_off = true;
    }
    if (!failed) co_return std::move(plan).results();
    std::vector<ClaimResult> made = plan.acquired();
    std::vector<std::pair<Key, std::string>> sent = plan.in_flight();
    const bool throws = co_await net::this_coro::throw_if_cancelled();
    co_await net::this_coro::throw_if_cancelled(false);
    co_await async::detail::to_completion(release_left_behind(
        std::move(made), std::move(sent), std::move(unsettled),
        cut_off ? async::detail::cancelled_snapshot : idem::detail::abandoned_snapshot));
    co_await net::this_coro::throw_if_cancelled(throws);
    std::rethrow_exception(failed);
  }

  net::awaitable<void> complete(const Key& key, const Ticket& ticket, std::string_view snapshot) {
    co_await finish(key, ticket, snapshot, Status::succeeded, false);
  }

  net::awaitable<void> fail(const Key& key, const Ticket& ticket, std::string_view error,
                            bool retryable) {
    co_await finish(key, ticket, error, Status::failed, retryable);
  }

  net::awaitable<std::optional<Record>> find(const Key& key) {
    co_return co_await with_retries<std::optional<Record>>(
        "find", [&](Connection& c, bool) -> net::awaitable<std::optional<Record>> {
          auto row = co_await ops_.read(c, key, false);
          if (!row) co_return std::nullopt;
          co_return std::move(row->record);
        });
  }

  net::awaitable<std::size_t> purge_expired(std::size_t batch, std::size_t max_batches) {
    HousekeepingBatches purge(batch, max_batches);
    while (purge.more()) {
      purge.done(co_await with_retries<std::size_t>(
          "purge_expired", [&](Connection& c, bool) { return ops_.purge(c, batch); }));
    }
    co_return purge.total();
  }

  net::awaitable<std::size_t> release_stale(std::size_t batch) {
    HousekeepingBatches release(batch, 1);
    if (release.more()) {
      release.done(co_await with_retries<std::size_t>(
          "release_stale", [&](Connection& c, bool) { return ops_.release(c, batch); }));
    }
    co_return release.total();
  }

  // As the blocking skeleton's repair: RepairRefused with the current record when the fence
  // moved on.
  net::awaitable<Record> repair(const Key& key, const Repair& repair) requires
      requires(const Ops& ops, Connection& c, const Record& r, const Ticket& t) {
    { ops.write_repair(c, r, t) } -> std::same_as<net::awaitable<bool>>;
  }
  {
    validate(repair);
    const std::string token = idem::detail::new_owner_token();
    co_return co_await with_retries<Record>("repair", [&](Connection& c, bool) {
      return async::detail::repair_on(Backend::name, ops_, c, key, repair, token, false);
    });
  }

  // As the blocking skeleton's record_step: LeaseLost once the claim is not held; `known`: the
  // recovery points the caller believes are stored (see StepSteps).
  net::awaitable<std::string> record_step(
      const Key& key, const Ticket& ticket, std::string_view step, std::string_view result,
      std::optional<std::string_view> known = std::nullopt) requires
      requires(const Ops& ops, Connection& c, const Key& k, const Ticket& t, std::string_view v) {
    { ops.write_points(c, k, t, v, v) } -> std::same_as<net::awaitable<bool>>;
  }
  {
    co_return co_await with_retries<std::string>("record_step", [&](Connection& c, bool uncertain) {
      // After a lost reply the first write may have landed: look instead of trusting `known`.
      return async::detail::record_step_on(Backend::name, ops_, c, key, ticket, step, result, false,
                                           uncertain ? std::nullopt : known);
    });
  }

  net::awaitable<std::vector<Record>> list(const RecordQuery& query) requires
      requires(const Ops& ops, Connection& c, const RecordQuery& q) {
    { ops.list(c, q) } -> std::same_as<net::awaitable<std::vector<Record>>>;
  }
  {
    validate(query);
    co_return co_await with_retries<std::vector<Record>>(
        "list", [&](Connection& c, bool) { return ops_.list(c, query); });
  }

  const Ops& ops() const noexcept { return ops_; }

 protected:
  AsyncStoreSkeleton(Ops ops, RetryPolicy retry) : ops_(std::move(ops)), retry_(retry) {
    validate(retry_, fmt::format("{}::AsyncStore", Backend::name));
  }
  ~AsyncStoreSkeleton() = default;

  void attach(Pool* pool) noexcept { pool_ = pool; }
  Pool& pool() const { return *pool_; }

  // As the blocking skeleton's: the check of the table that the first operation runs, once per
  // store, before any claim.
  void check_table_first(std::function<net::awaitable<void>(Connection&)> check) {
    check_table_ = std::move(check);
  }
  void table_checked() noexcept { table_checked_.store(true, std::memory_order_release); }

  // As the blocking skeleton's with_retries: op(connection, uncertain) on a pooled
  // connection, tried again after a transient failure; the pause is a timer's.
  // before_retry() runs after each failed try that will be tried again.
  template <class R, class Op, class BeforeRetry = void (*)()>
  net::awaitable<R> with_retries(
      std::string_view what, Op op, BeforeRetry before_retry = [] {}) {
    return retry_on_pool<R>(what, true, std::move(op), std::move(before_retry));
  }
  // The same without the first-use check of the table (ensure_schema, check_schema).
  template <class R, class Op>
  net::awaitable<R> with_retries_unchecked(std::string_view what, Op op) {
    return retry_on_pool<R>(what, false, std::move(op), [] {});
  }

 private:
  template <class R, class Op, class BeforeRetry>
  net::awaitable<R> retry_on_pool(std::string_view what, bool check_table, Op op,
                                  BeforeRetry before_retry) {
    OperationTries tries(retry_, Backend::name, what, &Backend::classify);
    co_return co_await async::detail::retrying<R>(
        [&]() -> net::awaitable<R> {
          if (check_table) co_await check_table_once();
          auto handle = co_await pool().acquire();
          co_return co_await op(*handle, tries.uncertain());
        },
        [&](const StoreError& e) {
          const Duration pause = tries.failed(e);
          before_retry();
          return pause;
        });
  }

  // The first operations of a store wait for one check of its table, run by the first of them:
  // a thousand requests arriving together do not each read the table's layout. A check that
  // fails lets the next operation run it again.
  net::awaitable<void> check_table_once() {
    while (check_table_ && !table_checked_.load(std::memory_order_acquire)) {
      if (!checking_.exchange(true, std::memory_order_acq_rel)) {
        std::exception_ptr failed;
        try {
          auto handle = co_await pool().acquire();
          co_await check_table_(*handle);
          table_checked();
        } catch (...) {
          failed = std::current_exception();
        }
        checking_.store(false, std::memory_order_release);
        if (failed) std::rethrow_exception(failed);
        co_return;
      }
      co_await async::sleep_for(Duration{1});
    }
  }

  net::awaitable<void> finish(const Key& key, const Ticket& ticket, std::string_view snapshot,
                              Status to, bool retryable) {
    idem::detail::check_snapshot(snapshot);
    const bool held = co_await with_retries<bool>(
        "record", [&](Connection& c, bool uncertain) -> net::awaitable<bool> {
          using Step = FinishSteps::Step;
          FinishSteps steps(uncertain);
          for (Step step = steps.start();;) {
            switch (step) {
              case Step::look:
                step = steps.looked(finished_by(co_await ops_.read(c, key, false), ticket, to,
                                                snapshot, retryable));
                break;
              case Step::write:
                step = steps.wrote(co_await ops_.finish(c, key, ticket, snapshot, to, retryable));
                break;
              case Step::done:
                co_return steps.held();
            }
          }
        });
    if (!held) throw lease_lost(Backend::name, key, ticket);
  }

  // One try of an operation whose statements a cancellation may cut off, on `c`: `unsettled`
  // keeps the connections whose statements may still run on the server (the try in flight,
  // and a try whose connection broke with its statement out, its reply lost). A try that
  // answered, or failed otherwise, is done there: its connection is not waited for (and not
  // killed as a stuck one).
  template <class R, class Op>
  static net::awaitable<R> tracked(async::detail::Unsettled& unsettled, Connection& c, Op op) {
    unsettled.push_back(c.id());
    try {
      R answer = co_await op();
      unsettled.pop_back();
      co_return answer;
    } catch (const StoreError& e) {
      if (Backend::classify(e) != FailureKind::reply_lost) unsettled.pop_back();
      throw;
    } catch (const boost::system::system_error&) {
      throw;  // a socket wait cut off: the statement may still run
    } catch (...) {
      unsettled.pop_back();  // an answer that could not be read: the statement ended
      throw;
    }
  }

  // After a claim or a batch that was cancelled or failed: the claims it made (`made`) are
  // failed retryably; then, once the server is done with what the connections `unsettled` sent
  // (Ops::settled), each key of `sent` whose row is a claim of its token that nobody finished
  // (the statement wrote it but its answer never came) is failed retryably with `snapshot`, so
  // that the next duplicate runs at once. Fenced, so nothing newer is touched. The first
  // failure of the store ends it (the lease runs out instead): an outage does not make the
  // caller wait for one retried call per key.
  net::awaitable<void> release_left_behind(std::vector<ClaimResult> made,
                                           std::vector<std::pair<Key, std::string>> sent,
                                           async::detail::Unsettled unsettled,
                                           std::string_view snapshot) {
    try {
      for (const ClaimResult& c : made) {
        try {
          co_await fail(c.record.key, c.record.ticket, idem::detail::abandoned_snapshot, true);
        } catch (const LeaseLost&) {
          // Taken over meanwhile: no longer ours to release.
        }
      }
      if (sent.empty()) co_return;
      for (unsigned long id : unsettled) {
        co_await with_retries<bool>("settle a cancelled claim",
                                    [&](Connection& c, bool) { return ops_.settled(c, id); });
      }
      for (const auto& [key, token] : sent) {
        const std::optional<Record> stored = co_await find(key);
        if (!unfinished_claim_of(stored, token)) continue;
        try {
          co_await fail(key, stored->ticket, snapshot, true);
        } catch (const LeaseLost&) {
        }
      }
    } catch (...) {
      // The store failed: the lease runs out instead.
    }
  }

  Ops ops_;
  RetryPolicy retry_;
  Pool* pool_ = nullptr;
  std::function<net::awaitable<void>(Connection&)> check_table_;
  std::atomic<bool> table_checked_{false};
  std::atomic<bool> checking_{false};  // an operation is checking the table now
};

}  // namespace idem::backend

IDEM_ASYNC_FRAMES_END
