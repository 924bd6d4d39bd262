#pragma once
// The bound (same-transaction) store of an SQL backend, over the store skeleton
// (idem/backend/store_skeleton.hpp): the claims of one transaction on the caller's connection, with
// the claim ledger that says when it may commit, and the two ways of claiming (BoundClaim).
// Its Backend also says:
//
//   struct Backend {
//     ...                                  // as idem/backend/store_skeleton.hpp asks
//     using Native = ...;                  // Connection(Native*) borrows a caller's handle
//     static constexpr bool bound_supports_wait = ...;  // see idem/optional_operations.hpp
//     static constexpr std::string_view begin_hint = "START TRANSACTION";  // for the error
//     static bool in_transaction(Connection&);
//   };
//
// and its Ops, for BoundClaim::record_last:
//   RecordProbe probe(c, key)           a non-locking read: the row, if any, and the store's now
//   bool insert_finished(c, record)     INSERTs a finished record (its updated_at: the store's
//                                       now at the INSERT); false: the key exists
// and optionally, to send that INSERT with with_transaction's COMMIT (the Connection then
// also says bool borrowed(): a handle of the caller's):
//   bool insert_finished_and_commit(c, record)  the same and COMMIT, as one round trip; false:
//                                               the key exists, and nothing was committed
// and, to send a written claim's result and a step's recovery points with it too:
//   bool finish_and_commit(c, key, ticket, snapshot, to, retryable)
//   bool write_points_and_commit(c, key, ticket, before, after)
//                                    the guarded UPDATE and COMMIT as one round trip; false:
//                                    the guard matched no row, and nothing was committed
//
// tests/backend/store_skeleton_test.cpp drives it through a scripted backend, without a server.

#include <concepts>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/backend/housekeeping.hpp"
#include "idem/backend/record_rules.hpp"
#include "idem/backend/steps.hpp"
#include "idem/backend/store_skeleton.hpp"
#include "idem/bound_claim.hpp"
#include "idem/detail/checks.hpp"
#include "idem/detail/recovery_points.hpp"
#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/observer.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/repair.hpp"
#include "idem/same_transaction/claim_ledger.hpp"
#include "idem/same_transaction/speculative_claims.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem::same_transaction {

// A store bound to one connection and the transaction open on it. Nothing is retried here:
// a failure rolls back the caller's whole transaction, so the caller (or with_transaction)
// must run the transaction again.
//
// Every claim it acquires is noted in the connection's ClaimLedger with how it ended. The
// transaction may commit only when committable(): each claim succeeded or failed
// permanently. A claim still processing, abandoned by its guard or failed retryably must be
// rolled back with the business writes beside it, or the redelivery would run the business
// again on top of them (see docs/design.md, "A bound claim commits only a finished request").
//
// With BoundClaim::record_last a fresh claim writes nothing: the store keeps it until its
// result is INSERTed as the finished record. A takeover of an existing row is written first,
// under the row's lock, as with claim_first. Inside with_transaction, where the Ops can, that
// INSERT waits in the ledger and travels with the COMMIT (one round trip fewer); the store's
// next claim or read on the connection writes it first, so that it sees its own record.
// Where the Ops can, the last guarded UPDATE of a try (a written claim's result, a step's
// recovery points) waits the same way.
template <class Backend>
class BoundSqlStore {
 public:
  using Connection = typename Backend::Connection;
  using Ops = typename Backend::Ops;

  static constexpr bool supports_wait = Backend::bound_supports_wait;
  // Store failures roll back the caller's transaction; the guard reports them as
  // EventKind::transaction_error (idem/observer.hpp).
  static constexpr bool in_caller_transaction = true;
  // Whether the backend's Ops can claim record-last.
  static constexpr bool can_record_last =
      requires(const Ops& ops, Connection& c, const Key& key, const Record& r) {
    { ops.probe(c, key) } -> std::same_as<RecordProbe>;
    { ops.insert_finished(c, r) } -> std::same_as<bool>;
  };
  // Whether the backend's Ops can send a finished record with the COMMIT.
  static constexpr bool can_commit_with_record =
      requires(const Ops& ops, Connection& c, const Record& r) {
    { ops.insert_finished_and_commit(c, r) } -> std::same_as<bool>;
  };
  // Whether they can send a written claim's result, and a step's recovery points, with it.
  static constexpr bool can_commit_with_writes =
      requires(const Ops& ops, Connection& c, const Key& k, const Ticket& t, std::string_view v,
               Status to, bool flag) {
    { ops.finish_and_commit(c, k, t, v, to, flag) } -> std::same_as<bool>;
    { ops.write_points_and_commit(c, k, t, v, v) } -> std::same_as<bool>;
  };

