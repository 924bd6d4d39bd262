#pragma once
// idem::pg::with_transaction: run a transaction body, commit it only when every claim in it
// finished, and run it again when the server rolled it back for a transient reason (a
// serialization failure, a deadlock, a lock or statement timeout, a lost connection).
//
//   auto receipt = idem::pg::with_transaction(store.pool(), [&](idem::pg::Connection& c) {
//     auto tx = store.bind(c);
//     idem::IdempotencyGuard guard{tx, key, fp};
//     ...business writes on c (c.native() is the PGconn*)...
//     guard.commit(result);
//     return result;
//   });
//
// On the service's own PGconn* the body gets the handle back (idem::pg::Transaction, below, is
// one such transaction as an object, run once):
//
//   idem::pg::with_transaction(conn, [&](PGconn* conn) {
//     auto tx = store.bind(conn);
//     return idem::run_once(tx, key, fp, [&] { ...business writes on conn...; return 1; });
//   });
//
// Each try is BEGIN ... COMMIT at the session's isolation level (default_transaction_isolation:
// READ COMMITTED unless the service set another for its role, database or connection); idem
// sets nothing on the session. How a try ends, as idem::mysql::with_transaction's: COMMIT when
// every claim succeeded or failed permanently; ROLLBACK (and the body's result) when they
// failed retryably; ROLLBACK and UsageError naming the claim when one was abandoned or left
// processing; an exception from the body rolls back and propagates, and a retryable StoreError
// (also from the service's own SQL, see idem::pg::error_from) runs the body again.
//
// A duplicate of a request in flight waits at its INSERT on the first transaction's row; when
// that one commits, READ COMMITTED reads its record and replays it, and REPEATABLE READ or
// SERIALIZABLE fail the duplicate's try with a serialization failure, after which the next try
// replays. The body must be safe to run again: everything it wrote to this database is rolled
// back before a new try. A body that also acts outside the database wants standalone mode.

#include <libpq-fe.h>

#include <string_view>
#include <type_traits>
#include <utility>

#include "idem/errors.hpp"
#include "idem/pg/connection.hpp"
#include "idem/pg/pool.hpp"
#include "idem/pg/store.hpp"
#include "idem/retry_policy.hpp"
#include "idem/same_transaction/own_transaction.hpp"
#include "idem/same_transaction/transaction_try.hpp"

namespace idem::pg {

using TransactionParams = idem::TransactionParams;

namespace detail {

// One try on one of idem's connections or a borrowed one (see
// idem/same_transaction/transaction_try.hpp).
struct ConnectionTry {
  Connection& c;
  const void* handle() const noexcept { return c.native(); }
  void begin() { c.query("BEGIN", "with_transaction"); }
  void commit() {
    require_committed(c.query("COMMIT", "with_transaction"), "idem::pg::with_transaction");
  }
  void roll_back() { c.query("ROLLBACK", "with_transaction"); }
  void roll_back_quietly() noexcept {
    if (c.broken()) return;
    try {
      c.query("ROLLBACK", "with_transaction");
    } catch (...) {
      c.mark_broken();  // a connection in an unknown transaction state is not reused
    }
  }
};

// What every try checks first (blocking and coroutine, idem/pg/async_transaction.hpp): its
// connection has no transaction open, and the service's own is still up (idem never reopens it).
inline void require_no_transaction(bool in_transaction) {
  if (in_transaction) {
    throw UsageError("idem::pg::with_transaction: a transaction is already open on the connection");
  }
}
inline void require_service_connection_up(bool broken) {
  if (broken) {
    throw StoreError(
        "idem::pg::with_transaction: the service's connection is lost (reconnect it and call "
        "again)",
        false);
  }
}

template <class F, class... Args>
decltype(auto) run_try(Connection& c, idem::same_transaction::TryReport& report, F& body,
                       Args&&... args) {
  require_no_transaction(c.in_transaction());
  ConnectionTry tx{c};
  return idem::same_transaction::run_try(tx, "idem::pg::with_transaction", report,
                                         [&]() -> decltype(auto) { return body(args...); });
}

}  // namespace detail

// One transaction on the service's own PGconn*, as an object
// (idem/same_transaction/own_transaction.hpp): made, it runs BEGIN unless a transaction is open
// (begin one yourself for another isolation level: BEGIN ISOLATION LEVEL SERIALIZABLE);
// commit() commits it or rolls it back as its claims say; destroyed before, it rolls back.
//
//   idem::pg::Transaction tx(store, conn);
//   const auto out = idem::run_once(tx, key, fp, [&] { ...business writes on conn...; });
//   tx.commit();
using Transaction = same_transaction::OwnTransaction<detail::Backend, detail::ConnectionTry>;

// On a connection from the pool (e.g. store.pool()), taken for each try.
template <class F>
auto with_transaction(Pool& pool, F&& body, TransactionParams params = {})
    -> std::invoke_result_t<F&, Connection&> {
  return idem::same_transaction::retry_transaction(
      params, "idem::pg::with_transaction",
      [&](idem::same_transaction::TryReport& report) -> decltype(auto) {
        auto conn = pool.acquire(backend::ConnectionPurpose::transaction);
        return detail::run_try(*conn, report, body, *conn);
      });
}

// On one of idem's connections.
template <class F>
auto with_transaction(Connection& connection, F&& body, TransactionParams params = {})
    -> std::invoke_result_t<F&, Connection&> {
  return idem::same_transaction::retry_transaction(
      params, "idem::pg::with_transaction",
      [&](idem::same_transaction::TryReport& report) -> decltype(auto) {
        return detail::run_try(connection, report, body, connection);
      });
}

// On the service's own connection, which must have no transaction open. A try that lost the
// connection is not run again on it (idem never reopens a handle of the service's): the next
// try throws a StoreError that is not retryable ("reconnect it and call again").
template <class F>
auto with_transaction(PGconn* conn, F&& body, TransactionParams params = {})
    -> std::invoke_result_t<F&, PGconn*> {
  if (conn == nullptr) throw InvalidArgument("idem::pg::with_transaction: the connection is null");
  return idem::same_transaction::retry_transaction(
      params, "idem::pg::with_transaction",
      [&](idem::same_transaction::TryReport& report) -> decltype(auto) {
        Connection c(conn);
        detail::require_service_connection_up(c.broken());
        return detail::run_try(c, report, body, conn);
      });
}

}  // namespace idem::pg
