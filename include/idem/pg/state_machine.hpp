#pragma once
// idem::StateMachine transitions on PostgreSQL: the guarded UPDATE and the explaining read
// rendered with PostgreSQL's quoting (double quotes) and numbered placeholders ($1, $2, ...).
//
//   idem::pg::with_transaction(store.pool(), [&](idem::pg::Connection& c) {
//     auto tx = store.bind(c);                                  // the guard, same transaction
//     idem::IdempotencyGuard guard{tx, idem::Key{"PAY", trade_no}, fp};
//     if (!guard.acquired()) return ...;                        // replay / in progress
//     const auto r = idem::pg::apply(c, machine, order_no, pending, paid, version,
//                                    {.explain = true});        // on the same connection
//     guard.commit(...);                                         // transitioned or rejected
//   });
//
// Every statement runs on the caller's connection (idem's, or the service's PGconn* borrowed
// for the call), so it joins whatever transaction is open there (or autocommits when none is).
// The values travel as parameters, typed by the columns they are compared with or assigned to.

#include <libpq-fe.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/backend/transition_sql.hpp"
#include "idem/detail/identifier.hpp"
#include "idem/errors.hpp"
#include "idem/pg/connection.hpp"
#include "idem/state_machine.hpp"
#include "idem/statement.hpp"

namespace idem::pg {

namespace detail {

inline idem::backend::TransitionNames names(const GuardedTransition& t) {
  return {t, "idem::pg", [](const auto& parts) { return idem::detail::quote_parts(parts, '"'); }};
}

// The statement with its `?` placeholders numbered, $1 for the first. Only the placeholders
// can hold a `?`: the names around them are quoted identifiers of [A-Za-z0-9_$].
inline Statement numbered(Statement s) {
  std::string sql;
  int n = 0;
  for (const char ch : s.sql) {
    if (ch == '?') {
      sql += '$' + std::to_string(++n);
    } else {
      sql += ch;
    }
  }
  s.sql = std::move(sql);
  return s;
}

}  // namespace detail

// The statement's parameters as driver parameters (each owns its text).
inline std::vector<Param> to_params(const Statement& s) {
  return idem::backend::driver_values<Param>(s, [](const auto& x) { return Param(x); });
}

// Runs the statement (placeholders $1, $2, ...); returns the rows it changed (for an UPDATE,
// every row its WHERE matched). Throws StoreError.
inline std::uint64_t execute(Connection& c, const Statement& s) {
  return c.execute(s.sql, to_params(s), "execute");
}

// Runs a query statement and returns its rows, as text.
inline Result select(Connection& c, const Statement& s) {
  return c.exec(s.sql, to_params(s), "select");
}

// The guarded UPDATE of a transition, in PostgreSQL's dialect:
//   UPDATE "t" SET "status" = $1, "version" = "version" + 1
//    WHERE "key" = $2 AND "status" = $3 AND "version" = $4   params: to, key, from, version
// (without the version parts for an unversioned transition). Throws InvalidArgument for a
// name that breaks idem's identifier rule.
inline Statement update_statement(const GuardedTransition& t) {
  return detail::numbered(idem::backend::transition_update(t, detail::names(t)));
}

// The read that explains a rejection: SELECT "status"[, "version"] FROM "t" WHERE "key" = $1.
// A plain read: under READ COMMITTED it sees the latest committed row; under REPEATABLE READ
// or SERIALIZABLE the UPDATE could only have been rejected by the row of the transaction's
// snapshot (a row changed since fails the UPDATE with a serialization failure instead), and
// that is the row the read sees.
inline Statement probe_statement(const GuardedTransition& t) {
  return detail::numbered(idem::backend::transition_probe(t, detail::names(t)));
}

namespace detail {

// What probe_statement's result says: the row's status (and version), or none.
inline std::optional<ProbeRow> probe_row(const GuardedTransition& t, const Result& r) {
  if (r.rows() == 0) return std::nullopt;
  auto text = [&](int column) -> std::optional<std::string> {
    if (r.is_null(0, column)) return std::nullopt;
    return std::string(r.text(0, column));
  };
  return ProbeRow{text(0), t.versioned() ? text(1) : std::nullopt};
}

// One transition on one connection: the UPDATE, then the machine's conclusion.
struct RunTransition {
  template <StatusEnum E>
  static TransitionResult<E> run(Connection& c, const StateMachine<E>& machine,
                                 const GuardedTransition& t, TransitionOptions options) {
    const std::uint64_t changed = execute(c, update_statement(t));
    return machine.conclude(t, changed, options,
                            [&] { return probe_row(t, select(c, probe_statement(t))); });
  }
};

}  // namespace detail

// The machine's guarded transition on this connection, or on the service's own PGconn*
// borrowed for the call and left as it was (see Connection(PGconn*)), inside its open
// transaction if any. Throws IllegalTransition for an undeclared move before anything is
// sent. One UPDATE; with options.explain, a rejection costs one more statement,
// probe_statement's read. Throws UsageError if the UPDATE changed more than one row (the key
// column is not unique), StoreError for the database's failures (a serialization failure
// under REPEATABLE READ or SERIALIZABLE is retryable: run the transaction again).
inline constexpr idem::backend::TransitionApply<Connection, PGconn, detail::RunTransition> apply{};

}  // namespace idem::pg
