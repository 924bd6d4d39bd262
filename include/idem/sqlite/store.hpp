#pragma once
// idem::sqlite::Store: the idempotency record table in a SQLite database file.
//
// Two modes, one decision table (idem/store/record_rules.hpp), as on MySQL:
//  - standalone (Store): every operation is its own autocommit statement on a pooled
//    connection. Use it when the business calls something outside this file (a payment
//    channel): the claim must be durable before the call, and its result recorded after.
//  - same transaction (Store::bind(connection) -> BoundStore): the operations run on the
//    caller's connection inside the caller's transaction, so claim + business writes + record
//    commit or roll back together. Duplicates wait for the write lock and then replay. Such a
//    transaction may commit only once every claim in it finished (BoundStore::committable());
//    pair it with idem::sqlite::with_transaction, which checks that before its COMMIT and
//    re-runs the body when the file stays locked.
//
// How a claim works: one INSERT on the primary key (never SELECT-then-INSERT). On
// SQLITE_CONSTRAINT_PRIMARYKEY the row is read and decide() judges it with the same `now`; a
// takeover is one UPDATE of the record take_over() computed, guarded by the old fence
// and owner token and the re-checked takeover condition. Completions are UPDATEs guarded by
// status, fence and owner. Every statement is atomic on its own, so many threads and several
// processes can share the file.
//
// Time: SQLite has no server clock, so `now` comes from StoreParams::clock (the system clock
// by default). Every process using one file must read the same clock: keep them on one host.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/detail/checks.hpp"
#include "idem/detail/claim_ledger.hpp"
#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/sqlite/connection.hpp"
#include "idem/sqlite/detail/record_sql.hpp"
#include "idem/sqlite/errors.hpp"
#include "idem/sqlite/pool.hpp"
#include "idem/sqlite/schema.hpp"
#include "idem/store.hpp"
#include "idem/store/record_rules.hpp"
#include "idem/store/retry.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem::sqlite {

struct StoreParams {
  // The record table; 1-64 characters of [A-Za-z0-9_$], optionally schema.table.
  std::string table = "idempotent_record";
  // Where `now` comes from. Inject a ManualClock to move time in tests. Processes sharing a
  // file must share the clock, i.e. run on one host.
  std::function<TimePoint()> clock = system_now;
  // How long a statement waits for another connection's lock (and a call for a free pooled
  // connection) before it fails with SQLITE_BUSY.
  std::chrono::milliseconds busy_timeout{5'000};
  // full: every commit is synced to disk (the default; a payment claim must survive a power
  // cut). normal: faster, but a power cut may lose the last commits.
  Synchronous synchronous = Synchronous::full;
  // Connections to the file at most (one per thread using the store at that moment).
  std::size_t pool_size = 8;
  // Tries per operation while the file stays locked (SQLITE_BUSY / SQLITE_LOCKED after the
  // busy timeout), and the jittered backoff between them; the last failure is thrown as a
  // retryable StoreError.
  RetryPolicy retry{.max_attempts = 4};
  // Create the table and its indexes (if missing) when the store is constructed.
  bool create_schema = true;
};

namespace detail {

// The operations on one connection, shared by both modes.
class RecordOps {
 public:
  RecordOps(const RecordSql& sql, const std::function<TimePoint()>& clock)
      : sql_(sql), clock_(clock) {}

  std::optional<Record> read(Connection& c, const Key& key) const {
    Rows rows = c.query(sql_.select, {key.id(), key.biz_type()});
    if (!rows.next()) return std::nullopt;
    return decode_record(rows);
  }

