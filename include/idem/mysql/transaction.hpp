#pragma once
// idem::mysql::with_transaction: run a transaction body, commit it only when every claim in
// it finished, and run it again when the server rolled it back for a transient reason
// (deadlock, lock wait timeout, lost connection, a Galera certification failure).
//
//   auto receipt = idem::mysql::with_transaction(pool, [&](idem::mysql::Connection& c) {
//     auto tx = store.bind(c);
//     idem::IdempotencyGuard guard{tx, key, fp};
//     ...business writes on c (c.native() is the MYSQL*)...
//     guard.commit(result);
//     return result;
//   });
//
// The connections may be the service's own: pass anything that lends a MYSQL* for the
// length of a call instead of the pool (see ConnectionLender below):
//
//   auto lend = [&](auto&& use) { auto h = service_pool.get(); return use(h.get()); };
//   idem::mysql::with_transaction(lend, [&](idem::mysql::Connection& c) { ...as above... });
//
// How a try ends, when the body returns:
//  - every claim of the try succeeded or failed permanently (or there was none): COMMIT, and
//    the body's result is returned;
//  - its claims failed retryably (a 5xx from idem::http::handle, a consume body that threw):
//    ROLLBACK, so that no business write of the try stays behind, and the body's result (the
//    failure) is returned; the redelivery runs the request afresh;
//  - a claim was abandoned (its guard destroyed without commit or fail) or left processing,
//    or finished claims share the try with a retryable one: ROLLBACK, and UsageError naming
//    the claim.
// An exception from the body rolls back and propagates; a retryable StoreError (also from
// the caller's own SQL, see idem::mysql::error_from) runs the body again, up to max_attempts.
//
// The body must be safe to run again: everything it writes to this database is rolled back
// before a new try, and idem's claim inside it makes a duplicate run a replay. A body that
// also acts outside the database (a payment channel) wants standalone mode instead.
// Even a COMMIT whose reply was lost is safe to retry this way when the body is guarded:
// if the first commit did land, the retry's claim replays it.

#include <mysql.h>

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/mysql/pool.hpp"
#include "idem/mysql/store.hpp"
#include "idem/observer.hpp"
#include "idem/same_transaction/own_transaction.hpp"
#include "idem/same_transaction/transaction_try.hpp"

namespace idem::mysql {

using TransactionParams = idem::TransactionParams;

namespace detail {

// Stands for any `use` a lender is given: it is called with a MYSQL*.
struct AnyHandleUse {
  void operator()(MYSQL*) const {}
};

}  // namespace detail

// A connection source of the caller's: lend(use) takes a MYSQL* from wherever the service
// keeps its connections, calls use(handle) once, and gives the handle back when use returns
// or throws. The handle must have no transaction open; with_transaction begins, commits or
// rolls back its own and changes nothing else on it.
template <class L>
concept ConnectionLender = std::invocable<L&, detail::AnyHandleUse>;

// The concept's name before the house rules named concepts like types (docs/changes.md); it
// will be removed in the next release.
template <class L>
concept lends_connection = ConnectionLender<L>;

namespace detail {

// A try on one of idem's connections or a borrowed one (see
// idem/same_transaction/transaction_try.hpp).
struct ConnectionTry {
  Connection& c;
  const void* handle() const noexcept { return c.native(); }
  void begin() { c.begin_transaction(); }
  void commit() { c.query("COMMIT"); }
  void roll_back() { c.query("ROLLBACK"); }
  void roll_back_quietly() noexcept {
    if (c.broken()) return;
    try {
      c.query("ROLLBACK");
    } catch (...) {
      c.mark_broken();  // a connection in an unknown transaction state is not reused
    }
  }
};

// What a lender must do, for the blocking and the coroutine with_transaction: lend a handle
// with no transaction open, call use, and let use's exceptions through.
inline void check_lent(bool in_transaction) {
  if (in_transaction) {
    throw UsageError(
        "idem::mysql::with_transaction: the lent handle already has a transaction open");
  }
}
inline void check_lender_returned(bool lent, bool answered) {
  if (!lent) {
    throw UsageError("idem::mysql::with_transaction: the lender returned without calling use");
  }
  if (!answered) {
    throw UsageError(
        "idem::mysql::with_transaction: the lender swallowed an exception of use (the try was "
        "rolled back); let use's exceptions through");
  }
}

template <class F>
std::invoke_result_t<F&, Connection&> run_try(Connection& c, F& body,
                                              idem::same_transaction::TryReport& report) {
  ConnectionTry tx{c};
  return idem::same_transaction::run_try(tx, "idem::mysql::with_transaction", report,
                                         [&]() -> decltype(auto) { return body(c); });
}

}  // namespace detail

// One transaction on the service's own MYSQL*, as an object
// (idem/same_transaction/own_transaction.hpp): made, it runs START TRANSACTION unless a transaction
// is open; commit() commits it or rolls it back as its claims say; destroyed before, it rolls back.
//
//   idem::mysql::Transaction tx(store, mysql);
//   const auto out = idem::run_once(tx, key, fp, [&] { ...business writes on mysql...; });
//   tx.commit();
using Transaction = same_transaction::OwnTransaction<detail::Backend, detail::ConnectionTry>;

// On a connection of idem's pool, taken for each try.
template <class F>
auto with_transaction(Pool& pool, F&& body, TransactionParams params = {})
    -> std::invoke_result_t<F&, Connection&> {
  return idem::same_transaction::retry_transaction(
      params, "idem::mysql::with_transaction",
      [&](idem::same_transaction::TryReport& report) -> decltype(auto) {
        auto conn = pool.acquire(backend::ConnectionPurpose::transaction);
        return detail::run_try(*conn, body, report);
      });
}

// On a handle lent by the caller's own connection source, taken for each try. The body gets
// a Connection borrowing that handle: bind the store to it (store.bind(c)), and run the
// service's own SQL on c.native().
template <class L, class F>
requires ConnectionLender<L>
auto with_transaction(L&& lend, F&& body, TransactionParams params = {})
    -> std::invoke_result_t<F&, Connection&> {
  using R = std::invoke_result_t<F&, Connection&>;
  return idem::same_transaction::retry_transaction(
      params, "idem::mysql::with_transaction", [&](idem::same_transaction::TryReport& report) -> R {
        std::optional<std::conditional_t<std::is_void_v<R>, int, R>> result;
        bool lent = false;
        lend([&](MYSQL* mysql) {
          lent = true;
          Connection c(mysql);
          detail::check_lent(c.in_transaction());
          if constexpr (std::is_void_v<R>) {
            detail::run_try(c, body, report);
            result.emplace(0);
          } else {
            result.emplace(detail::run_try(c, body, report));
          }
        });
        detail::check_lender_returned(lent, result.has_value());
        if constexpr (!std::is_void_v<R>) return std::move(*result);
      });
}

}  // namespace idem::mysql
