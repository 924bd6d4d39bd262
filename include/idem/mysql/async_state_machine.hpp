#pragma once
// idem::mysql::async_apply: a StateMachine transition (idem/mysql/state_machine.hpp) on an
// AsyncConnection, in a coroutine: the same guarded UPDATE, the same explaining read, the same
// TransitionResult; async_execute and async_select run any idem::Statement there.
//
//   co_await idem::mysql::with_transaction(
//       *pool, [&](idem::mysql::AsyncTransaction& tx) -> net::awaitable<bool> {
//         auto bound = tx.bind(store);  // the guard's store, in this transaction
//         auto guard = co_await idem::async::IdempotencyGuard<idem::mysql::AsyncBoundStore>::claim(
//             bound, key, fp);
//         if (!guard.acquired()) co_return false;
//         const auto r = co_await idem::mysql::async_apply(tx.connection(), machine, order_no,
//                                                          paid, refunded, version);
//         co_await guard.commit(r.transitioned());
//         co_return r.transitioned();
//       });
//
// Every statement runs on the connection given, so it joins the transaction open there.

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "idem/async/net.hpp"
#include "idem/backend/async_transition.hpp"
#include "idem/mysql/async_connection.hpp"
#include "idem/mysql/row.hpp"
#include "idem/mysql/state_machine.hpp"
#include "idem/sql_value.hpp"
#include "idem/state_machine.hpp"
#include "idem/statement.hpp"
#include "idem/transition_result.hpp"

namespace idem::mysql {

// As execute(Connection&, Statement): the rows the statement changed.
inline net::awaitable<std::uint64_t> async_execute(AsyncConnection& c, Statement s) {
  co_return co_await c.execute(s.sql, to_params(s));
}

// As select(Connection&, Statement): every row.
inline net::awaitable<std::vector<Row>> async_select(AsyncConnection& c, Statement s) {
  co_return co_await c.select(s.sql, to_params(s));
}

// As apply(): IllegalTransition for an undeclared move before anything is sent; one UPDATE,
// and with options.explain one locking read on a rejection; UsageError when the UPDATE changed
// more than one row; StoreError for the database's failures. `machine` must outlive the call.
template <StatusEnum E>
net::awaitable<TransitionResult<E>> async_apply(AsyncConnection& c, const StateMachine<E>& machine,
                                                SqlValue id, E from, E to,
                                                std::optional<std::int64_t> version = std::nullopt,
                                                TransitionOptions options = {}) {
  const GuardedTransition t = machine.transition(id, from, to, version);
  co_return co_await idem::backend::async_transition(
      machine, t, options,
      [&c](const GuardedTransition& u) { return async_execute(c, update_statement(u)); },
      [&c](const GuardedTransition& u) -> net::awaitable<std::optional<ProbeRow>> {
        const std::vector<Row> rows = co_await async_select(c, probe_statement(u));
        co_return detail::probe_row(u, rows);
      });
}

}  // namespace idem::mysql
