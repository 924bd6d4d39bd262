#pragma once
// The comparison behind every SQL store's schema check, without I/O: the table the store's DDL
// creates (read back by ddl_shape) against the live table's columns and indexes, as the
// store's catalogue (information_schema, SQLite's PRAGMAs) lists them. Each difference is a
// SchemaMismatch::Problem naming the column or index and the statement that fixes it, in the
// store's dialect. tests/backend/schema_rules_test.cpp pins each rule.

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "idem/detail/ddl_shape.hpp"
#include "idem/errors.hpp"

namespace idem::backend {

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
  bool hidden =
      false;  // kept up to date but not used by queries (MariaDB IGNORED, MySQL INVISIBLE)
};

// What each of idem's indexes is for, to say what goes wrong without it.
inline std::string_view index_use(std::string_view name) {
  if (name.ends_with("idx_expire")) return "purge_expired would scan the whole table";
  if (name.ends_with("idx_stale"))
    return "release_stale and the Janitor's stale pass would scan the whole table";
  return "idem's statements would scan the table";
}

// How a store's SQL dialect reads and fixes a table.
struct SchemaDialect {
  std::string (*comparable_type)(std::string_view live_type);  // a live type as the DDL writes it
  std::string (*modify)(const std::string& quoted,
                        const detail::DdlColumn& want);  // a column's fix
  std::string (*primary_key)(const std::string& quoted, const std::string& columns);  // its fix
  std::string (*add_column)(const std::string& quoted, const detail::DdlColumn& want);
  std::string (*create_index)(const std::string& quoted, const detail::DdlIndex& want);
  // The fix for a hidden index (nullptr where the database has none).
  std::string (*unhide_index)(const std::string& quoted, const std::string& index) = nullptr;
  std::string_view create_fix;                  // for a table that does not exist
  std::vector<std::string_view> later_columns;  // added by later layouts: migrated, not added
  std::string_view migrate_fix;                 // for a table that lacks them
  std::string_view layout;                      // "layout 2", for the message
};

// Every difference between the table `ddl` creates and the live one (its columns and its
// indexes' columns in order), with its fix. Columns and indexes of the DBA's own are left
// alone; an index of idem's counts under any name when its leading columns are idem's.
inline std::vector<SchemaMismatch::Problem> schema_problems(
    const SchemaDialect& dialect, const std::string& quoted, std::string_view ddl,
    const std::vector<LiveColumn>& live, const std::vector<LiveIndexColumn>& keys) {
  using Problem = SchemaMismatch::Problem;
  std::vector<Problem> problems;
  if (live.empty()) {
    problems.push_back(
        {fmt::format("the table {} does not exist", quoted), std::string(dialect.create_fix)});
    return problems;
  }
  const auto shape = detail::ddl_shape(ddl);
  bool layout_columns_missing = false;
  for (const auto& want : shape.columns) {
    const auto got = std::find_if(live.begin(), live.end(),
                                  [&](const LiveColumn& c) { return c.name == want.name; });
    const std::string modify = dialect.modify(quoted, want);
    if (got == live.end()) {
      const bool later = std::find(dialect.later_columns.begin(), dialect.later_columns.end(),
                                   want.name) != dialect.later_columns.end();
      if (later) {
        layout_columns_missing = true;
      } else {
        problems.push_back(
            {fmt::format("column {} is missing", want.name), dialect.add_column(quoted, want)});
      }
      continue;
    }
    const std::string type = dialect.comparable_type(got->type);
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
    problems.push_back({fmt::format("the table lacks the columns of {} (an older idem created it)",
                                    dialect.layout),
                        std::string(dialect.migrate_fix)});
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
  const auto hidden = [&](std::string_view index) {
    return std::any_of(keys.begin(), keys.end(),
                       [&](const LiveIndexColumn& k) { return k.index == index && k.hidden; });
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
             dialect.primary_key(quoted, list)});
      }
      continue;
    }
    std::vector<std::string> names;
    for (const auto& k : keys)
      if (std::find(names.begin(), names.end(), k.index) == names.end()) names.push_back(k.index);
    const auto serves = [&](const std::string& n) {
      const auto [cols, prefix] = columns_of(n);
      return !prefix && cols.size() >= want.columns.size() &&
             std::equal(want.columns.begin(), want.columns.end(), cols.begin());
    };
    const bool found = std::any_of(names.begin(), names.end(),
                                   [&](const std::string& n) { return serves(n) && !hidden(n); });
    const auto unused = std::find_if(names.begin(), names.end(),
                                     [&](const std::string& n) { return serves(n) && hidden(n); });
    if (!found && unused != names.end() && dialect.unhide_index != nullptr) {
      problems.push_back({fmt::format("index {} leads with ({}) but queries may not use it "
                                      "(ignored or invisible): {}",
                                      *unused, list, index_use(want.name)),
                          dialect.unhide_index(quoted, *unused)});
    } else if (!found) {
      problems.push_back(
          {fmt::format("no index leads with ({}) ({}): {}", list, want.name, index_use(want.name)),
           dialect.create_index(quoted, want)});
    }
  }
  return problems;
}

}  // namespace idem::backend
