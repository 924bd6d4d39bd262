#pragma once
// The record operations of idem::pg::Store on one connection, and the Backend that hands them
// to the store skeleton (idem/backend/store_skeleton.hpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "idem/backend/record_columns.hpp"
#include "idem/backend/record_rules.hpp"
#include "idem/backend/steps.hpp"
#include "idem/backend/store_skeleton.hpp"
#include "idem/clock.hpp"
#include "idem/detail/utf8.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/pg/connection.hpp"
#include "idem/pg/detail/record_sql.hpp"
#include "idem/pg/errors.hpp"
#include "idem/pg/pool.hpp"
#include "idem/pg/schema.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/record_stats.hpp"
#include "idem/same_transaction/bound_sql_store.hpp"
#include "idem/status.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"

namespace idem::pg::detail {

// What a text column holds: UTF-8 without NUL bytes. A snapshot or recovery point that is not
// is refused before anything is written (JSON text always is).
inline void require_storable_text(std::string_view text, std::string_view what) {
  for (std::size_t i = 0; i < text.size();) {
    const idem::detail::TextCheck check = idem::detail::check_text(text.substr(i));
    if (check.fault == idem::detail::TextFault::none) return;
    const std::size_t at = i + check.offset;
    const auto byte = static_cast<unsigned char>(text[at]);
    if (check.fault == idem::detail::TextFault::invalid_utf8 || byte == 0) {
      throw InvalidArgument(
          fmt::format("idem::pg: {} must be UTF-8 text without NUL bytes (PostgreSQL's text); "
                      "byte {} is not",
                      what, at));
    }
    i = at + (byte < 0x80 ? 1 : 2);  // another control character (C0, DEL or C1) is text
  }
}

// The values of a finished record's INSERT, in its placeholders' order.
inline std::vector<Param> finished_values(const Record& r) {
  require_storable_text(r.snapshot, "a snapshot");
  require_storable_text(r.recovery_points, "a step's result");
  return {r.key.id(),
          r.key.biz_type(),
          static_cast<int>(r.status),
          r.ticket.fence,
          r.ticket.owner,
          r.fingerprint,
          Param::text_or_null(r.snapshot),
          r.retryable,
          r.attempts,
          Param::time(r.lease_until),
          Param::time(r.created_at),
          Param::time(r.expire_at),
          Param::text_or_null(r.recovery_points),
          Param::text_or_null(r.repair_reason),
          Param::time_or_null(r.repaired_at)};
}

// The values and answers of the record statements (make_record_sql), apart from any
// connection: the blocking RecordOps below and the coroutine AsyncRecordOps
// (idem/pg/async_store.hpp) send the same statements and decode the same way.

inline std::vector<Param> key_values(const Key& key) {
  return {key.id(), key.biz_type()};
}

// A row read by select (or none): the record and the server's now.
inline std::optional<backend::RecordRead> read_answer(const Result& r, const Key& key) {
  if (r.rows() == 0) return std::nullopt;
  backend::RecordRead read = decode_record(r, 0);
  backend::require_key_read("idem::pg", key, read.record);
  return read;
}

inline std::vector<Param> claim_values(const Key& key, std::string_view fp, const Options& o,
                                       const std::string& token) {
  return {key.id(), key.biz_type(), token, fp, o.lease.count(), o.ttl.count()};
}

// The fresh claim, or nullopt when the key exists (no row from ON CONFLICT DO NOTHING).
inline std::optional<Record> claim_answer(const Result& r, const Key& key, std::string_view fp,
                                          const std::string& token) {
  if (r.rows() == 0) return std::nullopt;
  if (r.columns() != 3) throw CorruptRecord("idem::pg: unexpected column count from RETURNING");
  return backend::claim_record(key, token, fp, time_of(r, 0, 1, "created_at"),
                               time_of(r, 0, 0, "lease_until"), time_of(r, 0, 2, "expire_at"));
}

inline std::vector<Param> takeover_values(backend::Decision d, const Record& next,
                                          const Ticket& read) {
  std::vector<Param> values;
  backend::takeover_values(d, next, read, [&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<V, TimePoint>)
      values.push_back(Param::time(v));
    else if constexpr (std::is_same_v<V, backend::PointsValue>)
      values.emplace_back(v.bytes);
    else
      values.emplace_back(v);
  });
  return values;
}

