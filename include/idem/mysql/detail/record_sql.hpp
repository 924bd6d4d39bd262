#pragma once
// The SQL idem::mysql issues against the record table, and the decoding of its rows.
// Every statement is a single-row operation on the primary key, except the batch claim
// (a multi-row INSERT IGNORE and a read of the same primary keys), the housekeeping ones,
// which walk idx_expire / idx_stale in LIMITed batches, and list(), which walks idx_stale.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
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
#include "idem/mysql/connection.hpp"
#include "idem/mysql/param.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/record_stats.hpp"
#include "idem/status.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem::mysql::detail {

// Batch statements come in power-of-two row counts (1, 2, 4, ... max_batch_rows) so that a
// connection prepares at most a few of them; a batch is padded to its class by repeating its
// last row, which INSERT IGNORE skips as a duplicate of itself and the read ignores.
inline constexpr std::size_t max_batch_rows = 128;
inline constexpr std::size_t batch_classes = 8;  // 2^0 .. 2^7

inline constexpr std::size_t batch_class(std::size_t rows) noexcept {
  std::size_t c = 0;
  while ((std::size_t{1} << c) < rows)
    ++c;
  return c;
}

// The record's columns, in backend::column's order (docs/schema.sql); a read adds the server's
// UTC_TIMESTAMP(3) after them, at column::now.
namespace column = backend::column;
inline const std::string record_columns = backend::column_list();
// The columns a claim's INSERT writes; the later ones start NULL (no steps, no repair).
inline const std::string claim_columns = backend::column_list(column::claimed);

// Whether the stored recovery points are the bound value (empty for none: a NULL column).
// BLOB and a binary value compare byte for byte.
inline constexpr std::string_view points_are = "IFNULL(recovery_points, '') = ?";

struct RecordSql {
  std::string table;  // quoted
  std::string insert;
  std::string insert_returning;  // INSERT IGNORE answering with the new row's times (10.5+)
  std::array<std::string, batch_classes> insert_batch;            // INSERT IGNORE of 2^i claims
  std::array<std::string, batch_classes> insert_batch_returning;  // ... answering with new rows
  std::array<std::string, batch_classes> select_batch;            // read of 2^i primary keys
  std::string select;          // plain read (autocommit: the latest committed row)
  std::string select_locking;  // shared-locking read: inside a caller's transaction, the latest row
  std::string probe;           // a record-last claim's read: one row, the record's columns NULL
                               // when there is none, and the server's time
  std::string insert_finished;         // a record-last claim's result, written last
  std::string insert_finished_commit;  // ... and the COMMIT, as one statement (MariaDB)
  std::string take_over_retry;         // also take_over_stale
  std::string take_over_expired;
  std::string finish;  // complete and fail
  std::string purge;
  std::string release;
  std::string repair;  // the record repaired() computed
  std::string points;  // a step's recovery point added
  // finish and points, each with the COMMIT as one statement (MariaDB): the COMMIT runs only
  // when the guarded UPDATE changed the row; otherwise the block ends with guard_refused.
  std::string finish_commit;
  std::string points_commit;
};

// What a guarded write sent with its COMMIT signals when its guard matched no row (the
// transaction is then left open, uncommitted, for the caller to roll back).
inline constexpr std::string_view guard_refused = "idem: the guarded write matched no row";

inline std::string with_guarded_commit(const std::string& update) {
  return fmt::format(
      "BEGIN NOT ATOMIC {}; IF ROW_COUNT() <> 1 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = "
      "'{}'; END IF; COMMIT; END",
      update, guard_refused);
}

