#pragma once
// The idempotent_record table: its DDL, the validated, quoted table name, and the migration of
// a table an older idem created.
//
// Key columns are VARBINARY so that they compare byte for byte: "abc" and "ABC", "a" and
// "a " are different keys (a _ci collation would merge the first pair, a PAD SPACE one the
// second). docs/schema.sql holds the same DDL for DBAs.
//
// Layouts: 1 is the table of idem before outcome_unknown, repairs and recovery points (13
// columns); 2 adds recovery_points, repair_reason and repaired_at at the end, and status 3.
// migrate_record_table() takes a layout-1 table to layout 2 in place. The layout is stamped
// in the table's comment (idem/table_layout.hpp); a table of an idem before stamps gets its
// stamp from the migration.

#include <mysql.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "idem/detail/identifier.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/mysql/detail/server_features.hpp"
#include "idem/mysql/errors.hpp"
#include "idem/mysql/param.hpp"
#include "idem/table_layout.hpp"

namespace idem::mysql {

// A table name by idem's identifier rule (idem/detail/identifier.hpp), optionally qualified
// as schema.table. Returns it quoted with backticks; throws InvalidArgument otherwise.
inline std::string quote_identifier(std::string_view name) {
  return idem::detail::quote_parts(
      idem::detail::split_identifier(name, "idem::mysql", "table name", true), '`');
}

// The layout record_table_ddl() creates and migrate_record_table() brings older tables to.
inline constexpr int record_table_layout = 2;

// The stamp record_table_ddl() and migrate_record_table() write: layout 2, which an idem of
// layout 1 would misread (status 3).
inline constexpr TableLayout record_table_stamp{
    .layout = record_table_layout, .oldest_reader = 2, .stamped = true};

namespace detail {

// A column definition as the DDL writes it (the name padded to the DDL's alignment).
struct ColumnDefinition {
  std::string_view name;
  std::string_view definition;
};

inline constexpr ColumnDefinition status_column{
    "status",
    "TINYINT          NOT NULL DEFAULT 0 COMMENT '0 processing, 1 succeeded, 2 failed, "
    "3 outcome unknown'"};

// The columns of layout 2, in the order they follow expire_at. VARBINARY for the reason: its
// bytes come back as they were written whatever the session's character set (a borrowed
// handle's session may convert a text column on the way out), like every other column idem
// reads; validate(Repair) already holds it to printable UTF-8 of at most 512 bytes.
inline constexpr std::array<ColumnDefinition, 3> layout2_columns{{
    {"recovery_points",
     "MEDIUMBLOB       NULL COMMENT 'JSON object: step name -> result of the finished steps'"},
    {"repair_reason", "VARBINARY(512)   NULL COMMENT 'UTF-8: why the last repair was made'"},
    {"repaired_at", "DATETIME(3)      NULL COMMENT 'UTC; when the last repair was made'"},
}};

inline std::string column_line(const ColumnDefinition& c) {
  return fmt::format("{:<17} {}", c.name, c.definition);
}

}  // namespace detail

// CREATE TABLE IF NOT EXISTS for the record table under the given (already quoted) name.
inline std::string record_table_ddl(std::string_view quoted_table) {
  return fmt::format(R"(CREATE TABLE IF NOT EXISTS {} (
  idempotent_key    VARBINARY(64)    NOT NULL COMMENT 'the business id of the action, byte-exact',
  biz_type          VARBINARY(32)    NOT NULL COMMENT 'business domain: PAY, REFUND, ORDER, ...',
  {},
  fence             BIGINT UNSIGNED  NOT NULL DEFAULT 1 COMMENT 'bumped by every claim and takeover',
  owner_token       CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'random token of the current claim',
  request_hash      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '' COMMENT 'request fingerprint',
  response_snapshot MEDIUMBLOB       NULL COMMENT 'JSON: the response (succeeded) or the error (failed)',
  retryable         TINYINT          NOT NULL DEFAULT 0 COMMENT 'failed records: may a duplicate run again',
  attempts          INT UNSIGNED     NOT NULL DEFAULT 1,
  lease_until       DATETIME(3)      NOT NULL COMMENT 'UTC; a processing claim is honoured until then',
  created_at        DATETIME(3)      NOT NULL COMMENT 'UTC',
  updated_at        DATETIME(3)      NOT NULL COMMENT 'UTC',
  expire_at         DATETIME(3)      NOT NULL COMMENT 'UTC; purged after this',
  {},
  {},
  {},
  PRIMARY KEY (idempotent_key, biz_type),
  KEY idx_expire (expire_at),
  KEY idx_stale (status, lease_until)
) ENGINE=InnoDB COMMENT='{}')",
                     quoted_table, detail::column_line(detail::status_column),
                     detail::column_line(detail::layout2_columns[0]),
                     detail::column_line(detail::layout2_columns[1]),
                     detail::column_line(detail::layout2_columns[2]),
                     idem::detail::layout_stamp(record_table_stamp));
}