  ClaimResult claim(Connection& c, const Key& key, std::string_view fp, const Options& o) const {
    // No "is this row already mine?" shortcut: a statement that returned an error did not
    // happen, so a row can carry this call's token only if this call returned acquired.
    const std::string token = idem::detail::new_owner_token();
    constexpr int rounds = 16;  // each round loses only to another caller's completed write
    for (int round = 0; round < rounds; ++round) {
      const TimePoint now = clock_();
      const StepResult inserted =
          c.try_execute(sql_.insert, {key.id(), key.biz_type(), token, fp, millis(now + o.lease),
                                      millis(now), millis(now + o.ttl)});
      if (inserted.code == SQLITE_OK) {
        return {Verdict::acquired, claim_record(key, token, fp, now, o)};
      }
      if (inserted.code != SQLITE_CONSTRAINT_PRIMARYKEY) throw c.error("claim", inserted.code);
      std::optional<Record> stored = read(c, key);
      if (!stored) continue;  // purged between the INSERT and the read: insert again
      const Decision d = decide(*stored, fp, now);
      if (!is_takeover(d)) return {verdict_of(d), std::move(*stored)};
      Record next = take_over(*stored, d, fp, token, now, o);
      const std::string& sql =
          d == Decision::take_over_expired ? sql_.take_over_expired : sql_.take_over_retry;
      const auto changed =
          c.execute(sql, {static_cast<int>(next.status), next.ticket.fence, next.ticket.owner,
                          next.fingerprint, next.attempts, millis(next.lease_until),
                          millis(next.created_at), millis(next.updated_at), millis(next.expire_at),
                          key.id(), key.biz_type(), stored->ticket.fence, stored->ticket.owner});
      if (changed == 1) return {Verdict::acquired, std::move(next)};
      // Someone else moved the row on: look again.
    }
    throw StoreError(fmt::format("idem::sqlite: the claim on {}/{} did not settle after {} rounds",
                                 key.biz_type(), idem::detail::printable(key.id()), rounds),
                     true);
  }

  // The fenced UPDATE of complete/fail. Returns true if it changed the row.
  bool finish(Connection& c, const Key& key, const Ticket& t, std::string_view snapshot, Status to,
              bool retryable) const {
    return c.execute(sql_.finish,
                     {static_cast<int>(to), Value::blob(snapshot), stored_retryable(to, retryable),
                      millis(clock_()), key.id(), key.biz_type(), t.fence, t.owner}) == 1;
  }

  std::size_t purge(Connection& c, std::size_t batch, std::size_t max_batches) const {
    std::size_t total = 0;
    for (std::size_t i = 0; i < max_batches; ++i) {
      const auto n =
          static_cast<std::size_t>(c.execute(sql_.purge, {millis(clock_()), limit(batch)}));
      total += n;
      if (n < batch) break;
    }
    return total;
  }

  std::size_t release(Connection& c, std::size_t batch) const {
    return static_cast<std::size_t>(
        c.execute(sql_.release, {static_cast<int>(released_status), released_retryable,
                                 Value::blob(released_snapshot), millis(clock_()), limit(batch)}));
  }

 private:
  const RecordSql& sql_;
  const std::function<TimePoint()>& clock_;
};

[[noreturn]] inline void throw_lease_lost(const Key& key, const Ticket& t) {
  throw lease_lost("idem::sqlite", key, t);
}

}  // namespace detail

class BoundStore;

class Store {
 public:
  // Opens (creating it when missing) the database file at `path` and, unless
  // params.create_schema is false, creates the record table. Throws StoreError when the file
  // cannot be opened or is not a SQLite database, InvalidArgument for bad params.
  explicit Store(std::filesystem::path path, StoreParams params = {})
      : params_(checked(path, std::move(params))),
        name_(parse_table_name(params_.table)),
        table_(name_.quoted()),
        ddl_(record_table_ddl(name_)),
        sql_(detail::make_record_sql(name_)),
        pool_(std::move(path), ConnectionParams{params_.busy_timeout, params_.synchronous},
              params_.pool_size),
        ops_(sql_, params_.clock) {
    if (params_.create_schema) {
      ensure_schema();
    } else {
      // Open one connection now: a bad file should fail here, not at the first claim.
      with_retries("open", [](Connection&) { return 0; });
    }
  }

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Creates the record table and its indexes if they do not exist. Never alters a table.
  void ensure_schema() {
    with_retries("ensure_schema", [&](Connection& c) {
      c.exec("BEGIN IMMEDIATE");
      try {
        c.exec(ddl_);
        c.exec("COMMIT");
      } catch (...) {
        try {
          c.exec("ROLLBACK");
        } catch (...) {
        }
        throw;
      }
      return 0;
    });
  }

  ClaimResult claim(const Key& key, std::string_view fingerprint, const Options& options) {
    validate(options);
    idem::detail::check_fingerprint(fingerprint);
    return with_retries("claim",
                        [&](Connection& c) { return ops_.claim(c, key, fingerprint, options); });
  }

