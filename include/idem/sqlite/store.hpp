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
// SQLITE_CONSTRAINT_PRIMARYKEY the row is read and decide() judges it with the clock's `now`; a
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
#include <vector>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/detail/checks.hpp"
#include "idem/detail/claim_ledger.hpp"
#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/sqlite/connection.hpp"
#include "idem/sqlite/detail/record_sql.hpp"
#include "idem/sqlite/errors.hpp"
#include "idem/sqlite/pool.hpp"
#include "idem/sqlite/schema.hpp"
#include "idem/sqlite/schema_check.hpp"
#include "idem/store.hpp"
#include "idem/store/abilities.hpp"
#include "idem/store/record_rules.hpp"
#include "idem/store/retry.hpp"
#include "idem/store/sql_store.hpp"
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
  // Create (or migrate) the table and its indexes when the store is constructed, and check the
  // result (ensure_schema).
  bool create_schema = true;
  // With create_schema false: check the table (check_schema) once, on the store's first
  // operation, so that a table not as idem expects fails with SchemaMismatch before any claim.
  // false: the caller checks it. Stores bound to a caller's connection do not check by
  // themselves.
  bool check_table = true;
};

namespace detail {

// The record operations on one connection, shared by both modes (see
// idem/store/sql_store.hpp). Inside a write transaction SQLite reads the latest committed
// state, so `bound` changes nothing here.
class RecordOps {
 public:
  RecordOps(const TableName& table, std::function<TimePoint()> clock)
      : table_(table), sql_(make_record_sql(table)), clock_(std::move(clock)) {}

  std::optional<RecordRead> read(Connection& c, const Key& key, bool /*bound*/) const {
    const TimePoint now = clock_();
    Rows rows = c.query(sql_.select, {key.id(), key.biz_type()});
    if (!rows.next()) return std::nullopt;
    Record read = decode_record(rows);
    require_key_read("idem::sqlite", key, read);
    return RecordRead{std::move(read), now};
  }

  // The fresh claim, or nullopt when the key exists (SQLITE_CONSTRAINT_PRIMARYKEY).
  std::optional<Record> insert(Connection& c, const Key& key, std::string_view fp, const Options& o,
                               const std::string& token, bool /*bound*/) const {
    const TimePoint now = clock_();
    Record fresh = claim_record(key, token, fp, now, o);
    const StepResult inserted =
        c.try_execute(sql_.insert, {key.id(), key.biz_type(), token, fp, millis(fresh.lease_until),
                                    millis(now), millis(fresh.expire_at)});
    if (inserted.code == SQLITE_OK) return fresh;
    if (inserted.code != SQLITE_CONSTRAINT_PRIMARYKEY) throw c.error("claim", inserted.code);
    return std::nullopt;
  }

  // `next` is take_over() of the row read: a retry keeps that row's recovery points, so they
  // guard the write too (see make_record_sql).
  bool write_takeover(Connection& c, Decision d, const Record& next, const Ticket& read) const {
    if (d == Decision::take_over_expired) {
      return c.execute(sql_.take_over_expired,
                       {static_cast<int>(next.status), next.ticket.fence, next.ticket.owner,
                        next.fingerprint, next.attempts, millis(next.lease_until),
                        millis(next.created_at), millis(next.updated_at), millis(next.expire_at),
                        next.key.id(), next.key.biz_type(), read.fence, read.owner}) == 1;
    }
    return c.execute(
               sql_.take_over_retry,
               {static_cast<int>(next.status), next.ticket.fence, next.ticket.owner,
                next.fingerprint, next.attempts, millis(next.lease_until), millis(next.created_at),
                millis(next.updated_at), millis(next.expire_at), next.key.id(), next.key.biz_type(),
                read.fence, read.owner, Value::blob(next.recovery_points)}) == 1;
  }

  // The fenced UPDATE of complete/fail. Returns true if it changed the row.
  bool finish(Connection& c, const Key& key, const Ticket& t, std::string_view snapshot, Status to,
              bool retryable) const {
    return c.execute(sql_.finish,
                     {static_cast<int>(to), Value::blob(snapshot), stored_retryable(to, retryable),
                      millis(clock_()), key.id(), key.biz_type(), t.fence, t.owner}) == 1;
  }

  std::size_t purge(Connection& c, std::size_t batch) const {
    return static_cast<std::size_t>(c.execute(sql_.purge, {millis(clock_()), limit(batch)}));
  }