inline RecordSql make_record_sql(const std::string& t) {
  constexpr std::string_view now = "UTC_TIMESTAMP(3)";
  RecordSql s;
  s.table = t;
  const std::string into = fmt::format(
      " INTO {} ({}) VALUES (?, ?, 0, 1, ?, ?, NULL, 0, 1, UTC_TIMESTAMP(3) + INTERVAL ? "
      "MICROSECOND, "
      "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND)",
      t, claim_columns);
  s.insert = "INSERT" + into;
  // IGNORE: a duplicate answers with no row instead of ER_DUP_ENTRY, which would arrive after
  // the column list and cost a statement reset. It can only skip duplicates here: every value
  // was validated before it got here (lengths, text, the ttl's bound). RETURNING lists only
  // what the server chose, its times (see fresh_record); a shorter answer measured about 5%
  // more claims per second than all 14 columns.
  s.insert_returning = "INSERT IGNORE" + into + " RETURNING lease_until, created_at, expire_at";
  // The batch's RETURNING lists the columns of a read, UTC_TIMESTAMP(3) included, so both decode
  // alike (a batch must tell which keys were inserted).
  const std::string returning = fmt::format(" RETURNING {}, UTC_TIMESTAMP(3)", record_columns);
  s.select =
      fmt::format("SELECT {}, UTC_TIMESTAMP(3) FROM {} WHERE idempotent_key = ? AND biz_type = ?",
                  record_columns, t);
  s.select_locking = s.select + " LOCK IN SHARE MODE";
  // The derived one-row table makes the answer carry the server's time when no record exists.
  s.probe = fmt::format(
      "SELECT {}, UTC_TIMESTAMP(3) FROM (SELECT 1) AS probe LEFT JOIN {} ON idempotent_key = ? "
      "AND biz_type = ?",
      record_columns, t);
  // IGNORE: meeting another request's row answers 0 rows instead of ER_DUP_ENTRY (every value
  // was validated before it got here, so a duplicate is all it can skip).
  const std::string finished_into =
      fmt::format(" INTO {} ({}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {}, ?, ?, ?, ?)", t,
                  record_columns, now);
  s.insert_finished = "INSERT IGNORE" + finished_into;
  // A compound statement (MariaDB's anonymous block, prepared like any other): the COMMIT
  // travels with the INSERT. Without IGNORE: meeting another request's row is ER_DUP_ENTRY,
  // which ends the block before its COMMIT and leaves the transaction open to roll back.
  s.insert_finished_commit = "BEGIN NOT ATOMIC INSERT" + finished_into + "; COMMIT; END";
  for (std::size_t c = 0; c < batch_classes; ++c) {
    std::string values;
    std::string keys;
    for (std::size_t i = 0; i < (std::size_t{1} << c); ++i) {
      values += i == 0 ? "" : ", ";
      values +=
          "(?, ?, 0, 1, ?, ?, NULL, 0, 1, UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, "
          "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), "
          "UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND)";
      keys += i == 0 ? "" : " OR ";
      keys += "(idempotent_key = ? AND biz_type = ?)";
    }
    // IGNORE only skips the duplicates: every value was validated before it got here.
    s.insert_batch[c] =
        fmt::format("INSERT IGNORE INTO {} ({}) VALUES {}", t, claim_columns, values);
    s.insert_batch_returning[c] = s.insert_batch[c] + returning;  // only the inserted rows
    s.select_batch[c] =
        fmt::format("SELECT {}, UTC_TIMESTAMP(3) FROM {} WHERE {}", record_columns, t, keys);
  }
  // The single-row writes name their index: their guards test indexed columns (status,
  // expire_at), and the optimizer would otherwise weigh, and at times choose, a range of
  // idx_stale or idx_expire over the primary key (it estimates few processing rows), which
  // costs a dive per statement and locks every row of that range.
  const std::string one_row = t + " FORCE INDEX (PRIMARY)";
  // A takeover writes the record take_over() computed from the row that was read, guarded
  // by the rule it was decided on, re-checked against the server's clock (so a completion in
  // between is never overwritten) and by the ticket read. An expired record starts afresh
  // without steps or repair. A retry (or a stale claim's takeover) keeps them, and is guarded
  // by the points read too: the stale worker, still alive, may add a step in between, and the
  // claim must answer with the steps it took over.
  const auto take_over = [&](std::string_view extra) {
    return fmt::format(
        "UPDATE {} SET status = ?, fence = ?, owner_token = ?, request_hash = ?, "
        "response_snapshot = NULL, retryable = 0, attempts = ?, lease_until = ?, created_at = ?, "
        "updated_at = ?, expire_at = ?{} WHERE idempotent_key = ? AND biz_type = ? AND ",
        one_row, extra);
  };
  s.take_over_retry =
      take_over("") +
      idem::backend::sql_guard::takeover_holds(backend::Decision::take_over_retry, now, "?", "?") +
      " AND " + std::string(points_are);
  s.take_over_expired =
      take_over(", recovery_points = NULL, repair_reason = NULL, repaired_at = NULL") +
      idem::backend::sql_guard::takeover_holds(backend::Decision::take_over_expired, now, "?", "?");
  s.finish = fmt::format(
      "UPDATE {} SET status = ?, response_snapshot = ?, retryable = ?, updated_at = {} "
      "WHERE idempotent_key = ? AND biz_type = ? AND {}",
      one_row, now, idem::backend::sql_guard::holds("?", "?"));
  s.purge = fmt::format("DELETE FROM {} WHERE {} ORDER BY expire_at LIMIT ?", t,
                        idem::backend::sql_guard::is_expired(now));
  s.release = fmt::format(
      "UPDATE {} SET status = ?, retryable = ?, response_snapshot = ?, updated_at = {} WHERE {} "
      "ORDER BY lease_until LIMIT ?",
      t, now, idem::backend::sql_guard::is_stale(now));
  // Every column repaired() may change, from the record it computed over the row read (its
  // times are the server's, as read with the row), guarded by the ticket read.
  s.repair = fmt::format(
      "UPDATE {} SET status = ?, fence = ?, owner_token = ?, response_snapshot = ?, "
      "retryable = ?, updated_at = ?, expire_at = ?, repair_reason = ?, repaired_at = ? "
      "WHERE idempotent_key = ? AND biz_type = ? AND {}",
      one_row, idem::backend::sql_guard::repair_holds("?", "?"));
  // Guarded by the claim and by the points read, so that no step of the same claim written
  // meanwhile (by another thread of the worker) is lost.
  s.points = fmt::format(
      "UPDATE {} SET recovery_points = ?, updated_at = {} "
      "WHERE idempotent_key = ? AND biz_type = ? AND {} AND {}",
      one_row, now, idem::backend::sql_guard::holds("?", "?"), points_are);
  s.finish_commit = with_guarded_commit(s.finish);
  s.points_commit = with_guarded_commit(s.points);
  return s;
}

