#pragma once
// idem::mysql::Store: the idempotency record table on MySQL / MariaDB (InnoDB).
//
// Two modes, one decision table (idem/store/record_rules.hpp):
//  - standalone (Store): every operation is its own autocommit statement on a pooled
//    connection. Use it when the business calls something outside this database (a payment
//    channel): the claim must be durable before the call, and its result recorded after.
//  - same transaction (Store::bind(connection) -> BoundStore): the operations run on the
//    caller's connection (one of idem's, or the caller's own MYSQL*) inside the caller's
//    transaction, so claim + business writes + record commit or roll back together.
//    Duplicates wait on the row lock and then replay. Such a transaction may commit only once
//    every claim in it finished (BoundStore::committable()); idem::mysql::with_transaction
//    checks that before its COMMIT and re-runs the body after a deadlock. A Store that is only
//    ever bound needs no Pool.
//
// How a claim works: one INSERT on the primary key (never SELECT-then-INSERT); on MariaDB
// 10.5+ it is INSERT IGNORE ... RETURNING, so a fresh claim is one round trip (elsewhere the
// new row is read back). On a duplicate (ER_DUP_ENTRY, or no row returned) the row is read
// with the server's UTC_TIMESTAMP(3) and decide() picks the verdict; a takeover is one UPDATE
// guarded by the old fence and owner token. Every time comes from the database clock. Deadlocks and
// lock wait timeouts are retried with jittered backoff; a write whose outcome was lost with
// its connection is resolved by re-reading the row on a fresh connection (the owner token
// says whether it was ours).

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

#include "idem/batch.hpp"
#include "idem/detail/checks.hpp"
#include "idem/detail/claim_ledger.hpp"
#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/mysql/detail/record_sql.hpp"
#include "idem/mysql/errors.hpp"
#include "idem/mysql/pool.hpp"
#include "idem/mysql/schema.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/store.hpp"
#include "idem/store/record_rules.hpp"
#include "idem/store/retry.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem::mysql {

struct StoreParams {
  // The record table; 1-64 characters of [A-Za-z0-9_$], optionally schema.table.
  std::string table = "idempotent_record";
  // Tries per operation on transient failures (deadlock, lock wait timeout, lost
  // connection), and the jittered backoff between them.
  RetryPolicy retry{};
  // Claim with INSERT IGNORE ... RETURNING where the server has it (MariaDB 10.5 and later,
  // seen per connection), saving the read-back of a fresh claim; false always reads back
  // (for a proxy that cannot pass RETURNING through). Batch claims on a Galera node always
  // read back (see Connection::in_galera_cluster).
  bool insert_returning = true;
};

namespace detail {

// The operations on one connection, shared by both modes. `locking` reads with LOCK IN SHARE
// MODE: inside a caller's transaction a plain read could return an old snapshot, and an
// exclusive lock would deadlock the duplicates that all hold the shared lock their failed
// INSERT took (the S-then-X upgrade deadlock of concurrent inserts on a unique key).
class RecordOps {
 public:
  RecordOps(const RecordSql& sql, bool returning) : sql_(sql), returning_(returning) {}

  std::optional<RowRead> read(Connection& c, const Key& key, bool locking) const {
    const auto rows =
        c.select(locking ? sql_.select_locking : sql_.select, {key.id(), key.biz_type()});
    if (rows.empty()) return std::nullopt;
    return decode_record(rows.front());
  }

