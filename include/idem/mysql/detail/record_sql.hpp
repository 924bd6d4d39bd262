#pragma once
// The SQL idem::mysql issues against the record table, and the decoding of its rows.
// Every statement is a single-row operation on the primary key, except the batch claim
// (a multi-row INSERT IGNORE and a read of the same primary keys) and the housekeeping ones,
// which walk idx_expire / idx_stale in LIMITed batches.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/mysql/param.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/status.hpp"
#include "idem/store/record_rules.hpp"
#include "idem/store/sql_guards.hpp"
#include "idem/store/steps.hpp"
#include "idem/ticket.hpp"

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

struct RecordSql {
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
  std::string take_over_retry;
  std::string take_over_expired;
  std::string finish;  // complete and fail
  std::string purge;
  std::string release;
};

inline RecordSql make_record_sql(const std::string& t) {
  constexpr std::string_view columns =
      "idempotent_key, biz_type, status, fence, owner_token, request_hash, response_snapshot, "
      "retryable, "
      "attempts, lease_until, created_at, updated_at, expire_at";
  constexpr std::string_view now = "UTC_TIMESTAMP(3)";
  RecordSql s;
  const std::string into = fmt::format(
      " INTO {} ({}) VALUES (?, ?, 0, 1, ?, ?, NULL, 0, 1, UTC_TIMESTAMP(3) + INTERVAL ? "
      "MICROSECOND, "
      "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND)",
      t, columns);
  s.insert = "INSERT" + into;
  // IGNORE: a duplicate answers with no row instead of ER_DUP_ENTRY, which would arrive after
  // the column list and cost a statement reset. It can only skip duplicates here: every value
  // was validated before it got here (lengths, text, the ttl's bound). RETURNING lists only
  // what the server chose, its times (see fresh_record); a shorter answer measured about 5%
  // more claims per second than all 14 columns.
  s.insert_returning = "INSERT IGNORE" + into + " RETURNING lease_until, created_at, expire_at";
  // The batch's RETURNING lists the columns of a read, UTC_TIMESTAMP(3) included, so both decode
  // alike (a batch must tell which keys were inserted).
  const std::string returning = fmt::format(" RETURNING {}, UTC_TIMESTAMP(3)", columns);
  s.select = fmt::format(
      "SELECT {}, UTC_TIMESTAMP(3) FROM {} WHERE idempotent_key = ? AND biz_type = ?", columns, t);
  s.select_locking = s.select + " LOCK IN SHARE MODE";
  // The derived one-row table makes the answer carry the server's time when no record exists.
  s.probe = fmt::format(
      "SELECT {}, UTC_TIMESTAMP(3) FROM (SELECT 1) AS probe LEFT JOIN {} ON idempotent_key = ? "
      "AND biz_type = ?",
      columns, t);
  // IGNORE: meeting another request's row answers 0 rows instead of ER_DUP_ENTRY (every value
  // was validated before it got here, so a duplicate is all it can skip).
  const std::string finished_into =
      fmt::format(" INTO {} ({}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {}, ?)", t, columns, now);
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
    s.insert_batch[c] = fmt::format("INSERT IGNORE INTO {} ({}) VALUES {}", t, columns, values);
    s.insert_batch_returning[c] = s.insert_batch[c] + returning;  // only the inserted rows
    s.select_batch[c] =
        fmt::format("SELECT {}, UTC_TIMESTAMP(3) FROM {} WHERE {}", columns, t, keys);
  }
  // A takeover writes the record take_over() computed from the row that was read, guarded
  // by the rule it was decided on, re-checked against the server's clock (so a completion in
  // between is never overwritten) and by the ticket read.
  const std::string take_over = fmt::format(
      "UPDATE {} SET status = ?, fence = ?, owner_token = ?, request_hash = ?, "
      "response_snapshot = NULL, retryable = 0, attempts = ?, lease_until = ?, created_at = ?, "
      "updated_at = ?, expire_at = ? WHERE idempotent_key = ? AND biz_type = ? AND ",
      t);
  s.take_over_retry =
      take_over + idem::detail::sql_guard::takeover_holds(Decision::take_over_retry, now, "?", "?");
  s.take_over_expired = take_over + idem::detail::sql_guard::takeover_holds(
                                        Decision::take_over_expired, now, "?", "?");
  s.finish = fmt::format(
      "UPDATE {} SET status = ?, response_snapshot = ?, retryable = ?, updated_at = {} "
      "WHERE idempotent_key = ? AND biz_type = ? AND {}",
      t, now, idem::detail::sql_guard::holds("?", "?"));
  s.purge = fmt::format("DELETE FROM {} WHERE {} ORDER BY expire_at LIMIT ?", t,
                        idem::detail::sql_guard::is_expired(now));
  s.release = fmt::format(
      "UPDATE {} SET status = ?, retryable = ?, response_snapshot = ?, updated_at = {} WHERE {} "
      "ORDER BY lease_until LIMIT ?",
      t, now, idem::detail::sql_guard::is_stale(now));
  return s;
}

