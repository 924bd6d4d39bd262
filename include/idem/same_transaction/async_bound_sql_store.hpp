#pragma once
// The bound (same-transaction) store of an SQL backend, for coroutines: the store's operations
// on one connection, inside the transaction open on it, so that the claim, the business writes
// and the recorded result commit or roll back together. The coroutine form of BoundSqlStore
// (idem/same_transaction/bound_sql_store.hpp), whose rules it follows: claim_first INSERTs the
// processing row in the transaction and the result UPDATEs it, a concurrent duplicate waiting on
// the row's lock, then replaying; record_last reads without a lock, keeps a fresh claim in memory
// (SpeculativeClaims) and INSERTs the finished record as its result, a concurrent duplicate's
// INSERT meeting the first one's row (its transaction then rolls back and runs again, replaying).
// In a try of with_transaction, where the Ops can, a claim's result (that INSERT, or the fenced
// UPDATE) waits to be sent with the COMMIT, in one round trip. Nothing is retried here: a failure
// rolls back the caller's transaction (with_transaction runs it again,
// idem/same_transaction/async_transaction.hpp).
//
// Every claim acquired is noted in the transaction's ClaimLedger; the transaction may commit
// only when committable(): each claim succeeded or failed permanently. A consumer's failed
// attempt, which rolls back with the business's writes, is counted after the rollback
// (fail_after_rollback) by the transaction the store was bound through.
//
// Its Backend is the coroutine store skeleton's (idem/backend/async_store_skeleton.hpp) and also
// says:
//
//   struct AsyncBackend {
//     ...                                              // as the skeleton asks
//     static constexpr std::string_view begin_hint = "BEGIN";  // for the error below
//     static bool in_transaction(Connection&);         // a claim here would not commit alone
//   };
//
// Its Ops may also, for BoundClaim::record_last, probe(c, key) and insert_finished(c, record),
// and, to send a result with the COMMIT, insert_finished_and_commit(c, record) and
// finish_and_commit(c, key, ticket, snapshot, to, retryable), each awaitable, as BoundSqlStore's
// blocking ones.

#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/async/net.hpp"
#include "idem/async/store.hpp"
#include "idem/backend/async_store_skeleton.hpp"
#include "idem/backend/housekeeping.hpp"
#include "idem/backend/record_rules.hpp"
#include "idem/bound_claim.hpp"
#include "idem/detail/checks.hpp"
#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/observer.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/same_transaction/claim_ledger.hpp"
#include "idem/same_transaction/speculative_claims.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

IDEM_ASYNC_FRAMES_BEGIN

namespace idem::same_transaction {

namespace net = idem::async::net;

// What the stores bound through an AsyncTransaction leave for its end: the writes waiting for
// its ROLLBACK and, in a try of with_transaction, the one write waiting to be sent with its
// COMMIT in one round trip (ClaimLedger::Deferred, awaitable): a claim's result.
template <class Connection>
struct AsyncTransactionWrites {
  struct Deferred {
    Key key;
    Ticket ticket;
    // write(c, true) writes and commits, write(c, false) writes alone; false: the finished
    // record met another request's row (then nothing was committed).
    std::function<net::awaitable<bool>(Connection&, bool with_commit)> write;
  };

  // Whether a result may wait for the COMMIT: only where idem sends that COMMIT itself (a
  // try of with_transaction), never where the caller might end the transaction on its own.
  bool defers = false;
  std::optional<Deferred> deferred;  // dropped unsent when the transaction rolls back
  // The writes that wait for a try's ROLLBACK (ClaimLedger::after_rollback's, awaited): the try
  // runs them in a transaction of their own on its connection, and again after a transient
  // failure.
  std::vector<std::function<net::awaitable<void>(Connection&)>> after_rollback;

  // As ClaimLedger::send_deferred, on `c`: writes the waiting result, if any, alone or with the
  // COMMIT; false when none waited. Superseded: noted in `ledger`, and thrown.
  net::awaitable<bool> send_deferred(Connection& c, ClaimLedger& ledger, bool with_commit,
                                     std::string_view who) {
    if (!deferred) co_return false;
    Deferred d = std::move(*deferred);
    deferred.reset();
    const ClaimLedger::Sending sending(ledger, std::move(d.key), d.ticket, with_commit, who);
    bool written = false;
    try {
      written = co_await d.write(c, with_commit);
    } catch (...) {
      sending.failed();
      throw;
    }
    co_return sending.answered(written);
  }
};

template <class Backend>
class AsyncBoundSqlStore {
 public:
  using Ops = typename Backend::Ops;
  using Connection = typename Backend::Connection;

