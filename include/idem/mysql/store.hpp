#pragma once
// idem::mysql::Store: the idempotency record table on MySQL / MariaDB (InnoDB).
//
// Two modes, one decision table (idem/backend/record_rules.hpp):
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
// (idem/optional_operations.hpp). ensure_schema() creates the table or migrates one an older idem
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

#include "idem/backend/record_rules.hpp"
#include "idem/backend/steps.hpp"
#include "idem/backend/store_skeleton.hpp"
#include "idem/batch.hpp"
#include "idem/detail/checks.hpp"
#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/mysql/detail/record_ops.hpp"
#include "idem/mysql/detail/record_sql.hpp"
#include "idem/mysql/errors.hpp"
#include "idem/mysql/pool.hpp"
#include "idem/mysql/schema.hpp"
#include "idem/mysql/schema_check.hpp"
#include "idem/mysql/store_params.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/retry_policy.hpp"
#include "idem/same_transaction/bound_sql_store.hpp"
#include "idem/same_transaction/claim_ledger.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem::mysql {

// A Store bound to one connection and the transaction open on it (see BoundSqlStore). Its
// reads take a shared lock (LOCK IN SHARE MODE), so that the decision is taken on the latest
// committed state, whatever the transaction's snapshot.
using BoundStore = same_transaction::BoundSqlStore<detail::Backend>;

class Store : public backend::StoreSkeleton<detail::Backend> {
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
