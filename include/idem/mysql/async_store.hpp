#pragma once
// idem::mysql::AsyncStore: the idempotency record table of idem::mysql::Store, for coroutines,
// on MariaDB Connector/C's non-blocking API. The same SQL, the same decisions (the steps of
// idem/backend/steps.hpp), the same retries and reconciliation of a lost reply, on an
// AsyncPool of AsyncConnections: no thread per request, no thread pool doing blocking calls.
//
//   auto pool = std::make_shared<idem::mysql::AsyncPool>(params);
//   idem::mysql::AsyncStore store{pool};
//   co_await store.ensure_schema();
//   auto out = co_await idem::async::run_once(store, key, fp, handler);
//
// A blocking idem::mysql::Store and an AsyncStore on the same table work side by side.
// docs/async.md has the model, cancellation, and what blocks.

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/async/net.hpp"
#include "idem/async/store.hpp"
#include "idem/backend/async_store_skeleton.hpp"
#include "idem/backend/record_rules.hpp"
#include "idem/backend/steps.hpp"
#include "idem/detail/identifier.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/mysql/async_pool.hpp"
#include "idem/mysql/detail/record_sql.hpp"
#include "idem/mysql/errors.hpp"
#include "idem/mysql/schema.hpp"
#include "idem/mysql/schema_check.hpp"
#include "idem/mysql/store.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/same_transaction/async_bound_sql_store.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"

namespace idem::mysql {

namespace detail {

// RecordOps' statements on an AsyncConnection: the SQL, values and decoding are RecordOps'.
class AsyncRecordOps {
 public:
  static constexpr std::size_t max_batch_rows = RecordOps::max_batch_rows;

  explicit AsyncRecordOps(RecordOps ops) : ops_(std::move(ops)) {}

  net::awaitable<std::optional<backend::RecordRead>> read(AsyncConnection& c, const Key& key,
                                                          bool bound) const {
    const RecordSql& sql = ops_.sql();
    co_return read_answer(
        co_await c.select(bound ? sql.select_locking : sql.select, key_values(key)), key);
  }

  net::awaitable<std::optional<Record>> insert(AsyncConnection& c, const Key& key,
                                               std::string_view fp, const Options& o,
                                               const std::string& token, bool bound) const {
    const RecordSql& sql = ops_.sql();
    try {
      if (ops_.returning() && c.supports_returning()) {
        co_return returning_answer(
            co_await c.select(sql.insert_returning, claim_values(key, fp, o, token)), key, token,
            fp);
      }
      co_await c.execute(sql.insert, claim_values(key, fp, o, token));
    } catch (const StoreError& e) {
      if (e.diagnostics().code != code::dup_entry) throw;
      co_return std::nullopt;
    }
    co_return read_back(co_await read(c, key, bound), token);
  }

  // A record-last claim's read and its result (RecordOps::probe, insert_finished).
  net::awaitable<same_transaction::RecordProbe> probe(AsyncConnection& c, const Key& key) const {
    co_return probe_answer(co_await c.select(ops_.sql().probe, key_values(key)), key);
  }
  net::awaitable<bool> insert_finished(AsyncConnection& c, const Record& r) const {
    co_return co_await c.execute(ops_.sql().insert_finished, finished_values(r)) == 1;
  }
  // RecordOps::insert_finished_and_commit: false when another request's row is there, and then
  // nothing was committed.
  net::awaitable<bool> insert_finished_and_commit(AsyncConnection& c, const Record& r) const {
    const auto alone = [&] { return insert_finished(c, r); };
    co_return co_await with_commit(c, ops_.sql().insert_finished_commit, finished_values(r),
                                   code::dup_entry, alone);
  }