  std::size_t release(Connection& c, std::size_t batch) const {
    return static_cast<std::size_t>(
        c.execute(sql_.release, {static_cast<int>(released_status), released_retryable,
                                 Value::blob(released_snapshot), millis(clock_()), limit(batch)}));
  }

  // Writes repaired() over the row read, while it still carries the ticket read. True when it
  // did.
  bool write_repair(Connection& c, const Record& next, const Ticket& read) const {
    return c.execute(sql_.repair,
                     {static_cast<int>(next.status), next.ticket.fence, next.ticket.owner,
                      nullable_blob(next.snapshot), next.retryable, millis(next.updated_at),
                      millis(next.expire_at), nullable_text(next.repair_reason),
                      next.repaired_at ? Value(millis(*next.repaired_at)) : Value(nullptr),
                      next.key.id(), next.key.biz_type(), read.fence, read.owner}) == 1;
  }

  // Replaces the recovery points `before` (as read) with `after` while `held` holds. True when
  // it did; false when the claim is gone or the points moved on (StepSteps reads again).
  bool write_points(Connection& c, const Key& key, const Ticket& held, std::string_view before,
                    std::string_view after) const {
    return c.execute(sql_.points, {Value::blob(after), millis(clock_()), key.id(), key.biz_type(),
                                   held.fence, held.owner, Value::blob(before)}) == 1;
  }

  RecordStats stats(Connection& c) const {
    RecordStats stats{.now = clock_()};
    Rows counts = c.query(counts_sql(table_), {});
    while (counts.next()) {
      const std::int64_t status = integer_column(counts, 1, "status");
      if (status < 0 || status > static_cast<std::int64_t>(Status::outcome_unknown)) {
        throw CorruptRecord(
            fmt::format("idem::sqlite: column status holds an unknown status {}", status));
      }
      stats.counts.push_back({.biz_type = text_column(counts, 0, "biz_type"),
                              .status = static_cast<Status>(status),
                              .records = static_cast<std::uint64_t>(counts.integer(2))});
    }
    Rows totals = c.query(totals_sql(table_), {millis(stats.now)});
    if (totals.next()) {
      stats.purge_backlog = static_cast<std::uint64_t>(totals.integer(0));
      stats.stale_claims = static_cast<std::uint64_t>(totals.integer(1));
      if (!totals.is_null(2)) stats.oldest_stale_lease = TimePoint{Duration{totals.integer(2)}};
    }
    try {
      const std::string_view schema =
          table_.schema.empty() ? std::string_view("main") : std::string_view(table_.schema);
      Rows size = c.query(size_sql(table_), {schema, std::string_view(table_.table)});
      if (size.next() && !size.is_null(0))
        stats.table_bytes = static_cast<std::uint64_t>(size.integer(0));
    } catch (const StoreError&) {
      // A SQLite without the dbstat table: the size stays unknown.
    }
    return stats;
  }

  std::vector<Record> list(Connection& c, const RecordQuery& query) const {
    std::vector<Value> params;
    const std::string sql = list_sql(table_, query, clock_(), params);
    std::vector<Record> found;
    Rows rows = c.query(sql, params);
    while (rows.next())
      found.push_back(decode_record(rows));
    return found;
  }

 private:
  // NULL for none, so that the columns read as "never" in the shell too.
  static Value nullable_blob(std::string_view bytes) noexcept {
    return bytes.empty() ? Value(nullptr) : Value::blob(bytes);
  }
  static Value nullable_text(std::string_view text) noexcept {
    return text.empty() ? Value(nullptr) : Value(text);
  }

  TableName table_;
  RecordSql sql_;  // built once, when the store is made
  std::function<TimePoint()> clock_;
};

// idem::sqlite for the store skeleton (idem/store/skeleton.hpp, idem/store/sql_store.hpp).
struct Backend : BackendTypes<sqlite::Connection, sqlite3, sqlite::Pool, RecordOps> {
  static constexpr std::string_view name = "idem::sqlite";
  static constexpr bool bound_supports_wait = true;
  static constexpr std::string_view begin_hint = "BEGIN IMMEDIATE";

  // A statement that failed did not happen (no lost replies as over a network): a busy or
  // locked file is retried, and a retry may simply send the same statement again.
  static FailureKind classify(const StoreError& e) noexcept {
    return e.retryable() ? FailureKind::transient : FailureKind::fatal;
  }
  static bool in_transaction(const Connection& c) noexcept {
    return sqlite3_get_autocommit(c.native()) == 0;
  }
};

}  // namespace detail