// The SELECT of list(): the filter of backend/record_rules.hpp's matches() and the order of its
// listed_before(), judged at the server's UTC_TIMESTAMP(3). Stale claims walk idx_stale
// (status, lease_until) in lease order; a status, that index's prefix. Its values:
// list_values().
inline std::string list_sql(const RecordSql& s, const RecordQuery& q) {
  constexpr std::string_view now = "UTC_TIMESTAMP(3)";
  std::string where;
  const auto add = [&](std::string_view condition) {
    where += fmt::format("{}{}", where.empty() ? "" : " AND ", condition);
  };
  if (q.stale) add(idem::backend::sql_guard::is_stale(now));
  if (q.status) add("status = ?");
  if (!q.biz_type.empty()) add("biz_type = ?");
  if (q.not_updated_for) add("updated_at <= UTC_TIMESTAMP(3) - INTERVAL ? MICROSECOND");
  return fmt::format("SELECT {}, {} FROM {} WHERE {} ORDER BY {} LIMIT ?", record_columns, now,
                     s.table, where.empty() ? "1" : where, q.stale ? "lease_until" : "updated_at");
}

// The reads of stats(): the records by business type and status, in record_stats.hpp's order
// (biz_type is binary, so ORDER BY compares bytes as std::string does); then in one row the
// purge backlog (is_expired, what purge deletes), the stale claims and the oldest one's lease
// (is_stale, on idx_stale), the server's now, and the table's size from information_schema
// (values: the table's schema or NULL, and its name).
inline std::string counts_sql(const RecordSql& s) {
  return fmt::format(
      "SELECT biz_type, status, COUNT(*) FROM {} GROUP BY biz_type, status ORDER BY biz_type, "
      "status",
      s.table);
}
inline std::string totals_sql(const RecordSql& s) {
  constexpr std::string_view now = "UTC_TIMESTAMP(3)";
  return fmt::format(
      "SELECT (SELECT COUNT(*) FROM {0} WHERE {1}), (SELECT COUNT(*) FROM {0} WHERE {2}), "
      "(SELECT MIN(lease_until) FROM {0} WHERE {2}), {3}, (SELECT DATA_LENGTH + INDEX_LENGTH "
      "FROM information_schema.TABLES WHERE TABLE_SCHEMA = IFNULL(?, DATABASE()) AND "
      "TABLE_NAME = ?)",
      s.table, idem::backend::sql_guard::is_expired(now), idem::backend::sql_guard::is_stale(now),
      now);
}

