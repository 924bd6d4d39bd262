#pragma once
// idem::mysql::Store: the idempotency record table on MySQL / MariaDB (InnoDB).
//
// Two modes, one decision table (idem/store/record_rules.hpp):
//  - standalone (Store): every operation is its own autocommit statement on a pooled
//    connection. Use it when the business calls something outside this database (a payment
//    channel): the claim must be durable before the call, and its result recorded after.
//  - same transaction (Store::bind(connection) -> BoundStore): the operations run on the
//    caller's connection (one of idem's, or the caller's own MYSQL*) inside the caller's
//    transaction, so claim + business writes + record commit or roll back together. By default
//    (StoreParams::bound_claim, BoundClaim::record_last) the claim is a read and the record is
//    INSERTed finished after the business; a concurrent duplicate's transaction is rolled back
//    and run again, and replays. Such a transaction may commit only once every claim in it
//    finished (BoundStore::committable()); idem::mysql::with_transaction checks that before
//    its COMMIT and re-runs the body after a deadlock or a superseded claim. A Store that is
//    only ever bound needs no Pool.
//
// How a claim works: one INSERT on the primary key (never SELECT-then-INSERT); on MariaDB
// 10.5+ it is INSERT IGNORE ... RETURNING, so a fresh claim is one round trip (elsewhere the
// new row is read back). On a duplicate (ER_DUP_ENTRY, or no row returned) the row is read
// with the server's UTC_TIMESTAMP(3) and decide() picks the verdict; a takeover is one UPDATE
// guarded by the old fence and owner token. Every time comes from the database clock. Deadlocks and
// lock wait timeouts are retried with jittered backoff; a write whose outcome was lost with
// its connection is resolved by re-reading the row on a fresh connection (the owner token
// says whether it was ours).
//
// Both also repair records (fenced by the fence read) and keep a business's finished steps
// (record_step, guarded by the claim and the points read); Store lists records by status
// (idem/store/abilities.hpp). ensure_schema() creates the table or migrates one an older idem
// created (migrate_record_table, idem/mysql/schema.hpp).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/batch.hpp"
#include "idem/detail/checks.hpp"
#include "idem/detail/claim_ledger.hpp"
#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/mysql/detail/record_sql.hpp"
#include "idem/mysql/errors.hpp"
#include "idem/mysql/pool.hpp"
#include "idem/mysql/schema.hpp"
#include "idem/mysql/schema_check.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/store.hpp"
#include "idem/store/abilities.hpp"
#include "idem/store/record_rules.hpp"
#include "idem/store/retry.hpp"
#include "idem/store/skeleton.hpp"
#include "idem/store/sql_store.hpp"
#include "idem/store/steps.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem::mysql {

struct StoreParams {
  // The record table; 1-64 characters of [A-Za-z0-9_$], optionally schema.table.
  std::string table = "idempotent_record";
  // Tries per operation on transient failures (deadlock, lock wait timeout, lost
  // connection), and the jittered backoff between them.
  RetryPolicy retry{};
  // Claim with INSERT IGNORE ... RETURNING where the server has it (MariaDB 10.5 and later,
  // seen per connection), saving the read-back of a fresh claim; false always reads back
  // (for a proxy that cannot pass RETURNING through). Batch claims on a Galera node always
  // read back (see Connection::in_galera_cluster).
  bool insert_returning = true;
  // How store.bind(...) claims inside the caller's transaction: record_last (read, run, INSERT
  // the finished record; a concurrent duplicate runs speculatively and is rolled back and run
  // again) or claim_first (INSERT a processing row, UPDATE it; a duplicate waits on its lock).
  // docs/mysql.md, "Same-transaction mode", says when to choose which.
  BoundClaim bound_claim = BoundClaim::record_last;
  // Check the table (check_schema) once, on the first operation of this store: a table not as
  // idem expects fails with SchemaMismatch before any claim. false: the caller checks it
  // (ensure_schema or check_schema at start-up), or the store runs beside an older idem during
  // an upgrade. Stores bound to a caller's connection (bind) do not check by themselves.
  bool check_table = true;
};