  // One claim on one connection. `token` is the owner token of this claim call: if an earlier
  // try of the same call already wrote it (its reply was lost), the row is recognised as ours.
  ClaimResult claim(Connection& c, const Key& key, std::string_view fp, const Options& o,
                    const std::string& token, bool locking) const {
    constexpr int rounds = 16;  // each round loses only to another caller's completed write
    for (int round = 0; round < rounds; ++round) {
      try {
        if (returning_ && c.supports_returning()) {
          auto rows = c.select(sql_.insert_returning, {key.id(), key.biz_type(), token, fp,
                                                       micros(o.lease), micros(o.ttl)});
          if (rows.size() > 1) {
            throw StoreError("idem::mysql: INSERT ... RETURNING answered more than one row", true);
          }
          // No row: the key exists (IGNORE skipped the duplicate), read it as below.
          if (rows.size() == 1)
            return {Verdict::acquired, fresh_record(rows.front(), key, token, fp)};
        } else {
          c.execute(sql_.insert,
                    {key.id(), key.biz_type(), token, fp, micros(o.lease), micros(o.ttl)});
          return acquired(c, key, token, locking);
        }
      } catch (const StoreError& e) {
        if (e.diagnostics().code != code::dup_entry) throw;
      }
      auto row = read(c, key, locking);
      if (!row) continue;  // purged between the INSERT and the read: insert again
      Record& stored = row->record;
      if (stored.ticket.owner == token) return {Verdict::acquired, std::move(stored)};
      const Decision d = decide(stored, fp, row->now);
      if (!is_takeover(d)) return {verdict_of(d), std::move(stored)};
      Record next = take_over(stored, d, fp, token, row->now, o);
      const std::string& sql =
          d == Decision::take_over_expired ? sql_.take_over_expired : sql_.take_over_retry;
      const auto changed =
          c.execute(sql, {static_cast<int>(next.status), next.ticket.fence, next.ticket.owner,
                          next.fingerprint, next.attempts, Param::time(next.lease_until),
                          Param::time(next.created_at), Param::time(next.updated_at),
                          Param::time(next.expire_at), key.id(), key.biz_type(),
                          stored.ticket.fence, stored.ticket.owner});
      if (changed == 1) return {Verdict::acquired, std::move(next)};
      // Someone else moved the row on: read it again.
    }
    throw StoreError(fmt::format("idem::mysql: the claim on {}/{} did not settle after {} rounds",
                                 key.biz_type(), idem::detail::printable(key.id()), rounds),
                     true);
  }

  // Claims up to max_batch_rows distinct keys with one INSERT IGNORE and one read (no read
  // when INSERT ... RETURNING answers with every key); each
  // request i has its own owner token tokens[i] (so a retried chunk recognises its own rows).
  // Keys the read does not settle (a takeover is due, or the row vanished) are claimed one by
  // one with their token, so every request gets exactly the single claim's answer.
  std::vector<ClaimResult> claim_chunk(Connection& c, std::span<const ClaimRequest* const> requests,
                                       std::span<const std::string> tokens,
                                       const Options& o) const {
    const std::size_t cls = batch_class(requests.size());
    const std::size_t padded = std::size_t{1} << cls;
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
    if (returning_ && c.supports_returning() && !c.in_galera_cluster()) {
      // The answer lists the rows this INSERT created; when that is every key (the common,
      // all-fresh batch) no read is needed. Not on Galera: see Connection::in_galera_cluster.
      auto created = c.select(sql_.insert_batch_returning[cls], params);
      if (created.size() == requests.size()) {
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
          if (it == mine.end() || it->second.ticket.owner != tokens[i]) break;
          out.push_back({Verdict::acquired, std::move(it->second)});
        }
        if (out.size() == requests.size()) return out;
      }
    } else {
      c.execute(sql_.insert_batch[cls], params);
    }

    std::vector<Param> keys;
    keys.reserve(padded * 2);
    for (std::size_t i = 0; i < padded; ++i) {
      const ClaimRequest& r = *requests[std::min(i, requests.size() - 1)];
      keys.insert(keys.end(), {Param(r.key.id()), Param(r.key.biz_type())});
    }
    std::unordered_map<Key, RowRead> rows;
    for (const Row& row : c.select(sql_.select_batch[cls], keys)) {
      RowRead read = decode_record(row);
      Key key = read.record.key;
      rows.emplace(std::move(key), std::move(read));
    }

    std::vector<ClaimResult> out;
    out.reserve(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const ClaimRequest& r = *requests[i];
      auto it = rows.find(r.key);
      if (it != rows.end()) {
        Record& stored = it->second.record;
        if (stored.ticket.owner == tokens[i]) {
          out.push_back({Verdict::acquired, std::move(stored)});
          continue;
        }
        const Decision d = decide(stored, r.fingerprint, it->second.now);
        if (!is_takeover(d)) {
          out.push_back({verdict_of(d), std::move(stored)});
          continue;
        }
      }
      out.push_back(claim(c, r.key, r.fingerprint, o, tokens[i], false));
    }
    return out;
  }

