#pragma once
// idem::mysql::with_transaction: run a transaction body, and run it again when the server
// rolled it back for a transient reason (deadlock, lock wait timeout, lost connection,
// a Galera certification failure).
//
//   auto receipt = idem::mysql::with_transaction(pool, [&](idem::mysql::Connection& c) {
//     auto tx = store.bind(c);
//     idem::IdempotencyGuard guard{tx, key, fp};
//     ...business writes on c...
//     guard.commit(result);
//     return result;
//   });
//
// The body must be safe to run again: everything it writes to this database is rolled back
// before a new try, and idem's claim inside it makes a duplicate run a replay. A body that
// also acts outside the database (a payment channel) wants standalone mode instead.
// Even a COMMIT whose reply was lost is safe to retry this way when the body is guarded:
// if the first commit did land, the retry's claim replays it.

#include <chrono>
#include <random>
#include <thread>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/mysql/pool.hpp"

namespace idem::mysql {

struct TransactionParams {
  int max_attempts = 5;
  std::chrono::milliseconds backoff{5};
  std::chrono::milliseconds max_backoff{500};
};

template <class F>
auto with_transaction(Pool& pool, F&& body, TransactionParams params = {})
    -> std::invoke_result_t<F&, Connection&> {
  using R = std::invoke_result_t<F&, Connection&>;
  if (params.max_attempts < 1) {
    throw InvalidArgument("idem::mysql::with_transaction: max_attempts must be at least 1");
  }
  if (params.backoff.count() < 1 || params.max_backoff < params.backoff) {
    throw InvalidArgument(
        "idem::mysql::with_transaction: backoff must be at least 1 ms and max_backoff at least "
        "backoff");
  }
  thread_local std::minstd_rand jitter{std::random_device{}()};
  auto backoff = params.backoff;
  for (int attempt = 1;; ++attempt) {
    auto conn = pool.acquire();
    auto rollback = [&]() noexcept {
      if (conn->broken()) return;
      try {
        conn->query("ROLLBACK");
      } catch (...) {
        conn->mark_broken();  // a connection in an unknown transaction state is not reused
      }
    };
    try {
      conn->query("START TRANSACTION");
      if constexpr (std::is_void_v<R>) {
        body(*conn);
        conn->query("COMMIT");
        return;
      } else {
        R result = body(*conn);
        conn->query("COMMIT");
        return result;
      }
    } catch (const StoreError& e) {
      rollback();
      if (!e.retryable()) throw;
      if (attempt >= params.max_attempts) {
        throw StoreError(fmt::format("idem::mysql::with_transaction: gave up after {} tries: {}",
                                     attempt, e.what()),
                         true, e.diagnostics());
      }
    } catch (...) {
      rollback();
      throw;
    }
    std::this_thread::sleep_for(backoff +
                                std::chrono::milliseconds{jitter() % (backoff.count() + 1)});
    backoff = std::min(backoff * 2, params.max_backoff);
  }
}

}  // namespace idem::mysql