  // As BoundStore's: a duplicate's wait would hold the shared row lock of its reads and block
  // the very claim it waits for.
  static constexpr bool supports_wait = false;
  static constexpr bool in_caller_transaction = true;
  // Whether the Ops can claim record-last.
  static constexpr bool can_record_last =
      requires(const Ops& ops, Connection& c, const Key& key, const Record& r) {
    { ops.probe(c, key) } -> std::same_as<net::awaitable<RecordProbe>>;
    { ops.insert_finished(c, r) } -> std::same_as<net::awaitable<bool>>;
  };
  // Whether they can send a record-last claim's INSERT, and a written claim's result, with the
  // COMMIT.
  static constexpr bool can_commit_with_record =
      requires(const Ops& ops, Connection& c, const Record& r) {
    { ops.insert_finished_and_commit(c, r) } -> std::same_as<net::awaitable<bool>>;
  };
  static constexpr bool can_commit_with_result =
      requires(const Ops& ops, Connection& c, const Key& k, const Ticket& t, std::string_view v,
               Status to, bool flag) {
    { ops.finish_and_commit(c, k, t, v, to, flag) } -> std::same_as<net::awaitable<bool>>;
  };

  // `ledger` and `writes`: the AsyncTransaction's, or null for a transaction the caller runs
  // itself (nobody counts a failed attempt there, and every result is written at once).
  // `ops` (the store's) must outlive the transaction, whose end may send a result of this
  // store's; `connection` and the transaction must outlive this. Throws InvalidArgument for
  // record_last on Ops that cannot.
  AsyncBoundSqlStore(const Ops& ops, Connection& connection,
                     BoundClaim how = BoundClaim::claim_first, ClaimLedger* ledger = nullptr,
                     AsyncTransactionWrites<Connection>* writes = nullptr)
      : ops_(&ops),
        connection_(&connection),
        ledger_(ledger != nullptr ? ledger : own_.get()),
        writes_(writes),
        how_(checked(how)) {}

  AsyncBoundSqlStore(AsyncBoundSqlStore&&) noexcept = default;
  AsyncBoundSqlStore& operator=(AsyncBoundSqlStore&&) noexcept = default;

  net::awaitable<ClaimResult> claim(const Key& key, std::string_view fingerprint,
                                    const Options& options) {
    validate(options);
    idem::detail::check_fingerprint(fingerprint);
    if (!Backend::in_transaction(*connection_)) {
      throw UsageError(fmt::format(
          "{}::AsyncBoundStore: no transaction is open on the connection (begin one first: {}): "
          "the claim would commit on its own",
          who, Backend::begin_hint));
    }
    co_await send_deferred();  // the read below must see the record a claim before it finished
    ledger_->claiming(options);
    std::optional<ClaimResult> r;
    if constexpr (can_record_last) {
      if (how_ == BoundClaim::record_last) {
        RecordProbe seen = co_await ops_->probe(*connection_, key);
        r = speculative_.claim(key, fingerprint, options, idem::detail::new_owner_token(),
                               std::move(seen));
      }
    }
    if (!r) {  // claim first, or a record-last claim's takeover (under the row's lock)
      r.emplace(co_await idem::async::detail::claim_on(who, *ops_, *connection_, key, fingerprint,
                                                       options, idem::detail::new_owner_token(),
                                                       true));
    }
    if (r->verdict == Verdict::acquired) ledger_->claimed(r->record.key, r->record.ticket);
    co_return std::move(*r);
  }

  // Throws LeaseLost when the claim is no longer held, and a retryable StoreError when a
  // record-last claim was superseded (the transaction must roll back and run again).
  net::awaitable<void> complete(const Key& key, const Ticket& ticket, std::string_view snapshot) {
    co_await record(key, ticket, snapshot, Status::succeeded, false);
  }
  net::awaitable<void> fail(const Key& key, const Ticket& ticket, std::string_view error,
                            bool retryable) {
    co_await record(key, ticket, error, Status::failed, retryable);
  }
  // As BoundStore::abandon: noted first, so that even a failed write leaves the transaction
  // uncommittable. A record-last claim whose record was sent records nothing more; one that
  // turns out superseded is noted so, without an error.
  net::awaitable<void> abandon(const Key& key, const Ticket& ticket, std::string_view error) {
    ledger_->ended(key, ticket, Ledger::State::abandoned);
    if (speculative_.sent(key, ticket)) co_return;
    // Written at once, not with the COMMIT: a speculative body that failed on the first
    // request's writes learns here that it was superseded, and the try runs again.
    (void)co_await write(key, ticket, error, Status::failed, true, false);
  }

  // What a Guard destroyed without a result calls: no write (it would race the transaction's
  // own statements on the connection); the transaction may then not commit.
  void note_abandoned(const Key& key, const Ticket& ticket) noexcept {
    ledger_->ended(key, ticket, Ledger::State::abandoned);
  }