  // On a connection of the store's kind, or on the caller's own handle (borrowed, see the
  // backend's Connection). `ops` (the store's) must outlive this.
  BoundSqlStore(const Ops& ops, Connection& connection, BoundClaim how = BoundClaim::claim_first)
      : ops_(&ops),
        connection_(&connection),
        ledger_(same_transaction::ledger_for(connection.native(), *own_)),
        how_(checked(how)) {}
  BoundSqlStore(const Ops& ops, typename Backend::Native* native,
                BoundClaim how = BoundClaim::claim_first)
      : ops_(&ops),
        borrowed_(std::make_unique<Connection>(native)),
        connection_(borrowed_.get()),
        ledger_(same_transaction::ledger_for(borrowed_->native(), *own_)),
        how_(checked(how)) {}

  BoundSqlStore(BoundSqlStore&&) noexcept = default;
  BoundSqlStore& operator=(BoundSqlStore&&) noexcept = default;

  ClaimResult claim(const Key& key, std::string_view fingerprint, const Options& options) {
    validate(options);
    detail::check_fingerprint(fingerprint);
    if (!Backend::in_transaction(*connection_)) {
      throw UsageError(fmt::format(
          "{}::BoundStore: no transaction is open on the connection ({} first): the claim "
          "would commit on its own",
          Backend::name, Backend::begin_hint));
    }
    send_deferred();  // the read below must see the record a claim before it finished
    ledger_->claiming(options);
    ClaimResult r = how_ == BoundClaim::record_last ? claim_last(key, fingerprint, options)
                                                    : claim_first(key, fingerprint, options);
    if (r.verdict == Verdict::acquired) ledger_->claimed(r.record.key, r.record.ticket);
    return r;
  }

  // Throws LeaseLost when the claim is no longer held, and a retryable StoreError when a
  // record-last claim was superseded (the transaction must roll back and run again).
  void complete(const Key& key, const Ticket& ticket, std::string_view snapshot) {
    record(key, ticket, snapshot, Status::succeeded, false);
  }

  void fail(const Key& key, const Ticket& ticket, std::string_view error, bool retryable) {
    record(key, ticket, error, Status::failed, retryable);
  }

  // What an IdempotencyGuard destroyed without a result calls: noted as abandoned (before
  // anything is sent, so even a failed write leaves the transaction uncommittable), then
  // recorded as a retryable failure in case the caller commits anyway. A record-last claim
  // whose write was already tried records nothing more; one that turns out superseded is
  // noted so, without an error: the transaction's runner runs it again.
  void abandon(const Key& key, const Ticket& ticket, std::string_view error) {
    ledger_->ended(key, ticket, Ledger::State::abandoned);
    if (speculative_.sent(key, ticket)) return;
    // Written at once, not with the COMMIT: a speculative body that failed on the first
    // request's writes learns here that it was superseded, and the try runs again.
    (void)write(key, ticket, error, Status::failed, true, false);
  }

  // The stored row: a record-last claim that has not finished has none yet.
  std::optional<Record> find(const Key& key) {
    send_deferred();
    auto row = ops_->read(*connection_, key, false);
    if (!row) return std::nullopt;
    return std::move(row->record);
  }

  // A step's result kept with the key, in this transaction (idem/attempt.hpp): it commits or
  // rolls back with the business writes beside it. A record-last claim keeps it until its
  // finished record is INSERTed.
  std::string record_step(const Key& key, const Ticket& ticket, std::string_view step,
                          std::string_view result,
                          std::optional<std::string_view> known = std::nullopt) requires
      requires(const Ops& ops, Connection& c, const Key& k, const Ticket& t, std::string_view v) {
    { ops.write_points(c, k, t, v, v) } -> std::same_as<bool>;
  }
  {
    if (auto points = speculative_.record_step(Backend::name, key, ticket, step, result)) {
      return std::move(*points);
    }
    send_deferred();
    if constexpr (can_commit_with_writes) {
      // A write guarded by known points waits for the COMMIT; refused there, the try runs
      // again, and Attempt::step reads the points this time (idem::detail::local_step_start).
      if (known && may_defer()) {
        backend::StepSteps steps(Backend::name, key, ticket, step, result, known);
        if (steps.start() == backend::StepSteps::Step::write) {
          std::string after = steps.after();
          ledger_->defer(
              {key, ticket,
               [ops = ops_, c = connection_, key, ticket, before = steps.before(),
                after](bool with_commit) {
                 if (with_commit ? ops->write_points_and_commit(*c, key, ticket, before, after)
                                 : ops->write_points(*c, key, ticket, before, after)) {
                   return true;
                 }
                 throw StoreError(
                     fmt::format("{}: a recovery point of {}/{} was refused: the claim "
                                 "moved on or its points changed; the transaction "
                                 "runs again and reads them",
                                 Backend::name, key.biz_type(), detail::printable(key.id())),
                     true);
               }});
          return after;
        }
      }
    }
    return backend::record_step_on(Backend::name, *ops_, *connection_, key, ticket, step, result,
                                   true, known);
  }