  void complete(const Key& key, const Ticket& ticket, std::string_view snapshot) {
    finish(key, ticket, snapshot, Status::succeeded, false);
  }

  void fail(const Key& key, const Ticket& ticket, std::string_view error, bool retryable) {
    finish(key, ticket, error, Status::failed, retryable);
  }

  std::optional<Record> find(const Key& key) {
    return with_retries("find", [&](Connection& c) { return ops_.read(c, key); });
  }

  std::size_t purge_expired(std::size_t batch, std::size_t max_batches) {
    if (batch == 0 || max_batches == 0) return 0;
    return with_retries("purge_expired",
                        [&](Connection& c) { return ops_.purge(c, batch, max_batches); });
  }

  std::size_t release_stale(std::size_t batch) {
    if (batch == 0) return 0;
    return with_retries("release_stale", [&](Connection& c) { return ops_.release(c, batch); });
  }

  // The same store on a connection of yours (or of pool()), inside the transaction open on
  // it. The store must outlive the BoundStore.
  BoundStore bind(Connection& connection) const;
  // The same on your own sqlite3* handle; the BoundStore caches its prepared statements and
  // must be destroyed before you close the handle.
  BoundStore bind(sqlite3* db) const;

  // The quoted table name, e.g. "idempotent_record".
  const std::string& table() const noexcept { return table_; }
  const std::filesystem::path& path() const noexcept { return pool_.path(); }
  // The store's connections; use them for business statements on the same file, or with
  // idem::sqlite::with_transaction.
  Pool& pool() noexcept { return pool_; }
  TimePoint now() const { return params_.clock(); }

 private:
  friend class BoundStore;

  static StoreParams checked(const std::filesystem::path& path, StoreParams p) {
    if (path.empty() || path == ":memory:") {
      throw InvalidArgument(
          "idem::sqlite::Store: needs a database file (an in-memory database is private to one "
          "connection; use idem::MemoryStore instead)");
    }
    if (!p.clock) throw InvalidArgument("idem::sqlite::Store: clock must not be empty");
    if (p.pool_size == 0)
      throw InvalidArgument("idem::sqlite::Store: pool_size must be at least 1");
    if (p.busy_timeout < std::chrono::milliseconds::zero())
      throw InvalidArgument("idem::sqlite::Store: busy_timeout must not be negative");
    validate(p.retry, "idem::sqlite::Store");
    return p;
  }

  void finish(const Key& key, const Ticket& ticket, std::string_view snapshot, Status to,
              bool retryable) {
    idem::detail::check_snapshot(snapshot);
    // A statement that failed did not happen (no lost replies as over a network), so a retry
    // can simply send the same fenced UPDATE again.
    const bool done = with_retries("record", [&](Connection& c) {
      return ops_.finish(c, key, ticket, snapshot, to, retryable);
    });
    if (!done) detail::throw_lease_lost(key, ticket);
  }

  // Runs op on a pooled connection; while the file stays locked (a retryable StoreError after
  // the busy timeout), backs off and tries again, up to max_attempts.
  template <class Op>
  auto with_retries(std::string_view what, Op&& op) -> decltype(op(std::declval<Connection&>())) {
    return retry(
        params_.retry, "idem::sqlite", what,
        [&](int) {
          auto handle = pool_.acquire();
          return op(*handle);
        },
        [](const StoreError& e, int) {
          if (!e.retryable()) throw;
        });
  }

  StoreParams params_;
  TableName name_;
  std::string table_;
  std::string ddl_;
  detail::RecordSql sql_;  // the store is not movable: RecordOps and BoundStores refer to it
  Pool pool_;
  detail::RecordOps ops_;
};

// A Store bound to one connection and the transaction open on it. Nothing is retried here: a
// busy failure inside the caller's transaction means the transaction must run again, which is
// the caller's (or with_transaction's) call. Inside a write transaction SQLite reads the
// latest committed state, so no locking reads are needed.
//
// As on MySQL, every claim it acquires is noted in the transaction's ClaimLedger: commit only
// when committable() (each claim succeeded or failed permanently); otherwise roll back, or
// the redelivery would run the business again on top of this transaction's writes.
class BoundStore {
 public:
  // Store failures roll back the caller's transaction; the guard reports them as
  // EventKind::transaction_error (idem/observer.hpp).
  static constexpr bool in_caller_transaction = true;

