#pragma once
// The record operations of idem::mysql::Store on one connection, and the Backend that hands them
// to the store skeleton (idem/backend/store_skeleton.hpp) and the bound store
// (idem/same_transaction/bound_sql_store.hpp).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/backend/record_rules.hpp"
#include "idem/backend/steps.hpp"
#include "idem/backend/store_skeleton.hpp"
#include "idem/batch.hpp"
#include "idem/detail/checks.hpp"
#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/mysql/detail/record_sql.hpp"
#include "idem/mysql/errors.hpp"
#include "idem/mysql/pool.hpp"
#include "idem/mysql/schema.hpp"
#include "idem/mysql/schema_check.hpp"
#include "idem/mysql/store_params.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/retry_policy.hpp"
#include "idem/same_transaction/bound_sql_store.hpp"
#include "idem/same_transaction/claim_ledger.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem::mysql {

namespace detail {

// A write sent with the COMMIT as one compound statement failed with `e` (call it in the handler
// of `e`): true when the write was refused (the block ended with the error `refused` before its
// COMMIT, so nothing was committed); false when the session cannot parse the block (a sql_mode
// such as ORACLE), so the write goes alone and then the COMMIT; any other error is rethrown.
inline bool compound_refused(const StoreError& e, unsigned refused) {
  const auto& d = e.diagnostics();
  if (d.code == refused && (refused != code::signal_exception || d.message == guard_refused)) {
    return true;
  }
  if (d.code != code::parse_error) throw;
  return false;
}

// The answer of RecordSql::probe: the row, if any, and the server's now.
inline same_transaction::RecordProbe probe_answer(const std::vector<Row>& rows, const Key& key) {
  if (rows.size() != 1) throw CorruptRecord("idem::mysql: the probe did not answer one row");
  const Row& row = rows.front();
  if (row.size() != column::count_with_now) {
    throw CorruptRecord("idem::mysql: unexpected column count from the probe");
  }
  if (row[column::key].is_null())
    return {std::nullopt, time_of(row[column::now], "UTC_TIMESTAMP(3)")};
  RowRead read = decode_record(row);
  backend::require_key_read("idem::mysql", key, read.record);
  return {std::move(read.record), read.now};
}

// The record operations on one connection, shared by both modes (see
// idem/backend/store_skeleton.hpp). `bound` reads with LOCK IN SHARE MODE: inside a caller's
// transaction a plain read could return an old snapshot, and an exclusive lock would deadlock the
// duplicates that all hold the shared lock their failed INSERT took (the S-then-X upgrade deadlock
// of concurrent inserts on a unique key).
class RecordOps {
 public:
  static constexpr std::size_t max_batch_rows = detail::max_batch_rows;

  // `table` as StoreParams::table takes it.
  RecordOps(std::string_view table, bool returning)
      : sql_(make_record_sql(quote_identifier(table))), name_(table), returning_(returning) {}

  std::optional<backend::RecordRead> read(Connection& c, const Key& key, bool bound) const {
    return read_answer(c.select(bound ? sql_.select_locking : sql_.select, key_values(key)), key);
  }

  // A record-last claim's read: plain (a consistent read inside the transaction), so that a
  // duplicate holds no lock while its body runs.
  same_transaction::RecordProbe probe(Connection& c, const Key& key) const {
    return probe_answer(c.select(sql_.probe, key_values(key)), key);
  }

  // A record-last claim's result; false when another request's row is there.
  bool insert_finished(Connection& c, const Record& r) const {
    return c.execute(sql_.insert_finished, finished_values(r)) == 1;
  }

  // The same, and COMMIT, in one round trip where the server runs compound statements
  // (MariaDB, told apart by its RETURNING); false when another request's row is there, and
  // then nothing was committed.
  bool insert_finished_and_commit(Connection& c, const Record& r) const {
    return with_commit(c, sql_.insert_finished_commit, finished_values(r), code::dup_entry,
                       [&] { return insert_finished(c, r); });
  }

  // The fresh claim, or nullopt when the key exists (ER_DUP_ENTRY, or no row from INSERT
  // IGNORE ... RETURNING).
  std::optional<Record> insert(Connection& c, const Key& key, std::string_view fp, const Options& o,
                               const std::string& token, bool bound) const {
    try {
      if (returning_ && c.supports_returning()) {
        return returning_answer(c.select(sql_.insert_returning, claim_values(key, fp, o, token)),
                                key, token, fp);
      }
      c.execute(sql_.insert, claim_values(key, fp, o, token));
    } catch (const StoreError& e) {
      if (e.diagnostics().code != code::dup_entry) throw;
      return std::nullopt;
    }
    return read_back(read(c, key, bound), token);
  }

  bool write_takeover(Connection& c, backend::Decision d, const Record& next,
                      const Ticket& read) const {
    return c.execute(takeover_sql(d), takeover_values(d, next, read)) == 1;
  }

  // Claims up to max_batch_rows distinct keys with one INSERT IGNORE and one read (no read
  // when INSERT ... RETURNING answers with every key); each request i has its own owner token
  // tokens[i] (so a retried chunk recognises its own rows). Keys the read does not settle (a
  // takeover is due, or the row vanished) are claimed one by one with their token, so every
  // request gets exactly the single claim's answer.
  std::vector<ClaimResult> claim_chunk(Connection& c, std::span<const ClaimRequest* const> requests,
                                       std::span<const std::string> tokens,
                                       const Options& o) const {
    const std::size_t cls = batch_class(requests.size());
    if (batch_returning(c)) {
      auto created = batch_created_answer(
          c.select(sql_.insert_batch_returning[cls], batch_claim_values(requests, tokens, o)),
          requests, tokens);
      if (created) return std::move(*created);
    } else {
      c.execute(sql_.insert_batch[cls], batch_claim_values(requests, tokens, o));
    }
    auto rows = batch_rows_answer(c.select(sql_.select_batch[cls], batch_key_values(requests)));
    auto answers = backend::batch_answers(requests, rows);
    return backend::settle_batch("idem::mysql", *this, c, requests, tokens, o, answers);
  }