  // A fenced repair (idem/repair.hpp) in this transaction.
  Record repair(const Key& key, const Repair& repair) requires
      requires(const Ops& ops, Connection& c, const Record& r, const Ticket& t) {
    { ops.write_repair(c, r, t) } -> std::same_as<bool>;
  }
  {
    validate(repair);
    send_deferred();
    return backend::repair_on(Backend::name, *ops_, *connection_, key, repair,
                              detail::new_owner_token(), true);
  }

  std::size_t purge_expired(std::size_t batch, std::size_t max_batches) {
    send_deferred();
    backend::HousekeepingBatches purge(batch, max_batches);
    while (purge.more())
      purge.done(ops_->purge(*connection_, batch));
    return purge.total();
  }
  std::size_t release_stale(std::size_t batch) {
    send_deferred();
    backend::HousekeepingBatches release(batch, 1);
    if (release.more()) release.done(ops_->release(*connection_, batch));
    return release.total();
  }

  // Whether the transaction may commit now: every claim noted on this connection since the
  // transaction began succeeded or failed permanently. false after a retryable failure (roll
  // back: the redelivery runs the request afresh), after an abandoned or unfinished claim, and
  // after a superseded record-last claim (roll back and run the transaction again).
  bool committable() const noexcept { return ledger_->committable(); }
  // Throws UsageError naming the claim that forbids the commit; call it before your COMMIT.
  void check_committable() const { ledger_->check_committable(Backend::name); }
  // Marks the transaction as one to roll back whatever its claims say (see ClaimLedger).
  void set_rollback_only() noexcept { ledger_->set_rollback_only(); }
  // Runs f once with_transaction's try that this store is bound in has committed, and answers
  // true; false (f dropped) in a transaction of the caller's own, whose commit nobody reports.
  // Attempt::complete learns so that its record is written.
  bool after_commit(std::function<void()> f) {
    if (!ledger_commits()) return false;
    ledger_->after_commit(std::move(f));
    return true;
  }

  // Counts a failed attempt of `key` although its claim rolls back with the business's writes:
  // once with_transaction's try has rolled back, a claim of the key and its failure (`error`,
  // `retryable`) are written in a transaction of their own on the connection. Nothing is
  // written when another request holds or finished the key by then (theirs to record).
  // false, with nothing to come, in a transaction of the caller's own, whose rollback nobody
  // reports.
  bool fail_after_rollback(const Key& key, std::string_view fingerprint, const Options& options,
                           std::string error, bool retryable) {
    if (!ledger_commits()) return false;
    validate(options);
    detail::check_fingerprint(fingerprint);
    detail::check_snapshot(error);
    auto write = [ops = ops_, key, fp = std::string(fingerprint), options, error = std::move(error),
                  retryable](Connection& c) {
      const ClaimResult r = backend::claim_on(Backend::name, *ops, c, key, fp, options,
                                              detail::new_owner_token(), true);
      // The row stays locked by this transaction until it commits: the finish cannot be
      // refused, and another request's claim or result is left as it is.
      if (r.verdict == Verdict::acquired) {
        (void)ops->finish(c, key, r.record.ticket, error, Status::failed, retryable);
      }
    };
    if (borrowed_ != nullptr) {
      // The Connection borrowing the caller's handle is this store's, which may be gone by
      // then.
      ledger_->after_rollback([write = std::move(write), native = connection_->native()] {
        Connection c(native);
        write(c);
      });
    } else {
      ledger_->after_rollback([write = std::move(write), c = connection_] { write(*c); });
    }
    return true;
  }

  // The observer a guard on this store reports to: in with_transaction's try, one that holds
  // the events until the try ends (ClaimLedger::held); otherwise `requested` itself.
  Observer* observer_for(Observer* requested) { return ledger_->held(requested); }

  Connection& connection() const noexcept { return *connection_; }
  BoundClaim how() const noexcept { return how_; }

 private:
  using Ledger = same_transaction::ClaimLedger;

  static BoundClaim checked(BoundClaim how) {
    if (how == BoundClaim::record_last && !can_record_last) {
      throw InvalidArgument(
          fmt::format("{}::BoundStore: this backend cannot claim record-last", Backend::name));
    }
    return how;
  }