  BoundStore(const Store& store, Connection& connection)
      : ops_(&store.ops_),
        connection_(&connection),
        ledger_(idem::detail::ledger_for(connection.native(), *own_)) {}
  BoundStore(const Store& store, sqlite3* db)
      : ops_(&store.ops_),
        borrowed_(std::make_unique<Connection>(db)),
        connection_(borrowed_.get()),
        ledger_(idem::detail::ledger_for(borrowed_->native(), *own_)) {}

  BoundStore(BoundStore&&) noexcept = default;
  BoundStore& operator=(BoundStore&&) noexcept = default;

  ClaimResult claim(const Key& key, std::string_view fingerprint, const Options& options) {
    validate(options);
    idem::detail::check_fingerprint(fingerprint);
    if (sqlite3_get_autocommit(connection_->native()) != 0) {
      throw UsageError(
          "idem::sqlite::BoundStore: no transaction is open on the connection (BEGIN IMMEDIATE "
          "first): the claim would commit on its own");
    }
    ledger_->claiming(options.observer);
    ClaimResult r = ops_->claim(*connection_, key, fingerprint, options);
    if (r.verdict == Verdict::acquired) ledger_->claimed(r.record.key, r.record.ticket);
    return r;
  }

  void complete(const Key& key, const Ticket& ticket, std::string_view snapshot) {
    idem::detail::check_snapshot(snapshot);
    if (!ops_->finish(*connection_, key, ticket, snapshot, Status::succeeded, false))
      detail::throw_lease_lost(key, ticket);
    ledger_->ended(key, ticket, Ledger::State::succeeded);
  }

  void fail(const Key& key, const Ticket& ticket, std::string_view error, bool retryable) {
    idem::detail::check_snapshot(error);
    if (!ops_->finish(*connection_, key, ticket, error, Status::failed, retryable))
      detail::throw_lease_lost(key, ticket);
    ledger_->ended(key, ticket, retryable ? Ledger::State::retryable : Ledger::State::failed);
  }

  // See idem::mysql::BoundStore::abandon.
  void abandon(const Key& key, const Ticket& ticket, std::string_view error) {
    ledger_->ended(key, ticket, Ledger::State::abandoned);
    if (!ops_->finish(*connection_, key, ticket, error, Status::failed, true))
      detail::throw_lease_lost(key, ticket);
  }

  std::optional<Record> find(const Key& key) { return ops_->read(*connection_, key); }

  std::size_t purge_expired(std::size_t batch, std::size_t max_batches) {
    return batch == 0 ? 0 : ops_->purge(*connection_, batch, max_batches);
  }
  std::size_t release_stale(std::size_t batch) {
    return batch == 0 ? 0 : ops_->release(*connection_, batch);
  }

  // Whether the transaction may commit now (see idem::mysql::BoundStore::committable).
  bool committable() const noexcept { return ledger_->committable(); }
  // Throws UsageError naming the claim that forbids the commit; call it before your COMMIT.
  void check_committable() const {
    if (!committable())
      throw UsageError("idem::sqlite: do not commit this transaction: " + ledger_->why());
  }
  void set_rollback_only() noexcept { ledger_->set_rollback_only(); }

  Connection& connection() const noexcept { return *connection_; }

 private:
  using Ledger = idem::detail::ClaimLedger;

  const detail::RecordOps* ops_;
  std::unique_ptr<Connection> borrowed_;  // set when bound to a raw sqlite3*
  Connection* connection_;
  // Outside with_transaction the claims are this store's (one bind per transaction); on the
  // heap so that a moved BoundStore keeps pointing at it.
  std::unique_ptr<Ledger> own_ = std::make_unique<Ledger>();
  Ledger* ledger_;
};

inline BoundStore Store::bind(Connection& connection) const {
  return BoundStore(*this, connection);
}

inline BoundStore Store::bind(sqlite3* db) const {
  return BoundStore(*this, db);
}

static_assert(idem::Store<Store>);
static_assert(idem::Store<BoundStore>);

}  // namespace idem::sqlite