inline std::vector<Param> finish_values(const Key& key, const Ticket& t, std::string_view snapshot,
                                        Status to, bool retryable) {
  require_storable_text(snapshot, "a snapshot");
  return {static_cast<int>(to),
          Param::text_or_null(snapshot),
          backend::stored_retryable(to, retryable),
          key.id(),
          key.biz_type(),
          t.fence,
          t.owner};
}

inline std::vector<Param> purge_values(std::size_t batch) {
  return {static_cast<std::int64_t>(batch)};
}

inline std::vector<Param> release_values(std::size_t batch) {
  return {static_cast<int>(backend::released_status), backend::released_retryable,
          backend::released_snapshot, static_cast<std::int64_t>(batch)};
}

inline std::vector<Param> repair_values(const Record& next, const Ticket& read) {
  require_storable_text(next.snapshot, "a snapshot");
  require_storable_text(next.repair_reason, "a repair reason");
  return {static_cast<int>(next.status),
          next.ticket.fence,
          next.ticket.owner,
          Param::text_or_null(next.snapshot),
          next.retryable,
          Param::time(next.updated_at),
          Param::time(next.expire_at),
          Param::text_or_null(next.repair_reason),
          Param::time_or_null(next.repaired_at),
          next.key.id(),
          next.key.biz_type(),
          read.fence,
          read.owner};
}

inline std::vector<Param> points_values(const Key& key, const Ticket& held, std::string_view before,
                                        std::string_view after) {
  require_storable_text(after, "a step's result");
  return {Param::text_or_null(after), key.id(), key.biz_type(), held.fence, held.owner, before};
}

// A batch claim's values (make_record_sql's claim_batch): the keys, tokens and fingerprints as
// four text arrays, request i's token tokens[i]; then the lease and the ttl.
inline std::vector<Param> claim_batch_values(std::span<const ClaimRequest* const> requests,
                                             std::span<const std::string> tokens,
                                             const Options& o) {
  std::vector<std::string_view> ids, types, fps;
  for (const ClaimRequest* r : requests) {
    ids.push_back(r->key.id());
    types.push_back(r->key.biz_type());
    fps.push_back(r->fingerprint);
  }
  const auto view = [](std::string_view s) { return s; };
  const auto text = [](const std::string& s) -> const std::string& { return s; };
  std::vector<Param> values;
  values.reserve(6);
  values.emplace_back(text_array(ids, view));
  values.emplace_back(text_array(types, view));
  values.emplace_back(text_array(tokens, text));
  values.emplace_back(text_array(fps, view));
  values.emplace_back(o.lease.count());
  values.emplace_back(o.ttl.count());
  return values;
}

// The rows a batch claim answered (those it created and those it met), by key.
inline std::unordered_map<Key, backend::RecordRead> batch_rows_answer(const Result& r) {
  std::unordered_map<Key, backend::RecordRead> rows;
  for (int row = 0; row < r.rows(); ++row) {
    backend::RecordRead read = decode_record(r, row);
    Key key = read.record.key;
    rows.emplace(std::move(key), std::move(read));
  }
  return rows;
}

inline std::vector<Record> list_answer(const Result& r) {
  std::vector<Record> found;
  found.reserve(static_cast<std::size_t>(r.rows()));
  for (int row = 0; row < r.rows(); ++row)
    found.push_back(decode_record(r, row).record);
  return found;
}

// The probe's answer: the row, if any, and the server's now.
inline same_transaction::RecordProbe probe_answer(const Result& r, const Key& key) {
  if (r.rows() != 1) throw CorruptRecord("idem::pg: the probe did not answer one row");
  if (r.is_null(0, column::key)) {
    if (r.columns() != column::count_with_now) {
      throw CorruptRecord("idem::pg: unexpected column count from the probe");
    }
    return {std::nullopt, time_of(r, 0, column::now, "statement_timestamp()")};
  }
  backend::RecordRead read = decode_record(r, 0);
  backend::require_key_read("idem::pg", key, read.record);
  return {std::move(read.record), read.now};
}

