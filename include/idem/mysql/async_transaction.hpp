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
//         auto guard = co_await idem::async::Guard<idem::mysql::AsyncBoundStore>::claim(
//             bound, key, fp);
//         if (!guard.acquired()) co_return ...;
//         co_await tx.connection().execute("INSERT INTO orders ...", {...});
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

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "idem/async/net.hpp"
#include "idem/backend/pool.hpp"
#include "idem/backend/retry_loop.hpp"
#include "idem/errors.hpp"
#include "idem/mysql/async_pool.hpp"
#include "idem/mysql/async_store.hpp"
#include "idem/mysql/transaction.hpp"
#include "idem/retry_policy.hpp"
#include "idem/same_transaction/claim_ledger.hpp"
#include "idem/same_transaction/transaction_try.hpp"

namespace idem::mysql {

class AsyncTransaction;

namespace detail {

inline constexpr std::string_view async_transaction_who = "idem::mysql::with_transaction";

template <class F>
using transaction_result_t =
    typename idem::async::detail::Awaited<std::invoke_result_t<F&, AsyncTransaction&>>::type;

template <class F>
net::awaitable<transaction_result_t<F>> run_async_try(AsyncConnection& c, F& body,
                                                      idem::same_transaction::TryReport& report);

}  // namespace detail

class AsyncTransaction {
 public:
  // Begins a transaction on `c` unless one is open there (then this one ends it): one of the
  // pool's connections, or one borrowing the service's handle. `c` must outlive it. Throws
  // StoreError.
  static net::awaitable<AsyncTransaction> begin(AsyncConnection& c) {
    // (Begun before the object exists: a BEGIN that fails leaves nothing to roll back.)
    if (!c.in_transaction()) co_await c.begin_transaction();
    co_return AsyncTransaction(c, false, "idem::mysql::AsyncTransaction");
  }

  AsyncTransaction(AsyncTransaction&& other) noexcept
      : connection_(std::exchange(other.connection_, nullptr)),
        who_(other.who_),
        ledger_(std::move(other.ledger_)),
        writes_(std::move(other.writes_)),
        ended_(other.ended_),
        committed_(other.committed_) {}
  AsyncTransaction& operator=(AsyncTransaction&&) = delete;
  ~AsyncTransaction() {
    if (connection_ == nullptr || ended_) return;
    ledger_->rolled_back();
    roll_back_blocking(*connection_);
  }

  AsyncConnection& connection() const noexcept { return *connection_; }
  // The store, bound to this transaction's connection and ledger, claiming as its
  // StoreParams::bound_claim says.
  AsyncBoundStore bind(const AsyncStore& store) const {
    return AsyncBoundStore(store.ops(), *connection_, store.bound_claim(), ledger_.get(),
                           writes_.get());
  }
  // As BoundStore::set_rollback_only, for the whole transaction.
  void set_rollback_only() noexcept { ledger_->set_rollback_only(); }

  // Ends the transaction as its claims say (see the header comment): true when it committed.
  // Throws UsageError when it already ended or a claim forbids the commit (after the
  // rollback); a StoreError from the COMMIT or the ROLLBACK leaves after a rollback.
  net::awaitable<bool> commit() {
    end();
    idem::same_transaction::TryReport nobody;  // the guards reported their own claims
    co_await finish(nobody);
    co_return committed_;
  }

  // Rolls back whatever the claims say. The failed attempts a consumer counted in it are not
  // written (commit() writes them after its rollback). Throws UsageError when the
  // transaction already ended, StoreError when the ROLLBACK fails (the connection is then
  // broken).
  net::awaitable<void> roll_back() {
    end();
    ledger_->rolled_back();
    co_await roll_back_or_break();
  }

  // Whether commit() committed (false also after a rollback it chose).
  bool committed() const noexcept { return committed_; }

 private:
  using Ledger = idem::same_transaction::ClaimLedger;

  template <class F>
  friend net::awaitable<detail::transaction_result_t<F>> detail::run_async_try(
      AsyncConnection& c, F& body, idem::same_transaction::TryReport& report);

  // `is_try`: a try of with_transaction, which holds its claims' events until it ended and
  // sends a claim's result with its COMMIT (the caller's own transaction does neither).
  AsyncTransaction(AsyncConnection& c, bool is_try, std::string_view who)
      : connection_(&c),
        who_(who),
        ledger_(std::make_unique<Ledger>()),
        writes_(std::make_unique<AsyncTransactionWrites>()) {
    if (!is_try) return;
    ledger_->hold_events();
    writes_->defers = true;
  }

  void end() {
    if (ended_) throw UsageError(fmt::format("{}: the transaction already ended", who_));
    ended_ = true;
  }

  // The steps of TryEnd (idem/same_transaction/transaction_try.hpp), as the blocking try takes
  // them; a failure rolls back and leaves as try_failed says.
  net::awaitable<void> finish(idem::same_transaction::TryReport& report) {
    std::exception_ptr failed;
    try {
      using Step = idem::same_transaction::TryEnd::Step;
      idem::same_transaction::TryEnd end(*ledger_, who_, !writes_->after_rollback.empty());
      for (Step step = end.start(); step != Step::done; step = end.done(step)) {
        switch (step) {
          case Step::commit: {
            // A claim's result may wait to go with it (AsyncTransactionWrites).
            const bool sent = co_await writes_->send_deferred(*connection_, *ledger_, true, who_);
            if (!sent) co_await connection_->query("COMMIT");
            break;
          }
          case Step::roll_back:
            co_await connection_->query("ROLLBACK");
            break;
          case Step::write_after_rollback:
            co_await write_after_rollback();
            break;
          case Step::done:
            break;
        }
      }
      committed_ = end.committed();
    } catch (...) {
      failed = fail(std::current_exception(), report);
    }
    if (failed) {
      co_await roll_back_quietly();
      std::rethrow_exception(failed);
    }
  }

