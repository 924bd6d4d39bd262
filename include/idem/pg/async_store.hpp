#pragma once
// idem::pg::AsyncStore: the record table of idem::pg::Store, for coroutines, on libpq's
// asynchronous API. The same SQL, values and decoding (detail/record_ops.hpp), the same
// decisions (the steps of idem/backend/steps.hpp), the same retries and reconciliation of a
// lost reply, on an AsyncPool of AsyncConnections: no thread per request, no thread pool doing
// blocking calls.
//
//   auto pool = std::make_shared<idem::pg::AsyncPool>(idem::pg::ConnectionParams{conninfo});
//   idem::pg::AsyncStore store{pool};
//   co_await store.ensure_schema();
//   auto out = co_await idem::async::run_once(store, key, fp, handler);
//
// A blocking idem::pg::Store and an AsyncStore on the same table work side by side.
// docs/postgres.md ("Coroutines") and docs/async.md have the model, cancellation and what
// blocks.

#include <libpq-fe.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
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
#include "idem/bound_claim.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/pg/async_pool.hpp"
#include "idem/pg/detail/record_ops.hpp"
#include "idem/pg/errors.hpp"
#include "idem/pg/schema.hpp"
#include "idem/pg/schema_check.hpp"
#include "idem/pg/store_params.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/same_transaction/async_bound_sql_store.hpp"
#include "idem/same_transaction/claim_ledger.hpp"
#include "idem/store.hpp"
#include "idem/table_layout.hpp"
#include "idem/ticket.hpp"

namespace idem::pg {

namespace detail {

// RecordOps' statements on an AsyncConnection: the SQL, values and decoding are RecordOps'.
class AsyncRecordOps {
 public:
  static constexpr std::size_t max_batch_rows = RecordOps::max_batch_rows;

  explicit AsyncRecordOps(RecordOps ops) : ops_(std::move(ops)) {}

  net::awaitable<std::optional<backend::RecordRead>> read(AsyncConnection& c, const Key& key,
                                                          bool /*bound*/) const {
    co_return read_answer(co_await c.exec(ops_.sql().select, key_values(key), "read"), key);
  }

  net::awaitable<std::optional<Record>> insert(AsyncConnection& c, const Key& key,
                                               std::string_view fp, const Options& o,
                                               const std::string& token, bool /*bound*/) const {
    co_return claim_answer(
        co_await c.exec(ops_.sql().insert, claim_values(key, fp, o, token), "claim"), key, fp,
        token);
  }

  // RecordOps::claim_chunk: up to max_batch_rows distinct keys in one statement.
  net::awaitable<std::vector<ClaimResult>> claim_chunk(
      AsyncConnection& c, std::span<const ClaimRequest* const> requests,
      std::span<const std::string> tokens, const Options& o) const {
    const Result answered = co_await c.exec(ops_.sql().claim_batch,
                                            claim_batch_values(requests, tokens, o), "claim_batch");
    auto rows = batch_rows_answer(answered);
    auto answers = backend::batch_answers(requests, rows);
    co_return co_await idem::async::detail::settle_batch("idem::pg", *this, c, requests, tokens, o,
                                                         answers);
  }

  // RecordOps::probe and insert_finished: a record-last claim's plain read, and its finished
  // record's INSERT (false: another request's row holds the key).
  net::awaitable<same_transaction::RecordProbe> probe(AsyncConnection& c, const Key& key) const {
    co_return probe_answer(co_await c.exec(ops_.sql().probe, key_values(key), "claim"), key);
  }
  net::awaitable<bool> insert_finished(AsyncConnection& c, const Record& r) const {
    co_return co_await c.execute(ops_.sql().insert_finished, finished_values(r), "record") == 1;
  }
  // The same and the COMMIT, in one round trip; false: another request's row holds the key,
  // and nothing was committed (the transaction is failed, to roll back).
  net::awaitable<bool> insert_finished_and_commit(AsyncConnection& c, const Record& r) const {
    bool met = false;
    try {
      co_await c.exec_and_commit(ops_.sql().insert_finished_strict, finished_values(r), "record");
    } catch (const StoreError& e) {
      if (e.diagnostics().sqlstate != sqlstate::unique_violation) throw;
      met = true;
    }
    co_return !met;
  }