inline std::int64_t micros(Duration d) {
  return static_cast<std::int64_t>(d.count()) * 1000;
}

// A record column's value, or CorruptRecord naming the column and what it held instead.
[[noreturn]] inline void corrupt(const Cell& cell, std::string_view column, std::string_view want) {
  throw CorruptRecord(fmt::format("idem::mysql: column {} holds {}, not {}", column,
                                  cell.is_null() ? "NULL" : "\"" + *cell.to_text() + "\"", want));
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

struct RowRead {
  Record record;
  TimePoint now;  // the server's UTC_TIMESTAMP(3) when the row was read
};

inline RowRead decode_record(const Row& row) {
  if (row.size() != 14) throw CorruptRecord("idem::mysql: unexpected column count in a record row");
  std::optional<Key> key;
  try {
    key.emplace(text_of(row[1], "biz_type"), text_of(row[0], "idempotent_key"));
  } catch (const InvalidArgument& e) {
    throw CorruptRecord(fmt::format("idem::mysql: a stored key is not valid: {}", e.what()));
  }
  const int status = integer_of<int>(row[2], "status");
  if (status < 0 || status > 2)
    throw CorruptRecord(fmt::format("idem::mysql: unknown status {}", status));
  return RowRead{Record{.key = std::move(*key),
                        .status = static_cast<Status>(status),
                        .ticket = Ticket{integer_of<std::uint64_t>(row[3], "fence"),
                                         text_of(row[4], "owner_token")},
                        .fingerprint = text_of(row[5], "request_hash"),
                        .snapshot = text_of(row[6], "response_snapshot"),
                        .retryable = integer_of<int>(row[7], "retryable") != 0,
                        .attempts = integer_of<std::uint32_t>(row[8], "attempts"),
                        .created_at = time_of(row[10], "created_at"),
                        .updated_at = time_of(row[11], "updated_at"),
                        .lease_until = time_of(row[9], "lease_until"),
                        .expire_at = time_of(row[12], "expire_at")},
                 time_of(row[13], "UTC_TIMESTAMP(3)")};
}

// The row a single claim's INSERT IGNORE ... RETURNING created: the values the claim sent
// (status 0, fence 1, attempts 1, its token and fingerprint, no snapshot) with the times the
// server returned; created_at and updated_at are the same UTC_TIMESTAMP(3).
inline Record fresh_record(const Row& row, const Key& key, const std::string& token,
                           std::string_view fingerprint) {
  if (row.size() != 3) throw CorruptRecord("idem::mysql: unexpected column count from RETURNING");
  return claim_record(key, token, fingerprint, time_of(row[1], "created_at"),
                      time_of(row[0], "lease_until"), time_of(row[2], "expire_at"));
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
inline std::vector<Param> takeover_values(const Record& next, const Ticket& read) {
  return {static_cast<int>(next.status),
          next.ticket.fence,
          next.ticket.owner,
          next.fingerprint,
          next.attempts,
          Param::time(next.lease_until),
          Param::time(next.created_at),
          Param::time(next.updated_at),
          Param::time(next.expire_at),
          next.key.id(),
          next.key.biz_type(),
          read.fence,
          read.owner};
}
inline std::vector<Param> finish_values(const Key& key, const Ticket& t, std::string_view snapshot,
                                        Status to, bool retryable) {
  return {static_cast<int>(to),
          Param::blob(snapshot),
          stored_retryable(to, retryable),
          key.id(),
          key.biz_type(),
          t.fence,
          t.owner};
}
inline std::vector<Param> purge_values(std::size_t batch) {
  return {static_cast<std::uint64_t>(batch)};
}
inline std::vector<Param> release_values(std::size_t batch) {
  return {static_cast<int>(released_status), released_retryable, Param::blob(released_snapshot),
          static_cast<std::uint64_t>(batch)};
}

// What a read answers: the row, if any, with the server's now.
inline std::optional<RecordRead> read_answer(const std::vector<Row>& rows) {
  if (rows.empty()) return std::nullopt;
  RowRead row = decode_record(rows.front());
  return RecordRead{std::move(row.record), row.now};
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
inline Record read_back(std::optional<RecordRead> row, const std::string& token) {
  if (!row || row->record.ticket.owner != token) {
    throw StoreError("idem::mysql: a claimed row could not be read back", true);
  }
  return std::move(row->record);
}

}  // namespace idem::mysql::detail