  // Runs the fenced UPDATE of complete/fail. Returns true if it changed the row.
  bool finish(Connection& c, const Key& key, const Ticket& t, std::string_view snapshot, Status to,
              bool retryable) const {
    return c.execute(sql_.finish,
                     {static_cast<int>(to), Param::blob(snapshot), stored_retryable(to, retryable),
                      key.id(), key.biz_type(), t.fence, t.owner}) == 1;
  }

  // Whether the row already holds exactly what finish() would have written (a write whose
  // reply was lost with its connection).
  static bool finished_as(const std::optional<RowRead>& row, const Ticket& t,
                          std::string_view snapshot, Status to, bool retryable) {
    return row && idem::finished_as(row->record, t, to, snapshot, retryable);
  }

  std::size_t purge(Connection& c, std::size_t batch, std::size_t max_batches) const {
    std::size_t total = 0;
    for (std::size_t i = 0; i < max_batches; ++i) {
      const auto n =
          static_cast<std::size_t>(c.execute(sql_.purge, {static_cast<std::uint64_t>(batch)}));
      total += n;
      if (n < batch) break;
    }
    return total;
  }

  std::size_t release(Connection& c, std::size_t batch) const {
    return static_cast<std::size_t>(c.execute(
        sql_.release, {static_cast<int>(released_status), released_retryable,
                       Param::blob(released_snapshot), static_cast<std::uint64_t>(batch)}));
  }

 private:
  ClaimResult acquired(Connection& c, const Key& key, const std::string& token,
                       bool locking) const {
    auto row = read(c, key, locking);
    if (!row || row->record.ticket.owner != token) {
      throw StoreError("idem::mysql: a claimed row could not be read back", true);
    }
    return {Verdict::acquired, std::move(row->record)};
  }

  const RecordSql& sql_;
  bool returning_;
};

[[noreturn]] inline void throw_lease_lost(const Key& key, const Ticket& t) {
  throw lease_lost("idem::mysql", key, t);
}

}  // namespace detail

class BoundStore;

class Store {
 public:
  // The store shares the pool (other stores or the caller's transactions may use it too).
  explicit Store(std::shared_ptr<Pool> pool, StoreParams params = {}) : Store(std::move(params)) {
    if (!pool) throw InvalidArgument("idem::mysql::Store: pool must not be null");
    pool_ = std::move(pool);
  }

  // A store without a pool, only ever bound to the caller's connections (bind()); its
  // standalone operations throw UsageError.
  explicit Store(StoreParams params = {})
      : params_(std::move(params)),
        table_(quote_identifier(params_.table)),
        sql_(std::make_unique<detail::RecordSql>(detail::make_record_sql(table_))),
        ops_(*sql_, params_.insert_returning) {
    validate(params_.retry, "idem::mysql::Store");
  }

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Creates the record table if it does not exist (docs/schema.sql holds the same DDL).
  void ensure_schema() {
    with_retries("ensure_schema", [&](Connection& c, bool) {
      c.query(record_table_ddl(table_));
      return 0;
    });
  }
  // The same on the caller's handle. DDL commits any transaction open on it: call it at
  // start-up, not inside a transaction.
  void ensure_schema(MYSQL* mysql) const {
    Connection c(mysql);
    c.query(record_table_ddl(table_));
  }

  ClaimResult claim(const Key& key, std::string_view fingerprint, const Options& options) {
    validate(options);
    idem::detail::check_fingerprint(fingerprint);
    const std::string token = idem::detail::new_owner_token();
    return with_retries("claim", [&](Connection& c, bool) {
      return ops_.claim(c, key, fingerprint, options, token, false);
    });
  }