  net::awaitable<std::optional<Record>> find(const Key& key) {
    co_await send_deferred();
    auto row = co_await ops_->read(*connection_, key, false);
    if (!row) co_return std::nullopt;
    co_return std::move(row->record);
  }

  // As BoundStore::record_step: a step's result kept with the key in this transaction, so that
  // it commits or rolls back with the business writes beside it (async::Attempt::step of a
  // claim made through this store calls it). LeaseLost once the claim is not held; `known`: the
  // recovery points the caller believes are stored (see StepSteps).
  net::awaitable<std::string> record_step(
      const Key& key, const Ticket& ticket, std::string_view step, std::string_view result,
      std::optional<std::string_view> known = std::nullopt) requires
      requires(const Ops& ops, Connection& c, const Key& k, const Ticket& t, std::string_view v) {
    { ops.write_points(c, k, t, v, v) } -> std::same_as<net::awaitable<bool>>;
  }
  {
    // A record-last claim keeps its points until its finished record is INSERTed.
    if (auto points = speculative_.record_step(who, key, ticket, step, result)) {
      co_return std::move(*points);
    }
    co_await send_deferred();
    co_return co_await idem::async::detail::record_step_on(who, *ops_, *connection_, key, ticket,
                                                           step, result, true, known);
  }

  // As BoundStore::repair: a fenced repair (idem/repair.hpp) in this transaction;
  // RepairRefused with the current record when the fence moved on.
  net::awaitable<Record> repair(const Key& key, const Repair& repair) requires
      requires(const Ops& ops, Connection& c, const Record& r, const Ticket& t) {
    { ops.write_repair(c, r, t) } -> std::same_as<net::awaitable<bool>>;
  }
  {
    validate(repair);
    co_await send_deferred();
    co_return co_await idem::async::detail::repair_on(who, *ops_, *connection_, key, repair,
                                                      idem::detail::new_owner_token(), true);
  }

  // The records a RecordQuery asks for, read in this transaction.
  net::awaitable<std::vector<Record>> list(const RecordQuery& query) requires
      requires(const Ops& ops, Connection& c, const RecordQuery& q) {
    { ops.list(c, q) } -> std::same_as<net::awaitable<std::vector<Record>>>;
  }
  {
    validate(query);
    co_await send_deferred();
    co_return co_await ops_->list(*connection_, query);
  }

  net::awaitable<std::size_t> purge_expired(std::size_t batch, std::size_t max_batches) {
    co_await send_deferred();
    idem::backend::HousekeepingBatches purge(batch, max_batches);
    while (purge.more())
      purge.done(co_await ops_->purge(*connection_, batch));
    co_return purge.total();
  }
  net::awaitable<std::size_t> release_stale(std::size_t batch) {
    co_await send_deferred();
    idem::backend::HousekeepingBatches release(batch, 1);
    if (release.more()) release.done(co_await ops_->release(*connection_, batch));
    co_return release.total();
  }

  // As BoundStore::fail_after_rollback: counts a failed attempt of `key` although its claim
  // rolls back with the business's writes. Once the AsyncTransaction's try has rolled back, a
  // claim of the key and its failure (`error`, `retryable`) are written in a transaction of
  // their own on the connection; nothing when another request holds or finished the key by
  // then. false, with nothing to come, when the store was not bound through an
  // AsyncTransaction.
  bool fail_after_rollback(const Key& key, std::string_view fingerprint, const Options& options,
                           std::string error, bool retryable) {
    if (writes_ == nullptr) return false;
    validate(options);
    idem::detail::check_fingerprint(fingerprint);
    idem::detail::check_snapshot(error);
    writes_->after_rollback.push_back([ops = ops_, key, fp = std::string(fingerprint), options,
                                       error = std::move(error), retryable](Connection& c) {
      return count_failed_attempt(*ops, c, key, fp, options, error, retryable);
    });
    return true;
  }

  // As BoundStore's.
  bool committable() const noexcept { return ledger_->committable(); }
  void check_committable() const { ledger_->check_committable(who); }
  void set_rollback_only() noexcept { ledger_->set_rollback_only(); }
  // As BoundStore's: in with_transaction's try, events are held until the try ends.
  Observer* observer_for(Observer* requested) { return ledger_->held(requested); }
  Connection& connection() const noexcept { return *connection_; }
  BoundClaim how() const noexcept { return how_; }

 private:
  using Ledger = ClaimLedger;
  static constexpr std::string_view who = Backend::name;

  static BoundClaim checked(BoundClaim how) {
    if (how == BoundClaim::record_last && !can_record_last) {
      throw InvalidArgument(
          fmt::format("{}::AsyncBoundStore: these Ops cannot claim record-last", who));
    }
    return how;
  }

  enum class Written { yes, superseded };