  // RecordOps::claim_chunk: up to max_batch_rows distinct keys with one INSERT IGNORE and one
  // read (none when INSERT ... RETURNING answers with every key).
  net::awaitable<std::vector<ClaimResult>> claim_chunk(
      AsyncConnection& c, std::span<const ClaimRequest* const> requests,
      std::span<const std::string> tokens, const Options& o) const {
    const RecordSql& sql = ops_.sql();
    const std::size_t cls = batch_class(requests.size());
    if (ops_.batch_returning(c)) {
      const auto created_rows = co_await c.select(sql.insert_batch_returning[cls],
                                                  batch_claim_values(requests, tokens, o));
      auto created = batch_created_answer(created_rows, requests, tokens);
      if (created) co_return std::move(*created);
    } else {
      co_await c.execute(sql.insert_batch[cls], batch_claim_values(requests, tokens, o));
    }
    const auto read_rows = co_await c.select(sql.select_batch[cls], batch_key_values(requests));
    auto rows = batch_rows_answer(read_rows);
    auto answers = backend::batch_answers(requests, rows);
    co_return co_await idem::async::detail::settle_batch("idem::mysql", *this, c, requests, tokens,
                                                         o, answers);
  }

  net::awaitable<bool> write_takeover(AsyncConnection& c, backend::Decision d, const Record& next,
                                      const Ticket& read) const {
    co_return co_await c.execute(ops_.takeover_sql(d), takeover_values(d, next, read)) == 1;
  }

  net::awaitable<bool> finish(AsyncConnection& c, const Key& key, const Ticket& t,
                              std::string_view snapshot, Status to, bool retryable) const {
    co_return co_await c.execute(ops_.sql().finish,
                                 finish_values(key, t, snapshot, to, retryable)) == 1;
  }
  // RecordOps::finish_and_commit: false when the guard matched no row, and then nothing was
  // committed.
  net::awaitable<bool> finish_and_commit(AsyncConnection& c, const Key& key, const Ticket& t,
                                         std::string_view snapshot, Status to,
                                         bool retryable) const {
    const auto alone = [&] { return finish(c, key, t, snapshot, to, retryable); };
    co_return co_await with_commit(c, ops_.sql().finish_commit,
                                   finish_values(key, t, snapshot, to, retryable),
                                   code::signal_exception, alone);
  }

  net::awaitable<std::size_t> purge(AsyncConnection& c, std::size_t batch) const {
    co_return static_cast<std::size_t>(co_await c.execute(ops_.sql().purge, purge_values(batch)));
  }

  net::awaitable<std::size_t> release(AsyncConnection& c, std::size_t batch) const {
    co_return static_cast<std::size_t>(
        co_await c.execute(ops_.sql().release, release_values(batch)));
  }

  net::awaitable<bool> write_repair(AsyncConnection& c, const Record& next,
                                    const Ticket& read) const {
    co_return co_await c.execute(ops_.sql().repair, repair_values(next, read)) == 1;
  }

  net::awaitable<bool> write_points(AsyncConnection& c, const Key& key, const Ticket& held,
                                    std::string_view before, std::string_view after) const {
    co_return co_await c.execute(ops_.sql().points, points_values(key, held, before, after)) == 1;
  }

  net::awaitable<std::vector<Record>> list(AsyncConnection& c, const RecordQuery& q) const {
    co_return list_answer(co_await c.select(list_sql(ops_.sql(), q), list_values(q)));
  }

  // Waits until the server is done with connection `id` (its thread is gone), so that a
  // statement it was running has committed or rolled back. A connection still there after a
  // second is killed. The caller's connection went away with the cancelled claim, so the
  // thread ends as soon as its statement does.
  net::awaitable<bool> settled(AsyncConnection& c, unsigned long id) const {
    const std::string alive = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?";
    // (Built apart from the co_await: GCC 12 cannot keep a braced list alive across one.)
    const std::vector<Param> values{static_cast<std::uint64_t>(id)};
    co_return co_await idem::async::detail::wait_until_session_ends(
        [&]() -> net::awaitable<bool> {
          const auto rows = co_await c.select(alive, values);
          co_return !rows.empty() && rows.front().at(0).integer<long>().value_or(0) != 0;
        },
        [&]() -> net::awaitable<void> {
          try {
            co_await c.query(fmt::format("KILL CONNECTION {}", id));
          } catch (const StoreError& e) {
            if (e.diagnostics().code != unknown_thread) throw;
          }
        });
  }

