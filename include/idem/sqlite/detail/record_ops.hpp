#pragma once
// The record operations of idem::sqlite::Store on one connection, and the Backend that hands them
// to the store skeleton (idem/backend/store_skeleton.hpp) and the bound store
// (idem/same_transaction/bound_sql_store.hpp).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/backend/record_columns.hpp"
#include "idem/backend/record_rules.hpp"
#include "idem/clock.hpp"
#include "idem/detail/checks.hpp"
#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/retry_policy.hpp"
#include "idem/same_transaction/bound_sql_store.hpp"
#include "idem/same_transaction/claim_ledger.hpp"
#include "idem/sqlite/connection.hpp"
#include "idem/sqlite/detail/record_sql.hpp"
#include "idem/sqlite/errors.hpp"
#include "idem/sqlite/pool.hpp"
#include "idem/sqlite/schema.hpp"
#include "idem/sqlite/schema_check.hpp"
#include "idem/sqlite/store_params.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem::sqlite {

namespace detail {

// The record operations on one connection, shared by both modes (see
// idem/same_transaction/bound_sql_store.hpp). Inside a write transaction SQLite reads the latest
// committed state, so `bound` changes nothing here.
class RecordOps {
 public:
  RecordOps(const TableName& table, std::function<TimePoint()> clock)
      : table_(table), sql_(make_record_sql(table)), clock_(std::move(clock)) {}

  std::optional<backend::RecordRead> read(Connection& c, const Key& key, bool /*bound*/) const {
    const TimePoint now = clock_();
    Rows rows = c.query(sql_.select, {key.id(), key.biz_type()});
    if (!rows.next()) return std::nullopt;
    Record read = decode_record(rows);
    backend::require_key_read("idem::sqlite", key, read);
    return backend::RecordRead{std::move(read), now};
  }

  // The fresh claim, or nullopt when the key exists (SQLITE_CONSTRAINT_PRIMARYKEY).
  std::optional<Record> insert(Connection& c, const Key& key, std::string_view fp, const Options& o,
                               const std::string& token, bool /*bound*/) const {
    const TimePoint now = clock_();
    Record fresh = backend::claim_record(key, token, fp, now, o);
    const StepResult inserted =
        c.try_execute(sql_.insert, {key.id(), key.biz_type(), token, fp, millis(fresh.lease_until),
                                    millis(now), millis(fresh.expire_at)});
    if (inserted.code == SQLITE_OK) return fresh;
    if (inserted.code != SQLITE_CONSTRAINT_PRIMARYKEY) throw c.error("claim", inserted.code);
    return std::nullopt;
  }

  // `next` is take_over() of the row read: a retry keeps that row's recovery points, so they
  // guard the write too (see make_record_sql).
  bool write_takeover(Connection& c, backend::Decision d, const Record& next,
                      const Ticket& read) const {
    std::vector<Value> values;
    backend::takeover_values(d, next, read, [&](const auto& v) {
      using V = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<V, TimePoint>)
        values.emplace_back(millis(v));
      else if constexpr (std::is_same_v<V, backend::PointsValue>)
        values.push_back(Value::blob(v.bytes));
      else
        values.emplace_back(v);
    });
    const bool fresh = d == backend::Decision::take_over_expired;
    return c.execute(fresh ? sql_.take_over_expired : sql_.take_over_retry, values) == 1;
  }

  // The fenced UPDATE of complete/fail. Returns true if it changed the row.
  bool finish(Connection& c, const Key& key, const Ticket& t, std::string_view snapshot, Status to,
              bool retryable) const {
    return c.execute(sql_.finish, {static_cast<int>(to), Value::blob(snapshot),
                                   backend::stored_retryable(to, retryable), millis(clock_()),
                                   key.id(), key.biz_type(), t.fence, t.owner}) == 1;
  }

  std::size_t purge(Connection& c, std::size_t batch) const {
    return static_cast<std::size_t>(c.execute(sql_.purge, {millis(clock_()), limit(batch)}));
  }

  std::size_t release(Connection& c, std::size_t batch) const {
    return static_cast<std::size_t>(c.execute(
        sql_.release, {static_cast<int>(backend::released_status), backend::released_retryable,
                       Value::blob(backend::released_snapshot), millis(clock_()), limit(batch)}));
  }