  // Whether a result may wait for the COMMIT of the transaction (AsyncTransactionWrites).
  bool may_defer() const noexcept { return writes_ != nullptr && writes_->defers; }

  // Writes the result waiting for the COMMIT, if any, before anything else is sent.
  net::awaitable<void> send_deferred() {
    if (may_defer()) (void)co_await writes_->send_deferred(*connection_, *ledger_, false, who);
  }

  // Records the result: the fenced UPDATE of a written claim, or the INSERT of a record-last
  // one, which answers superseded when it met another request's row (so noted in the ledger);
  // `deferrable` in a try of with_transaction, either waits for the COMMIT instead.
  // Throws LeaseLost when the claim is not held.
  net::awaitable<Written> write(const Key& key, const Ticket& ticket, std::string_view snapshot,
                                Status to, bool retryable, bool deferrable = true) {
    idem::detail::check_snapshot(snapshot);
    if constexpr (can_record_last) {
      if (std::optional<Record> done =
              speculative_.finish(who, key, ticket, to, snapshot, retryable)) {
        if constexpr (can_commit_with_record) {
          if (deferrable && may_defer()) {
            co_await send_deferred();
            writes_->deferred.emplace(typename AsyncTransactionWrites<Connection>::Deferred{
                key, ticket, [ops = ops_, r = std::move(*done)](Connection& c, bool with_commit) {
                  return with_commit ? ops->insert_finished_and_commit(c, r)
                                     : ops->insert_finished(c, r);
                }});
            co_return Written::yes;
          }
        }
        const bool inserted = co_await ops_->insert_finished(*connection_, *done);
        if (inserted) co_return Written::yes;
        ledger_->ended(key, ticket, Ledger::State::superseded);
        co_return Written::superseded;
      }
    }
    if constexpr (can_commit_with_result) {
      if (deferrable && may_defer()) {
        co_await send_deferred();
        writes_->deferred.emplace(typename AsyncTransactionWrites<Connection>::Deferred{
            key, ticket,
            [ops = ops_, key, ticket, snapshot = std::string(snapshot), to, retryable](
                Connection& c, bool with_commit) {
              return finish_held(*ops, c, key, ticket, snapshot, to, retryable, with_commit);
            }});
        co_return Written::yes;
      }
    }
    // (The answer is taken apart from the condition: GCC 12 miscompiles a throw after a
    // co_await inside an if's condition.)
    const bool held = co_await ops_->finish(*connection_, key, ticket, snapshot, to, retryable);
    if (!held) throw backend::lease_lost(who, key, ticket);
    co_return Written::yes;
  }

  // A written claim's result that waited for the COMMIT (with it, or alone): true, or LeaseLost
  // when the claim is not held (then nothing was committed).
  static net::awaitable<bool> finish_held(const Ops& ops, Connection& c, const Key& key,
                                          const Ticket& ticket, const std::string& snapshot,
                                          Status to, bool retryable, bool with_commit) {
    bool held = false;
    if (with_commit) {
      held = co_await ops.finish_and_commit(c, key, ticket, snapshot, to, retryable);
    } else {
      held = co_await ops.finish(c, key, ticket, snapshot, to, retryable);
    }
    if (!held) throw backend::lease_lost(who, key, ticket);
    co_return true;
  }

  net::awaitable<void> record(const Key& key, const Ticket& ticket, std::string_view snapshot,
                              Status to, bool retryable) {
    const Written written = co_await write(key, ticket, snapshot, to, retryable);
    if (written == Written::superseded) throw ledger_->superseded_error(who);
    ledger_->ended(key, ticket, Ledger::finished_state(to, retryable));
  }

  // A claim of the key and, acquired, its failure: the row stays locked by this transaction
  // until it commits, so the finish cannot be refused, and another request's claim or result
  // is left as it is. (A coroutine of its own, whose frame keeps its arguments.)
  static net::awaitable<void> count_failed_attempt(const Ops& ops, Connection& c, Key key,
                                                   std::string fingerprint, Options options,
                                                   std::string error, bool retryable) {
    const ClaimResult r = co_await idem::async::detail::claim_on(
        who, ops, c, key, fingerprint, options, idem::detail::new_owner_token(), true);
    if (r.verdict == Verdict::acquired) {
      (void)co_await ops.finish(c, key, r.record.ticket, error, Status::failed, retryable);
    }
  }

  const Ops* ops_;
  Connection* connection_;
  // On the heap so that a moved store keeps pointing at it.
  std::unique_ptr<Ledger> own_ = std::make_unique<Ledger>();
  Ledger* ledger_;
  AsyncTransactionWrites<Connection>* writes_;
  BoundClaim how_;
  SpeculativeClaims speculative_;
};

}  // namespace idem::same_transaction

IDEM_ASYNC_FRAMES_END
