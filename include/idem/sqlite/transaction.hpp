#pragma once
// idem::sqlite::with_transaction: run a transaction body under BEGIN IMMEDIATE ... COMMIT, and
// run it again when the file stayed locked (SQLITE_BUSY / SQLITE_LOCKED after the busy timeout).
//
//   auto receipt = idem::sqlite::with_transaction(store.pool(), [&](idem::sqlite::Connection& c) {
//     auto tx = store.bind(c);
//     idem::IdempotencyGuard guard{tx, key, fp};
//     ...business writes on c...
//     guard.commit(result);
//     return result;
//   });
//
// On your own handle the body gets the sqlite3* back (idem::sqlite::Transaction, below, is one
// such transaction as an object, run once):
//
//   idem::sqlite::with_transaction(db, [&](sqlite3* db) {
//     auto tx = store.bind(db);
//     return idem::run_once(tx, key, fp, [&] { ...business writes on db...; return 1; });
//   });
//
// The body's claims decide how a try ends, as in idem::mysql::with_transaction: COMMIT when
// every claim succeeded or failed permanently; ROLLBACK (and the body's result) when they
// failed retryably; ROLLBACK and UsageError naming the claim when one was abandoned or left
// processing. A store bound to the raw handle inside the body (store.bind(db)) counts too.
//
// BEGIN IMMEDIATE takes the write lock up front: a duplicate waits (busy timeout) until the
// first transaction commits, then its INSERT finds the row and replays it. A deferred BEGIN
// could instead fail half-way with SQLITE_BUSY_SNAPSHOT when it upgrades from reading to
// writing. The body must be safe to run again: whatever it wrote to this database is rolled
// back before a new try. A body that acts outside the database wants standalone mode.

#include <sqlite3.h>

#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/observer.hpp"
#include "idem/same_transaction/own_transaction.hpp"
#include "idem/same_transaction/transaction_try.hpp"
#include "idem/sqlite/connection.hpp"
#include "idem/sqlite/errors.hpp"
#include "idem/sqlite/pool.hpp"
#include "idem/sqlite/store.hpp"

namespace idem::sqlite {

using TransactionParams = idem::TransactionParams;

namespace detail {

inline void exec_raw(sqlite3* db, const char* sql) {
  char* message = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &message);
  sqlite3_free(message);
  if (rc != SQLITE_OK) {
    const char* file = sqlite3_db_filename(db, "main");
    throw make_error(sql, db, rc, file != nullptr && *file != '\0' ? file : "(temporary database)");
  }
}

inline void rollback_quietly(sqlite3* db) noexcept {
  // SQLite may already have rolled back by itself (e.g. after SQLITE_FULL or SQLITE_IOERR).
  if (sqlite3_get_autocommit(db) != 0) return;
  sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
}

// One try: BEGIN IMMEDIATE, fn(), then COMMIT or ROLLBACK as the claims made in it say (see
// idem/same_transaction/transaction_try.hpp).
struct HandleTry {
  sqlite3* db;
  explicit HandleTry(sqlite3* handle) noexcept : db(handle) {}
  explicit HandleTry(Connection& c) noexcept : db(c.native()) {}
  const void* handle() const noexcept { return db; }
  void begin() { exec_raw(db, "BEGIN IMMEDIATE"); }
  void commit() { exec_raw(db, "COMMIT"); }
  void roll_back() { exec_raw(db, "ROLLBACK"); }
  void roll_back_quietly() noexcept { rollback_quietly(db); }
};

template <class Fn>
std::invoke_result_t<Fn&> in_transaction(sqlite3* db, idem::same_transaction::TryReport& report,
                                         Fn&& fn) {
  if (sqlite3_get_autocommit(db) == 0) {
    throw UsageError(
        "idem::sqlite::with_transaction: a transaction is already open on this connection");
  }
  HandleTry tx{db};
  return idem::same_transaction::run_try(tx, "idem::sqlite::with_transaction", report, fn);
}

}  // namespace detail

// One transaction on your own sqlite3*, as an object (idem/same_transaction/own_transaction.hpp):
// made, it runs BEGIN IMMEDIATE unless a transaction is open; commit() commits it or rolls it back
// as its claims say; destroyed before, it rolls back.
//
//   idem::sqlite::Transaction tx(store, db);
//   const auto out = idem::run_once(tx, key, fp, [&] { ...business writes on db...; });
//   tx.commit();
using Transaction = same_transaction::OwnTransaction<detail::Backend, detail::HandleTry>;

// On your own connection handle (give it a busy timeout: sqlite3_busy_timeout).
template <class F>
auto with_transaction(sqlite3* db, F&& body, TransactionParams params = {})
    -> std::invoke_result_t<F&, sqlite3*> {
  if (db == nullptr) throw InvalidArgument("idem::sqlite::with_transaction: db is null");
  return idem::same_transaction::retry_transaction(
      params, "idem::sqlite::with_transaction",
      [&](idem::same_transaction::TryReport& report) -> decltype(auto) {
        return detail::in_transaction(db, report, [&]() -> decltype(auto) { return body(db); });
      });
}

// On one of idem's connections.
template <class F>
auto with_transaction(Connection& connection, F&& body, TransactionParams params = {})
    -> std::invoke_result_t<F&, Connection&> {
  return idem::same_transaction::retry_transaction(
      params, "idem::sqlite::with_transaction",
      [&](idem::same_transaction::TryReport& report) -> decltype(auto) {
        return detail::in_transaction(connection.native(), report,
                                      [&]() -> decltype(auto) { return body(connection); });
      });
}

// On a connection from the pool (e.g. store.pool()), taken for each try.
template <class F>
auto with_transaction(Pool& pool, F&& body, TransactionParams params = {})
    -> std::invoke_result_t<F&, Connection&> {
  return idem::same_transaction::retry_transaction(
      params, "idem::sqlite::with_transaction",
      [&](idem::same_transaction::TryReport& report) -> decltype(auto) {
        auto connection = pool.acquire();
        return detail::in_transaction(connection->native(), report,
                                      [&]() -> decltype(auto) { return body(*connection); });
      });
}

}  // namespace idem::sqlite