inline std::int64_t micros(Duration d) {
  return static_cast<std::int64_t>(d.count()) * 1000;
}

// A record column's value, or CorruptRecord naming the column and what it held instead.
[[noreturn]] inline void corrupt(const Cell& cell, std::string_view column, std::string_view want) {
  throw CorruptRecord(fmt::format(
      "idem::mysql: column {} holds {}, not {}", column,
      cell.is_null() ? "NULL" : "\"" + idem::detail::printable(*cell.to_text()) + "\"", want));
}

template <class Int>
Int integer_of(const Cell& cell, std::string_view column) {
  if (const auto v = cell.integer<Int>()) return *v;
  corrupt(cell, column, "a number");
}

// idem's time columns hold UTC (idem writes and compares UTC_TIMESTAMP(3)).
inline TimePoint time_of(const Cell& cell, std::string_view column) {
  if (const auto t = cell.time()) return *t;
  corrupt(cell, column, "a DATETIME");
}

// Key, owner token, fingerprint and snapshot: bytes; NULL reads as empty (a NULL snapshot
// is no snapshot).
inline std::string text_of(const Cell& cell, std::string_view column) {
  if (cell.is_null()) return {};
  if (const auto t = cell.text()) return std::string(*t);
  corrupt(cell, column, "text");
}

// The status column: 0 to 3. A newer idem's status is unknown here: the record is refused (as
// CorruptRecord, never retried), so nothing runs on a state this idem does not understand.
inline Status status_of(const Cell& cell) {
  const int status = integer_of<int>(cell, "status");
  if (status < 0 || status > static_cast<int>(Status::outcome_unknown)) {
    throw CorruptRecord(
        fmt::format("idem::mysql: column status holds unknown status {} (this idem knows 0 to {})",
                    status, static_cast<int>(Status::outcome_unknown)));
  }
  return static_cast<Status>(status);
}

// The recovery points: NULL (no step finished) or a JSON object.
inline std::string points_of(const Cell& cell) {
  std::string points = text_of(cell, "recovery_points");
  if (!points.empty() && !nlohmann::json::parse(points, nullptr, false).is_object()) {
    corrupt(cell, "recovery_points", "a JSON object");
  }
  return points;
}

// A time that may be absent (NULL: never).
inline std::optional<TimePoint> optional_time_of(const Cell& cell, std::string_view column) {
  if (cell.is_null()) return std::nullopt;
  return time_of(cell, column);
}

struct RowRead {
  Record record;
  TimePoint now;  // the server's UTC_TIMESTAMP(3) when the row was read
};

