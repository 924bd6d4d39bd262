#pragma once
// idem::sqlite::Store: the idempotency record table in a SQLite database file.
//
// Two modes, one decision table (idem/backend/record_rules.hpp), as on MySQL:
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

#include "idem/backend/record_rules.hpp"
#include "idem/clock.hpp"
#include "idem/detail/checks.hpp"
#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/retry_policy.hpp"
#include "idem/same_transaction/bound_sql_store.hpp"
#include "idem/same_transaction/claim_ledger.hpp"
#include "idem/sqlite/connection.hpp"
#include "idem/sqlite/detail/record_ops.hpp"
#include "idem/sqlite/detail/record_sql.hpp"
#include "idem/sqlite/errors.hpp"
#include "idem/sqlite/pool.hpp"
#include "idem/sqlite/schema.hpp"
#include "idem/sqlite/schema_check.hpp"
#include "idem/sqlite/store_params.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem::sqlite {

// A Store bound to one connection and the transaction open on it (see BoundSqlStore). A busy
// failure inside the caller's transaction means the transaction must run again, which is the
// caller's (or with_transaction's) call.
using BoundStore = same_transaction::BoundSqlStore<detail::Backend>;

class Store : public backend::StoreSkeleton<detail::Backend> {
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
              PoolParams{.size = params_.pool_size, .acquire_timeout = params_.busy_timeout}) {
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