// The record operations on one connection. Under READ COMMITTED (the standalone store's
// autocommit statements) every statement reads the latest committed rows.
class RecordOps {
 public:
  // The most distinct keys claim_batch sends in one statement.
  static constexpr std::size_t max_batch_rows = 128;

  explicit RecordOps(const TableName& name) : name_(name.quoted()), sql_(make_record_sql(name_)) {}

  std::optional<backend::RecordRead> read(Connection& c, const Key& key, bool /*bound*/) const {
    return read_answer(c.exec(sql_.select, key_values(key), "read"), key);
  }

  // The fresh claim, or nullopt when the key exists (no row from ON CONFLICT DO NOTHING).
  std::optional<Record> insert(Connection& c, const Key& key, std::string_view fp, const Options& o,
                               const std::string& token, bool /*bound*/) const {
    return claim_answer(c.exec(sql_.insert, claim_values(key, fp, o, token), "claim"), key, fp,
                        token);
  }

  // Claims up to max_batch_rows distinct keys in one statement (make_record_sql's
  // claim_batch); request i has its own owner token tokens[i], so that a retried chunk
  // recognises the rows its lost try created. A key the answer does not settle (a takeover is
  // due, its row was committed meanwhile by a transaction the INSERT waited for, or the row
  // vanished) is claimed on its own with its token, so every request gets the single claim's
  // answer.
  std::vector<ClaimResult> claim_chunk(Connection& c, std::span<const ClaimRequest* const> requests,
                                       std::span<const std::string> tokens,
                                       const Options& o) const {
    auto rows = batch_rows_answer(
        c.exec(sql_.claim_batch, claim_batch_values(requests, tokens, o), "claim_batch"));
    auto answers = backend::batch_answers(requests, rows);
    return backend::settle_batch("idem::pg", *this, c, requests, tokens, o, answers);
  }

  // A record-last claim's read: plain (under READ COMMITTED the latest committed row, under
  // REPEATABLE READ or SERIALIZABLE the transaction's snapshot), so that a duplicate holds no
  // lock while its body runs.
  same_transaction::RecordProbe probe(Connection& c, const Key& key) const {
    return probe_answer(c.exec(sql_.probe, key_values(key), "claim"), key);
  }

  // A record-last claim's finished record (its updated_at: the server's now); false when
  // another request's row holds the key.
  bool insert_finished(Connection& c, const Record& r) const {
    return c.execute(sql_.insert_finished, finished_values(r), "record") == 1;
  }
  // The same and the COMMIT, in one round trip (a pipeline); false: another request's row
  // holds the key, and nothing was committed (the transaction is failed, to roll back).
  bool insert_finished_and_commit(Connection& c, const Record& r) const {
    try {
      c.exec_and_commit(sql_.insert_finished_strict, finished_values(r), "record");
      return true;
    } catch (const StoreError& e) {
      if (e.diagnostics().sqlstate == sqlstate::unique_violation) return false;
      throw;
    }
  }

  bool write_takeover(Connection& c, backend::Decision d, const Record& next,
                      const Ticket& read) const {
    return c.execute(takeover_sql(d), takeover_values(d, next, read), "takeover") == 1;
  }

  // The fenced UPDATE of complete/fail. Returns true if it changed the row.
  bool finish(Connection& c, const Key& key, const Ticket& t, std::string_view snapshot, Status to,
              bool retryable) const {
    return c.execute(sql_.finish, finish_values(key, t, snapshot, to, retryable), "record") == 1;
  }

  std::size_t purge(Connection& c, std::size_t batch) const {
    return static_cast<std::size_t>(c.execute(sql_.purge, purge_values(batch), "purge_expired"));
  }

  std::size_t release(Connection& c, std::size_t batch) const {
    return static_cast<std::size_t>(
        c.execute(sql_.release, release_values(batch), "release_stale"));
  }

  // Writes repaired() over the row read, while it still carries the ticket read.
  bool write_repair(Connection& c, const Record& next, const Ticket& read) const {
    return c.execute(sql_.repair, repair_values(next, read), "repair") == 1;
  }

