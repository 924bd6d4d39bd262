#pragma once
// idem::pg::async_apply: a StateMachine transition (idem/pg/state_machine.hpp) on a
// pg::AsyncConnection, in a coroutine: the same guarded UPDATE, the same explaining read, the
// same TransitionResult; async_execute and async_select run any idem::Statement there.
//
//   auto handle = co_await pool->acquire();
//   const auto r = co_await idem::pg::async_apply(*handle, machine, order_no, paid, refunded,
//                                                 version, {.explain = true});
//
// Every statement runs on the connection given, so it joins the transaction open there.

#include <cstdint>
#include <optional>
#include <utility>

#include "idem/async/net.hpp"
#include "idem/backend/async_transition.hpp"
#include "idem/pg/async_connection.hpp"
#include "idem/pg/result.hpp"
#include "idem/pg/state_machine.hpp"
#include "idem/sql_value.hpp"
#include "idem/state_machine.hpp"
#include "idem/statement.hpp"
#include "idem/transition_result.hpp"

namespace idem::pg {

// As execute(Connection&, Statement): the rows the statement changed.
inline net::awaitable<std::uint64_t> async_execute(AsyncConnection& c, Statement s) {
  co_return co_await c.execute(s.sql, to_params(s), "execute");
}

// As select(Connection&, Statement): its rows, as text.
inline net::awaitable<Result> async_select(AsyncConnection& c, Statement s) {
  co_return co_await c.exec(s.sql, to_params(s), "select");
}

// As apply(): IllegalTransition for an undeclared move before anything is sent; one UPDATE,
// and with options.explain one read on a rejection; UsageError when the UPDATE changed more
// than one row; StoreError for the database's failures. `machine` must outlive the call.
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
        const Result rows = co_await async_select(c, probe_statement(u));
        co_return detail::probe_row(u, rows);
      });
}

}  // namespace idem::pg
