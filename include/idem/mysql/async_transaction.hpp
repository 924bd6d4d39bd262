#pragma once
// idem::mysql::AsyncTransaction and with_transaction for coroutines: a transaction on an
// AsyncConnection that commits only when every claim in it finished. The rules are the
// blocking Transaction's and with_transaction's (idem/mysql/transaction.hpp); the claims'
// ledger decides how a transaction ends (idem/same_transaction/claim_ledger.hpp).
//
// with_transaction takes a pooled connection for each try and runs the body again when the
// server rolled it back for a transient reason:
//
//   auto receipt = co_await idem::mysql::with_transaction(
//       *pool, [&](idem::mysql::AsyncTransaction& tx) -> net::awaitable<Receipt> {
//         auto bound = tx.bind(store);          // the guard's store, in this transaction
//         auto guard = co_await idem::async::IdempotencyGuard<idem::mysql::AsyncBoundStore>::claim(
//             bound, key, fp);
//         if (!guard.acquired()) co_return ...;
//         const std::vector<idem::mysql::Param> values{order_no};  // named before the co_await
//         co_await tx.connection().execute("INSERT INTO orders (order_no) VALUES (?)", values);
//         co_await guard.commit(receipt);
//         co_return receipt;
//       });
//
// The connections may be the service's own, taken for each try from a connection source of
// its (an async lender: lend(use) gets a MYSQL*, co_awaits use(handle), gives it back):
//
//   auto lend = [&](auto use) -> net::awaitable<void> {
//     auto h = co_await service_pool.get();  // however the service lends its handles
//     co_await use(h.get());
//   };
//   co_await idem::mysql::with_transaction(lend, [&](idem::mysql::AsyncTransaction& tx)
//                                                    -> net::awaitable<Receipt> { ...as above... });
//
// The object is one transaction on a connection of the service's (AsyncConnection(MYSQL*)
// borrows its handle) or of the pool, in the manner of libpqxx's `work`:
//
//   idem::mysql::AsyncConnection c(mysql);  // the service's handle
//   auto tx = co_await idem::mysql::AsyncTransaction::begin(c);
//   auto bound = tx.bind(store);
//   ...claims through bound, business writes on c...
//   co_await tx.commit();                   // or roll_back()
//
// commit() ends it as the blocking Transaction::commit does (COMMIT, or ROLLBACK as the claims
// say, then the failed attempts counted after it); one try: a transient failure leaves as a
// retryable StoreError after the rollback. Destroyed before it ended (an exception passing
// through), it rolls back with a blocking ROLLBACK: a destructor cannot await, so end it with
// commit() or roll_back() to keep the loop free.
//
// The ledger travels with the transaction (bind), not with the thread: a coroutine may resume
// on another thread of the loop.

#include <concepts>
#include <optional>
#include <type_traits>
#include <utility>

#include "idem/async/net.hpp"
#include "idem/errors.hpp"
#include "idem/mysql/async_pool.hpp"
#include "idem/mysql/async_store.hpp"
#include "idem/mysql/transaction.hpp"
#include "idem/retry_policy.hpp"
#include "idem/same_transaction/async_transaction.hpp"
#include "idem/same_transaction/transaction_try.hpp"

