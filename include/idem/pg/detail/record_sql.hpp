#pragma once
// The SQL idem::pg issues against the record table, and the decoding of its rows. Every
// statement is a single-row operation on the primary key, except the housekeeping ones, which
// walk the expiry and stale indexes in LIMITed batches of rows they lock (FOR UPDATE SKIP
// LOCKED, so two janitors share the work instead of waiting for each other), and list().
//
// Times: the columns are timestamptz(3); statements judge by the server's clock,
// statement_timestamp() truncated to milliseconds (the precision of idem's TimePoint, so a
// decision taken on a read is re-checked by the same values), and exchange times with idem as
// milliseconds since the epoch, whatever the session's TimeZone.

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/backend/record_columns.hpp"
#include "idem/backend/record_rules.hpp"
#include "idem/backend/sql_guards.hpp"
#include "idem/backend/steps.hpp"
#include "idem/clock.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/pg/connection.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/status.hpp"
#include "idem/ticket.hpp"

namespace idem::pg::detail {

// The store's now, in every statement.
inline constexpr std::string_view now_sql = "date_trunc('milliseconds', statement_timestamp())";

// A timestamptz column (or expression) as milliseconds since the epoch.
inline std::string millis_of(std::string_view column) {
  return fmt::format("(extract(epoch from {}) * 1000)::int8", column);
}
// Milliseconds since the epoch (a parameter) as a timestamptz; NULL stays NULL.
inline std::string time_at(std::string_view param) {
  return fmt::format("('epoch'::timestamptz + {}::int8 * interval '1 millisecond')", param);
}
// A text[] literal of `items` (each quoted, its quotes and backslashes escaped).
template <class Range, class Text>
std::string text_array(const Range& items, Text text_of_item) {
  std::string out = "{";
  for (const auto& item : items) {
    if (out.size() > 1) out += ',';
    out += '"';
    const auto& text = text_of_item(item);
    for (const char ch : std::string_view(text)) {
      if (ch == '"' || ch == '\\') out += '\\';
      out += ch;
    }
    out += '"';
  }
  out += '}';
  return out;
}

// now + a duration in milliseconds (a parameter).
inline std::string now_plus(std::string_view param) {
  return fmt::format("({} + {}::int8 * interval '1 millisecond')", now_sql, param);
}

// The columns a claim's INSERT writes (backend::column's order); the later ones start NULL (no
// steps, no repair).
inline const std::string claim_columns = backend::column_list(backend::column::claimed);

// What every read answers, in backend::column's order: the record's columns (times as
// milliseconds), then the server's now.
namespace column = backend::column;
inline std::string read_columns() {
  return fmt::format("{}, {}",
                     backend::column_list(column::count,
                                          [](std::string_view name, bool is_time) {
                                            return is_time ? millis_of(name) : std::string(name);
                                          }),
                     millis_of(now_sql));
}

// Whether the stored recovery points are the parameter (empty for none: a NULL column).
inline std::string points_are(std::string_view param) {
  return fmt::format("COALESCE(recovery_points, '') = {}", param);
}

struct RecordSql {
  std::string table;                   // quoted
  std::string insert;                  // ON CONFLICT DO NOTHING, answering with the new row's times
  std::string claim_batch;             // many claims and the rows they met, in one statement
  std::string select;                  // the row and the server's now
  std::string probe;                   // a record-last claim's read: one row, the record's columns
                                       // NULL when there is none, and the server's now
  std::string insert_finished;         // a record-last claim's result, written last
  std::string insert_finished_strict;  // the same, failing on another request's row
  std::string take_over_retry;         // also take_over_stale
  std::string take_over_expired;       // a fresh start: no steps, no repair
  std::string finish;                  // complete and fail
  std::string purge;
  std::string release;
  std::string repair;  // the record repaired() computed
  std::string points;  // a step's recovery point added
};

inline RecordSql make_record_sql(const std::string& t) {
  namespace guard = idem::backend::sql_guard;
  RecordSql s;
  s.table = t;
  // DO NOTHING: meeting the key answers no row (the read follows); a unique violation never
  // reaches the caller. RETURNING lists only what the server chose, its times.
  s.insert = fmt::format(
      "INSERT INTO {} ({}) VALUES ($1, $2, 0, 1, $3, $4, NULL, 0, 1, {}, {}, {}, {}) "
      "ON CONFLICT (idempotent_key, biz_type) DO NOTHING RETURNING {}, {}, {}",
      t, claim_columns, now_plus("$5"), now_sql, now_sql, now_plus("$6"), millis_of("lease_until"),
      millis_of("created_at"), millis_of("expire_at"));
  s.select = fmt::format("SELECT {} FROM {} WHERE idempotent_key = $1 AND biz_type = $2",
                         read_columns(), t);
  // The keys, tokens and fingerprints come as four text arrays ($1..$4; lease and TTL $5,
  // $6), inserted in their order (the caller sorts them, so that concurrent batches lock rows
  // in one order). The answer is every row the INSERT created and every row it met that the
  // statement's snapshot sees; a row committed meanwhile by a transaction the INSERT waited
  // for is in neither, and its key is claimed again on its own.
  s.claim_batch = fmt::format(
      "WITH req AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) "
      "WITH ORDINALITY AS r(k, b, tok, fp, n)), "
      "ins AS (INSERT INTO {0} ({1}) SELECT k, b, 0, 1, tok, fp, NULL, 0, 1, {2}, {3}, {3}, {4} "
      "FROM req ORDER BY n ON CONFLICT (idempotent_key, biz_type) DO NOTHING RETURNING {5}) "
      "SELECT * FROM ins UNION ALL SELECT {5} FROM {0} JOIN req ON idempotent_key = req.k AND "
      "biz_type = req.b WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.idempotent_key = req.k "
      "AND ins.biz_type = req.b)",
      t, claim_columns, now_plus("$5"), now_sql, now_plus("$6"), read_columns());
  // The derived one-row table makes the answer carry the server's now when no record exists.
  s.probe = fmt::format(
      "SELECT {} FROM (SELECT 1) AS probe LEFT JOIN {} ON idempotent_key = $1 AND biz_type = $2",
      read_columns(), t);
  // DO NOTHING: another request's row (committed, or committed by the transaction this INSERT
  // waited for) answers 0 rows: the claim was superseded. Under REPEATABLE READ or
  // SERIALIZABLE a row this transaction cannot see is a serialization failure instead, and the
  // transaction runs again.
  const std::string finished_into = fmt::format(
      "INSERT INTO {} ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, {}, {}, {}, {}, $13, $14, "
      "{})",
      t, backend::column_list(), time_at("$10"), time_at("$11"), now_sql, time_at("$12"),
      time_at("$15"));
  s.insert_finished = finished_into + " ON CONFLICT (idempotent_key, biz_type) DO NOTHING";
  // Sent with the COMMIT in one pipeline: another request's row must fail it (a unique
  // violation), so that the COMMIT behind it does not run.
  s.insert_finished_strict = finished_into;
  // A takeover writes the record take_over() computed from the row that was read, guarded by
  // the rule it was decided on (re-checked at the server's now, so a completion in between is
  // never overwritten) and by the ticket read. An expired record starts afresh without steps
  // or repair; a retry (or a stale claim's takeover) keeps them, and is guarded by the points
  // read too (the stale worker, still alive, may add a step in between).
  const auto take_over = [&](std::string_view extra) {
    return fmt::format(
        "UPDATE {} SET status = $1, fence = $2, owner_token = $3, request_hash = $4, "
        "response_snapshot = NULL, retryable = 0, attempts = $5, lease_until = {}, "
        "created_at = {}, updated_at = {}, expire_at = {}{} WHERE idempotent_key = $10 AND "
        "biz_type = $11 AND ",
        t, time_at("$6"), time_at("$7"), time_at("$8"), time_at("$9"), extra);
  };
  s.take_over_retry =
      take_over("") +
      guard::takeover_holds(backend::Decision::take_over_retry, now_sql, "$12", "$13") + " AND " +
      points_are("$14");
  s.take_over_expired =
      take_over(", recovery_points = NULL, repair_reason = NULL, repaired_at = NULL") +
      guard::takeover_holds(backend::Decision::take_over_expired, now_sql, "$12", "$13");
  s.finish = fmt::format(
      "UPDATE {} SET status = $1, response_snapshot = $2, retryable = $3, updated_at = {} "
      "WHERE idempotent_key = $4 AND biz_type = $5 AND {}",
      t, now_sql, guard::holds("$6", "$7"));
  // The batch is locked before it is written; rows another janitor holds are skipped.
  s.purge = fmt::format(
      "DELETE FROM {0} AS r USING (SELECT idempotent_key, biz_type FROM {0} WHERE {1} "
      "ORDER BY expire_at LIMIT $1 FOR UPDATE SKIP LOCKED) AS due "
      "WHERE r.idempotent_key = due.idempotent_key AND r.biz_type = due.biz_type",
      t, guard::is_expired(now_sql));
  s.release = fmt::format(
      "UPDATE {0} AS r SET status = $1, retryable = $2, response_snapshot = $3, updated_at = {1} "
      "FROM (SELECT idempotent_key, biz_type FROM {0} WHERE {2} ORDER BY lease_until LIMIT $4 "
      "FOR UPDATE SKIP LOCKED) AS due "
      "WHERE r.idempotent_key = due.idempotent_key AND r.biz_type = due.biz_type",
      t, now_sql, guard::is_stale(now_sql));
  // Every column repaired() may change, from the record it computed over the row read,
  // guarded by the ticket read.
  s.repair = fmt::format(
      "UPDATE {} SET status = $1, fence = $2, owner_token = $3, response_snapshot = $4, "
      "retryable = $5, updated_at = {}, expire_at = {}, repair_reason = $8, repaired_at = {} "
      "WHERE idempotent_key = $10 AND biz_type = $11 AND {}",
      t, time_at("$6"), time_at("$7"), time_at("$9"), guard::repair_holds("$12", "$13"));
  // Guarded by the claim and by the points read, so that no step of the same claim written
  // meanwhile (by another thread of the worker) is lost.
  s.points = fmt::format(
      "UPDATE {} SET recovery_points = $1, updated_at = {} "
      "WHERE idempotent_key = $2 AND biz_type = $3 AND {} AND {}",
      t, now_sql, guard::holds("$4", "$5"), points_are("$6"));
  return s;
}

// The SELECT of list(), with its values: the filter of backend/record_rules.hpp's matches()
// and the order of its listed_before(), judged at the server's now. Stale claims walk the
// stale index (status, lease_until) in lease order.
inline std::string list_sql(const RecordSql& s, const RecordQuery& q, std::vector<Param>& values) {
  std::string where;
  const auto add = [&](std::string_view condition) {
    where += fmt::format("{}{}", where.empty() ? "" : " AND ", condition);
  };
  const auto next = [&] { return fmt::format("${}", values.size()); };
  if (q.stale) add(idem::backend::sql_guard::is_stale(now_sql));
  if (q.status) {
    values.emplace_back(static_cast<int>(*q.status));
    add(fmt::format("status = {}", next()));
  }
  if (!q.biz_type.empty()) {
    values.emplace_back(q.biz_type);
    add(fmt::format("biz_type = {}", next()));
  }
  if (q.not_updated_for) {
    values.emplace_back(q.not_updated_for->count());
    add(fmt::format("updated_at <= {} - {}::int8 * interval '1 millisecond'", now_sql, next()));
  }
  values.emplace_back(static_cast<std::int64_t>(q.limit));
  return fmt::format("SELECT {} FROM {} WHERE {} ORDER BY {} LIMIT {}", read_columns(), s.table,
                     where.empty() ? "true" : where, q.stale ? "lease_until" : "updated_at",
                     next());
}

// The reads of stats(): the records by business type and status (biz_type compares bytes, as
// std::string does); then in one row the purge backlog (is_expired, what purge deletes), the
// stale claims and the oldest one's lease (is_stale), the server's now, and the size of the
// table with its indexes (the value: the quoted table name).
inline std::string counts_sql(const RecordSql& s) {
  return fmt::format(
      "SELECT biz_type, status, count(*) FROM {} GROUP BY biz_type, status "
      "ORDER BY biz_type, status",
      s.table);
}
inline std::string totals_sql(const RecordSql& s) {
  namespace guard = idem::backend::sql_guard;
  return fmt::format(
      "SELECT (SELECT count(*) FROM {0} WHERE {1}), (SELECT count(*) FROM {0} WHERE {2}), "
      "(SELECT {3} FROM {0} WHERE {2}), {4}, pg_total_relation_size($1::regclass)",
      s.table, guard::is_expired(now_sql), guard::is_stale(now_sql), millis_of("min(lease_until)"),
      millis_of(now_sql));
}

// A column's value, or CorruptRecord naming the column and what it held instead.
[[noreturn]] inline void corrupt(const Result& r, int row, int col, std::string_view column,
                                 std::string_view want) {
  throw CorruptRecord(fmt::format(
      "idem::pg: column {} holds {}, not {}", column,
      r.is_null(row, col) ? "NULL" : "\"" + idem::detail::printable(r.text(row, col)) + "\"",
      want));
}

inline std::int64_t integer_of(const Result& r, int row, int col, std::string_view column) {
  if (const auto v = r.integer(row, col)) return *v;
  corrupt(r, row, col, column, "a number");
}

inline TimePoint time_of(const Result& r, int row, int col, std::string_view column) {
  return TimePoint{Duration{integer_of(r, row, col, column)}};
}

inline std::optional<TimePoint> optional_time_of(const Result& r, int row, int col,
                                                 std::string_view column) {
  if (r.is_null(row, col)) return std::nullopt;
  return time_of(r, row, col, column);
}

// Text; NULL reads as empty (a NULL snapshot is no snapshot).
inline std::string text_of(const Result& r, int row, int col) {
  return r.is_null(row, col) ? std::string() : std::string(r.text(row, col));
}

// The status column: 0 to 3. A newer idem's status is unknown here: the record is refused (as
// CorruptRecord, never retried), so nothing runs on a state this idem does not understand.
inline Status status_of(const Result& r, int row) {
  const std::int64_t status = integer_of(r, row, column::status, "status");
  if (status < 0 || status > static_cast<int>(Status::outcome_unknown)) {
    throw CorruptRecord(
        fmt::format("idem::pg: column status holds unknown status {} (this idem knows 0 to {})",
                    status, static_cast<int>(Status::outcome_unknown)));
  }
  return static_cast<Status>(status);
}

// The recovery points: NULL (no step finished) or a JSON object.
inline std::string points_of(const Result& r, int row) {
  std::string points = text_of(r, row, column::recovery_points);
  if (!points.empty() && !nlohmann::json::parse(points, nullptr, false).is_object()) {
    corrupt(r, row, column::recovery_points, "recovery_points", "a JSON object");
  }
  return points;
}

inline backend::RecordRead decode_record(const Result& r, int row) {
  if (r.columns() != column::count_with_now) {
    throw CorruptRecord(fmt::format("idem::pg: a record row has {} columns, not {}", r.columns(),
                                    int{column::count_with_now}));
  }
  std::optional<Key> key;
  try {
    key.emplace(text_of(r, row, column::biz_type), text_of(r, row, column::key));
  } catch (const InvalidArgument& e) {
    throw CorruptRecord(fmt::format("idem::pg: a stored key is not valid: {}", e.what()));
  }
  const std::int64_t fence = integer_of(r, row, column::fence, "fence");
  const std::int64_t attempts = integer_of(r, row, column::attempts, "attempts");
  if (fence < 0) corrupt(r, row, column::fence, "fence", "a fence (0 or more)");
  if (attempts < 0) corrupt(r, row, column::attempts, "attempts", "a count (0 or more)");
  return backend::RecordRead{
      Record{
          .key = std::move(*key),
          .status = status_of(r, row),
          .ticket = Ticket{static_cast<std::uint64_t>(fence), text_of(r, row, column::owner_token)},
          .fingerprint = text_of(r, row, column::request_hash),
          .snapshot = text_of(r, row, column::response_snapshot),
          .retryable = integer_of(r, row, column::retryable, "retryable") != 0,
          .attempts = static_cast<std::uint32_t>(attempts),
          .created_at = time_of(r, row, column::created_at, "created_at"),
          .updated_at = time_of(r, row, column::updated_at, "updated_at"),
          .lease_until = time_of(r, row, column::lease_until, "lease_until"),
          .expire_at = time_of(r, row, column::expire_at, "expire_at"),
          .recovery_points = points_of(r, row),
          .repair_reason = text_of(r, row, column::repair_reason),
          .repaired_at = optional_time_of(r, row, column::repaired_at, "repaired_at")},
      time_of(r, row, column::now, "statement_timestamp()")};
}

}  // namespace idem::pg::detail
