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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "idem/detail/identifier.hpp"
#include "idem/errors.hpp"
#include "idem/sqlite/connection.hpp"
#include "idem/table_layout.hpp"

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

// The layout record_table_ddl() creates and migrate_record_table() brings older tables to,
// and its stamp (idem/table_layout.hpp): layout 2 (the added columns and status 3), which an
// idem of the first layout would misread.
inline constexpr TableLayout record_table_stamp{.layout = 2, .oldest_reader = 2, .stamped = true};

namespace detail {

// The table that keeps the layout stamp of each record table of a database (SQLite has no
// table comments): one row per record table, written by migrate_record_table().
inline std::string stamp_table(const TableName& t) {
  return t.schema.empty() ? "\"idem_schema\"" : fmt::format("\"{}\".\"idem_schema\"", t.schema);
}

inline std::string stamp_table_ddl(const TableName& t) {
  return fmt::format(R"(CREATE TABLE IF NOT EXISTS {} (
  record_table  TEXT COLLATE BINARY PRIMARY KEY,  -- a record table of this database
  layout        INTEGER NOT NULL,                 -- its layout (idem/table_layout.hpp)
  oldest_reader INTEGER NOT NULL                  -- the oldest layout of idem that may use it
))",
                     stamp_table(t));
}

// The column names of a table (PRAGMA table_info); none when it does not exist.
inline std::vector<std::string> column_names(Connection& c, const TableName& t) {
  const std::string schema = t.schema.empty() ? "" : fmt::format("\"{}\".", t.schema);
  std::vector<std::string> names;
  Rows info = c.query(fmt::format("PRAGMA {}table_info(\"{}\")", schema, t.table));
  while (info.next())
    names.push_back(info.text(1));
  return names;
}

// The stamp of the record table `t`; nullopt when it has none (an idem before stamps).
inline std::optional<TableLayout> read_stamp(Connection& c, const TableName& t) {
  if (column_names(c, {t.schema, "idem_schema"}).empty()) return std::nullopt;
  Rows row = c.query(
      fmt::format("SELECT layout, oldest_reader FROM {} WHERE record_table = ?", stamp_table(t)),
      {t.table});
  if (!row.next()) return std::nullopt;
  return idem::detail::stamp_from(row.integer(0), row.integer(1));
}

// The layout of a table with the columns `present`.
inline TableLayout layout_of(Connection& c, const TableName& t,
                             const std::vector<std::string>& present) {
  bool current_columns = true;
  for (const AddedColumn& column : added_record_columns)
    current_columns =
        current_columns && std::find(present.begin(), present.end(), column.name) != present.end();
  return idem::detail::table_layout(read_stamp(c, t), current_columns, record_table_stamp);
}

}  // namespace detail

// Upgrades a record table of an earlier layout in place: adds the columns of
// added_record_columns it lacks (PRAGMA table_info, then ALTER TABLE ADD COLUMN), in order, so
// that a migrated table has the columns of a new one in the same order, and writes its layout
// stamp (in idem_schema, created if missing). Idempotent: a table that has them is left alone.
// Safe when several connections or processes migrate at once: a column that another migrator
// added first ("duplicate column name") counts as added. Returns the number of columns this
// call added. Run it in a write transaction (BEGIN IMMEDIATE, as Store::ensure_schema does) to
// add all of them and the stamp, or nothing. Throws SchemaMismatch for a table that a newer
// idem migrated beyond this one's reach, and changes nothing then.
inline int migrate_record_table(Connection& c, const TableName& t) {
  const std::vector<std::string> present = detail::column_names(c, t);
  if (present.empty()) {
    throw UsageError(fmt::format("idem::sqlite: there is no table {} to migrate", t.quoted()));
  }
  const TableLayout layout = detail::layout_of(c, t, present);
  if (auto problem = idem::detail::layout_problem(layout, record_table_stamp.layout))
    throw SchemaMismatch(t.quoted(), {std::move(*problem)});
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
  if (idem::detail::needs_stamp(layout, record_table_stamp)) {
    c.exec(detail::stamp_table_ddl(t));
    c.execute(fmt::format("INSERT INTO {} (record_table, layout, oldest_reader) VALUES (?, ?, ?) "
                          "ON CONFLICT (record_table) DO UPDATE SET layout = excluded.layout, "
                          "oldest_reader = excluded.oldest_reader",
                          detail::stamp_table(t)),
              {t.table, record_table_stamp.layout, record_table_stamp.oldest_reader});
  }
  return added;
}

}  // namespace idem::sqlite