 private:
  static constexpr unsigned unknown_thread = 1094;  // ER_NO_SUCH_THREAD: it ended meanwhile

  // RecordOps::with_commit on this connection: the compound statement `sql` (a write and the
  // COMMIT), or, where the server or the session runs none, alone() and then a COMMIT. false:
  // refused, and nothing was committed.
  template <class Alone>
  static net::awaitable<bool> with_commit(AsyncConnection& c, const std::string& sql,
                                          std::vector<Param> values, unsigned refused,
                                          Alone alone) {
    if (c.supports_returning()) {
      bool refused_there = false;
      try {
        co_await c.execute(sql, std::move(values));
        co_return true;
      } catch (const StoreError& e) {
        refused_there = compound_refused(e, refused);
      }
      if (refused_there) co_return false;
    }
    const bool written = co_await alone();
    if (!written) co_return false;
    co_await c.query("COMMIT");
    co_return true;
  }

  RecordOps ops_;
};

}  // namespace detail

// migrate_record_table (idem/mysql/schema.hpp) on a coroutine connection: the same statements.
inline net::awaitable<Migration> migrate_record_table(AsyncConnection& c, std::string_view table) {
  const auto parts = idem::detail::split_identifier(table, "idem::mysql", "table name", true);
  const std::string quoted = idem::detail::quote_parts(parts, '`');
  const std::vector<Param> where = detail::present_columns_values(parts);
  std::vector<std::string> present;
  for (const Row& row : co_await c.select(detail::present_columns_sql(), where))
    present.emplace_back(row.at(0).text().value_or(""));
  const auto comment = co_await c.select(detail::table_comment_sql, where);
  Migration done = detail::migration_plan(quoted, present, comment);
  const auto statements = detail::migration_statements(quoted, done.added, done.stamped,
                                                       detail::server_is_mariadb(c.native()));
  for (std::size_t i = 0; i < statements.size(); ++i) {
    std::optional<StoreError> refused;
    try {
      co_await c.query(statements[i].sql);
      done.algorithm = statements[i].algorithm;
      co_return done;
    } catch (const StoreError& e) {
      if (!detail::algorithm_refused(e)) throw;
      refused.emplace(e);
    }
    if (i + 1 == statements.size()) throw detail::migration_refused(quoted, *refused);
  }
  co_return done;
}

// check_record_table (idem/mysql/schema_check.hpp) on a coroutine connection: the same reads.
inline net::awaitable<TableLayout> check_record_table(AsyncConnection& c, std::string_view table) {
  const auto parts = idem::detail::split_identifier(table, "idem::mysql", "table name", true);
  const std::vector<Param> where = detail::present_columns_values(parts);
  const auto columns = co_await c.select(detail::live_columns_sql, where);
  const auto hiding = detail::index_hiding(co_await c.select(detail::index_hiding_sql, {}));
  const auto indexes = co_await c.select(detail::live_indexes_sql(hiding), where);
  const auto comment = co_await c.select(detail::table_comment_sql, where);
  co_return detail::require_expected_table(hiding, idem::detail::quote_parts(parts, '`'), columns,
                                           indexes, comment);
}

namespace detail {

// idem::mysql for the coroutine store skeleton (idem/backend/async_store_skeleton.hpp).
struct AsyncBackend {
  using Connection = AsyncConnection;
  using Pool = AsyncPool;
  using Ops = AsyncRecordOps;
  static constexpr std::string_view name = "idem::mysql";
  static constexpr std::string_view begin_hint = Backend::begin_hint;
  static backend::FailureKind classify(const StoreError& e) noexcept {
    return Backend::classify(e);
  }
  // Also a session with autocommit off: a claim there would not commit on its own.
  static bool in_transaction(AsyncConnection& c) noexcept {
    return c.in_transaction() || !c.autocommit();
  }