  // Many claims in few round trips (see idem/batch.hpp): results[i] is what claim() would
  // have answered for requests[i] had the requests been claimed one after another. Distinct
  // keys go up to max_batch_rows at a time through one INSERT IGNORE and one read, in primary key
  // order (concurrent batches then lock rows in the same order); a key repeated within the
  // batch is claimed again after them, so it sees its first occurrence's claim.
  std::vector<ClaimResult> claim_batch(std::span<const ClaimRequest> requests,
                                       const Options& options) {
    idem::detail::validate_batch(requests, options);
    std::vector<std::optional<ClaimResult>> slots(requests.size());
    std::vector<std::size_t> firsts;  // index of each key's first occurrence
    std::vector<std::size_t> repeats;
    {
      std::unordered_map<Key, std::size_t> seen;
      for (std::size_t i = 0; i < requests.size(); ++i) {
        (seen.emplace(requests[i].key, i).second ? firsts : repeats).push_back(i);
      }
    }
    std::sort(firsts.begin(), firsts.end(), [&](std::size_t a, std::size_t b) {
      return std::tie(requests[a].key.id(), requests[a].key.biz_type()) <
             std::tie(requests[b].key.id(), requests[b].key.biz_type());
    });

    // One owner token per key for the whole call: a retried statement recognises the rows an
    // earlier try created before its answer was lost.
    std::vector<std::string> tokens(firsts.size());
    for (auto& token : tokens)
      token = idem::detail::new_owner_token();
    // Rows per statement. A deadlock or a lost certification rolls a whole statement back, and
    // under contention a wide one keeps meeting other writers (on Galera it can lose eight times
    // running); so every failed try halves the statement and every clean one doubles it again.
    std::size_t width = detail::max_batch_rows;
    std::vector<const ClaimRequest*> chunk;
    for (std::size_t begin = 0, end = 0; begin < firsts.size(); begin = end) {
      auto claimed = with_retries(
          "claim_batch",
          [&](Connection& c, bool) {
            end = std::min(firsts.size(), begin + width);
            chunk.clear();
            for (std::size_t k = begin; k < end; ++k)
              chunk.push_back(&requests[firsts[k]]);
            return ops_.claim_chunk(c, chunk, std::span(tokens).subspan(begin, end - begin),
                                    options);
          },
          [&] { width = std::max<std::size_t>(1, width / 2); });
      for (std::size_t k = begin; k < end; ++k)
        slots[firsts[k]] = std::move(claimed[k - begin]);
      width = std::min(detail::max_batch_rows, width * 2);
    }
    for (std::size_t i : repeats) {
      slots[i] = claim(requests[i].key, requests[i].fingerprint, options);
    }
    std::vector<ClaimResult> results;
    results.reserve(requests.size());
    for (auto& slot : slots)
      results.push_back(std::move(*slot));
    return results;
  }

  void complete(const Key& key, const Ticket& ticket, std::string_view snapshot) {
    finish(key, ticket, snapshot, Status::succeeded, false);
  }

  void fail(const Key& key, const Ticket& ticket, std::string_view error, bool retryable) {
    finish(key, ticket, error, Status::failed, retryable);
  }

  std::optional<Record> find(const Key& key) {
    return with_retries("find", [&](Connection& c, bool) -> std::optional<Record> {
      auto row = ops_.read(c, key, false);
      if (!row) return std::nullopt;
      return std::move(row->record);
    });
  }

  std::size_t purge_expired(std::size_t batch, std::size_t max_batches) {
    if (batch == 0 || max_batches == 0) return 0;
    // One retried unit per batch, so that a deadlock in a later batch does not drop the count
    // of the batches already deleted (only a batch whose reply was lost goes uncounted).
    std::size_t total = 0;
    for (std::size_t i = 0; i < max_batches; ++i) {
      const std::size_t n = with_retries(
          "purge_expired", [&](Connection& c, bool) { return ops_.purge(c, batch, 1); });
      total += n;
      if (n < batch) break;
    }
    return total;
  }

  std::size_t release_stale(std::size_t batch) {
    if (batch == 0) return 0;
    return with_retries("release_stale",
                        [&](Connection& c, bool) { return ops_.release(c, batch); });
  }

  // The same store on a connection inside the transaction open on it: one of idem's (e.g.
  // from with_transaction), or a handle of the caller's own, begun by the caller's code
  // (START TRANSACTION, or mysql_autocommit(handle, 0)). The handle stays the caller's: see
  // Connection(MYSQL*). The store must outlive the BoundStore; bind once per transaction.
  BoundStore bind(Connection& connection) const;
  BoundStore bind(MYSQL* mysql) const;

  const std::string& table() const noexcept { return table_; }
  bool has_pool() const noexcept { return pool_ != nullptr; }
  // Throws UsageError for a store without a pool.
  Pool& pool() const {
    if (!pool_) throw UsageError("idem::mysql::Store: this store has no pool (it is only bound)");
    return *pool_;
  }