  net::awaitable<bool> write_takeover(AsyncConnection& c, backend::Decision d, const Record& next,
                                      const Ticket& read) const {
    co_return co_await c.execute(ops_.takeover_sql(d), takeover_values(d, next, read),
                                 "takeover") == 1;
  }

  net::awaitable<bool> finish(AsyncConnection& c, const Key& key, const Ticket& t,
                              std::string_view snapshot, Status to, bool retryable) const {
    co_return co_await c.execute(ops_.sql().finish, finish_values(key, t, snapshot, to, retryable),
                                 "record") == 1;
  }

  net::awaitable<std::size_t> purge(AsyncConnection& c, std::size_t batch) const {
    co_return static_cast<std::size_t>(
        co_await c.execute(ops_.sql().purge, purge_values(batch), "purge_expired"));
  }

  net::awaitable<std::size_t> release(AsyncConnection& c, std::size_t batch) const {
    co_return static_cast<std::size_t>(
        co_await c.execute(ops_.sql().release, release_values(batch), "release_stale"));
  }

  net::awaitable<bool> write_repair(AsyncConnection& c, const Record& next,
                                    const Ticket& read) const {
    co_return co_await c.execute(ops_.sql().repair, repair_values(next, read), "repair") == 1;
  }

  net::awaitable<bool> write_points(AsyncConnection& c, const Key& key, const Ticket& held,
                                    std::string_view before, std::string_view after) const {
    co_return co_await c.execute(ops_.sql().points, points_values(key, held, before, after),
                                 "record_step") == 1;
  }

  net::awaitable<std::vector<Record>> list(AsyncConnection& c, const RecordQuery& q) const {
    std::vector<Param> values;
    const std::string sql = list_sql(ops_.sql(), q, values);
    co_return list_answer(co_await c.exec(sql, std::move(values), "list"));
  }

  // Waits until the server process that served connection `pid` is gone, so that a statement
  // it was running has committed or rolled back (the cancelled claim's connection was closed,
  // so the process ends as soon as its statement does). One still there after a second is
  // terminated.
  net::awaitable<bool> settled(AsyncConnection& c, unsigned long pid) const {
    static const std::string alive = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1";
    static const std::string terminate = "SELECT pg_terminate_backend($1)";
    // (Built apart from the co_await: GCC 12 cannot keep a braced list alive across one.)
    const std::vector<Param> process{static_cast<std::int64_t>(pid)};
    co_return co_await idem::async::detail::wait_until_session_ends(
        [&]() -> net::awaitable<bool> {
          const Result r = co_await c.exec(alive, process, "settle a cancelled claim");
          co_return r.rows() > 0 && r.integer(0, 0).value_or(0) > 0;
        },
        [&]() -> net::awaitable<void> {
          co_await c.exec(terminate, process, "settle a cancelled claim");
        });
  }

 private:
  RecordOps ops_;
};

// idem::pg for the coroutine store skeleton (idem/backend/async_store_skeleton.hpp).
struct AsyncBackend {
  using Connection = AsyncConnection;
  using Pool = AsyncPool;
  using Ops = AsyncRecordOps;
  static constexpr std::string_view name = "idem::pg";
  static constexpr std::string_view begin_hint = Backend::begin_hint;
  static backend::FailureKind classify(const StoreError& e) noexcept {
    return Backend::classify(e);
  }
  // Also a transaction that failed and waits for its ROLLBACK (as Backend's).
  static bool in_transaction(AsyncConnection& c) noexcept { return c.in_transaction(); }