  // For the coroutine transaction (idem/same_transaction/async_transaction.hpp).
  static constexpr std::string_view transaction_who = "idem::mysql::with_transaction";
  static constexpr std::string_view transaction_object_who = "idem::mysql::AsyncTransaction";
  static net::awaitable<void> begin(AsyncConnection& c) { return c.begin_transaction(); }
  static net::awaitable<void> commit(AsyncConnection& c) { return c.query("COMMIT"); }
  static void roll_back_blocking(AsyncConnection& c) noexcept {
    if (c.broken()) return;
    if (mysql_real_query(c.native(), "ROLLBACK", 8) != 0) c.mark_broken();
  }
};

}  // namespace detail

// The AsyncStore's operations inside the caller's transaction (see
// idem/same_transaction/async_bound_sql_store.hpp).
using AsyncBoundStore = same_transaction::AsyncBoundSqlStore<detail::AsyncBackend>;
// What the stores bound through an AsyncTransaction leave for its end.
using AsyncTransactionWrites = same_transaction::AsyncTransactionWrites<AsyncConnection>;

class AsyncStore : public idem::backend::AsyncStoreSkeleton<detail::AsyncBackend> {
 public:
  // The store shares the pool. Same parameters as Store.
  explicit AsyncStore(std::shared_ptr<AsyncPool> pool, StoreParams params = {})
      : AsyncStoreSkeleton(
            detail::AsyncRecordOps(detail::RecordOps(params.table, params.insert_returning)),
            params.retry),
        pool_(std::move(pool)),
        name_(params.table),
        table_(quote_identifier(params.table)),
        bound_claim_(params.bound_claim) {
    if (!pool_) throw InvalidArgument("idem::mysql::AsyncStore: pool must not be null");
    attach(pool_.get());
    if (params.check_table) {
      check_table_first([this](AsyncConnection& c) -> net::awaitable<void> {
        co_await check_record_table(c, name_);
      });
    }
  }

  // Creates the record table if it does not exist (docs/schema.sql holds the same DDL), brings
  // one an older idem created to the current layout (migrate_record_table, online), and checks
  // the result (check_schema).
  net::awaitable<Migration> ensure_schema() {
    Migration done = co_await with_retries_unchecked<Migration>(
        "ensure_schema", [&](AsyncConnection& c, bool) -> net::awaitable<Migration> {
          co_await c.query(record_table_ddl(table_));
          Migration migrated = co_await migrate_record_table(c, name_);
          co_await check_record_table(c, name_);
          co_return migrated;
        });
    table_checked();
    co_return done;
  }

  // Store::check_schema's check: throws SchemaMismatch naming each problem and its fix;
  // returns the table's layout.
  net::awaitable<TableLayout> check_schema() {
    const TableLayout layout = co_await with_retries_unchecked<TableLayout>(
        "check_schema", [&](AsyncConnection& c, bool) { return check_record_table(c, name_); });
    table_checked();
    co_return layout;
  }

  // The store on a connection inside the transaction the caller began on it (in a
  // with_transaction, bind through its AsyncTransaction instead), claiming as
  // StoreParams::bound_claim says. The store must outlive it.
  AsyncBoundStore bind(AsyncConnection& connection) const {
    return AsyncBoundStore(ops(), connection, bound_claim_);
  }
  // How its bound stores claim (StoreParams::bound_claim).
  BoundClaim bound_claim() const noexcept { return bound_claim_; }

  const std::string& table() const noexcept { return table_; }
  AsyncPool& pool() const noexcept { return *pool_; }

 private:
  std::shared_ptr<AsyncPool> pool_;
  std::string name_;   // as given (StoreParams::table)
  std::string table_;  // quoted
  BoundClaim bound_claim_;
};

static_assert(idem::async::AwaitableStore<AsyncStore>);
static_assert(idem::async::BatchClaimingAsyncStore<AsyncStore>);
static_assert(idem::async::AbandoningAsyncStore<AsyncBoundStore>);
static_assert(idem::async::NotingAsyncStore<AsyncBoundStore>);
static_assert(idem::async::AttemptCountingAsyncStore<AsyncBoundStore>);

}  // namespace idem::mysql