inline RowRead decode_record(const Row& row) {
  if (row.size() != column::count_with_now) {
    throw CorruptRecord(
        fmt::format("idem::mysql: a record row has {} columns, not {} (is the table migrated? see "
                    "migrate_record_table)",
                    row.size(), std::size_t{column::count_with_now}));
  }
  std::optional<Key> key;
  try {
    key.emplace(text_of(row[column::biz_type], "biz_type"),
                text_of(row[column::key], "idempotent_key"));
  } catch (const InvalidArgument& e) {
    throw CorruptRecord(fmt::format("idem::mysql: a stored key is not valid: {}", e.what()));
  }
  return RowRead{Record{.key = std::move(*key),
                        .status = status_of(row[column::status]),
                        .ticket = Ticket{integer_of<std::uint64_t>(row[column::fence], "fence"),
                                         text_of(row[column::owner_token], "owner_token")},
                        .fingerprint = text_of(row[column::request_hash], "request_hash"),
                        .snapshot = text_of(row[column::response_snapshot], "response_snapshot"),
                        .retryable = integer_of<int>(row[column::retryable], "retryable") != 0,
                        .attempts = integer_of<std::uint32_t>(row[column::attempts], "attempts"),
                        .created_at = time_of(row[column::created_at], "created_at"),
                        .updated_at = time_of(row[column::updated_at], "updated_at"),
                        .lease_until = time_of(row[column::lease_until], "lease_until"),
                        .expire_at = time_of(row[column::expire_at], "expire_at"),
                        .recovery_points = points_of(row[column::recovery_points]),
                        .repair_reason = text_of(row[column::repair_reason], "repair_reason"),
                        .repaired_at = optional_time_of(row[column::repaired_at], "repaired_at")},
                 time_of(row[column::now], "UTC_TIMESTAMP(3)")};
}

// The row a single claim's INSERT IGNORE ... RETURNING created: the values the claim sent
// (status 0, fence 1, attempts 1, its token and fingerprint, no snapshot, steps or repair)
// with the times the server returned; created_at and updated_at are the same
// UTC_TIMESTAMP(3).
inline Record fresh_record(const Row& row, const Key& key, const std::string& token,
                           std::string_view fingerprint) {
  if (row.size() != 3) throw CorruptRecord("idem::mysql: unexpected column count from RETURNING");
  return backend::claim_record(key, token, fingerprint, time_of(row[1], "created_at"),
                               time_of(row[0], "lease_until"), time_of(row[2], "expire_at"));
}

// Optional columns are NULL when empty (no steps, no repair), so that "" and NULL never both
// mean "none" in the table.
inline Param blob_or_null(std::string_view bytes) {
  return bytes.empty() ? Param(nullptr) : Param::blob(bytes);
}
inline Param time_or_null(const std::optional<TimePoint>& t) {
  return t ? Param::time(*t) : Param(nullptr);
}