namespace detail {

// The record operations on one connection, shared by both modes (see idem/store/skeleton.hpp).
// `bound` reads with LOCK IN SHARE MODE: inside a caller's transaction a plain read could
// return an old snapshot, and an exclusive lock would deadlock the duplicates that all hold
// the shared lock their failed INSERT took (the S-then-X upgrade deadlock of concurrent
// inserts on a unique key).
class RecordOps {
 public:
  static constexpr std::size_t max_batch_rows = detail::max_batch_rows;

  // `table` as StoreParams::table takes it.
  RecordOps(std::string_view table, bool returning)
      : sql_(make_record_sql(quote_identifier(table))), name_(table), returning_(returning) {}

  std::optional<RecordRead> read(Connection& c, const Key& key, bool bound) const {
    return read_answer(c.select(bound ? sql_.select_locking : sql_.select, key_values(key)), key);
  }

  // A record-last claim's read: plain (a consistent read inside the transaction), so that a
  // duplicate holds no lock while its body runs.
  RecordProbe probe(Connection& c, const Key& key) const {
    const auto rows = c.select(sql_.probe, {key.id(), key.biz_type()});
    if (rows.size() != 1) throw CorruptRecord("idem::mysql: the probe did not answer one row");
    const Row& row = rows.front();
    if (row.size() != column::count) {
      throw CorruptRecord("idem::mysql: unexpected column count from the probe");
    }
    if (row[column::key].is_null())
      return {std::nullopt, time_of(row[column::now], "UTC_TIMESTAMP(3)")};
    RowRead read = decode_record(row);
    require_key_read("idem::mysql", key, read.record);
    return {std::move(read.record), read.now};
  }

  // A record-last claim's result; false when another request's row is there.
  bool insert_finished(Connection& c, const Record& r) const {
    return c.execute(sql_.insert_finished, finished_values(r)) == 1;
  }

  // The same, and COMMIT, in one round trip where the server runs compound statements
  // (MariaDB, told apart by its RETURNING); false when another request's row is there, and
  // then nothing was committed.
  bool insert_finished_and_commit(Connection& c, const Record& r) const {
    return with_commit(c, sql_.insert_finished_commit, finished_values(r), code::dup_entry,
                       [&] { return insert_finished(c, r); });
  }

  // The fresh claim, or nullopt when the key exists (ER_DUP_ENTRY, or no row from INSERT
  // IGNORE ... RETURNING).
  std::optional<Record> insert(Connection& c, const Key& key, std::string_view fp, const Options& o,
                               const std::string& token, bool bound) const {
    try {
      if (returning_ && c.supports_returning()) {
        return returning_answer(c.select(sql_.insert_returning, claim_values(key, fp, o, token)),
                                key, token, fp);
      }
      c.execute(sql_.insert, claim_values(key, fp, o, token));
    } catch (const StoreError& e) {
      if (e.diagnostics().code != code::dup_entry) throw;
      return std::nullopt;
    }
    return read_back(read(c, key, bound), token);
  }

  bool write_takeover(Connection& c, Decision d, const Record& next, const Ticket& read) const {
    return c.execute(takeover_sql(d), takeover_values(d, next, read)) == 1;
  }

