#pragma once
// idem::pg::Store: the idempotency store on PostgreSQL, through libpq (docs/postgres.md).
//
// - A claim is one INSERT ... ON CONFLICT DO NOTHING on the primary key (idempotent_key,
//   biz_type): the fresh claim comes back with the server's times, a duplicate is read and
//   judged by the decision table (idem/backend/record_rules.hpp); a unique violation never
//   reaches the caller.
// - Every write that follows a read is guarded in its own WHERE by the rule it was decided on
//   and by the ticket read (fence and owner), judged at the server's clock: a lease, a takeover
//   or a completion is never decided on two clocks.
// - Housekeeping (purge_expired, release_stale) walks the expiry and stale indexes in batches
//   of rows it locks, skipping rows another janitor holds.
// - Serialization failures, deadlocks, lock and statement timeouts and lost connections are
//   retried under StoreParams::retry; a write whose reply was lost is recognised by its owner
//   token on the next try.
// - Same transaction (Store::bind -> BoundStore, Transaction, with_transaction in
//   idem/pg/transaction.hpp): the claim and its result are written in the service's own
//   transaction, on its own PGconn* or one of the pool's, and commit or roll back with the
//   business's writes.

#include <memory>
#include <string>
#include <utility>

#include "idem/backend/store_skeleton.hpp"
#include "idem/errors.hpp"
#include "idem/optional_operations.hpp"
#include "idem/pg/connection.hpp"
#include "idem/pg/detail/record_ops.hpp"
#include "idem/pg/errors.hpp"
#include "idem/pg/pool.hpp"
#include "idem/pg/schema.hpp"
#include "idem/pg/schema_check.hpp"
#include "idem/pg/store_params.hpp"
#include "idem/store.hpp"

namespace idem::pg {

// The store bound to one transaction on one connection (Store::bind): see
// idem/same_transaction/bound_sql_store.hpp for what it guarantees.
using BoundStore = same_transaction::BoundSqlStore<detail::Backend>;

class Store : public backend::StoreSkeleton<detail::Backend> {
 public:
  // The store shares the pool (other stores or the service's own statements may use it too).
  // Throws InvalidArgument for a null pool or a bad table name.
  explicit Store(std::shared_ptr<Pool> pool, StoreParams params = {}) : Store(std::move(params)) {
    if (!pool) throw InvalidArgument("idem::pg::Store: pool must not be null");
    pool_ = std::move(pool);
    attach(pool_.get());
  }

  // A store without a pool, only ever bound to the service's own connections (bind()); its
  // standalone operations throw UsageError. Throws InvalidArgument for a bad table name.
  explicit Store(StoreParams params = {})
      : StoreSkeleton(detail::RecordOps(parse_table_name(params.table)), params.retry),
        name_(parse_table_name(params.table)),
        bound_claim_(params.bound_claim) {
    if (params.check_table) {
      check_table_first([this](Connection& c) { check_record_table(c, name_); });
    }
  }

  // Creates the record table and its indexes where they do not exist (the DDL of
  // record_table_ddl, docs/postgres.md), in one transaction under an advisory lock, so that
  // stores starting together do not race; then checks the result (check_schema) and returns
  // the table's layout.
  TableLayout ensure_schema() {
    const TableLayout layout = with_retries_unchecked(
        "ensure_schema", [&](Connection& c, bool) { return create_table(c); });
    table_checked();
    return layout;
  }
  // The same on the service's own connection, once; it must have no transaction open (the
  // table is created in a transaction of its own).
  TableLayout ensure_schema(PGconn* conn) const {
    Connection c(checked(conn));
    if (c.in_transaction()) {
      throw UsageError(
          "idem::pg::Store::ensure_schema: a transaction is open on the connection (call it at "
          "start-up, outside the service's transactions)");
    }
    return create_table(c);
  }

  // Checks that the table is the one idem expects (check_record_table: columns, types,
  // collations, the primary key, indexes, the layout stamp) without changing anything; throws
  // SchemaMismatch naming each problem and its fix. For a role without DDL rights, whose table
  // a DBA created: call it at start-up. Returns the table's layout.
  TableLayout check_schema() {
    const TableLayout layout = with_retries_unchecked(
        "check_schema", [&](Connection& c, bool) { return check_record_table(c, name_); });
    table_checked();
    return layout;
  }

  TableLayout check_schema(PGconn* conn) const {
    Connection c(checked(conn));
    return check_record_table(c, name_);
  }

  // The same store on a connection inside the transaction open on it: one of idem's (e.g.
  // from with_transaction), or the service's own PGconn*, begun by the service's code (BEGIN,
  // at any isolation level). Nothing of the session is changed. The store must outlive the
  // BoundStore; bind once per transaction.
  BoundStore bind(Connection& connection) const {
    return BoundStore(ops(), connection, bound_claim_);
  }
  BoundStore bind(PGconn* conn) const { return BoundStore(ops(), checked(conn), bound_claim_); }

  // The quoted table name, e.g. "idempotent_record".
  std::string table() const { return name_.quoted(); }
  using StoreSkeleton::has_pool;
  // Throws UsageError for a store without a pool.
  using StoreSkeleton::pool;

 private:
  static PGconn* checked(PGconn* conn) {
    if (conn == nullptr) throw InvalidArgument("idem::pg::Store: the connection is null");
    return conn;
  }
  // In one transaction under an advisory lock, so that stores starting together do not race.
  TableLayout create_table(Connection& c) const {
    c.query("BEGIN", "ensure_schema");
    try {
      c.query(schema_lock_sql(name_), "ensure_schema");
      c.query(record_table_ddl(name_), "ensure_schema");
      c.query("COMMIT", "ensure_schema");
    } catch (...) {
      try {
        c.query("ROLLBACK", "ensure_schema");
      } catch (...) {
        c.mark_broken();
      }
      throw;
    }
    return check_record_table(c, name_);
  }

  TableName name_;
  std::shared_ptr<Pool> pool_;
  BoundClaim bound_claim_;
};

static_assert(idem::Store<Store>);
static_assert(idem::Store<BoundStore>);
static_assert(RepairingStore<BoundStore> && RecoveryPointStore<BoundStore>);
static_assert(RepairingStore<Store> && ListingStore<Store> && RecoveryPointStore<Store>);
static_assert(BatchClaimingStore<Store>);

}  // namespace idem::pg
