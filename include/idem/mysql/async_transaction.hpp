#pragma once
// idem::mysql::with_transaction for coroutines: run a transaction body on an AsyncConnection,
// commit it only when every claim in it finished, and run it again when the server rolled it
// back for a transient reason. The rules are with_transaction's (idem/mysql/transaction.hpp);
// the claims' ledger decides how each try ends (idem/same_transaction/claim_ledger.hpp).
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
#include "idem/backend/pool.hpp"
#include "idem/errors.hpp"
#include "idem/mysql/async_pool.hpp"
#include "idem/mysql/async_store.hpp"
#include "idem/retry_policy.hpp"
#include "idem/same_transaction/claim_ledger.hpp"
#include "idem/same_transaction/transaction_try.hpp"

namespace idem::mysql {

// One try of a with_transaction: its connection, with the transaction begun, and its ledger.
class AsyncTransaction {
 public:
  AsyncTransaction(AsyncConnection& c, idem::same_transaction::ClaimLedger& ledger) noexcept
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
  idem::same_transaction::ClaimLedger* ledger_;
};

namespace detail {

template <class F>
using transaction_result_t =
    typename idem::async::detail::Awaited<std::invoke_result_t<F&, AsyncTransaction&>>::type;

inline constexpr std::string_view async_transaction_who = "idem::mysql::with_transaction";

// One try: begin, the body, then the steps of TryEnd (idem/same_transaction/transaction_try.hpp),
// as the blocking try (run_try) takes them.
template <class F>
net::awaitable<transaction_result_t<F>> run_async_try(AsyncConnection& c, F& body,
                                                      idem::same_transaction::TryReport& report) {
  using R = transaction_result_t<F>;
  using Ledger = idem::same_transaction::ClaimLedger;
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
    using Step = idem::same_transaction::TryEnd::Step;
    idem::same_transaction::TryEnd end(ledger, async_transaction_who);
    for (Step step = end.start(); step != Step::done; step = end.done(step)) {
      switch (step) {
        case Step::commit:
          // The coroutine bound store writes its records itself: none waits in the ledger.
          co_await c.query("COMMIT");
          break;
        case Step::roll_back:
          co_await c.query("ROLLBACK");
          break;
        case Step::write_after_rollback:
          // Only a bound consumer counts its attempts after a rollback, and there is no
          // coroutine consume yet.
          throw UsageError(
              "idem::mysql::with_transaction: writes after a rollback need the blocking "
              "with_transaction");
        case Step::done:
          break;
      }
    }
  } catch (...) {
    failed = idem::same_transaction::try_failed(ledger, report, std::current_exception(),
                                                async_transaction_who);
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
  idem::same_transaction::TransactionTries tries(params, detail::async_transaction_who);
  co_return co_await idem::async::detail::retrying<R>(
      [&]() -> net::awaitable<R> {
        auto conn = co_await pool.acquire(backend::ConnectionPurpose::transaction);
        co_return co_await detail::run_async_try(*conn, body, tries.next_try());
      },
      [&](const StoreError& e) { return tries.failed(e); });
}

}  // namespace idem::mysql
