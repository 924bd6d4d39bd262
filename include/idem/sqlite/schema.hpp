#pragma once
// The idempotent_record table on SQLite: its DDL and the validated, quoted table name.
//
// The same columns as on MySQL (docs/schema.sql), in SQLite's types:
// - key columns are TEXT with the BINARY collation (SQLite's default, spelled out): compared
//   with memcmp, so "abc" and "ABC", "a" and "a " are different keys;
// - times are INTEGER milliseconds since the Unix epoch (UTC), from the store's clock;
// - the snapshot is a BLOB, stored byte for byte (CAST(response_snapshot AS TEXT) to read it).

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/detail/identifier.hpp"
#include "idem/errors.hpp"

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
  status            INTEGER NOT NULL DEFAULT 0,    -- 0 processing, 1 succeeded, 2 failed
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
  PRIMARY KEY (idempotent_key, biz_type)
);
CREATE INDEX IF NOT EXISTS {0}"{1}_idx_expire" ON "{1}" (expire_at);
CREATE INDEX IF NOT EXISTS {0}"{1}_idx_stale" ON "{1}" (status, lease_until);
)",
                     prefix, t.table);
}

}  // namespace idem::sqlite
