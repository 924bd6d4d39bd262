#pragma once
// The SQL idem::sqlite issues against the record table, and the decoding of its rows. The
// statements are those of idem::mysql with the clock's `now` bound as a parameter instead of
// UTC_TIMESTAMP(3): every single-row statement works on the primary key; the housekeeping ones
// walk the expire / stale indexes in LIMITed batches (DELETE/UPDATE ... LIMIT is an optional
// SQLite feature, so they pick their rowids in a subquery), and list() the stale index.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/backend/record_columns.hpp"
#include "idem/backend/record_rules.hpp"
#include "idem/backend/sql_guards.hpp"
#include "idem/clock.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/record_stats.hpp"
#include "idem/sqlite/connection.hpp"
#include "idem/sqlite/schema.hpp"
#include "idem/status.hpp"

namespace idem::sqlite::detail {

// Milliseconds since the Unix epoch, as the table stores time.
inline std::int64_t millis(TimePoint t) noexcept {
  return static_cast<std::int64_t>(t.time_since_epoch().count());
}

inline std::int64_t limit(std::size_t n) noexcept {
  constexpr auto max = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());
  return static_cast<std::int64_t>(n < max ? n : max);
}

struct RecordSql {
  std::string insert;
  std::string select;
  std::string take_over_retry;
  std::string take_over_expired;
  std::string finish;  // complete and fail
  std::string purge;
  std::string release;
  std::string repair;
  std::string points;  // a step's recovery point added
};

// The record's columns, in backend::column's order.
namespace column = backend::column;
inline const std::string record_columns = backend::column_list();

// Whether the stored recovery points are `param` (a blob; empty for none, which is NULL or an
// empty value in the row). Compared as bytes whatever type the row holds them in.
inline std::string points_are(std::string_view param) {
  return fmt::format("CAST(IFNULL(recovery_points, '') AS BLOB) = CAST({} AS BLOB)", param);
}

inline RecordSql make_record_sql(const TableName& name) {
  const std::string t = name.quoted();
  RecordSql s;
  // ?1 key, ?2 biz_type, ?3 owner token, ?4 fingerprint, ?5 lease_until, ?6 now, ?7 expire_at.
  s.insert = fmt::format(
      "INSERT INTO {} ({}) VALUES (?1, ?2, 0, 1, ?3, ?4, NULL, 0, 1, ?5, ?6, ?6, ?7, NULL, NULL, "
      "NULL)",
      t, record_columns);
  s.select = fmt::format("SELECT {} FROM {} WHERE idempotent_key = ?1 AND biz_type = ?2",
                         record_columns, t);
  // A takeover writes the record take_over() computed from the row that was read
  // (?1 status, ?2 fence, ?3 owner, ?4 fingerprint, ?5 attempts, ?6 lease_until, ?7 created_at,
  // ?8 now, ?9 expire_at), guarded by the rule it was decided on, re-checked at `now`, and by
  // the ticket read (?12, ?13): see idem/backend/sql_guards.hpp. An expired record starts afresh
  // without steps or repair; a retry keeps them, and is guarded by the points read (?14) too:
  // a stale worker still alive may add a step between the read and this write, and the claim
  // must answer the steps it took over.
  const auto take_over = [&](std::string_view extra_set) {
    return fmt::format(
        "UPDATE {} SET status = ?1, fence = ?2, owner_token = ?3, request_hash = ?4, "
        "response_snapshot = NULL, retryable = 0, attempts = ?5, lease_until = ?6, "
        "created_at = ?7, updated_at = ?8, expire_at = ?9{} "
        "WHERE idempotent_key = ?10 AND biz_type = ?11 AND ",
        t, extra_set);
  };
  s.take_over_retry = take_over("") +
                      idem::backend::sql_guard::takeover_holds(backend::Decision::take_over_retry,
                                                               "?8", "?12", "?13") +
                      " AND " + points_are("?14");
  s.take_over_expired =
      take_over(", recovery_points = NULL, repair_reason = NULL, repaired_at = NULL") +
      idem::backend::sql_guard::takeover_holds(backend::Decision::take_over_expired, "?8", "?12",
                                               "?13");
  // ?1 status, ?2 snapshot, ?3 retryable, ?4 now, ?5 key, ?6 biz_type, ?7 fence, ?8 owner.
  s.finish = fmt::format(
      "UPDATE {} SET status = ?1, response_snapshot = ?2, retryable = ?3, updated_at = ?4 "
      "WHERE idempotent_key = ?5 AND biz_type = ?6 AND {}",
      t, idem::backend::sql_guard::holds("?7", "?8"));
  // ?1 now, ?2 batch.
  s.purge = fmt::format(
      "DELETE FROM {0} WHERE rowid IN "
      "(SELECT rowid FROM {0} WHERE {1} ORDER BY expire_at LIMIT ?2)",
      t, idem::backend::sql_guard::is_expired("?1"));
  // ?1 status, ?2 retryable, ?3 snapshot, ?4 now, ?5 batch.
  s.release = fmt::format(
      "UPDATE {0} SET status = ?1, retryable = ?2, response_snapshot = ?3, updated_at = ?4 "
      "WHERE rowid IN (SELECT rowid FROM {0} WHERE {1} ORDER BY lease_until LIMIT ?5)",
      t, idem::backend::sql_guard::is_stale("?4"));
  // The record repaired() computed, over the row read (?12 fence, ?13 owner): ?1 status,
  // ?2 fence, ?3 owner, ?4 snapshot, ?5 retryable, ?6 now, ?7 expire_at, ?8 reason,
  // ?9 repaired_at, ?10 key, ?11 biz_type.
  s.repair = fmt::format(
      "UPDATE {} SET status = ?1, fence = ?2, owner_token = ?3, response_snapshot = ?4, "
      "retryable = ?5, updated_at = ?6, expire_at = ?7, repair_reason = ?8, repaired_at = ?9 "
      "WHERE idempotent_key = ?10 AND biz_type = ?11 AND {}",
      t, idem::backend::sql_guard::repair_holds("?12", "?13"));
  // ?1 the new points, ?2 now, ?3 key, ?4 biz_type, ?5 fence, ?6 owner, ?7 the points read.
  s.points = fmt::format(
      "UPDATE {} SET recovery_points = ?1, updated_at = ?2 "
      "WHERE idempotent_key = ?3 AND biz_type = ?4 AND {} AND {}",
      t, idem::backend::sql_guard::holds("?5", "?6"), points_are("?7"));
  return s;
}

