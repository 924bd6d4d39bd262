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

#include "idem/detail/ddl_shape.hpp"
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

// A collation that compares byte for byte (binary columns have none).
inline bool binary_collation(std::string_view collation) {
  return collation.empty() || collation == "binary" || collation.ends_with("_bin");
}

struct LiveColumn {
  std::string name, type, collation;
  bool nullable = false;
};

struct LiveIndexColumn {
  std::string index;
  std::string column;
  bool prefix = false;  // only a prefix of the column is indexed
};

// What each of idem's indexes is for, to say what goes wrong without it.
inline std::string_view index_use(std::string_view name) {
  if (name == "idx_expire") return "purge_expired would scan the whole table";
  if (name == "idx_stale")
    return "release_stale and the Janitor's stale pass would scan the whole table";
  return "idem's statements would scan the table";
}

inline std::vector<SchemaMismatch::Problem> schema_problems(
    const std::string& quoted, const std::vector<LiveColumn>& live,
    const std::vector<LiveIndexColumn>& keys) {
  using Problem = SchemaMismatch::Problem;
  std::vector<Problem> problems;
  if (live.empty()) {
    problems.push_back({fmt::format("the table {} does not exist", quoted),
                        "store.ensure_schema(), or the DDL of docs/schema.sql"});
    return problems;
  }
  const auto shape = idem::detail::ddl_shape(record_table_ddl(quoted));
  bool layout_columns_missing = false;
  for (const auto& want : shape.columns) {
    const auto got = std::find_if(live.begin(), live.end(),
                                  [&](const LiveColumn& c) { return c.name == want.name; });
    const std::string modify =
        fmt::format("ALTER TABLE {} MODIFY {} {}", quoted, want.name, want.line);
    if (got == live.end()) {
      const bool layout2 =
          std::any_of(layout2_columns.begin(), layout2_columns.end(),
                      [&](const ColumnDefinition& c) { return c.name == want.name; });
      if (layout2) {
        layout_columns_missing = true;
      } else {
        problems.push_back(
            {fmt::format("column {} is missing", want.name),
             fmt::format("ALTER TABLE {} ADD COLUMN {} {}", quoted, want.name, want.line)});
      }
      continue;
    }
    const std::string type = comparable_type(got->type);
    if (type != want.type) {
      const bool key_column =
          !shape.indexes.empty() &&
          std::find(shape.indexes.front().columns.begin(), shape.indexes.front().columns.end(),
                    want.name) != shape.indexes.front().columns.end();
      const bool merges = key_column && !binary_collation(got->collation);
      problems.push_back(
          {merges ? fmt::format("column {} is {} with collation {}, which does not compare byte "
                                "for byte (two keys idem tells apart would be one row); idem "
                                "expects {}",
                                want.name, type, got->collation, want.type)
                  : fmt::format("column {} is {}, idem expects {}", want.name, type, want.type),
           modify});
      continue;
    }
    if (!want.collation.empty() && got->collation != want.collation) {
      problems.push_back(
          {fmt::format("column {} has collation {}, idem expects {}", want.name,
                       got->collation.empty() ? "none" : got->collation, want.collation),
           modify});
      continue;
    }
    if (got->nullable != want.nullable) {
      problems.push_back(
          {fmt::format("column {} is {}, idem expects {}", want.name,
                       got->nullable ? "NULL" : "NOT NULL", want.nullable ? "NULL" : "NOT NULL"),
           modify});
    }
  }
  if (layout_columns_missing) {
    problems.push_back({fmt::format("the table lacks the columns of layout {} (an older idem "
                                    "created it)",
                                    record_table_layout),
                        "store.ensure_schema() or migrate_record_table() (online)"});
  }
  // An index's columns in order, and whether any of them is indexed by a prefix only.
  const auto columns_of = [&](std::string_view index) {
    std::vector<std::string> cols;
    bool prefix = false;
    for (const auto& k : keys) {
      if (k.index != index) continue;
      cols.push_back(k.column);
      prefix = prefix || k.prefix;
    }
    return std::pair{cols, prefix};
  };
  for (const auto& want : shape.indexes) {
    const std::string list = fmt::format("{}", fmt::join(want.columns, ", "));
    if (want.name == "PRIMARY") {
      const auto [cols, prefix] = columns_of("PRIMARY");
      if (cols != want.columns || prefix) {
        problems.push_back(
            {fmt::format("the primary key is ({}), idem expects ({}): the claim's INSERT is what "
                         "keeps a key to one row",
                         fmt::join(cols, ", "), list),
             fmt::format("ALTER TABLE {} DROP PRIMARY KEY, ADD PRIMARY KEY ({})", quoted, list)});
      }
      continue;
    }
    std::vector<std::string> names;
    for (const auto& k : keys)
      if (std::find(names.begin(), names.end(), k.index) == names.end()) names.push_back(k.index);
    const bool found = std::any_of(names.begin(), names.end(), [&](const std::string& n) {
      const auto [cols, prefix] = columns_of(n);
      return !prefix && cols.size() >= want.columns.size() &&
             std::equal(want.columns.begin(), want.columns.end(), cols.begin());
    });
    if (!found) {
      problems.push_back(
          {fmt::format("no index leads with ({}) ({}): {}", list, want.name, index_use(want.name)),
           fmt::format("CREATE INDEX {} ON {} ({})", want.name, quoted, list)});
    }
  }
  return problems;
}

// The two reads of the check (values: present_columns_values), and their answers decoded.
inline constexpr const char* live_columns_sql =
    "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, IFNULL(COLLATION_NAME, '') FROM "
    "information_schema.COLUMNS WHERE TABLE_SCHEMA = IFNULL(?, DATABASE()) AND TABLE_NAME = ?";
inline constexpr const char* live_indexes_sql =
    "SELECT INDEX_NAME, COLUMN_NAME, SUB_PART IS NOT NULL FROM information_schema.STATISTICS "
    "WHERE TABLE_SCHEMA = IFNULL(?, DATABASE()) AND TABLE_NAME = ? ORDER BY INDEX_NAME, "
    "SEQ_IN_INDEX";

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
                    row.at(2).integer().value_or(0) != 0});
  }
  return keys;
}

// Throws SchemaMismatch when the answers show problems.
inline void require_expected_table(const std::string& quoted, const std::vector<Row>& columns,
                                   const std::vector<Row>& indexes) {
  auto problems = schema_problems(quoted, live_columns(columns), live_indexes(indexes));
  if (!problems.empty()) throw SchemaMismatch(quoted, std::move(problems));
}

}  // namespace detail

// Checks that the record table `table` (a name as StoreParams::table takes it) is the one
// idem expects; throws SchemaMismatch listing every problem with its fix, StoreError when the
// server cannot be asked. Two reads of information_schema, nothing written.
inline void check_record_table(Connection& c, std::string_view table) {
  const auto parts = idem::detail::split_identifier(table, "idem::mysql", "table name", true);
  const auto where = detail::present_columns_values(parts);
  detail::require_expected_table(idem::detail::quote_parts(parts, '`'),
                                 c.select(detail::live_columns_sql, where),
                                 c.select(detail::live_indexes_sql, where));
}

}  // namespace idem::mysql