// The values of each single-row statement, in its placeholders' order: one copy for the
// blocking RecordOps and the coroutine AsyncRecordOps.
inline std::vector<Param> key_values(const Key& key) {
  return {key.id(), key.biz_type()};
}
inline std::vector<Param> claim_values(const Key& key, std::string_view fp, const Options& o,
                                       const std::string& token) {
  return {key.id(), key.biz_type(), token, fp, micros(o.lease), micros(o.ttl)};
}
inline std::vector<Param> takeover_values(backend::Decision d, const Record& next,
                                          const Ticket& read) {
  std::vector<Param> values;
  backend::takeover_values(d, next, read, [&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<V, TimePoint>)
      values.push_back(Param::time(v));
    else if constexpr (std::is_same_v<V, backend::PointsValue>)
      values.push_back(Param::blob(v.bytes));
    else
      values.emplace_back(v);
  });
  return values;
}
inline std::vector<Param> finish_values(const Key& key, const Ticket& t, std::string_view snapshot,
                                        Status to, bool retryable) {
  return {static_cast<int>(to),
          Param::blob(snapshot),
          backend::stored_retryable(to, retryable),
          key.id(),
          key.biz_type(),
          t.fence,
          t.owner};
}
// A record-last claim's finished record (its updated_at: the server's now at the INSERT).
inline std::vector<Param> finished_values(const Record& r) {
  return {r.key.id(),
          r.key.biz_type(),
          static_cast<int>(r.status),
          r.ticket.fence,
          r.ticket.owner,
          r.fingerprint,
          Param::blob(r.snapshot),
          r.retryable ? 1 : 0,
          r.attempts,
          Param::time(r.lease_until),
          Param::time(r.created_at),
          Param::time(r.expire_at),
          blob_or_null(r.recovery_points),
          blob_or_null(r.repair_reason),
          time_or_null(r.repaired_at)};
}
inline std::vector<Param> purge_values(std::size_t batch) {
  return {static_cast<std::uint64_t>(batch)};
}
inline std::vector<Param> release_values(std::size_t batch) {
  return {static_cast<int>(backend::released_status), backend::released_retryable,
          Param::blob(backend::released_snapshot), static_cast<std::uint64_t>(batch)};
}
inline std::vector<Param> repair_values(const Record& next, const Ticket& read) {
  return {static_cast<int>(next.status),
          next.ticket.fence,
          next.ticket.owner,
          Param::blob(next.snapshot),
          next.retryable ? 1 : 0,
          Param::time(next.updated_at),
          Param::time(next.expire_at),
          blob_or_null(next.repair_reason),
          time_or_null(next.repaired_at),
          next.key.id(),
          next.key.biz_type(),
          read.fence,
          read.owner};
}
inline std::vector<Param> points_values(const Key& key, const Ticket& t, std::string_view before,
                                        std::string_view after) {
  return {Param::blob(after), key.id(), key.biz_type(), t.fence, t.owner, Param::blob(before)};
}
// list_sql()'s values. A not_updated_for beyond any stored time is held to one that still is
// (so that its microseconds cannot overflow).
inline std::vector<Param> list_values(const RecordQuery& q) {
  std::vector<Param> values;
  if (q.status) values.emplace_back(static_cast<int>(*q.status));
  if (!q.biz_type.empty()) values.emplace_back(q.biz_type);
  if (q.not_updated_for) {
    constexpr Duration longest = std::chrono::hours{24 * 365 * 1000};
    values.emplace_back(micros(std::min(*q.not_updated_for, longest)));
  }
  values.emplace_back(static_cast<std::uint64_t>(q.limit));
  return values;
}

// What list() answers: the records, in the order the server sent them.
inline std::vector<Record> list_answer(const std::vector<Row>& rows) {
  std::vector<Record> records;
  records.reserve(rows.size());
  for (const Row& row : rows)
    records.push_back(decode_record(row).record);
  return records;
}

// What the reads of stats() answer (counts_sql, then totals_sql's one row).
inline RecordStats stats_answer(const std::vector<Row>& counts, const std::vector<Row>& totals) {
  RecordStats stats;
  for (const Row& row : counts) {
    stats.counts.push_back({.biz_type = text_of(row.at(0), "biz_type"),
                            .status = status_of(row.at(1)),
                            .records = integer_of<std::uint64_t>(row.at(2), "COUNT(*)")});
  }
  const Row& row = totals.at(0);
  stats.purge_backlog = integer_of<std::uint64_t>(row.at(0), "COUNT(*)");
  stats.stale_claims = integer_of<std::uint64_t>(row.at(1), "COUNT(*)");
  if (!row.at(2).is_null()) stats.oldest_stale_lease = time_of(row.at(2), "lease_until");
  stats.now = time_of(row.at(3), "UTC_TIMESTAMP(3)");
  if (!row.at(4).is_null()) stats.table_bytes = integer_of<std::uint64_t>(row.at(4), "DATA_LENGTH");
  return stats;
}

// What a read of `key` answers: its row, if any, with the server's now.
inline std::optional<backend::RecordRead> read_answer(const std::vector<Row>& rows,
                                                      const Key& key) {
  if (rows.empty()) return std::nullopt;
  RowRead row = decode_record(rows.front());
  backend::require_key_read("idem::mysql", key, row.record);
  return backend::RecordRead{std::move(row.record), row.now};
}