// A Store bound to one connection and the transaction open on it (see BoundSqlStore). A busy
// failure inside the caller's transaction means the transaction must run again, which is the
// caller's (or with_transaction's) call.
using BoundStore = BoundSqlStore<detail::Backend>;

class Store : public StoreSkeleton<detail::Backend> {
 public:
  // Opens (creating it when missing) the database file at `path` and, unless
  // params.create_schema is false, creates or migrates the record table and checks it
  // (ensure_schema). Throws StoreError when the file cannot be opened or is not a SQLite
  // database, SchemaMismatch when the table is not what idem expects, InvalidArgument for bad
  // params.
  explicit Store(std::filesystem::path path, StoreParams params = {})
      : StoreSkeleton(detail::RecordOps(parse_table_name(params.table), params.clock),
                      params.retry),
        params_(checked(path, std::move(params))),
        name_(parse_table_name(params_.table)),
        table_(name_.quoted()),
        ddl_(record_table_ddl(name_)),
        pool_(std::move(path), ConnectionParams{params_.busy_timeout, params_.synchronous},
              params_.pool_size) {
    attach(&pool_);
    if (params_.create_schema) {
      ensure_schema();  // and checks the table: a bad one fails here, not at the first claim
    } else {
      // Open one connection now: a bad file should fail here, not at the first claim. The table
      // may not exist yet (the caller's to create or migrate): it is checked at first use.
      with_retries_unchecked("open", [](Connection&, bool) { return 0; });
      if (params_.check_table) {
        check_table_first([this](Connection& c) { check_record_table(c, name_); });
      }
    }
  }

  // Creates the record table and its indexes if they do not exist, and upgrades a table of an
  // earlier idem in place (migrate_record_table: the columns it lacks are added, nothing else
  // is altered), in one write transaction: concurrent stores on the file wait for it, and
  // several stores that open at once each find the table as the first one left it. Then checks
  // the result (check_schema).
  void ensure_schema() {
    with_retries_unchecked("ensure_schema", [&](Connection& c, bool) {
      c.exec("BEGIN IMMEDIATE");
      try {
        c.exec(ddl_);
        migrate_record_table(c, name_);
        c.exec("COMMIT");
      } catch (...) {
        try {
          c.exec("ROLLBACK");
        } catch (...) {
        }
        throw;
      }
      check_record_table(c, name_);
      return 0;
    });
    table_checked();
  }

  // Checks that the table is the one idem expects (check_record_table: columns, types, the
  // primary key with byte-for-byte keys, indexes) without changing anything; throws
  // SchemaMismatch naming each problem and its fix. ensure_schema (so the constructor, unless
  // create_schema is false) runs it. Returns the table's layout.
  TableLayout check_schema() {
    const TableLayout layout = with_retries_unchecked(
        "check_schema", [&](Connection& c, bool) { return check_record_table(c, name_); });
    table_checked();
    return layout;
  }

  // The same store on a connection of yours (or of pool()), inside the transaction open on
  // it. The store must outlive the BoundStore.
  BoundStore bind(Connection& connection) const { return BoundStore(ops(), connection); }
  // The same on your own sqlite3* handle; the BoundStore caches its prepared statements and
  // must be destroyed before you close the handle.
  BoundStore bind(sqlite3* db) const { return BoundStore(ops(), db); }

  // The quoted table name, e.g. "idempotent_record".
  const std::string& table() const noexcept { return table_; }
  const std::filesystem::path& path() const noexcept { return pool_.path(); }
  // The store's connections; use them for business statements on the same file, or with
  // idem::sqlite::with_transaction.
  Pool& pool() noexcept { return pool_; }
  TimePoint now() const { return params_.clock(); }

 private:
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
    return p;
  }

  StoreParams params_;
  TableName name_;
  std::string table_;
  std::string ddl_;
  Pool pool_;
};

static_assert(idem::Store<Store>);
static_assert(idem::Store<BoundStore>);
static_assert(RepairingStore<Store> && ListingStore<Store> && RecoveryPointStore<Store>);
static_assert(RepairingStore<BoundStore> && RecoveryPointStore<BoundStore>);

}  // namespace idem::sqlite
