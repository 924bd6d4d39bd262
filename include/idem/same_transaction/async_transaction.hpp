#pragma once
// idem::same_transaction::AsyncSqlTransaction: a transaction on one coroutine connection of an SQL
// backend, which commits only when every claim in it finished; and the tries of with_transaction
// for coroutines. The rules are the blocking ones (idem/same_transaction/transaction_try.hpp,
// own_transaction.hpp); the claims' ledger decides how a transaction ends
// (idem/same_transaction/claim_ledger.hpp). The backends name it idem::mysql::AsyncTransaction
// and idem::pg::AsyncTransaction, and build their with_transaction on run_async_try and
// retry_async_transaction below:
//
//   auto tx = co_await idem::pg::AsyncTransaction::begin(c);  // c: an AsyncConnection
//   auto bound = tx.bind(store);
//   ...claims through bound, business writes on c...
//   co_await tx.commit();                                     // or roll_back()
//
// commit() ends it as the blocking OwnTransaction::commit does (COMMIT, or ROLLBACK as the
// claims say, then the failed attempts counted after it); one try: a transient failure leaves as
// a retryable StoreError after the rollback. A try of with_transaction cancelled between its
// statements (a timer `||`, a cancellation signal) sends its ROLLBACK, to its end, before the
// cancellation reaches the caller, and so do commit() and roll_back() cancelled once started.
// (Awaited from a coroutine cancelled before, they do not start: the destructor's ROLLBACK
// below runs instead; turn this_coro::throw_if_cancelled off around them to keep the loop
// free.) A statement cut in flight by a cancellation signal leaves the connection in the middle
// of the protocol: the pool drops it, and a borrowed handle is the service's to close
// (PQTRANS_ACTIVE, or a MariaDB handle that AsyncConnection::broken() calls so). Destroyed
// before it ended (an exception passing
// through), it rolls back with a blocking ROLLBACK: a destructor cannot await, so end it with
// commit() or roll_back() to keep the loop free.
//
// The ledger travels with the transaction (bind), not with the thread: a coroutine may resume
// on another thread of the loop.
//
// Its Backend is the bound store's (idem/same_transaction/async_bound_sql_store.hpp) and also
// says:
//
//   struct AsyncBackend {
//     ...
//     static constexpr std::string_view transaction_who = "idem::pg::with_transaction";
//     static constexpr std::string_view transaction_object_who = "idem::pg::AsyncTransaction";
//     static net::awaitable<void> begin(Connection&);   // BEGIN, as the session allows
//     static net::awaitable<void> commit(Connection&);  // COMMIT; throws when it did not commit
//     static void roll_back_blocking(Connection&) noexcept;  // for the destructor; marks a
//                                                             // connection it fails on broken
//   };

#include <concepts>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include "idem/async/detail/to_completion.hpp"
#include "idem/async/net.hpp"
#include "idem/backend/pool.hpp"
#include "idem/backend/retry_loop.hpp"
#include "idem/errors.hpp"
#include "idem/retry_policy.hpp"
#include "idem/same_transaction/async_bound_sql_store.hpp"
#include "idem/same_transaction/claim_ledger.hpp"
#include "idem/same_transaction/transaction_try.hpp"

IDEM_ASYNC_FRAMES_BEGIN

namespace idem::same_transaction {

namespace net = idem::async::net;

template <class Backend>
class AsyncSqlTransaction;

// What body(AsyncSqlTransaction<Backend>&) answers once co_awaited.
template <class Backend, class F>
using async_try_result_t = typename idem::async::detail::Awaited<
    std::invoke_result_t<F&, AsyncSqlTransaction<Backend>&>>::type;

template <class Backend, class F>
net::awaitable<async_try_result_t<Backend, F>> run_async_try(typename Backend::Connection& c,
                                                             F& body, TryReport& report);

template <class Backend>
class AsyncSqlTransaction {
  using Connection = typename Backend::Connection;
  using BoundStore = AsyncBoundSqlStore<Backend>;
  using Writes = AsyncTransactionWrites<Connection>;

 public:
  // Begins a transaction on `c` unless one is open there (then this one ends it): one of the
  // pool's connections, or one borrowing the service's handle. `c` must outlive it. Throws
  // StoreError.
  static net::awaitable<AsyncSqlTransaction> begin(Connection& c) {
    // (Begun before the object exists: a BEGIN that fails leaves nothing to roll back.)
    if (!Backend::in_transaction(c)) co_await Backend::begin(c);
    co_return AsyncSqlTransaction(c, false, Backend::transaction_object_who);
  }

