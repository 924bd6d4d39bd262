#pragma once
// The record table of idem::pg (docs/postgres.md shows the DDL): its name as idem quotes it,
// and the statements that create it.

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/detail/identifier.hpp"
#include "idem/errors.hpp"
#include "idem/table_layout.hpp"

namespace idem::pg {

// PostgreSQL keeps 63 bytes of a name; idem names the indexes after the table with a suffix of
// up to 11 characters ("_idx_expire"), so a table name takes at most this many.
inline constexpr std::size_t max_table_name_chars = 52;

// A table name as StoreParams::table takes it (1-52 characters of [A-Za-z0-9_$], optionally
// schema.table), split and quoted. Throws InvalidArgument for any other.
struct TableName {
  std::string schema;  // empty: the first schema of the search_path
  std::string table;

  // "schema"."table", or "table".
  std::string quoted() const { return idem::detail::quote_parts({schema, table}, '"'); }
  // The name of one of its indexes, unquoted (PostgreSQL puts an index in its table's schema).
  std::string index(std::string_view suffix) const { return fmt::format("{}_{}", table, suffix); }
};

inline TableName parse_table_name(std::string_view name) {
  const auto parts = idem::detail::split_identifier(name, "idem::pg", "table", true);
  if (parts.name.size() > max_table_name_chars || parts.schema.size() > max_table_name_chars) {
    throw InvalidArgument(fmt::format(
        "idem::pg: table \"{}\" is too long: a name takes at most {} characters here (PostgreSQL "
        "keeps 63 bytes, and idem's index names add a suffix)",
        idem::detail::printable(name), max_table_name_chars));
  }
  return TableName{std::string(parts.schema), std::string(parts.name)};
}

// The layout record_table_ddl() creates, stamped in the table's comment as on MySQL
// (idem/table_layout.hpp): PostgreSQL's first table already has layout 2's columns.
inline constexpr int record_table_layout = 2;
inline constexpr TableLayout record_table_stamp{
    .layout = record_table_layout, .oldest_reader = 2, .stamped = true};

// The table and its indexes, each created only where missing. Keys are text compared byte for
// byte (COLLATE "C"; a key is UTF-8 without control characters). Snapshots and recovery points
// are JSON text; times are timestamptz(3), judged by the server's clock.
inline std::string record_table_ddl(const TableName& name) {
  const std::string t = name.quoted();
  return fmt::format(
      "CREATE TABLE IF NOT EXISTS {0} (\n"
      "  idempotent_key    text COLLATE \"C\" NOT NULL,\n"
      "  biz_type          text COLLATE \"C\" NOT NULL,\n"
      "  status            smallint NOT NULL DEFAULT 0,\n"
      "  fence             bigint NOT NULL DEFAULT 1,\n"
      "  owner_token       text COLLATE \"C\" NOT NULL,\n"
      "  request_hash      text COLLATE \"C\" NOT NULL DEFAULT '',\n"
      "  response_snapshot text NULL,\n"
      "  retryable         smallint NOT NULL DEFAULT 0,\n"
      "  attempts          integer NOT NULL DEFAULT 1,\n"
      "  lease_until       timestamptz(3) NOT NULL,\n"
      "  created_at        timestamptz(3) NOT NULL,\n"
      "  updated_at        timestamptz(3) NOT NULL,\n"
      "  expire_at         timestamptz(3) NOT NULL,\n"
      "  recovery_points   text NULL,\n"
      "  repair_reason     text NULL,\n"
      "  repaired_at       timestamptz(3) NULL,\n"
      "  PRIMARY KEY (idempotent_key, biz_type)\n"
      ");\n"
      "CREATE INDEX IF NOT EXISTS \"{1}\" ON {0} (expire_at);\n"
      "CREATE INDEX IF NOT EXISTS \"{2}\" ON {0} (status, lease_until);\n"
      "COMMENT ON TABLE {0} IS '{3}';\n",
      t, name.index("idx_expire"), name.index("idx_stale"),
      idem::detail::layout_stamp(record_table_stamp));
}

// The key of the advisory lock under which ensure_schema creates the table, so that stores
// starting together do not race in CREATE TABLE IF NOT EXISTS (which can fail with a unique
// violation in the catalog when two sessions create the same table at once).
inline std::string schema_lock_sql(const TableName& name) {
  return fmt::format("SELECT pg_advisory_xact_lock(hashtext('idem schema {}'))", name.quoted());
}

}  // namespace idem::pg