  // Claims up to max_batch_rows distinct keys with one INSERT IGNORE and one read (no read
  // when INSERT ... RETURNING answers with every key); each request i has its own owner token
  // tokens[i] (so a retried chunk recognises its own rows). Keys the read does not settle (a
  // takeover is due, or the row vanished) are claimed one by one with their token, so every
  // request gets exactly the single claim's answer.
  std::vector<ClaimResult> claim_chunk(Connection& c, std::span<const ClaimRequest* const> requests,
                                       std::span<const std::string> tokens,
                                       const Options& o) const {
    const std::size_t cls = batch_class(requests.size());
    const std::size_t padded = std::size_t{1} << cls;
    std::vector<Param> params;
    params.reserve(padded * 6);
    const auto lease = micros(o.lease);
    const auto ttl = micros(o.ttl);
    for (std::size_t i = 0; i < padded; ++i) {
      const std::size_t j = std::min(i, requests.size() - 1);
      const ClaimRequest& r = *requests[j];
      params.insert(params.end(), {Param(r.key.id()), Param(r.key.biz_type()), Param(tokens[j]),
                                   Param(r.fingerprint), Param(lease), Param(ttl)});
    }
    if (returning_ && c.supports_returning() && !c.in_galera_cluster()) {
      // The answer lists the rows this INSERT created; when that is every key (the common,
      // all-fresh batch) no read is needed. Not on Galera: see Connection::in_galera_cluster.
      auto created = c.select(sql_.insert_batch_returning[cls], params);
      if (created.size() == requests.size()) {
        std::unordered_map<Key, Record> mine;
        for (const Row& row : created) {
          Record r = decode_record(row).record;
          Key key = r.key;
          mine.emplace(std::move(key), std::move(r));
        }
        std::vector<ClaimResult> out;
        out.reserve(requests.size());
        for (std::size_t i = 0; i < requests.size(); ++i) {
          auto it = mine.find(requests[i]->key);
          if (it == mine.end() || it->second.ticket.owner != tokens[i]) break;
          out.push_back({Verdict::acquired, std::move(it->second)});
        }
        if (out.size() == requests.size()) return out;
      }
    } else {
      c.execute(sql_.insert_batch[cls], params);
    }

    std::vector<Param> keys;
    keys.reserve(padded * 2);
    for (std::size_t i = 0; i < padded; ++i) {
      const ClaimRequest& r = *requests[std::min(i, requests.size() - 1)];
      keys.insert(keys.end(), {Param(r.key.id()), Param(r.key.biz_type())});
    }
    std::unordered_map<Key, RowRead> rows;
    for (const Row& row : c.select(sql_.select_batch[cls], keys)) {
      RowRead read = decode_record(row);
      Key key = read.record.key;
      rows.emplace(std::move(key), std::move(read));
    }

    std::vector<ClaimResult> out;
    out.reserve(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const ClaimRequest& r = *requests[i];
      auto it = rows.find(r.key);
      if (it != rows.end()) {
        // The single claim's own steps from its read on: the same decision, the takeover
        // written at once (after_crash for a stale claim), its own row recognised.
        using Step = idem::detail::ClaimSteps::Step;
        idem::detail::ClaimSteps steps("idem::mysql", r.key, r.fingerprint, o, tokens[i]);
        Step step = steps.met(RecordRead{std::move(it->second.record), it->second.now});
        if (step == Step::take_over) {
          step =
              steps.written(write_takeover(c, steps.decision(), steps.next(), steps.read_ticket()));
        }
        if (step == Step::done) {
          out.push_back(std::move(steps).result());
          continue;
        }
      }
      // No row (purged in between), or a takeover lost to another writer: a claim from the top.
      out.push_back(idem::detail::claim_on("idem::mysql", *this, c, r.key, r.fingerprint, o,
                                           tokens[i], false));
    }
    return out;
  }

  // The fenced UPDATE of complete/fail. Returns true if it changed the row.
  bool finish(Connection& c, const Key& key, const Ticket& t, std::string_view snapshot, Status to,
              bool retryable) const {
    return c.execute(sql_.finish, finish_values(key, t, snapshot, to, retryable)) == 1;
  }

  std::size_t purge(Connection& c, std::size_t batch) const {
    return static_cast<std::size_t>(c.execute(sql_.purge, purge_values(batch)));
  }

  std::size_t release(Connection& c, std::size_t batch) const {
    return static_cast<std::size_t>(c.execute(sql_.release, release_values(batch)));
  }

  // The record repaired() computed, over the row whose ticket was read; false when the row
  // moved on.
  bool write_repair(Connection& c, const Record& next, const Ticket& read) const {
    return c.execute(sql_.repair, repair_values(next, read)) == 1;
  }

  // A step's recovery points, while the claim holds and the points are still `before`.
  bool write_points(Connection& c, const Key& key, const Ticket& held, std::string_view before,
                    std::string_view after) const {
    return c.execute(sql_.points, points_values(key, held, before, after)) == 1;
  }