  AsyncSqlTransaction(AsyncSqlTransaction&& other) noexcept
      : connection_(std::exchange(other.connection_, nullptr)),
        who_(other.who_),
        ledger_(std::move(other.ledger_)),
        writes_(std::move(other.writes_)),
        ended_(other.ended_),
        committed_(other.committed_) {}
  AsyncSqlTransaction& operator=(AsyncSqlTransaction&&) = delete;
  ~AsyncSqlTransaction() {
    if (connection_ == nullptr || ended_) return;
    ledger_->rolled_back();
    Backend::roll_back_blocking(*connection_);
  }

  Connection& connection() const noexcept { return *connection_; }
  // The store, bound to this transaction's connection and ledger, claiming as its
  // StoreParams::bound_claim says.
  template <class Store>
  requires std::same_as < std::remove_cvref_t<decltype(std::declval<const Store&>().ops())>,
  typename Backend::Ops > BoundStore bind(const Store& store) const {
    return BoundStore(store.ops(), *connection_, store.bound_claim(), ledger_.get(), writes_.get());
  }
  // As BoundStore::set_rollback_only, for the whole transaction.
  void set_rollback_only() noexcept { ledger_->set_rollback_only(); }

  // Ends the transaction as its claims say (see the header comment): true when it committed.
  // Throws UsageError when it already ended or a claim forbids the commit (after the
  // rollback); a StoreError from the COMMIT or the ROLLBACK leaves after a rollback.
  net::awaitable<bool> commit() {
    require_open();
    TryReport nobody;  // the guards reported their own claims
    co_await finish(nobody);
    co_return committed_;
  }

  // Rolls back whatever the claims say. The failed attempts a consumer counted in it are not
  // written (commit() writes them after its rollback). Throws UsageError when the
  // transaction already ended, StoreError when the ROLLBACK fails (the connection is then
  // broken).
  net::awaitable<void> roll_back() {
    require_open();
    ledger_->rolled_back();
    const bool throws = co_await net::this_coro::throw_if_cancelled();
    co_await net::this_coro::throw_if_cancelled(false);  // see send_roll_back
    ended_ = true;
    const std::exception_ptr failed = co_await send_roll_back();
    co_await net::this_coro::throw_if_cancelled(throws);
    if (failed) std::rethrow_exception(failed);
  }

  // Whether commit() committed (false also after a rollback it chose).
  bool committed() const noexcept { return committed_; }

 private:
  using Ledger = ClaimLedger;

  template <class B, class F>
  friend net::awaitable<async_try_result_t<B, F>> run_async_try(typename B::Connection& c, F& body,
                                                                TryReport& report);

  // `is_try`: a try of with_transaction, which holds its claims' events until it ended and
  // sends a claim's result with its COMMIT (the caller's own transaction does neither).
  AsyncSqlTransaction(Connection& c, bool is_try, std::string_view who)
      : connection_(&c),
        who_(who),
        ledger_(std::make_unique<Ledger>()),
        writes_(std::make_unique<Writes>()) {
    if (!is_try) return;
    ledger_->hold_events();
    writes_->defers = true;
  }

  // Marked ended only where the ending has started: a co_await that throws before it starts
  // (the coroutine was cancelled) leaves the destructor's ROLLBACK in place.
  void require_open() const {
    if (ended_) throw UsageError(fmt::format("{}: the transaction already ended", who_));
  }