// The SELECT of list() for `q` (validated) and its parameters, in the filter and order of
// idem/backend/record_rules.hpp's matches() and listed_before(): stale claims through the
// (status, lease_until) index in lease order, a status through the same index, by last update.
// `params` receives the values; the strings it points to must outlive the query.
inline std::string list_sql(const TableName& name, const RecordQuery& q, TimePoint now,
                            std::vector<Value>& params) {
  const auto param = [&](Value v) {
    params.push_back(v);
    return fmt::format("?{}", params.size());
  };
  std::string where = "1";
  if (q.stale) where += " AND " + idem::backend::sql_guard::is_stale(param(millis(now)));
  if (q.status) where += " AND status = " + param(static_cast<int>(*q.status));
  if (!q.biz_type.empty()) where += " AND biz_type = " + param(std::string_view(q.biz_type));
  if (q.not_updated_for) where += " AND updated_at <= " + param(millis(now - *q.not_updated_for));
  return fmt::format("SELECT {} FROM {} WHERE {} ORDER BY {} LIMIT {}", record_columns,
                     name.quoted(), where, q.stale ? "lease_until" : "updated_at",
                     param(limit(q.limit)));
}

// The reads of stats(): the records by business type and status, in record_stats.hpp's order
// (biz_type compares as BINARY, bytes as std::string does); then in one row the purge backlog
// (is_expired, what purge deletes), the stale claims and the oldest one's lease (is_stale); and
// the bytes of the table's and its indexes' pages (the dbstat table, which a SQLite built
// without it lacks: then the size is not known).
inline std::string counts_sql(const TableName& name) {
  return fmt::format(
      "SELECT biz_type, status, COUNT(*) FROM {} GROUP BY biz_type, status ORDER BY biz_type, "
      "status",
      name.quoted());
}
inline std::string totals_sql(const TableName& name) {
  return fmt::format(
      "SELECT (SELECT COUNT(*) FROM {0} WHERE {1}), (SELECT COUNT(*) FROM {0} WHERE {2}), "
      "(SELECT MIN(lease_until) FROM {0} WHERE {2})",
      name.quoted(), idem::backend::sql_guard::is_expired("?1"),
      idem::backend::sql_guard::is_stale("?1"));
}
inline std::string size_sql(const TableName& name) {
  return fmt::format(
      "SELECT SUM(pgsize) FROM dbstat(?1) WHERE name = ?2 OR name IN (SELECT name FROM "
      "{}sqlite_master WHERE type = 'index' AND tbl_name = ?2)",
      name.schema.empty() ? std::string() : fmt::format("\"{}\".", name.schema));
}