 private:
  friend class BoundStore;

  void finish(const Key& key, const Ticket& ticket, std::string_view snapshot, Status to,
              bool retryable) {
    idem::detail::check_snapshot(snapshot);
    const bool done = with_retries("record", [&](Connection& c, bool uncertain) {
      // A previous try may have been applied before its connection died: look before writing.
      if (uncertain) {
        if (detail::RecordOps::finished_as(ops_.read(c, key, false), ticket, snapshot, to,
                                           retryable))
          return true;
      }
      if (ops_.finish(c, key, ticket, snapshot, to, retryable)) return true;
      // The killed try may still have been committing during the read above; the UPDATE
      // waited for its row lock, so a read now sees whether that write was ours.
      return uncertain && detail::RecordOps::finished_as(ops_.read(c, key, false), ticket, snapshot,
                                                         to, retryable);
    });
    if (!done) detail::throw_lease_lost(key, ticket);
  }

  // Runs op on a pooled connection; on a transient failure backs off and tries again on a
  // (possibly new) connection. `uncertain` tells op that an earlier try lost its connection
  // after sending a statement, so its outcome must be looked up, not assumed.
  template <class Op>
  auto with_retries(std::string_view what, Op&& op)
      -> decltype(op(std::declval<Connection&>(), false)) {
    return with_retries(what, std::forward<Op>(op), [] {});
  }

  // ... calling before_retry() after each failed try that will be tried again.
  template <class Op, class BeforeRetry>
  auto with_retries(std::string_view what, Op&& op, BeforeRetry&& before_retry)
      -> decltype(op(std::declval<Connection&>(), false)) {
    bool uncertain = false;
    return retry(
        params_.retry, "idem::mysql", what,
        [&](int) {
          auto handle = pool().acquire();
          return op(*handle, uncertain);
        },
        [&](const StoreError& e, int n) {
          // Only the database's transient errors are retried here; a pool that has no
          // connection free is reported at once (the caller decides whether to try again).
          if (!is_transient(e.diagnostics().code)) throw;
          if (is_connection_lost(e.diagnostics().code)) uncertain = true;
          if (n < params_.retry.max_attempts) before_retry();
        });
  }

  std::shared_ptr<Pool> pool_;
  StoreParams params_;
  std::string table_;
  std::unique_ptr<detail::RecordSql> sql_;  // stable address: RecordOps and BoundStores refer to it
  detail::RecordOps ops_;
};

// A Store bound to one connection and the transaction open on it. Nothing is retried here:
// a deadlock rolls back the caller's whole transaction, so the caller (or with_transaction)
// must run the transaction again. Reads take a shared lock (LOCK IN SHARE MODE) so that the
// decision is taken on the latest committed state, whatever the transaction's snapshot.
//
// Every claim it acquires is noted in the connection's ClaimLedger with how it ended. The
// transaction may commit only when committable(): each claim succeeded or failed
// permanently. A claim still processing, abandoned by its guard or failed retryably must be
// rolled back with the business writes beside it, or the redelivery would run the business
// again on top of them (see docs/design.md, "A bound claim commits only a finished request").
class BoundStore {
 public:
  // A duplicate's wait would hold the shared row lock of its reads until the transaction ends
  // and so block the very claim it waits for: the guard answers in_progress at once instead.
  static constexpr bool supports_wait = false;
  // Store failures roll back the caller's transaction; the guard reports them as
  // EventKind::transaction_error (idem/observer.hpp).
  static constexpr bool in_caller_transaction = true;

  BoundStore(const Store& store, Connection& connection)
      : ops_(store.ops_),
        connection_(&connection),
        ledger_(idem::detail::ledger_for(connection.native(), *own_)) {}
  BoundStore(const Store& store, MYSQL* mysql)
      : ops_(store.ops_),
        borrowed_(std::make_unique<Connection>(mysql)),
        connection_(borrowed_.get()),
        ledger_(idem::detail::ledger_for(borrowed_->native(), *own_)) {}

  BoundStore(BoundStore&&) noexcept = default;
  BoundStore& operator=(BoundStore&&) = delete;

