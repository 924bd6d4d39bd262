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

class Store : public backend::StoreSkeleton<detail::Backend> {
 public:
  // The store shares the pool (other stores or the service's own statements may use it too).
  // Throws InvalidArgument for a null pool or a bad table name.
  explicit Store(std::shared_ptr<Pool> pool, StoreParams params = {})
      : StoreSkeleton(detail::RecordOps(parse_table_name(params.table)), params.retry),
        name_(parse_table_name(params.table)),
        pool_(std::move(pool)) {
    if (!pool_) throw InvalidArgument("idem::pg::Store: pool must not be null");
    attach(pool_.get());
    if (params.check_table) {
      check_table_first([this](Connection& c) { check_record_table(c, name_); });
    }
  }

  // Creates the record table and its indexes where they do not exist (the DDL of
  // record_table_ddl, docs/postgres.md), in one transaction under an advisory lock, so that
  // stores starting together do not race; then checks the result (check_schema) and returns
  // the table's layout.
  TableLayout ensure_schema() {
    const TableLayout layout = with_retries_unchecked("ensure_schema", [&](Connection& c, bool) {
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
    });
    table_checked();
    return layout;
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

  // The quoted table name, e.g. "idempotent_record".
  std::string table() const { return name_.quoted(); }
  Pool& pool() const noexcept { return *pool_; }

 private:
  TableName name_;
  std::shared_ptr<Pool> pool_;
};

static_assert(idem::Store<Store>);
static_assert(RepairingStore<Store> && ListingStore<Store> && RecoveryPointStore<Store>);

}  // namespace idem::pg