  ClaimResult claim_first(const Key& key, std::string_view fingerprint, const Options& options) {
    return backend::claim_on(Backend::name, *ops_, *connection_, key, fingerprint, options,
                             detail::new_owner_token(), true);
  }

  // Decided on a non-locking read, as SpeculativeClaims::claim says.
  ClaimResult claim_last(const Key& key, std::string_view fingerprint, const Options& options) {
    if constexpr (can_record_last) {
      if (auto answer = speculative_.claim(key, fingerprint, options, detail::new_owner_token(),
                                           ops_->probe(*connection_, key))) {
        return std::move(*answer);
      }
    }
    return claim_first(key, fingerprint, options);
  }

  // Whether the ledger is a with_transaction try's, which sends what waits in it with its
  // COMMIT (a transaction of the caller's own has this store's ledger, and waits for nothing).
  bool ledger_commits() const noexcept { return ledger_ != own_.get(); }

  void send_deferred() {
    if (ledger_commits()) ledger_->send_deferred(false, Backend::name);
  }

  // Whether a write may wait for with_transaction's COMMIT. Not on a borrowed handle: the
  // Connection borrowing it (this store's own, or one the caller made) may be gone by then.
  bool may_defer() const noexcept {
    if constexpr (requires { connection_->borrowed(); }) {
      return ledger_commits() && !connection_->borrowed();
    } else {
      return false;
    }
  }

  enum class Written { yes, superseded };

  // Records the result: the fenced UPDATE of a written claim, or the INSERT of a record-last
  // one, which answers superseded when it met another request's row (so noted in the
  // ledger), or, `deferrable` inside with_transaction, leaves that INSERT (or the fenced
  // UPDATE, where the Ops can) for the COMMIT.
  // Throws LeaseLost when the claim is not held.
  Written write(const Key& key, const Ticket& ticket, std::string_view snapshot, Status to,
                bool retryable, bool deferrable = true) {
    detail::check_snapshot(snapshot);
    if constexpr (can_record_last) {
      if (std::optional<Record> finished =
              speculative_.finish(Backend::name, key, ticket, to, snapshot, retryable)) {
        Record done = std::move(*finished);
        if constexpr (can_commit_with_record) {
          if (deferrable && may_defer()) {
            send_deferred();
            ledger_->defer(
                {key, ticket, [ops = ops_, c = connection_, r = std::move(done)](bool with_commit) {
                   return with_commit ? ops->insert_finished_and_commit(*c, r)
                                      : ops->insert_finished(*c, r);
                 }});
            return Written::yes;
          }
        }
        if (ops_->insert_finished(*connection_, done)) return Written::yes;
        ledger_->ended(key, ticket, Ledger::State::superseded);
        return Written::superseded;
      }
    }
    if constexpr (can_commit_with_writes) {
      // The fenced UPDATE waits for the COMMIT; refused there, the claim is not held.
      if (deferrable && may_defer()) {
        send_deferred();
        ledger_->defer({key, ticket,
                        [ops = ops_, c = connection_, key, ticket, snapshot = std::string(snapshot),
                         to, retryable](bool with_commit) {
                          if (with_commit
                                  ? ops->finish_and_commit(*c, key, ticket, snapshot, to, retryable)
                                  : ops->finish(*c, key, ticket, snapshot, to, retryable)) {
                            return true;
                          }
                          throw backend::lease_lost(Backend::name, key, ticket);
                        }});
        return Written::yes;
      }
    }
    if (!ops_->finish(*connection_, key, ticket, snapshot, to, retryable)) {
      throw backend::lease_lost(Backend::name, key, ticket);
    }
    return Written::yes;
  }

  void record(const Key& key, const Ticket& ticket, std::string_view snapshot, Status to,
              bool retryable) {
    if (write(key, ticket, snapshot, to, retryable) == Written::superseded) {
      throw ledger_->superseded_error(Backend::name);
    }
    ledger_->ended(key, ticket, Ledger::finished_state(to, retryable));
  }

  const Ops* ops_;
  std::unique_ptr<Connection> borrowed_;  // set when bound to the caller's own handle
  Connection* connection_;
  // Outside with_transaction the claims are this store's (one bind per transaction); on the
  // heap so that a moved BoundSqlStore keeps pointing at it.
  std::unique_ptr<Ledger> own_ = std::make_unique<Ledger>();
  Ledger* ledger_;
  BoundClaim how_;
  SpeculativeClaims speculative_;
};

}  // namespace idem::same_transaction