  // Writes repaired() over the row read, while it still carries the ticket read. True when it
  // did.
  bool write_repair(Connection& c, const Record& next, const Ticket& read) const {
    return c.execute(sql_.repair,
                     {static_cast<int>(next.status), next.ticket.fence, next.ticket.owner,
                      nullable_blob(next.snapshot), next.retryable, millis(next.updated_at),
                      millis(next.expire_at), nullable_text(next.repair_reason),
                      next.repaired_at ? Value(millis(*next.repaired_at)) : Value(nullptr),
                      next.key.id(), next.key.biz_type(), read.fence, read.owner}) == 1;
  }

  // Replaces the recovery points `before` (as read) with `after` while `held` holds. True when
  // it did; false when the claim is gone or the points moved on (StepSteps reads again).
  bool write_points(Connection& c, const Key& key, const Ticket& held, std::string_view before,
                    std::string_view after) const {
    return c.execute(sql_.points, {Value::blob(after), millis(clock_()), key.id(), key.biz_type(),
                                   held.fence, held.owner, Value::blob(before)}) == 1;
  }

  RecordStats stats(Connection& c) const {
    RecordStats stats{.now = clock_()};
    Rows counts = c.query(counts_sql(table_), {});
    while (counts.next()) {
      const std::int64_t status = integer_column(counts, 1, "status");
      if (status < 0 || status > static_cast<std::int64_t>(Status::outcome_unknown)) {
        throw CorruptRecord(
            fmt::format("idem::sqlite: column status holds an unknown status {}", status));
      }
      stats.counts.push_back({.biz_type = text_column(counts, 0, "biz_type"),
                              .status = static_cast<Status>(status),
                              .records = static_cast<std::uint64_t>(counts.integer(2))});
    }
    Rows totals = c.query(totals_sql(table_), {millis(stats.now)});
    if (totals.next()) {
      stats.purge_backlog = static_cast<std::uint64_t>(totals.integer(0));
      stats.stale_claims = static_cast<std::uint64_t>(totals.integer(1));
      if (!totals.is_null(2)) stats.oldest_stale_lease = TimePoint{Duration{totals.integer(2)}};
    }
    try {
      const std::string_view schema =
          table_.schema.empty() ? std::string_view("main") : std::string_view(table_.schema);
      Rows size = c.query(size_sql(table_), {schema, std::string_view(table_.table)});
      if (size.next() && !size.is_null(0))
        stats.table_bytes = static_cast<std::uint64_t>(size.integer(0));
    } catch (const StoreError&) {
      // A SQLite without the dbstat table: the size stays unknown.
    }
    return stats;
  }

  std::vector<Record> list(Connection& c, const RecordQuery& query) const {
    std::vector<Value> params;
    const std::string sql = list_sql(table_, query, clock_(), params);
    std::vector<Record> found;
    Rows rows = c.query(sql, params);
    while (rows.next())
      found.push_back(decode_record(rows));
    return found;
  }

 private:
  // NULL for none, so that the columns read as "never" in the shell too.
  static Value nullable_blob(std::string_view bytes) noexcept {
    return bytes.empty() ? Value(nullptr) : Value::blob(bytes);
  }
  static Value nullable_text(std::string_view text) noexcept {
    return text.empty() ? Value(nullptr) : Value(text);
  }

  TableName table_;
  RecordSql sql_;  // built once, when the store is made
  std::function<TimePoint()> clock_;
};

// idem::sqlite for the store skeleton (idem/backend/store_skeleton.hpp,
// idem/same_transaction/bound_sql_store.hpp).
struct Backend : backend::BackendTypes<sqlite::Connection, sqlite3, sqlite::Pool, RecordOps> {
  static constexpr std::string_view name = "idem::sqlite";
  static constexpr bool bound_supports_wait = true;
  static constexpr std::string_view begin_hint = "BEGIN IMMEDIATE";

  // A statement that failed did not happen (no lost replies as over a network): a busy or
  // locked file is retried, and a retry may simply send the same statement again.
  static backend::FailureKind classify(const StoreError& e) noexcept {
    return e.retryable() ? backend::FailureKind::transient : backend::FailureKind::fatal;
  }
  static bool in_transaction(const Connection& c) noexcept {
    return sqlite3_get_autocommit(c.native()) == 0;
  }
};

}  // namespace detail

}  // namespace idem::sqlite