  // For the coroutine transaction (idem/same_transaction/async_transaction.hpp).
  static constexpr std::string_view transaction_who = "idem::pg::with_transaction";
  static constexpr std::string_view transaction_object_who = "idem::pg::AsyncTransaction";
  static net::awaitable<void> begin(AsyncConnection& c) {
    co_await c.query("BEGIN", "with_transaction");
  }
  static net::awaitable<void> commit(AsyncConnection& c) {
    require_committed(co_await c.query("COMMIT", "with_transaction"), transaction_who);
  }
  // PQexec blocks whatever libpq's mode; a connection with a call cut midway is broken and
  // skipped (the pool closes it).
  static void roll_back_blocking(AsyncConnection& c) noexcept {
    if (c.broken()) return;
    PGresult* r = PQexec(c.native(), "ROLLBACK");
    if (PQresultStatus(r) != PGRES_COMMAND_OK) c.mark_broken();
    PQclear(r);
  }
};

}  // namespace detail

// check_record_table (idem/pg/schema_check.hpp) on a coroutine connection: the same reads and
// verdict.
inline net::awaitable<TableLayout> check_record_table(AsyncConnection& c, const TableName& name) {
  const std::vector<Param> table{name.quoted()};
  const Result columns = co_await c.exec(detail::live_columns_sql, table, "check_schema");
  const Result indexes = co_await c.exec(detail::live_indexes_sql, table, "check_schema");
  const Result comment = co_await c.exec(detail::table_comment_sql, table, "check_schema");
  co_return detail::table_check(name, columns, indexes, comment);
}

// The AsyncStore's operations inside the caller's transaction (see
// idem/same_transaction/async_bound_sql_store.hpp).
using AsyncBoundStore = same_transaction::AsyncBoundSqlStore<detail::AsyncBackend>;

class AsyncStore : public idem::backend::AsyncStoreSkeleton<detail::AsyncBackend> {
 public:
  // The store shares the pool. Same parameters as Store. Throws InvalidArgument for a null pool
  // or a bad table name.
  explicit AsyncStore(std::shared_ptr<AsyncPool> pool, StoreParams params = {})
      : AsyncStoreSkeleton(
            detail::AsyncRecordOps(detail::RecordOps(parse_table_name(params.table))),
            params.retry),
        pool_(std::move(pool)),
        name_(parse_table_name(params.table)),
        bound_claim_(params.bound_claim) {
    if (!pool_) throw InvalidArgument("idem::pg::AsyncStore: pool must not be null");
    attach(pool_.get());
    if (params.check_table) {
      check_table_first([this](AsyncConnection& c) -> net::awaitable<void> {
        co_await check_record_table(c, name_);
      });
    }
  }

  // Store::ensure_schema: creates the record table and its indexes where they do not exist, in
  // one transaction under an advisory lock, then checks the result and returns its layout.
  net::awaitable<TableLayout> ensure_schema() {
    const TableLayout layout = co_await with_retries_unchecked<TableLayout>(
        "ensure_schema", [&](AsyncConnection& c, bool) -> net::awaitable<TableLayout> {
          // A failure leaves the transaction open: the pool rolls it back before the
          // connection's next use.
          co_await c.query("BEGIN", "ensure_schema");
          co_await c.query(schema_lock_sql(name_), "ensure_schema");
          co_await c.query(record_table_ddl(name_), "ensure_schema");
          co_await c.query("COMMIT", "ensure_schema");
          co_return co_await check_record_table(c, name_);
        });
    table_checked();
    co_return layout;
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

  // The quoted table name, e.g. "idempotent_record".
  std::string table() const { return name_.quoted(); }
  AsyncPool& pool() const noexcept { return *pool_; }

 private:
  std::shared_ptr<AsyncPool> pool_;
  TableName name_;
  BoundClaim bound_claim_;
};

static_assert(idem::async::AwaitableStore<AsyncStore>);
static_assert(idem::async::BatchClaimingAsyncStore<AsyncStore>);
static_assert(idem::async::AbandoningAsyncStore<AsyncBoundStore>);
static_assert(idem::async::NotingAsyncStore<AsyncBoundStore>);
static_assert(idem::async::AttemptCountingAsyncStore<AsyncBoundStore>);

}  // namespace idem::pg