  // finish and write_points, each with the COMMIT in one round trip where the server runs
  // compound statements (MariaDB, told apart by its RETURNING): false when the guard matched
  // no row, and then nothing was committed (the transaction stays open, to roll back).
  bool finish_and_commit(Connection& c, const Key& key, const Ticket& t, std::string_view snapshot,
                         Status to, bool retryable) const {
    return with_commit(c, sql_.finish_commit, finish_values(key, t, snapshot, to, retryable),
                       code::signal_exception,
                       [&] { return finish(c, key, t, snapshot, to, retryable); });
  }
  bool write_points_and_commit(Connection& c, const Key& key, const Ticket& held,
                               std::string_view before, std::string_view after) const {
    return with_commit(c, sql_.points_commit, points_values(key, held, before, after),
                       code::signal_exception,
                       [&] { return write_points(c, key, held, before, after); });
  }

  std::vector<Record> list(Connection& c, const RecordQuery& q) const {
    return list_answer(c.select(list_sql(sql_, q), list_values(q)));
  }

  RecordStats stats(Connection& c) const {
    const auto parts = idem::detail::split_identifier(name_, "idem::mysql", "table name", true);
    const std::vector<Row> counts = c.select(counts_sql(sql_), {});
    return stats_answer(counts, c.select(totals_sql(sql_), present_columns_values(parts)));
  }

  // For the coroutine store's ops (idem/mysql/async_store.hpp), which send the same SQL.
  const RecordSql& sql() const noexcept { return sql_; }
  bool returning() const noexcept { return returning_; }
  const std::string& takeover_sql(Decision d) const noexcept {
    return d == Decision::take_over_expired ? sql_.take_over_expired : sql_.take_over_retry;
  }

 private:
  // The compound statement `sql` (a write and the COMMIT, which it ends before with the error
  // `refused` when the write could not be made), or where the server has no compound
  // statements `alone()` and then a COMMIT. False: refused, and nothing was committed.
  template <class Alone>
  static bool with_commit(Connection& c, const std::string& sql, const std::vector<Param>& values,
                          unsigned refused, Alone&& alone) {
    if (c.supports_returning()) {
      try {
        c.execute(sql, values);
        return true;
      } catch (const StoreError& e) {
        const auto& d = e.diagnostics();
        if (d.code == refused && (refused != code::signal_exception || d.message == guard_refused))
          return false;
        // A session whose sql_mode does not parse the block (ORACLE) takes two round trips.
        if (d.code != code::parse_error) throw;
      }
    }
    if (!alone()) return false;
    c.query("COMMIT");
    return true;
  }

  RecordSql sql_;     // built once, when the store is made
  std::string name_;  // unquoted, for information_schema
  bool returning_;
};

// idem::mysql for the store skeleton (idem/store/skeleton.hpp, idem/store/sql_store.hpp).
struct Backend : BackendTypes<mysql::Connection, MYSQL, mysql::Pool, RecordOps> {
  static constexpr std::string_view name = "idem::mysql";
  // A duplicate's wait would hold the shared row lock of its reads until the transaction ends
  // and so block the very claim it waits for: the guard answers in_progress at once instead.
  static constexpr bool bound_supports_wait = false;
  static constexpr std::string_view begin_hint = "START TRANSACTION or mysql_autocommit(handle, 0)";

  // Only the database's transient errors are retried; a pool that has no connection free is
  // reported at once (the caller decides whether to try again).
  static FailureKind classify(const StoreError& e) noexcept {
    const unsigned code = e.diagnostics().code;
    if (!is_transient(code)) return FailureKind::fatal;
    return is_connection_lost(code) ? FailureKind::reply_lost : FailureKind::transient;
  }
  static bool in_transaction(Connection& c) noexcept {
    const MYSQL* m = c.native();
    return m != nullptr && ((m->server_status & SERVER_STATUS_IN_TRANS) != 0 ||
                            (m->server_status & SERVER_STATUS_AUTOCOMMIT) == 0);
  }
};

}  // namespace detail

