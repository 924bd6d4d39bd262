#pragma once
// The check that a record table on SQLite is the one idem expects, read from SQLite's PRAGMAs:
// every column of record_table_ddl() with its declared type and NOT NULL, the primary key
// (idempotent_key, biz_type) with the BINARY collation (so that keys compare byte for byte),
// and an index leading with the columns of each of idx_expire and idx_stale (under any name;
// a partial index does not count). The rules are idem/backend/schema_rules.hpp's; a mismatch is
// SchemaMismatch, each problem with its fix.

#include <sqlite3.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/backend/schema_rules.hpp"
#include "idem/detail/identifier.hpp"
#include "idem/errors.hpp"
#include "idem/sqlite/connection.hpp"
#include "idem/sqlite/schema.hpp"

namespace idem::sqlite {

namespace detail {

// SQLite cannot change a column or the primary key of a table in place: the fix is a rebuild.
inline std::string rebuild_fix(const std::string& quoted, std::string_view what) {
  return fmt::format(
      "rebuild {} with {} (SQLite cannot alter it in place): create a new table with "
      "idem::sqlite::record_table_ddl, copy the rows with INSERT ... SELECT, drop the old table "
      "and rename the new one, in one transaction",
      quoted, what);
}

inline const idem::backend::SchemaDialect& schema_dialect() {
  static const idem::backend::SchemaDialect dialect{
      .comparable_type = [](std::string_view declared) { return idem::detail::lower(declared); },
      .modify =
          [](const std::string& quoted, const idem::detail::DdlColumn& want) {
            return rebuild_fix(quoted, fmt::format("the column as {} {}", want.name, want.line));
          },
      .primary_key =
          [](const std::string& quoted, const std::string& columns) {
            return rebuild_fix(quoted, fmt::format("PRIMARY KEY ({})", columns));
          },
      .add_column =
          [](const std::string& quoted, const idem::detail::DdlColumn& want) {
            // SQLite adds a NOT NULL column only with a default for the rows already there.
            if (!want.nullable &&
                idem::detail::lower(want.line).find(" default ") == std::string::npos)
              return rebuild_fix(quoted, fmt::format("the column {} {}", want.name, want.line));
            return fmt::format("ALTER TABLE {} ADD COLUMN {} {}", quoted, want.name, want.line);
          },
      .create_index =
          [](const std::string& quoted, const idem::detail::DdlIndex& want) {
            // The schema goes on the index's name: CREATE INDEX "s"."i" ON "t".
            const auto dot = quoted.find("\".\"");
            if (dot == std::string::npos)
              return fmt::format("CREATE INDEX {} ON {} ({})", want.name, quoted,
                                 fmt::join(want.columns, ", "));
            return fmt::format("CREATE INDEX {}.\"{}\" ON {} ({})", quoted.substr(0, dot + 1),
                               want.name, quoted.substr(dot + 2), fmt::join(want.columns, ", "));
          },
      .create_fix =
          "open the store with create_schema (the default) or call store.ensure_schema(), or "
          "run idem::sqlite::record_table_ddl",
      .later_columns = {added_record_columns[0].name, added_record_columns[1].name,
                        added_record_columns[2].name},
      .migrate_fix =
          "open the store with create_schema (the default) or call store.ensure_schema(), or "
          "run idem::sqlite::migrate_record_table",
      .layout = "the layout after the first",
  };
  return dialect;
}

}  // namespace detail

// Checks that the record table `t` is the one idem expects and returns its layout (its stamp
// in idem_schema, or what its columns show); throws SchemaMismatch listing every problem with
// its fix (a table a newer idem migrated beyond this one's reach among them), StoreError when
// the file cannot be read. Reads only.
inline TableLayout check_record_table(Connection& c, const TableName& t) {
  const std::string schema = t.schema.empty() ? "" : fmt::format("\"{}\".", t.schema);
  std::vector<idem::backend::LiveColumn> live;
  {
    Rows info = c.query(fmt::format("PRAGMA {}table_info(\"{}\")", schema, t.table));
    while (info.next())
      live.push_back({info.text(1), info.text(2), "", info.integer(3) == 0});
  }
  // Each column's own collation: comparisons in a WHERE use it, whatever the key's index says.
  for (auto& col : live) {
    const char* collation = nullptr;
    if (sqlite3_table_column_metadata(c.native(), t.schema.empty() ? nullptr : t.schema.c_str(),
                                      t.table.c_str(), col.name.c_str(), nullptr, &collation,
                                      nullptr, nullptr, nullptr) == SQLITE_OK &&
        collation != nullptr)
      col.collation = idem::detail::lower(collation);
  }
  std::vector<idem::backend::LiveIndexColumn> keys;
  std::vector<std::pair<std::string, bool>> indexes;  // name, is the primary key
  {
    Rows list = c.query(fmt::format("PRAGMA {}index_list(\"{}\")", schema, t.table));
    while (list.next()) {
      if (list.integer(4) != 0) continue;  // partial: it does not cover every row
      indexes.emplace_back(list.text(1), list.text(3) == "pk");
    }
  }
  for (const auto& [name, primary] : indexes) {
    Rows info = c.query(fmt::format("PRAGMA {}index_xinfo(\"{}\")", schema, name));
    while (info.next()) {
      if (info.integer(5) == 0) continue;  // the rowid, not a key column
      const std::string column = info.text(2);
      keys.push_back({primary ? "PRIMARY" : name, column});
      if (!primary) continue;
      // The primary key's collation decides which keys are one row: a key column keeps the
      // first of its own and the key's that does not compare byte for byte.
      for (auto& col : live)
        if (col.name == column && idem::backend::binary_collation(col.collation))
          col.collation = idem::detail::lower(info.text(4));
    }
  }
  const std::string quoted = t.quoted();
  auto problems = idem::backend::schema_problems(detail::schema_dialect(), quoted,
                                                 record_table_ddl(t), live, keys);
  std::vector<std::string> present;
  for (const auto& col : live)
    present.push_back(col.name);
  const TableLayout layout = detail::layout_of(c, t, present);
  if (!live.empty()) {
    if (auto problem = idem::detail::layout_problem(layout, record_table_stamp.layout))
      problems.insert(problems.begin(), std::move(*problem));
  }
  if (!problems.empty()) throw SchemaMismatch(quoted, std::move(problems));
  return layout;
}

}  // namespace idem::sqlite
