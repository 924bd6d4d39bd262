#pragma once
// The idempotent_record table on SQLite: its DDL, the validated, quoted table name, and the
// in-place upgrade of a table created by an earlier idem.
//
// The same columns as on MySQL (docs/schema.sql), in SQLite's types:
// - key columns are TEXT with the BINARY collation (SQLite's default, spelled out): compared
//   with memcmp, so "abc" and "ABC", "a" and "a " are different keys;
// - times are INTEGER milliseconds since the Unix epoch (UTC), from the store's clock;
// - the snapshot and the recovery points are BLOBs of JSON text, stored byte for byte
//   (CAST(response_snapshot AS TEXT) to read them).

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "idem/detail/identifier.hpp"
#include "idem/errors.hpp"
#include "idem/sqlite/connection.hpp"

namespace idem::sqlite {

// A table name split into its optional schema (the database name: main, temp or an ATTACHed
// one) and the table.
struct TableName {
  std::string schema;  // empty: unqualified
  std::string table;

  // "schema"."table" or "table".
  std::string quoted() const { return idem::detail::quote_parts({schema, table}, '"'); }
};

// A table name by idem's identifier rule (idem/detail/identifier.hpp), optionally qualified
// as schema.table. Throws InvalidArgument otherwise.
inline TableName parse_table_name(std::string_view name) {
  const auto parts = idem::detail::split_identifier(name, "idem::sqlite", "table name", true);
  return TableName{std::string(parts.schema), std::string(parts.name)};
}

// The table name quoted with double quotes ("schema"."table"); throws InvalidArgument when it
// breaks the rule above.
inline std::string quote_identifier(std::string_view name) {
  return parse_table_name(name).quoted();
}

// CREATE TABLE / CREATE INDEX IF NOT EXISTS for the record table, as one script. Index names
// are per database file in SQLite, so they carry the table's name.
inline std::string record_table_ddl(const TableName& t) {
  const std::string prefix = t.schema.empty() ? "" : fmt::format("\"{}\".", t.schema);
  return fmt::format(R"(CREATE TABLE IF NOT EXISTS {0}"{1}" (
  idempotent_key    TEXT COLLATE BINARY NOT NULL,  -- the business id of the action, byte-exact
  biz_type          TEXT COLLATE BINARY NOT NULL,  -- business domain: PAY, REFUND, ORDER, ...
  status            INTEGER NOT NULL DEFAULT 0,    -- 0 processing, 1 succeeded, 2 failed,
                                                   -- 3 outcome unknown (never expires)
  fence             INTEGER NOT NULL DEFAULT 1,    -- bumped by every claim and takeover
  owner_token       TEXT    NOT NULL,              -- random token of the current claim
  request_hash      TEXT    NOT NULL DEFAULT '',   -- request fingerprint; '' when opted out
  response_snapshot BLOB,                          -- JSON: the response or the error
  retryable         INTEGER NOT NULL DEFAULT 0,    -- failed records: may a duplicate run again
  attempts          INTEGER NOT NULL DEFAULT 1,    -- claims that ran the business
  lease_until       INTEGER NOT NULL,              -- ms since the Unix epoch, UTC
  created_at        INTEGER NOT NULL,              -- ms since the Unix epoch, UTC
  updated_at        INTEGER NOT NULL,              -- ms since the Unix epoch, UTC
  expire_at         INTEGER NOT NULL,              -- ms since the Unix epoch, UTC; purged after
  recovery_points   BLOB,                          -- JSON object, step -> result; NULL: none
  repair_reason     TEXT,                          -- why it was last repaired; NULL: never
  repaired_at       INTEGER,                       -- ms since the Unix epoch, UTC; NULL: never
  PRIMARY KEY (idempotent_key, biz_type)
);
CREATE INDEX IF NOT EXISTS {0}"{1}_idx_expire" ON "{1}" (expire_at);
CREATE INDEX IF NOT EXISTS {0}"{1}_idx_stale" ON "{1}" (status, lease_until);
)",
                     prefix, t.table);
}

// The columns added after the first layout of the table (idem's "version 1", which ended at
// expire_at), in their order at the end of the table, as ALTER TABLE ADD COLUMN spells them.
// Only nullable columns without a default: adding them rewrites no row, and old rows read
// them as NULL (none, never).
struct AddedColumn {
  std::string_view name;
  std::string_view definition;
};
inline constexpr std::array<AddedColumn, 3> added_record_columns{{
    {"recovery_points", "recovery_points BLOB"},
    {"repair_reason", "repair_reason TEXT"},
    {"repaired_at", "repaired_at INTEGER"},
}};

// Upgrades a record table of an earlier layout in place: adds the columns of
// added_record_columns it lacks (PRAGMA table_info, then ALTER TABLE ADD COLUMN), in order, so
// that a migrated table has the columns of a new one in the same order. Idempotent: a table
// that has them is left alone. Safe when several connections or processes migrate at once: a
// column that another migrator added first ("duplicate column name") counts as added. Returns
// the number of columns this call added. Run it in a write transaction (BEGIN IMMEDIATE, as
// Store::ensure_schema does) to add all of them or none.
inline int migrate_record_table(Connection& c, const TableName& t) {
  const std::string schema = t.schema.empty() ? "" : fmt::format("\"{}\".", t.schema);
  std::vector<std::string> present;
  {
    Rows info = c.query(fmt::format("PRAGMA {}table_info(\"{}\")", schema, t.table));
    while (info.next())
      present.push_back(info.text(1));
  }
  if (present.empty()) {
    throw UsageError(fmt::format("idem::sqlite: there is no table {} to migrate", t.quoted()));
  }
  int added = 0;
  for (const AddedColumn& column : added_record_columns) {
    if (std::find(present.begin(), present.end(), column.name) != present.end()) continue;
    try {
      c.exec(fmt::format("ALTER TABLE {} ADD COLUMN {}", t.quoted(), column.definition));
      ++added;
    } catch (const StoreError& e) {
      // Another connection added it between our look and our ALTER: the table is as wanted.
      if (e.diagnostics().message.rfind("duplicate column name", 0) != 0) throw;
    }
  }
  return added;
}

}  // namespace idem::sqlite