  // Replaces the recovery points `before` (as read) with `after` while `held` holds.
  bool write_points(Connection& c, const Key& key, const Ticket& held, std::string_view before,
                    std::string_view after) const {
    return c.execute(sql_.points, points_values(key, held, before, after), "record_step") == 1;
  }

  std::vector<Record> list(Connection& c, const RecordQuery& query) const {
    std::vector<Param> values;
    const std::string sql = list_sql(sql_, query, values);
    return list_answer(c.exec(sql, values, "list"));
  }

  RecordStats stats(Connection& c) const {
    RecordStats stats;
    const Result counts = c.exec(counts_sql(sql_), {}, "stats");
    for (int row = 0; row < counts.rows(); ++row) {
      const std::int64_t status = integer_of(counts, row, 1, "status");
      if (status < 0 || status > static_cast<std::int64_t>(Status::outcome_unknown)) {
        throw CorruptRecord(
            fmt::format("idem::pg: column status holds an unknown status {}", status));
      }
      stats.counts.push_back(
          {.biz_type = text_of(counts, row, 0),
           .status = static_cast<Status>(status),
           .records = static_cast<std::uint64_t>(integer_of(counts, row, 2, "count"))});
    }
    const Result totals = c.exec(totals_sql(sql_), {name_}, "stats");
    stats.purge_backlog = static_cast<std::uint64_t>(integer_of(totals, 0, 0, "count"));
    stats.stale_claims = static_cast<std::uint64_t>(integer_of(totals, 0, 1, "count"));
    stats.oldest_stale_lease = optional_time_of(totals, 0, 2, "lease_until");
    stats.now = time_of(totals, 0, 3, "statement_timestamp()");
    if (const auto bytes = totals.integer(0, 4)) {
      stats.table_bytes = static_cast<std::uint64_t>(*bytes);
    }
    return stats;
  }

  const RecordSql& sql() const noexcept { return sql_; }
  const std::string& takeover_sql(backend::Decision d) const noexcept {
    return d == backend::Decision::take_over_expired ? sql_.take_over_expired
                                                     : sql_.take_over_retry;
  }

 private:
  std::string name_;  // quoted
  RecordSql sql_;     // built once, when the store is made
};

// A COMMIT's answer: a transaction that failed earlier (an error of the service's own SQL that
// the body caught) answers COMMIT with ROLLBACK; say so rather than report a commit.
inline void require_committed(const Result& r, std::string_view who) {
  if (std::string_view(PQcmdStatus(r.native())) == "ROLLBACK") {
    throw StoreError(fmt::format("{}: the transaction had failed (a statement in it was "
                                 "refused), so its COMMIT rolled it back",
                                 who),
                     false);
  }
}

// idem::pg for the store skeleton (idem/backend/store_skeleton.hpp).
struct Backend : backend::BackendTypes<pg::Connection, PGconn, pg::Pool, RecordOps> {
  static constexpr std::string_view name = "idem::pg";
  // A duplicate's claim waits on the row the first transaction inserted until that one ends;
  // waiting again for a processing row would hold the caller's transaction (and its locks)
  // open: the guard answers in_progress at once instead.
  static constexpr bool bound_supports_wait = false;
  static constexpr std::string_view begin_hint = "BEGIN";
  // Also a transaction that failed and waits for its ROLLBACK: a claim there fails with the
  // server's own error rather than running outside it.
  static bool in_transaction(Connection& c) noexcept { return c.in_transaction(); }

  // Only the server's transient errors are retried; a connection lost with a statement on it
  // may have run it (the next try looks first). A pool that has no connection free is
  // reported at once (the caller decides whether to try again).
  static backend::FailureKind classify(const StoreError& e) noexcept {
    const std::string& state = e.diagnostics().sqlstate;
    if (!is_transient(state)) return backend::FailureKind::fatal;
    return is_connection_lost(state) ? backend::FailureKind::reply_lost
                                     : backend::FailureKind::transient;
  }
};

}  // namespace idem::pg::detail
