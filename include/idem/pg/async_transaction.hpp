#pragma once
// idem::pg::AsyncTransaction and with_transaction for coroutines: a transaction on an
// AsyncConnection that commits only when every claim in it finished. The rules are the blocking
// Transaction's and with_transaction's (idem/pg/transaction.hpp); the claims' ledger decides how
// a transaction ends (idem/same_transaction/claim_ledger.hpp).
//
// with_transaction takes a pooled connection for each try and runs the body again when the
// server rolled it back for a transient reason (a serialization failure, a deadlock, a lost
// connection):
//
//   auto receipt = co_await idem::pg::with_transaction(
//       pool, [&](idem::pg::AsyncTransaction& tx) -> net::awaitable<Receipt> {
//         auto bound = tx.bind(store);          // the guard's store, in this transaction
//         auto guard = co_await idem::async::IdempotencyGuard<idem::pg::AsyncBoundStore>::claim(
//             bound, key, fp);
//         if (!guard.acquired()) co_return ...;
//         const std::vector<idem::pg::Param> values{order_no};  // named before the co_await
//         co_await tx.connection().execute("INSERT INTO orders (order_no) VALUES ($1)", values);
//         co_await guard.commit(receipt);
//         co_return receipt;
//       });
//
// or on the service's own PGconn* (with_transaction(conn, body)), which it borrows for each try
// (AsyncConnection(PGconn*)). The object is one transaction on a connection of the service's or
// of the pool, in the manner of libpqxx's `work`:
//
//   idem::pg::AsyncConnection c(conn);      // the service's handle
//   auto tx = co_await idem::pg::AsyncTransaction::begin(c);
//   auto bound = tx.bind(store);
//   ...claims through bound, business writes on c...
//   co_await tx.commit();                   // or roll_back()
//
// begin() runs BEGIN unless a transaction is open (begin one yourself for another isolation
// level: BEGIN ISOLATION LEVEL SERIALIZABLE). commit() ends it as the blocking Transaction's
// commit() does; one try: a transient failure leaves as a retryable StoreError after the
// rollback. Destroyed before it ended (an exception passing through), it rolls back with a
// blocking ROLLBACK: a destructor cannot await, so end it with commit() or roll_back() to keep
// the loop free. A COMMIT that the server answered with ROLLBACK (the service's own statement in
// the transaction failed and was caught) throws StoreError, not retryable. A call on a borrowed
// connection cut midway (cancelled while the server ran it, or the connection lost) leaves it in
// the middle of the protocol: AsyncConnection::broken() says so, and the service must close it.

#include <libpq-fe.h>

#include "idem/async/net.hpp"
#include "idem/errors.hpp"
#include "idem/pg/async_connection.hpp"
#include "idem/pg/async_pool.hpp"
#include "idem/pg/async_store.hpp"
#include "idem/pg/transaction.hpp"
#include "idem/retry_policy.hpp"
#include "idem/same_transaction/async_transaction.hpp"
#include "idem/same_transaction/transaction_try.hpp"

namespace idem::pg {

using TransactionParams = idem::TransactionParams;

// One transaction on an AsyncConnection (see the header comment and
// idem/same_transaction/async_transaction.hpp).
using AsyncTransaction = same_transaction::AsyncSqlTransaction<detail::AsyncBackend>;

namespace detail {

template <class F>
using async_transaction_result_t = same_transaction::async_try_result_t<AsyncBackend, F>;

}  // namespace detail

// body(AsyncTransaction&) returns net::awaitable<R>; with_transaction answers R. Throws as the
// blocking with_transaction does.
template <class F>
net::awaitable<detail::async_transaction_result_t<F>> with_transaction(
    AsyncPool& pool, F body, TransactionParams params = {}) {
  co_return co_await same_transaction::with_async_transaction<detail::AsyncBackend>(pool, body,
                                                                                    params);
}

// On the service's own connection, which must have no transaction open, borrowed for each try.
// A try that lost the connection, or was cut in the middle of a statement, is not run again on
// it (idem never reopens a handle of the service's): the next try throws a StoreError that is
// not retryable ("reconnect it and call again"). After an exception, a connection whose
// PQtransactionStatus is PQTRANS_ACTIVE was cut midway: close it.
template <class F>
net::awaitable<detail::async_transaction_result_t<F>> with_transaction(
    PGconn* conn, F body, TransactionParams params = {}) {
  using R = detail::async_transaction_result_t<F>;
  if (conn == nullptr) throw InvalidArgument("idem::pg::with_transaction: the connection is null");
  co_return co_await same_transaction::retry_async_transaction<R>(
      params, detail::AsyncBackend::transaction_who,
      [&](same_transaction::TryReport& report) -> net::awaitable<R> {
        AsyncConnection c(conn);  // borrowed anew for each try, as the blocking one does
        detail::require_service_connection_up(c.broken());
        detail::require_no_transaction(c.in_transaction());
        co_return co_await same_transaction::run_async_try<detail::AsyncBackend>(c, body, report);
      });
}

}  // namespace idem::pg