inline std::int64_t integer_column(const Rows& row, int column, std::string_view name) {
  if (row.type(column) != SQLITE_INTEGER) {
    throw CorruptRecord(fmt::format("idem::sqlite: column {} does not hold an integer", name));
  }
  return row.integer(column);
}

inline std::string text_column(const Rows& row, int column, std::string_view name) {
  const int type = row.type(column);
  if (type != SQLITE_TEXT && type != SQLITE_BLOB) {
    throw CorruptRecord(fmt::format("idem::sqlite: column {} does not hold text", name));
  }
  return row.text(column);
}

inline TimePoint time_column(const Rows& row, int column, std::string_view name) {
  return TimePoint{Duration{integer_column(row, column, name)}};
}

// The optional columns: NULL is none (an old row of a migrated table reads so).
inline std::string optional_text(const Rows& row, int column, std::string_view name) {
  return row.is_null(column) ? std::string{} : text_column(row, column, name);
}

inline std::string points_column(const Rows& row, int column) {
  std::string points = optional_text(row, column, "recovery_points");
  if (!points.empty() && !nlohmann::json::parse(points, nullptr, false).is_object()) {
    throw CorruptRecord("idem::sqlite: column recovery_points does not hold a JSON object");
  }
  return points;
}

// The record in the current row of a query over record_columns.
inline Record decode_record(const Rows& row) {
  if (row.columns() != column::count) {
    throw CorruptRecord("idem::sqlite: unexpected column count in a record row");
  }
  std::optional<Key> key;
  try {
    key.emplace(text_column(row, column::biz_type, "biz_type"),
                text_column(row, column::key, "idempotent_key"));
  } catch (const InvalidArgument& e) {
    throw CorruptRecord(fmt::format("idem::sqlite: a stored key is not valid: {}", e.what()));
  }
  const std::int64_t status = integer_column(row, column::status, "status");
  if (status < 0 || status > static_cast<std::int64_t>(Status::outcome_unknown)) {
    throw CorruptRecord(
        fmt::format("idem::sqlite: column status holds an unknown status {}", status));
  }
  const std::int64_t fence = integer_column(row, column::fence, "fence");
  const std::int64_t attempts = integer_column(row, column::attempts, "attempts");
  if (fence < 0 || attempts < 0 || attempts > std::numeric_limits<std::uint32_t>::max()) {
    throw CorruptRecord("idem::sqlite: fence or attempts out of range");
  }
  return Record{.key = std::move(*key),
                .status = static_cast<Status>(status),
                .ticket = Ticket{static_cast<std::uint64_t>(fence),
                                 text_column(row, column::owner_token, "owner_token")},
                .fingerprint = text_column(row, column::request_hash, "request_hash"),
                .snapshot = optional_text(row, column::response_snapshot, "response_snapshot"),
                .retryable = integer_column(row, column::retryable, "retryable") != 0,
                .attempts = static_cast<std::uint32_t>(attempts),
                .created_at = time_column(row, column::created_at, "created_at"),
                .updated_at = time_column(row, column::updated_at, "updated_at"),
                .lease_until = time_column(row, column::lease_until, "lease_until"),
                .expire_at = time_column(row, column::expire_at, "expire_at"),
                .recovery_points = points_column(row, column::recovery_points),
                .repair_reason = optional_text(row, column::repair_reason, "repair_reason"),
                .repaired_at = row.is_null(column::repaired_at)
                                   ? std::nullopt
                                   : std::optional<TimePoint>(
                                         time_column(row, column::repaired_at, "repaired_at"))};
}

}  // namespace idem::sqlite::detail