  // The steps of TryEnd (idem/same_transaction/transaction_try.hpp), as the blocking try takes
  // them; a failure rolls back and leaves as try_failed says.
  net::awaitable<void> finish(TryReport& report) {
    ended_ = true;
    std::exception_ptr failed;
    try {
      using Step = TryEnd::Step;
      TryEnd end(*ledger_, who_, !writes_->after_rollback.empty());
      for (Step step = end.start(); step != Step::done; step = end.done(step)) {
        switch (step) {
          case Step::commit: {
            // A claim's result may wait to go with it (AsyncTransactionWrites).
            const bool sent = co_await writes_->send_deferred(*connection_, *ledger_, true, who_);
            if (!sent) co_await Backend::commit(*connection_);
            break;
          }
          case Step::roll_back:  // (not cut by a cancellation signal once sent)
            co_await idem::async::detail::to_completion(query_roll_back(*connection_));
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
      const bool throws = co_await net::this_coro::throw_if_cancelled();
      co_await net::this_coro::throw_if_cancelled(false);  // see send_roll_back
      co_await roll_back_quietly();
      co_await net::this_coro::throw_if_cancelled(throws);
      std::rethrow_exception(failed);
    }
  }

  std::exception_ptr fail(std::exception_ptr error, TryReport& report) {
    ended_ = true;
    return try_failed(*ledger_, report, std::move(error), who_);
  }

  // As write_after_rollback: the bound stores' writes in a transaction
  // of their own, tried again while they fail transiently.
  net::awaitable<void> write_after_rollback() {
    backend::RetryLoop loop(RetryPolicy{}, who_, after_rollback_what);
    co_await idem::async::detail::retrying<bool>(
        [&]() -> net::awaitable<bool> {
          std::exception_ptr failed;
          try {
            co_await Backend::begin(*connection_);
            for (auto& write : writes_->after_rollback)
              co_await write(*connection_);
            co_await Backend::commit(*connection_);
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
          if (!e.retryable()) throw after_rollback_failed(who_, e);
          return loop.failed(e);
        });
  }

  // A ROLLBACK once the try failed, was cancelled, or was ended by roll_back(): sent to its end
  // even when a cancellation signal comes meanwhile (idem/async/detail/to_completion.hpp), so
  // that no connection is handed back with the transaction still open. Its failure, if any,
  // is answered, and the connection marked broken (its transaction state is unknown: the pool
  // drops it, and a borrowed handle is the service's to close). A cancelled coroutine's every
  // co_await throws before it starts, this one's too: the caller turns
  // this_coro::throw_if_cancelled off around it, and gives the setting back after.
  net::awaitable<std::exception_ptr> send_roll_back() {
    std::exception_ptr failed;
    try {
      co_await idem::async::detail::to_completion(query_roll_back(*connection_));
    } catch (...) {
      connection_->mark_broken();
      failed = std::current_exception();
    }
    co_return failed;
  }
  // (Not when no transaction is open: a failed COMMIT ended it, or BEGIN never ran.)
  net::awaitable<void> roll_back_quietly() {
    if (!connection_->broken() && Backend::in_transaction(*connection_)) {
      (void)co_await send_roll_back();
    }
  }
  static net::awaitable<void> query_roll_back(Connection& c) { co_await c.query("ROLLBACK"); }

  Connection* connection_;
  std::string_view who_;  // a literal
  // On the heap: the bound stores point at them, and the transaction moves.
  std::unique_ptr<Ledger> ledger_;
  std::unique_ptr<Writes> writes_;
  bool ended_ = false;
  bool committed_ = false;
};

// One try of with_transaction: begin, the body, then the transaction's end as its claims say.
template <class Backend, class F>
net::awaitable<async_try_result_t<Backend, F>> run_async_try(typename Backend::Connection& c,
                                                             F& body, TryReport& report) {
  using R = async_try_result_t<Backend, F>;
  AsyncSqlTransaction<Backend> tx(c, true, Backend::transaction_who);
  std::exception_ptr failed;
  std::optional<std::conditional_t<std::is_void_v<R>, bool, R>> result;
  try {
    co_await Backend::begin(c);
    if constexpr (std::is_void_v<R>) {
      co_await body(tx);
      result.emplace(true);
    } else {
      result.emplace(co_await body(tx));
    }
    // Cancelled while the body's last call could not be cut (a guard's record): the try fails
    // here, as the next co_await would throw before it starts.
    const net::cancellation_state cancellation = co_await net::this_coro::cancellation_state;
    const bool throws = co_await net::this_coro::throw_if_cancelled();
    if (throws && cancellation.cancelled() != net::cancellation_type::none) {
      throw boost::system::system_error(net::error::operation_aborted);
    }
  } catch (...) {
    failed = tx.fail(std::current_exception(), report);
  }
  if (failed) {
    const bool throws = co_await net::this_coro::throw_if_cancelled();
    co_await net::this_coro::throw_if_cancelled(false);  // see send_roll_back
    co_await tx.roll_back_quietly();
    co_await net::this_coro::throw_if_cancelled(throws);
    std::rethrow_exception(failed);
  }
  tx.require_open();  // (the body may not end the try's transaction itself)
  co_await tx.finish(report);
  if constexpr (!std::is_void_v<R>) co_return std::move(*result);
}

// with_transaction's retry loop, the coroutine form of same_transaction::retry_transaction:
// co_awaits one_try(report) until it answers, as TransactionTries says.
// `who`, e.g. "idem::pg::with_transaction", must outlive the call.
template <class R, class Try>
net::awaitable<R> retry_async_transaction(TransactionParams params, std::string_view who,
                                          Try one_try) {
  TransactionTries tries(params, who);
  co_return co_await idem::async::detail::retrying<R>(
      [&] { return one_try(tries.next_try()); },
      [&](const StoreError& e) { return tries.failed(e); });
}

// with_transaction on a pool of the backend's: a connection taken for each try.
template <class Backend, class Pool, class F>
net::awaitable<async_try_result_t<Backend, F>> with_async_transaction(Pool& pool, F& body,
                                                                      TransactionParams params) {
  using R = async_try_result_t<Backend, F>;
  co_return co_await retry_async_transaction<R>(
      params, Backend::transaction_who, [&](TryReport& report) -> net::awaitable<R> {
        auto conn = co_await pool.acquire(backend::ConnectionPurpose::transaction);
        co_return co_await run_async_try<Backend>(*conn, body, report);
      });
}

}  // namespace idem::same_transaction

IDEM_ASYNC_FRAMES_END