// What migrate_record_table() did.
struct Migration {
  std::vector<std::string> added;  // the columns it added (none: the table was up to date)
  std::string algorithm;           // the ALTER's algorithm ("INSTANT", ...); empty: no ALTER
  bool stamped = false;            // it wrote the layout stamp (a table without one, or older)
};

namespace detail {

// How long the ALTER waits for the table's metadata lock (MariaDB's WAIT): while it waits,
// every new statement on the table queues behind it, so a long transaction holding the table
// fails the migration (1205, which ensure_schema retries) instead of stalling the claims.
inline constexpr int migration_lock_wait_seconds = 2;

// The layout-2 columns `table` already has (values: its schema or NULL for the current
// database, and its name).
inline std::string present_columns_sql() {
  std::string names;
  for (const auto& c : layout2_columns)
    names += fmt::format("{}'{}'", names.empty() ? "" : ", ", c.name);
  return fmt::format(
      "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
      "IFNULL(?, DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME IN ({})",
      names);
}

// The table's comment, which holds the layout stamp (values: present_columns_values).
inline constexpr const char* table_comment_sql =
    "SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = IFNULL(?, "
    "DATABASE()) AND TABLE_NAME = ?";

inline std::optional<TableLayout> stamp_in(const std::vector<Row>& comment_rows) {
  if (comment_rows.empty()) return std::nullopt;
  return idem::detail::parse_layout_stamp(comment_rows.front().at(0).text().value_or(""));
}

inline std::vector<Param> present_columns_values(const idem::detail::IdentifierParts& parts) {
  return {parts.schema.empty() ? Param(nullptr) : Param(parts.schema), Param(parts.name)};
}

// The columns of layout 2 missing from a table that has `present`.
inline std::vector<std::string> missing_columns(const std::vector<std::string>& present) {
  std::vector<std::string> missing;
  for (const auto& c : layout2_columns) {
    bool found = false;
    for (const auto& p : present)
      found = found || p == c.name;
    if (!found) missing.emplace_back(c.name);
  }
  return missing;
}

// One way of running the migration's ALTER.
struct MigrationStatement {
  std::string sql;
  std::string_view algorithm;
};

// The ALTERs that add `missing` to the table and, with `stamp`, write the layout stamp in its
// comment, to try in order: INSTANT (metadata only, no copy of the rows), then an online
// rebuild (INPLACE, LOCK=NONE: claims go on meanwhile). A server that can do neither refuses
// both; the migration never falls back to a copy that locks the table. MariaDB gets IF NOT
// EXISTS (a concurrent migration may have added a column in between), WAIT and the new status
// comment; MySQL has none of the first two, and its status comment is left alone there (a
// column's comment change may cost MySQL its INSTANT add).
inline std::vector<MigrationStatement> migration_statements(std::string_view quoted_table,
                                                            const std::vector<std::string>& missing,
                                                            bool stamp, bool mariadb) {
  if (missing.empty() && !stamp) return {};
  std::string changes;
  for (const auto& c : layout2_columns) {
    bool wanted = false;
    for (const auto& m : missing)
      wanted = wanted || m == c.name;
    if (!wanted) continue;
    changes += fmt::format("{}ADD COLUMN {}{} {}", changes.empty() ? "" : ", ",
                           mariadb ? "IF NOT EXISTS " : "", c.name, c.definition);
  }
  if (mariadb && !missing.empty()) {
    changes += fmt::format(", MODIFY COLUMN {} {}", status_column.name, status_column.definition);
  }
  if (stamp) {
    changes += fmt::format("{}COMMENT='{}'", changes.empty() ? "" : ", ",
                           idem::detail::layout_stamp(record_table_stamp));
  }
  const std::string head =
      mariadb ? fmt::format("ALTER TABLE {} WAIT {} ", quoted_table, migration_lock_wait_seconds)
              : fmt::format("ALTER TABLE {} ", quoted_table);
  return {{head + changes + ", ALGORITHM=INSTANT", "INSTANT"},
          {head + changes + ", ALGORITHM=INPLACE, LOCK=NONE", "INPLACE, LOCK=NONE"}};
}

// Whether the server refused an ALTER's algorithm (so the next one may be tried).
inline bool algorithm_refused(const StoreError& e) noexcept {
  const unsigned n = e.diagnostics().code;
  return n == 1845 ||  // ER_ALTER_OPERATION_NOT_SUPPORTED
         n == 1846 ||  // ER_ALTER_OPERATION_NOT_SUPPORTED_REASON
         n == 1800;    // ER_UNKNOWN_ALTER_ALGORITHM (no INSTANT before MySQL 8)
}

inline StoreError migration_refused(std::string_view quoted_table, const StoreError& last) {
  return StoreError(
      fmt::format("idem::mysql: the server cannot take {1} to layout {0} online "
                  "(neither INSTANT nor INPLACE, LOCK=NONE); run the ALTER of docs/mysql.md "
                  "in a maintenance window: {2}",
                  record_table_layout, quoted_table, last.what()),
      false, last.diagnostics());
}

// What a migration does to a table that has the layout-2 columns `present` and the comment
// `comment_rows` (none when there is no table): the columns to add and whether to stamp.
// Refuses (SchemaMismatch) a table that a newer idem made unreadable for this one.
inline Migration migration_plan(const std::string& quoted, const std::vector<std::string>& present,
                                const std::vector<Row>& comment_rows) {
  Migration plan{missing_columns(present), {}, false};
  const TableLayout table =
      idem::detail::table_layout(stamp_in(comment_rows), plan.added.empty(), record_table_stamp);
  if (auto problem = idem::detail::layout_problem(table, record_table_layout))
    throw SchemaMismatch(quoted, {std::move(*problem)});
  plan.stamped = idem::detail::needs_stamp(table, record_table_stamp);
  return plan;
}

}  // namespace detail