// What a single claim's INSERT IGNORE ... RETURNING answers: the fresh claim, or nullopt when
// IGNORE skipped the duplicate.
inline std::optional<Record> returning_answer(const std::vector<Row>& rows, const Key& key,
                                              const std::string& token, std::string_view fp) {
  if (rows.size() > 1) {
    throw StoreError("idem::mysql: INSERT ... RETURNING answered more than one row", true);
  }
  if (rows.empty()) return std::nullopt;
  return fresh_record(rows.front(), key, token, fp);
}

// A plain INSERT's claim as read back (the server chose its times): it must be ours.
inline Record read_back(std::optional<backend::RecordRead> row, const std::string& token) {
  if (!row || row->record.ticket.owner != token) {
    throw StoreError("idem::mysql: a claimed row could not be read back", true);
  }
  return std::move(row->record);
}

// A batch claim's values, padded to its batch_class by repeating the last request: six per key
// for the multi-row INSERT, and the key alone for the read of the same rows. Request i's owner
// token is tokens[i].
inline std::vector<Param> batch_claim_values(std::span<const ClaimRequest* const> requests,
                                             std::span<const std::string> tokens,
                                             const Options& o) {
  const std::size_t padded = std::size_t{1} << batch_class(requests.size());
  std::vector<Param> params;
  params.reserve(padded * 6);
  const auto lease = micros(o.lease);
  const auto ttl = micros(o.ttl);
  for (std::size_t i = 0; i < padded; ++i) {
    const std::size_t j = std::min(i, requests.size() - 1);
    const ClaimRequest& r = *requests[j];
    params.insert(params.end(), {Param(r.key.id()), Param(r.key.biz_type()), Param(tokens[j]),
                                 Param(r.fingerprint), Param(lease), Param(ttl)});
  }
  return params;
}
inline std::vector<Param> batch_key_values(std::span<const ClaimRequest* const> requests) {
  const std::size_t padded = std::size_t{1} << batch_class(requests.size());
  std::vector<Param> keys;
  keys.reserve(padded * 2);
  for (std::size_t i = 0; i < padded; ++i) {
    const ClaimRequest& r = *requests[std::min(i, requests.size() - 1)];
    keys.insert(keys.end(), {Param(r.key.id()), Param(r.key.biz_type())});
  }
  return keys;
}

// What a batch's INSERT IGNORE ... RETURNING answered (the rows it created): every request's
// fresh claim when it created each key's row with that request's token; nullopt when some key
// was there already (the batch then reads the rows and settles each key).
inline std::optional<std::vector<ClaimResult>> batch_created_answer(
    const std::vector<Row>& created, std::span<const ClaimRequest* const> requests,
    std::span<const std::string> tokens) {
  if (created.size() != requests.size()) return std::nullopt;
  std::unordered_map<Key, Record> mine;
  for (const Row& row : created) {
    Record r = decode_record(row).record;
    Key key = r.key;
    mine.emplace(std::move(key), std::move(r));
  }
  std::vector<ClaimResult> out;
  out.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto it = mine.find(requests[i]->key);
    if (it == mine.end() || it->second.ticket.owner != tokens[i]) return std::nullopt;
    out.push_back({Verdict::acquired, std::move(it->second)});
  }
  return out;
}

// The rows a batch's read found, by key, each with the server's now.
inline std::unordered_map<Key, backend::RecordRead> batch_rows_answer(
    const std::vector<Row>& rows) {
  std::unordered_map<Key, backend::RecordRead> found;
  for (const Row& row : rows) {
    RowRead read = decode_record(row);
    Key key = read.record.key;
    found.emplace(std::move(key), backend::RecordRead{std::move(read.record), read.now});
  }
  return found;
}

}  // namespace idem::mysql::detail