  std::exception_ptr fail(std::exception_ptr error, idem::same_transaction::TryReport& report) {
    ended_ = true;
    return idem::same_transaction::try_failed(*ledger_, report, std::move(error), who_);
  }

  // As idem::same_transaction::write_after_rollback: the bound stores' writes in a transaction
  // of their own, tried again while they fail transiently.
  net::awaitable<void> write_after_rollback() {
    backend::RetryLoop loop(RetryPolicy{}, who_, idem::same_transaction::after_rollback_what);
    co_await idem::async::detail::retrying<bool>(
        [&]() -> net::awaitable<bool> {
          std::exception_ptr failed;
          try {
            co_await connection_->begin_transaction();
            for (auto& write : writes_->after_rollback)
              co_await write(*connection_);
            co_await connection_->query("COMMIT");
          } catch (const StoreError&) {
            failed = std::current_exception();
          }
          if (failed) {
            co_await roll_back_quietly();
            std::rethrow_exception(failed);
          }
          co_return true;
        },
        [&](const StoreError& e) {
          if (!e.retryable()) throw idem::same_transaction::after_rollback_failed(who_, e);
          return loop.failed(e);
        });
  }

  net::awaitable<void> roll_back_or_break() {
    try {
      co_await connection_->query("ROLLBACK");
    } catch (...) {
      connection_->mark_broken();  // in an unknown transaction state: not reused
      throw;
    }
  }
  // A connection whose ROLLBACK failed is in an unknown state: the pool drops it.
  net::awaitable<void> roll_back_quietly() {
    if (connection_->broken()) co_return;
    try {
      co_await connection_->query("ROLLBACK");
    } catch (...) {
      connection_->mark_broken();
    }
  }
  static void roll_back_blocking(AsyncConnection& c) noexcept {
    if (c.broken()) return;
    if (mysql_real_query(c.native(), "ROLLBACK", 8) != 0) c.mark_broken();
  }

  AsyncConnection* connection_;
  std::string_view who_;  // a literal
  // On the heap: the bound stores point at them, and the transaction moves.
  std::unique_ptr<Ledger> ledger_;
  std::unique_ptr<AsyncTransactionWrites> writes_;
  bool ended_ = false;
  bool committed_ = false;
};

namespace detail {

// One try of with_transaction: begin, the body, then the transaction's end as its claims say.
template <class F>
net::awaitable<transaction_result_t<F>> run_async_try(AsyncConnection& c, F& body,
                                                      idem::same_transaction::TryReport& report) {
  using R = transaction_result_t<F>;
  AsyncTransaction tx(c, true, async_transaction_who);
  std::exception_ptr failed;
  std::optional<std::conditional_t<std::is_void_v<R>, bool, R>> result;
  try {
    co_await c.begin_transaction();
    if constexpr (std::is_void_v<R>) {
      co_await body(tx);
      result.emplace(true);
    } else {
      result.emplace(co_await body(tx));
    }
  } catch (...) {
    failed = tx.fail(std::current_exception(), report);
  }
  if (failed) {
    co_await tx.roll_back_quietly();
    std::rethrow_exception(failed);
  }
  tx.end();
  co_await tx.finish(report);
  if constexpr (!std::is_void_v<R>) co_return std::move(*result);
}

// with_transaction's retry loop, the coroutine form of same_transaction::retry_transaction:
// co_awaits one_try(report) until it answers, as TransactionTries says.
template <class R, class Try>
net::awaitable<R> retry_async_transaction(TransactionParams params, Try one_try) {
  idem::same_transaction::TransactionTries tries(params, async_transaction_who);
  co_return co_await idem::async::detail::retrying<R>(
      [&] { return one_try(tries.next_try()); },
      [&](const StoreError& e) { return tries.failed(e); });
}

}  // namespace detail

// body(AsyncTransaction&) returns net::awaitable<R>; with_transaction answers R. Throws as
// the blocking with_transaction does.
template <class F>
net::awaitable<detail::transaction_result_t<F>> with_transaction(AsyncPool& pool, F body,
                                                                 TransactionParams params = {}) {
  using R = detail::transaction_result_t<F>;
  co_return co_await detail::retry_async_transaction<R>(
      params, [&](idem::same_transaction::TryReport& report) -> net::awaitable<R> {
        auto conn = co_await pool.acquire(backend::ConnectionPurpose::transaction);
        co_return co_await detail::run_async_try(*conn, body, report);
      });
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
    co_await run_async_try(c, t.body, t.report);
    t.result.emplace(0);
  } else {
    t.result.emplace(co_await run_async_try(c, t.body, t.report));
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
  co_return co_await detail::retry_async_transaction<R>(
      params, [&](idem::same_transaction::TryReport& report) -> net::awaitable<R> {
        detail::LentTry<F> t(body, report);
        const detail::LentUse<F> use{&t};
        co_await lend(use);
        detail::check_lender_returned(t.lent, t.result.has_value());
        if constexpr (!std::is_void_v<R>) co_return std::move(*t.result);
      });
}

}  // namespace idem::mysql
