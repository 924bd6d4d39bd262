#pragma once
// idem::mysql::with_transaction for coroutines: run a transaction body on an AsyncConnection,
// commit it only when every claim in it finished, and run it again when the server rolled it
// back for a transient reason. The rules are with_transaction's (idem/mysql/transaction.hpp);
// the claims' ledger decides how each try ends (idem/detail/claim_ledger.hpp).
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
// The ledger travels with the try (AsyncTransaction::bind), not with the thread: a coroutine
// may resume on another thread of the loop.

#include <exception>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "idem/async/net.hpp"
#include "idem/detail/claim_ledger.hpp"
#include "idem/detail/transaction_try.hpp"
#include "idem/errors.hpp"
#include "idem/mysql/async_pool.hpp"
#include "idem/mysql/async_store.hpp"
#include "idem/store/pool.hpp"
#include "idem/store/retry.hpp"

namespace idem::mysql {

// One try of a with_transaction: its connection, with the transaction begun, and its ledger.
class AsyncTransaction {
 public:
  AsyncTransaction(AsyncConnection& c, idem::detail::ClaimLedger& ledger) noexcept
      : connection_(&c), ledger_(&ledger) {}

  AsyncConnection& connection() const noexcept { return *connection_; }
  // The store, bound to this try's connection and ledger.
  AsyncBoundStore bind(const AsyncStore& store) const {
    return AsyncBoundStore(store.ops(), *connection_, ledger_);
  }
  // As BoundStore::set_rollback_only, for the whole try.
  void set_rollback_only() noexcept { ledger_->set_rollback_only(); }

 private:
  AsyncConnection* connection_;
  idem::detail::ClaimLedger* ledger_;
};

namespace detail {

template <class F>
using transaction_result_t =
    typename idem::async::detail::Awaited<std::invoke_result_t<F&, AsyncTransaction&>>::type;

inline constexpr std::string_view async_transaction_who = "idem::mysql::with_transaction";

// One try: begin, the body, then COMMIT or ROLLBACK as the ledger says; the steps around the
// I/O are run_try's (idem/detail/transaction_try.hpp, which the blocking with_transaction runs).
template <class F>
net::awaitable<transaction_result_t<F>> run_async_try(AsyncConnection& c, F& body,
                                                      idem::detail::TryReport& report) {
  using R = transaction_result_t<F>;
  using Ledger = idem::detail::ClaimLedger;
  Ledger ledger;
  ledger.hold_events();
  AsyncTransaction tx(c, ledger);
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
    if (idem::detail::try_commits(ledger, async_transaction_who)) {
      co_await c.query("COMMIT");
      ledger.committed();
    } else {
      co_await c.query("ROLLBACK");
      ledger.rolled_back();
    }
  } catch (...) {
    failed =
        idem::detail::try_failed(ledger, report, std::current_exception(), async_transaction_who);
  }
  if (failed) {
    // A connection whose ROLLBACK failed is in an unknown state: the pool drops it.
    if (!c.broken()) {
      try {
        co_await c.query("ROLLBACK");
      } catch (...) {
        c.mark_broken();
      }
    }
    std::rethrow_exception(failed);
  }
  if constexpr (!std::is_void_v<R>) co_return std::move(*result);
}

}  // namespace detail

// body(AsyncTransaction&) returns net::awaitable<R>; with_transaction answers R. Throws as
// the blocking with_transaction does.
template <class F>
net::awaitable<detail::transaction_result_t<F>> with_transaction(AsyncPool& pool, F body,
                                                                 TransactionParams params = {}) {
  using R = detail::transaction_result_t<F>;
  idem::detail::TransactionTries tries(params, detail::async_transaction_who);
  co_return co_await idem::async::detail::retrying<R>(
      [&]() -> net::awaitable<R> {
        auto conn = co_await pool.acquire(PoolUse::transaction);
        co_return co_await detail::run_async_try(*conn, body, tries.next_try());
      },
      [&](const StoreError& e) { return tries.failed(e); });
}

}  // namespace idem::mysql