// Brings the record table `table` (a name as StoreParams::table takes it) created by an older
// idem to the current layout in place, online: ALTER TABLE ... ADD COLUMN of the columns it
// lacks and the layout stamp (see detail::migration_statements). A table already up to date
// costs two reads of information_schema and no ALTER (an ALTER, even an instant one, waits
// for the table's metadata lock). Safe to run while other processes claim on the table, and
// to run twice. store.ensure_schema() runs it; the account needs ALTER on the table then.
// Throws StoreError; SchemaMismatch for a table a newer idem migrated beyond this one.
inline Migration migrate_record_table(Connection& c, std::string_view table) {
  const auto parts = idem::detail::split_identifier(table, "idem::mysql", "table name", true);
  const std::string quoted = idem::detail::quote_parts(parts, '`');
  const auto where = detail::present_columns_values(parts);
  std::vector<std::string> present;
  for (const Row& row : c.select(detail::present_columns_sql(), where))
    present.emplace_back(row.at(0).text().value_or(""));
  Migration done =
      detail::migration_plan(quoted, present, c.select(detail::table_comment_sql, where));
  const auto statements = detail::migration_statements(quoted, done.added, done.stamped,
                                                       detail::server_is_mariadb(c.native()));
  for (std::size_t i = 0; i < statements.size(); ++i) {
    try {
      c.query(statements[i].sql);
      done.algorithm = statements[i].algorithm;
      return done;
    } catch (const StoreError& e) {
      if (!detail::algorithm_refused(e)) throw;
      if (i + 1 == statements.size()) throw detail::migration_refused(quoted, e);
    }
  }
  return done;
}

}  // namespace idem::mysql