  ClaimResult claim(const Key& key, std::string_view fingerprint, const Options& options) {
    validate(options);
    idem::detail::check_fingerprint(fingerprint);
    if (!in_transaction()) {
      throw UsageError(
          "idem::mysql::BoundStore: no transaction is open on the connection (START "
          "TRANSACTION or mysql_autocommit(handle, 0) first): the claim would commit on its own");
    }
    ledger().claiming(options.observer);
    ClaimResult r =
        ops_.claim(*connection_, key, fingerprint, options, idem::detail::new_owner_token(), true);
    if (r.verdict == Verdict::acquired) ledger().claimed(r.record.key, r.record.ticket);
    return r;
  }

  void complete(const Key& key, const Ticket& ticket, std::string_view snapshot) {
    idem::detail::check_snapshot(snapshot);
    if (!ops_.finish(*connection_, key, ticket, snapshot, Status::succeeded, false)) {
      detail::throw_lease_lost(key, ticket);
    }
    ledger().ended(key, ticket, Ledger::State::succeeded);
  }

  void fail(const Key& key, const Ticket& ticket, std::string_view error, bool retryable) {
    idem::detail::check_snapshot(error);
    if (!ops_.finish(*connection_, key, ticket, error, Status::failed, retryable))
      detail::throw_lease_lost(key, ticket);
    ledger().ended(key, ticket, retryable ? Ledger::State::retryable : Ledger::State::failed);
  }

  // What an IdempotencyGuard destroyed without a result calls: noted as abandoned (before
  // anything is sent, so even a failed write leaves the transaction uncommittable), then
  // recorded as a retryable failure in case the caller commits anyway.
  void abandon(const Key& key, const Ticket& ticket, std::string_view error) {
    ledger().ended(key, ticket, Ledger::State::abandoned);
    if (!ops_.finish(*connection_, key, ticket, error, Status::failed, true))
      detail::throw_lease_lost(key, ticket);
  }

  std::optional<Record> find(const Key& key) {
    auto row = ops_.read(*connection_, key, false);
    if (!row) return std::nullopt;
    return std::move(row->record);
  }

  std::size_t purge_expired(std::size_t batch, std::size_t max_batches) {
    return batch == 0 ? 0 : ops_.purge(*connection_, batch, max_batches);
  }
  std::size_t release_stale(std::size_t batch) {
    return batch == 0 ? 0 : ops_.release(*connection_, batch);
  }

  // Whether the transaction may commit now: every claim noted on this connection since the
  // transaction began succeeded or failed permanently. false after a retryable failure (roll
  // back: the redelivery runs the request afresh) and after an abandoned or unfinished claim.
  bool committable() const noexcept { return ledger_->committable(); }
  // Throws UsageError naming the claim that forbids the commit; call it before your COMMIT.
  void check_committable() const {
    if (!committable())
      throw UsageError("idem::mysql: do not commit this transaction: " + ledger_->why());
  }
  // Marks the transaction as one to roll back whatever its claims say (see ClaimLedger).
  void set_rollback_only() noexcept { ledger().set_rollback_only(); }

  Connection& connection() const noexcept { return *connection_; }

 private:
  using Ledger = idem::detail::ClaimLedger;
  Ledger& ledger() noexcept { return *ledger_; }
  bool in_transaction() const noexcept {
    const MYSQL* m = connection_->native();
    return m != nullptr && ((m->server_status & SERVER_STATUS_IN_TRANS) != 0 ||
                            (m->server_status & SERVER_STATUS_AUTOCOMMIT) == 0);
  }

  detail::RecordOps ops_;
  std::unique_ptr<Connection> borrowed_;  // set when bound to the caller's MYSQL*
  Connection* connection_;
  // Outside with_transaction the claims are this store's (one bind per transaction); on the
  // heap so that a moved BoundStore keeps pointing at it.
  std::unique_ptr<Ledger> own_ = std::make_unique<Ledger>();
  Ledger* ledger_;
};

inline BoundStore Store::bind(Connection& connection) const {
  return BoundStore(*this, connection);
}

inline BoundStore Store::bind(MYSQL* mysql) const {
  return BoundStore(*this, mysql);
}

static_assert(idem::Store<Store>);
static_assert(idem::Store<BoundStore>);

}  // namespace idem::mysql
