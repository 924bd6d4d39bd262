#pragma once
// The check that a record table on MySQL/MariaDB is the one idem expects, read from
// information_schema (any account that may use the table may read it): every column of
// record_table_ddl() with its type, nullability and collation (so that the key columns and the
// tokens compare byte for byte), the primary key (idempotent_key, biz_type), and an index
// leading with the columns of each of idx_expire and idx_stale (under any name). Columns and
// indexes of the DBA's own are left alone. A mismatch is SchemaMismatch, each problem with the
// statement that fixes it.

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "idem/backend/schema_rules.hpp"
#include "idem/detail/identifier.hpp"
#include "idem/errors.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/mysql/schema.hpp"

namespace idem::mysql {

namespace detail {

// information_schema's COLUMN_TYPE without integer display widths (MariaDB and MySQL 5.7 say
// "bigint(20) unsigned", MySQL 8 "bigint unsigned").
inline std::string comparable_type(std::string_view column_type) {
  std::string t = idem::detail::lower(column_type);
  for (const std::string_view integer : {"tinyint", "smallint", "mediumint", "bigint", "int"}) {
    if (t.starts_with(integer) && t.size() > integer.size() && t[integer.size()] == '(') {
      const auto close = t.find(')', integer.size());
      if (close != std::string::npos) t.erase(integer.size(), close - integer.size() + 1);
      break;
    }
  }
  return t;
}

using idem::backend::LiveColumn;
using idem::backend::LiveIndexColumn;

// How the server hides an index from queries while keeping it up to date: MariaDB 10.6 and
// later can IGNORE one, MySQL 8 make one INVISIBLE; a hidden index does not serve idem. Read
// from the columns information_schema.STATISTICS has (index_hiding_sql), not from the version
// the server announces, which a proxy or an older client library may report otherwise.
enum class IndexHiding { none, ignored, invisible };

inline constexpr const char* index_hiding_sql =
    "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
    "'information_schema' AND TABLE_NAME = 'STATISTICS' AND COLUMN_NAME IN ('IGNORED', "
    "'IS_VISIBLE')";

inline IndexHiding index_hiding(const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    const auto name = idem::detail::lower(row.at(0).text().value_or(""));
    if (name == "ignored") return IndexHiding::ignored;
    if (name == "is_visible") return IndexHiding::invisible;
  }
  return IndexHiding::none;
}

inline const idem::backend::SchemaDialect& schema_dialect(IndexHiding hiding = IndexHiding::none) {
  static const idem::backend::SchemaDialect dialect{
      .comparable_type = comparable_type,
      .modify =
          [](const std::string& quoted, const idem::detail::DdlColumn& want) {
            return fmt::format("ALTER TABLE {} MODIFY {} {}{}{}", quoted, want.name, want.line,
                               want.comment.empty() ? "" : " ", want.comment);
          },
      .primary_key =
          [](const std::string& quoted, const std::string& columns) {
            return fmt::format("ALTER TABLE {} DROP PRIMARY KEY, ADD PRIMARY KEY ({})", quoted,
                               columns);
          },
      .add_column =
          [](const std::string& quoted, const idem::detail::DdlColumn& want) {
            return fmt::format("ALTER TABLE {} ADD COLUMN {} {}{}{}", quoted, want.name, want.line,
                               want.comment.empty() ? "" : " ", want.comment);
          },
      .create_index =
          [](const std::string& quoted, const idem::detail::DdlIndex& want) {
            return fmt::format("CREATE INDEX {} ON {} ({})", want.name, quoted,
                               fmt::join(want.columns, ", "));
          },
      .create_fix = "store.ensure_schema(), or the DDL of docs/schema.sql",
      .later_columns = {layout2_columns[0].name, layout2_columns[1].name, layout2_columns[2].name},
      .migrate_fix = "store.ensure_schema() or migrate_record_table() (online)",
      .layout = "layout 2",
  };
  static const idem::backend::SchemaDialect mariadb = [] {
    auto d = dialect;
    d.unhide_index = [](const std::string& quoted, const std::string& index) {
      return fmt::format("ALTER TABLE {} ALTER INDEX {} NOT IGNORED", quoted, index);
    };
    return d;
  }();
  static const idem::backend::SchemaDialect mysql = [] {
    auto d = dialect;
    d.unhide_index = [](const std::string& quoted, const std::string& index) {
      return fmt::format("ALTER TABLE {} ALTER INDEX {} VISIBLE", quoted, index);
    };
    return d;
  }();
  switch (hiding) {
    case IndexHiding::ignored:
      return mariadb;
    case IndexHiding::invisible:
      return mysql;
    case IndexHiding::none:
      break;
  }
  return dialect;
}

// The reads of the check (values: present_columns_values), and their answers decoded.
inline constexpr const char* live_columns_sql =
    "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, IFNULL(COLLATION_NAME, '') FROM "
    "information_schema.COLUMNS WHERE TABLE_SCHEMA = IFNULL(?, DATABASE()) AND TABLE_NAME = ?";
inline std::string live_indexes_sql(IndexHiding hiding) {
  const std::string_view hidden = hiding == IndexHiding::ignored     ? "IGNORED = 'YES'"
                                  : hiding == IndexHiding::invisible ? "IS_VISIBLE = 'NO'"
                                                                     : "0";
  return fmt::format(
      "SELECT INDEX_NAME, COLUMN_NAME, SUB_PART IS NOT NULL, {} FROM information_schema.STATISTICS "
      "WHERE TABLE_SCHEMA = IFNULL(?, DATABASE()) AND TABLE_NAME = ? ORDER BY INDEX_NAME, "
      "SEQ_IN_INDEX",
      hidden);
}

inline std::vector<LiveColumn> live_columns(const std::vector<Row>& rows) {
  std::vector<LiveColumn> live;
  for (const Row& row : rows) {
    live.push_back({std::string(row.at(0).text().value_or("")),
                    std::string(row.at(1).text().value_or("")),
                    idem::detail::lower(row.at(3).text().value_or("")),
                    row.at(2).text().value_or("") == "YES"});
  }
  return live;
}

inline std::vector<LiveIndexColumn> live_indexes(const std::vector<Row>& rows) {
  std::vector<LiveIndexColumn> keys;
  for (const Row& row : rows) {
    keys.push_back({std::string(row.at(0).text().value_or("")),
                    std::string(row.at(1).text().value_or("")),
                    row.at(2).integer().value_or(0) != 0, row.at(3).integer().value_or(0) != 0});
  }
  return keys;
}

// The table's layout; throws SchemaMismatch when the answers show problems.
inline TableLayout require_expected_table(IndexHiding hiding, const std::string& quoted,
                                          const std::vector<Row>& columns,
                                          const std::vector<Row>& indexes,
                                          const std::vector<Row>& comment) {
  const auto live = live_columns(columns);
  auto problems = idem::backend::schema_problems(
      schema_dialect(hiding), quoted, record_table_ddl(quoted), live, live_indexes(indexes));
  std::vector<std::string> present;
  for (const auto& c : live)
    present.push_back(c.name);
  const TableLayout layout = idem::detail::table_layout(
      stamp_in(comment), missing_columns(present).empty(), record_table_stamp);
  if (!live.empty()) {
    if (auto problem = idem::detail::layout_problem(layout, record_table_layout))
      problems.insert(problems.begin(), std::move(*problem));
  }
  if (!problems.empty()) throw SchemaMismatch(quoted, std::move(problems));
  return layout;
}

}  // namespace detail

// Checks that the record table `table` (a name as StoreParams::table takes it) is the one
// idem expects and returns its layout (the stamp in its comment, or what its columns show);
// throws SchemaMismatch listing every problem with its fix (a table a newer idem migrated
// beyond this one's reach among them), StoreError when the server cannot be asked. Four reads
// of information_schema, nothing written.
inline TableLayout check_record_table(Connection& c, std::string_view table) {
  const auto parts = idem::detail::split_identifier(table, "idem::mysql", "table name", true);
  const auto where = detail::present_columns_values(parts);
  const auto hiding = detail::index_hiding(c.select(detail::index_hiding_sql, {}));
  return detail::require_expected_table(hiding, idem::detail::quote_parts(parts, '`'),
                                        c.select(detail::live_columns_sql, where),
                                        c.select(detail::live_indexes_sql(hiding), where),
                                        c.select(detail::table_comment_sql, where));
}

}  // namespace idem::mysql
