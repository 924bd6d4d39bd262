#pragma once
// The check that a record table on PostgreSQL is the one idem expects, read from the catalog
// (any role that may use the table may read it): every column of record_table_ddl() with its
// type, nullability and collation (the key columns and the tokens compare byte for byte,
// COLLATE "C"), the primary key (idempotent_key, biz_type), an index leading with the columns
// of each of the expiry and stale indexes (under any name; a partial, expression or invalid
// index does not count), and the layout stamp in the table's comment. Columns and indexes of
// the DBA's own are left alone. A mismatch is SchemaMismatch, each problem with the statement
// that fixes it (idem/backend/schema_rules.hpp compares).

#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "idem/backend/schema_rules.hpp"
#include "idem/detail/ddl_shape.hpp"
#include "idem/errors.hpp"
#include "idem/pg/connection.hpp"
#include "idem/pg/schema.hpp"
#include "idem/table_layout.hpp"

namespace idem::pg {

namespace detail {

// The catalog's name of a type as the DDL writes it ("timestamp(3) with time zone" is
// timestamptz(3)).
inline std::string comparable_type(std::string_view type) {
  std::string t = idem::detail::lower(type);
  constexpr std::string_view with_zone = " with time zone";
  if (t.starts_with("timestamp") && t.ends_with(with_zone)) {
    t.erase(t.size() - with_zone.size());
    t.replace(0, std::string_view("timestamp").size(), "timestamptz");
  }
  return t;
}

inline const idem::backend::SchemaDialect& schema_dialect() {
  static const idem::backend::SchemaDialect dialect{
      .comparable_type = comparable_type,
      .modify =
          [](const std::string& quoted, const idem::detail::DdlColumn& want) {
            // The collation as the DDL writes it (its case matters here: "C").
            std::string collate;
            if (const auto at = want.line.find(" COLLATE "); at != std::string::npos) {
              const auto end = want.line.find(' ', at + 9);
              collate = want.line.substr(at, end == std::string::npos ? end : end - at);
            }
            return fmt::format(
                "ALTER TABLE {0} ALTER COLUMN {1} TYPE {2}{3}, ALTER COLUMN {1} {4} NOT NULL",
                quoted, want.name, want.type, collate, want.nullable ? "DROP" : "SET");
          },
      .primary_key =
          [](const std::string& quoted, const std::string& columns) {
            return fmt::format(
                "ALTER TABLE {} ADD PRIMARY KEY ({}) (after dropping the table's other primary "
                "key constraint)",
                quoted, columns);
          },
      .add_column =
          [](const std::string& quoted, const idem::detail::DdlColumn& want) {
            return fmt::format("ALTER TABLE {} ADD COLUMN {} {}", quoted, want.name, want.line);
          },
      .create_index =
          [](const std::string& quoted, const idem::detail::DdlIndex& want) {
            return fmt::format("CREATE INDEX CONCURRENTLY \"{}\" ON {} ({})", want.name, quoted,
                               fmt::join(want.columns, ", "));
          },
      .create_fix = "store.ensure_schema(), or the DDL of docs/postgres.md",
      .later_columns = {},
      .migrate_fix = "",
      .layout = "layout 2",
  };
  return dialect;
}

// The reads of the check; each takes the quoted table name ($1) and answers nothing for a
// table that does not exist. The primary key is listed as PRIMARY; an index that cannot serve
// idem's statements (partial, on an expression, or not valid yet) as a prefix one.
inline constexpr const char* live_columns_sql =
    "SELECT a.attname, format_type(a.atttypid, a.atttypmod), COALESCE(co.collname, ''), "
    "NOT a.attnotnull FROM pg_attribute a LEFT JOIN pg_collation co ON co.oid = a.attcollation "
    "WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum";
inline constexpr const char* live_indexes_sql =
    "SELECT CASE WHEN ix.indisprimary THEN 'PRIMARY' ELSE i.relname END, "
    "COALESCE(a.attname, ''), ix.indpred IS NOT NULL OR ix.indexprs IS NOT NULL OR NOT "
    "ix.indisvalid FROM pg_index ix JOIN pg_class i ON i.oid = ix.indexrelid CROSS JOIN LATERAL "
    "unnest(ix.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) LEFT JOIN pg_attribute a ON "
    "a.attrelid = ix.indrelid AND a.attnum = k.attnum WHERE ix.indrelid = to_regclass($1) "
    "ORDER BY 1, k.n";
inline constexpr const char* table_comment_sql =
    "SELECT COALESCE(obj_description(to_regclass($1), 'pg_class'), '')";

// A collation as the DDL's shape reads it (idem/detail/ddl_shape.hpp keeps COLLATE's word as
// written, lower case: "c" with its quotes).
inline std::string ddl_collation(std::string_view name) {
  return name.empty() ? std::string() : "\"" + idem::detail::lower(name) + "\"";
}

inline std::vector<idem::backend::LiveColumn> live_columns(const Result& r) {
  std::vector<idem::backend::LiveColumn> live;
  for (int row = 0; row < r.rows(); ++row) {
    live.push_back({std::string(r.text(row, 0)), std::string(r.text(row, 1)),
                    ddl_collation(r.text(row, 2)), r.text(row, 3) == "t"});
  }
  return live;
}

inline std::vector<idem::backend::LiveIndexColumn> live_indexes(const Result& r) {
  std::vector<idem::backend::LiveIndexColumn> keys;
  for (int row = 0; row < r.rows(); ++row) {
    keys.push_back(
        {std::string(r.text(row, 0)), std::string(r.text(row, 1)), r.text(row, 2) == "t", false});
  }
  return keys;
}

}  // namespace detail

namespace detail {

// The check's verdict on the three reads (live_columns_sql, live_indexes_sql,
// table_comment_sql): the layout, or SchemaMismatch.
inline TableLayout table_check(const TableName& name, const Result& columns, const Result& indexes,
                               const Result& comment) {
  const std::string quoted = name.quoted();
  const auto live = live_columns(columns);
  auto problems = idem::backend::schema_problems(schema_dialect(), quoted, record_table_ddl(name),
                                                 live, live_indexes(indexes));
  const TableLayout layout = idem::detail::table_layout(
      idem::detail::parse_layout_stamp(comment.rows() > 0 ? comment.text(0, 0) : ""), true,
      record_table_stamp);
  if (!live.empty()) {
    if (auto problem = idem::detail::layout_problem(layout, record_table_layout))
      problems.insert(problems.begin(), std::move(*problem));
  }
  if (!problems.empty()) throw SchemaMismatch(quoted, std::move(problems));
  return layout;
}

}  // namespace detail

// Checks that the record table `name` is the one idem expects and returns its layout (the
// stamp in its comment, or what its columns show); throws SchemaMismatch listing every problem
// with its fix (a table a newer idem migrated beyond this one's reach among them), StoreError
// when the server cannot be asked. Three reads of the catalog, nothing written.
inline TableLayout check_record_table(Connection& c, const TableName& name) {
  const std::vector<Param> table{name.quoted()};
  const Result columns = c.exec(detail::live_columns_sql, table, "check_schema");
  const Result indexes = c.exec(detail::live_indexes_sql, table, "check_schema");
  return detail::table_check(name, columns, indexes,
                             c.exec(detail::table_comment_sql, table, "check_schema"));
}

}  // namespace idem::pg