// A Store bound to one connection and the transaction open on it (see BoundSqlStore). Its
// reads take a shared lock (LOCK IN SHARE MODE), so that the decision is taken on the latest
// committed state, whatever the transaction's snapshot.
using BoundStore = BoundSqlStore<detail::Backend>;

class Store : public StoreSkeleton<detail::Backend> {
 public:
  // The store shares the pool (other stores or the caller's transactions may use it too).
  explicit Store(std::shared_ptr<Pool> pool, StoreParams params = {}) : Store(std::move(params)) {
    if (!pool) throw InvalidArgument("idem::mysql::Store: pool must not be null");
    shared_pool_ = std::move(pool);
    attach(shared_pool_.get());
  }

  // A store without a pool, only ever bound to the caller's connections (bind()); its
  // standalone operations throw UsageError.
  explicit Store(StoreParams params = {})
      : StoreSkeleton(detail::RecordOps(params.table, params.insert_returning), params.retry),
        name_(params.table),
        table_(quote_identifier(params.table)),
        bound_claim_(params.bound_claim) {
    if (params.check_table) {
      check_table_first([this](Connection& c) { check_record_table(c, name_); });
    }
  }

  // Creates the record table if it does not exist (docs/schema.sql holds the same DDL), brings
  // one an older idem created to the current layout (migrate_record_table, online), and checks
  // the result (check_schema). Returns what the migration did.
  Migration ensure_schema() {
    Migration done = with_retries_unchecked("ensure_schema", [&](Connection& c, bool) {
      c.query(record_table_ddl(table_));
      Migration migrated = migrate_record_table(c, name_);
      check_record_table(c, name_);
      return migrated;
    });
    table_checked();
    return done;
  }
  // The same on the caller's handle. DDL commits any transaction open on it: call it at
  // start-up, not inside a transaction.
  Migration ensure_schema(MYSQL* mysql) const {
    Connection c(mysql);
    c.query(record_table_ddl(table_));
    Migration done = migrate_record_table(c, name_);
    check_record_table(c, name_);
    return done;
  }

  // Checks that the table is the one idem expects (check_record_table: columns, types, byte
  // for byte keys, primary key, indexes) without changing anything; throws SchemaMismatch
  // naming each problem and its fix. For an account without DDL rights, whose table a DBA
  // created: call it at start-up, before the first claim. Returns the table's layout.
  TableLayout check_schema() {
    const TableLayout layout = with_retries_unchecked(
        "check_schema", [&](Connection& c, bool) { return check_record_table(c, name_); });
    table_checked();
    return layout;
  }
  TableLayout check_schema(MYSQL* mysql) const {
    Connection c(mysql);
    return check_record_table(c, name_);
  }

  // The same store on a connection inside the transaction open on it: one of idem's (e.g.
  // from with_transaction), or a handle of the caller's own, begun by the caller's code
  // (START TRANSACTION, or mysql_autocommit(handle, 0)). The handle stays the caller's: see
  // Connection(MYSQL*). The store must outlive the BoundStore; bind once per transaction.
  BoundStore bind(Connection& connection) const {
    return BoundStore(ops(), connection, bound_claim_);
  }
  BoundStore bind(MYSQL* mysql) const { return BoundStore(ops(), mysql, bound_claim_); }

  const std::string& table() const noexcept { return table_; }
  using StoreSkeleton::has_pool;
  // Throws UsageError for a store without a pool.
  using StoreSkeleton::pool;

 private:
  std::shared_ptr<Pool> shared_pool_;
  std::string name_;   // as given (StoreParams::table)
  std::string table_;  // quoted
  BoundClaim bound_claim_;
};

static_assert(idem::Store<Store>);
static_assert(idem::Store<BoundStore>);
static_assert(RepairingStore<Store> && ListingStore<Store> && RecoveryPointStore<Store>);
static_assert(RepairingStore<BoundStore> && RecoveryPointStore<BoundStore>);

}  // namespace idem::mysql