namespace idem::mysql {

// One transaction on an AsyncConnection (see the header comment and
// idem/same_transaction/async_transaction.hpp).
using AsyncTransaction = same_transaction::AsyncSqlTransaction<detail::AsyncBackend>;

namespace detail {

template <class F>
using transaction_result_t = same_transaction::async_try_result_t<AsyncBackend, F>;

}  // namespace detail

// body(AsyncTransaction&) returns net::awaitable<R>; with_transaction answers R. Throws as
// the blocking with_transaction does.
template <class F>
net::awaitable<detail::transaction_result_t<F>> with_transaction(AsyncPool& pool, F body,
                                                                 TransactionParams params = {}) {
  co_return co_await same_transaction::with_async_transaction<detail::AsyncBackend>(pool, body,
                                                                                    params);
}

namespace detail {

// Stands for any `use` an async lender is given: it is called with a MYSQL* and co_awaited.
struct AnyAsyncHandleUse {
  net::awaitable<void> operator()(MYSQL*) const;  // declared only: for the concept below
};

// One try of with_transaction(lend, ...) as far as the lender's `use` goes: whether the
// lender called it, and what the try answered.
template <class F>
struct LentTry {
  LentTry(F& b, idem::same_transaction::TryReport& r) : body(b), report(r) {}
  F& body;
  idem::same_transaction::TryReport& report;
  bool lent = false;
  std::optional<
      std::conditional_t<std::is_void_v<transaction_result_t<F>>, int, transaction_result_t<F>>>
      result;
};

template <class F>
net::awaitable<void> run_lent_try(LentTry<F>& t, MYSQL* mysql) {
  t.lent = true;
  AsyncConnection c(mysql);
  check_lent(c.in_transaction());
  if constexpr (std::is_void_v<transaction_result_t<F>>) {
    co_await same_transaction::run_async_try<AsyncBackend>(c, t.body, t.report);
    t.result.emplace(0);
  } else {
    t.result.emplace(co_await same_transaction::run_async_try<AsyncBackend>(c, t.body, t.report));
  }
}

// The `use` a lender is given: it only points at the try, so the try does not depend on how
// long the lender keeps it.
template <class F>
struct LentUse {
  LentTry<F>* t;
  net::awaitable<void> operator()(MYSQL* mysql) const { return run_lent_try(*t, mysql); }
};

}  // namespace detail

// A connection source of the caller's, for coroutines: lend(use) is a coroutine (its return
// type declared net::awaitable<void>) that gets a MYSQL* from wherever the service keeps its
// connections (awaiting it if it likes), co_awaits use(handle) once, and gives the handle back
// when use completes or throws. A lender that only returned use's awaitable would give the
// handle back before the try ran on it: the second requirement (the same result whatever
// use is) refuses one whose return type is deduced from use's. As for the blocking
// ConnectionLender, the handle has no transaction open, and with_transaction changes nothing
// else on it. The handle is borrowed by an AsyncConnection for the try: its non-blocking mode
// is turned on (the service's own blocking calls on it work as before), and a try cut midway
// leaves it in the middle of the protocol, for the service to close (see
// AsyncConnection(MYSQL*)).
template <class L>
concept AsyncConnectionLender = requires(L& lend, detail::AnyAsyncHandleUse use,
                                         detail::AnyHandleUse blocking_use) {
  { lend(use) } -> std::same_as<net::awaitable<void>>;
  { lend(blocking_use) } -> std::same_as<net::awaitable<void>>;
};

// On a handle lent by the caller's own connection source, taken for each try (a try the server
// rolled back for a transient reason runs again on the handle lent next). The body's
// transaction borrows that handle: bind the store to it (tx.bind(store)), and run the service's
// own SQL on tx.connection() or on the handle. Throws as the blocking with_transaction(lend, ...)
// does, UsageError included when the lender did not call use or swallowed its exception. The
// lender is kept (a copy, or moved in) until the call completes. (Name the body's parameter type,
// AsyncTransaction&: a body taking `auto&` also looks like a blocking body, and the call is
// ambiguous.)
template <class L, class F>
requires AsyncConnectionLender<L> net::awaitable<detail::transaction_result_t<F>> with_transaction(
    L lend, F body, TransactionParams params = {}) {
  using R = detail::transaction_result_t<F>;
  co_return co_await same_transaction::retry_async_transaction<R>(
      params, detail::AsyncBackend::transaction_who,
      [&](idem::same_transaction::TryReport& report) -> net::awaitable<R> {
        detail::LentTry<F> t(body, report);
        const detail::LentUse<F> use{&t};
        co_await lend(use);
        detail::check_lender_returned(t.lent, t.result.has_value());
        if constexpr (!std::is_void_v<R>) co_return std::move(*t.result);
      });
}

}  // namespace idem::mysql