  // Whether a batch's INSERT on `c` answers with the rows it created (INSERT ... RETURNING),
  // so that an all-fresh batch needs no read. Not on Galera: see Connection::in_galera_cluster.
  template <class C>
  bool batch_returning(const C& c) const noexcept {
    return returning_ && c.supports_returning() && !c.in_galera_cluster();
  }

  // The fenced UPDATE of complete/fail. Returns true if it changed the row.
  bool finish(Connection& c, const Key& key, const Ticket& t, std::string_view snapshot, Status to,
              bool retryable) const {
    return c.execute(sql_.finish, finish_values(key, t, snapshot, to, retryable)) == 1;
  }

  std::size_t purge(Connection& c, std::size_t batch) const {
    return static_cast<std::size_t>(c.execute(sql_.purge, purge_values(batch)));
  }

  std::size_t release(Connection& c, std::size_t batch) const {
    return static_cast<std::size_t>(c.execute(sql_.release, release_values(batch)));
  }

  // The record repaired() computed, over the row whose ticket was read; false when the row
  // moved on.
  bool write_repair(Connection& c, const Record& next, const Ticket& read) const {
    return c.execute(sql_.repair, repair_values(next, read)) == 1;
  }

  // A step's recovery points, while the claim holds and the points are still `before`.
  bool write_points(Connection& c, const Key& key, const Ticket& held, std::string_view before,
                    std::string_view after) const {
    return c.execute(sql_.points, points_values(key, held, before, after)) == 1;
  }

  // finish and write_points, each with the COMMIT in one round trip where the server runs
  // compound statements (MariaDB, told apart by its RETURNING): false when the guard matched
  // no row, and then nothing was committed (the transaction stays open, to roll back).
  bool finish_and_commit(Connection& c, const Key& key, const Ticket& t, std::string_view snapshot,
                         Status to, bool retryable) const {
    return with_commit(c, sql_.finish_commit, finish_values(key, t, snapshot, to, retryable),
                       code::signal_exception,
                       [&] { return finish(c, key, t, snapshot, to, retryable); });
  }
  bool write_points_and_commit(Connection& c, const Key& key, const Ticket& held,
                               std::string_view before, std::string_view after) const {
    return with_commit(c, sql_.points_commit, points_values(key, held, before, after),
                       code::signal_exception,
                       [&] { return write_points(c, key, held, before, after); });
  }

  std::vector<Record> list(Connection& c, const RecordQuery& q) const {
    return list_answer(c.select(list_sql(sql_, q), list_values(q)));
  }

  RecordStats stats(Connection& c) const {
    const auto parts = idem::detail::split_identifier(name_, "idem::mysql", "table name", true);
    const std::vector<Row> counts = c.select(counts_sql(sql_), {});
    return stats_answer(counts, c.select(totals_sql(sql_), present_columns_values(parts)));
  }

  // For the coroutine store's ops (idem/mysql/async_store.hpp), which send the same SQL.
  const RecordSql& sql() const noexcept { return sql_; }
  bool returning() const noexcept { return returning_; }
  const std::string& takeover_sql(backend::Decision d) const noexcept {
    return d == backend::Decision::take_over_expired ? sql_.take_over_expired
                                                     : sql_.take_over_retry;
  }

 private:
  // The compound statement `sql` (a write and the COMMIT, which it ends before with the error
  // `refused` when the write could not be made), or where the server has no compound
  // statements `alone()` and then a COMMIT. False: refused, and nothing was committed.
  template <class Alone>
  static bool with_commit(Connection& c, const std::string& sql, const std::vector<Param>& values,
                          unsigned refused, Alone&& alone) {
    if (c.supports_returning()) {
      try {
        c.execute(sql, values);
        return true;
      } catch (const StoreError& e) {
        if (compound_refused(e, refused)) return false;
      }
    }
    if (!alone()) return false;
    c.query("COMMIT");
    return true;
  }

  RecordSql sql_;     // built once, when the store is made
  std::string name_;  // unquoted, for information_schema
  bool returning_;
};

// idem::mysql for the store skeleton (idem/backend/store_skeleton.hpp,
// idem/same_transaction/bound_sql_store.hpp).
struct Backend : backend::BackendTypes<mysql::Connection, MYSQL, mysql::Pool, RecordOps> {
  static constexpr std::string_view name = "idem::mysql";
  // A duplicate's wait would hold the shared row lock of its reads until the transaction ends
  // and so block the very claim it waits for: the guard answers in_progress at once instead.
  static constexpr bool bound_supports_wait = false;
  static constexpr std::string_view begin_hint = "START TRANSACTION or mysql_autocommit(handle, 0)";

  // Only the database's transient errors are retried; a pool that has no connection free is
  // reported at once (the caller decides whether to try again).
  static backend::FailureKind classify(const StoreError& e) noexcept {
    const unsigned code = e.diagnostics().code;
    if (!is_transient(code)) return backend::FailureKind::fatal;
    return is_connection_lost(code) ? backend::FailureKind::reply_lost
                                    : backend::FailureKind::transient;
  }
  static bool in_transaction(Connection& c) noexcept {
    const MYSQL* m = c.native();
    return m != nullptr && ((m->server_status & SERVER_STATUS_IN_TRANS) != 0 ||
                            (m->server_status & SERVER_STATUS_AUTOCOMMIT) == 0);
  }
};

}  // namespace detail

}  // namespace idem::mysql
