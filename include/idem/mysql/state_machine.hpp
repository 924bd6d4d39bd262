#pragma once
// Running idem::Statement and idem::StateMachine transitions on MySQL / MariaDB: the guarded
// UPDATE and the explaining read rendered with MySQL's quoting (backticks).
//
//   idem::mysql::with_transaction(pool, [&](idem::mysql::Connection& c) {
//     auto tx = store.bind(c);                                  // the guard, same transaction
//     idem::IdempotencyGuard guard{tx, idem::Key{"PAY", trade_no}, fp};
//     if (!guard.acquired()) return ...;                        // replay / in progress
//     const auto r = idem::mysql::apply(c, machine, order_no, pending, paid, version,
//                                       {.explain = true});     // on the same connection
//     guard.commit(...);                                         // transitioned or rejected
//   });
//
// Every statement runs on the caller's connection (a prepared statement on idem's connections,
// SQL text with hex literals on a borrowed MYSQL*), so it joins whatever transaction is open
// there (or autocommits when none is).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "idem/backend/transition_sql.hpp"
#include "idem/errors.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/mysql/schema.hpp"
#include "idem/state_machine.hpp"
#include "idem/statement.hpp"

namespace idem::mysql {

// The statement's parameters as driver parameters. They refer to the statement's strings:
// keep the statement alive while they are used.
inline std::vector<Param> to_params(const Statement& s) {
  return idem::backend::driver_values<Param>(s, [](const auto& x) { return Param(x); });
}

// Runs the statement as a prepared statement; returns the affected rows (for an UPDATE, the
// rows it changed: MySQL does not count a row whose values stayed the same). Throws
// StoreError, or UsageError when the parameter count does not match the placeholders.
inline std::uint64_t execute(Connection& c, const Statement& s) {
  return c.execute(s.sql, to_params(s));
}

// Runs a query statement and returns every row (typed cells: see idem/mysql/row.hpp).
inline std::vector<Row> select(Connection& c, const Statement& s) {
  return c.select(s.sql, to_params(s));
}

namespace detail {

inline idem::backend::TransitionNames names(const GuardedTransition& t) {
  return {t, "idem::mysql",
          [](const auto& parts) { return idem::detail::quote_parts(parts, '`'); }};
}

}  // namespace detail

// The guarded UPDATE of a transition, in MySQL's dialect:
//   UPDATE `t` SET `status` = ?, `version` = `version` + 1
//    WHERE `key` = ? AND `status` = ? AND `version` = ?      params: to, key, from, version
// (without the version parts for an unversioned transition). Throws InvalidArgument for a
// name that breaks idem's identifier rule.
inline Statement update_statement(const GuardedTransition& t) {
  return idem::backend::transition_update(t, detail::names(t));
}

// The read that explains a rejection: SELECT `status`[, `version`] FROM `t` WHERE `key` = ?
// LOCK IN SHARE MODE. Locking, so that inside a REPEATABLE READ transaction it sees the
// latest committed row, the one the UPDATE compared against, rather than the transaction's
// old snapshot.
inline Statement probe_statement(const GuardedTransition& t) {
  return idem::backend::transition_probe(t, detail::names(t), " LOCK IN SHARE MODE");
}

namespace detail {

// What probe_statement's rows say: the row's status (and version), or none.
inline std::optional<ProbeRow> probe_row(const GuardedTransition& t, const std::vector<Row>& rows) {
  if (rows.empty()) return std::nullopt;
  ProbeRow row{rows.front().at(0).to_text(), std::nullopt};
  if (t.versioned()) row.version = rows.front().at(1).to_text();
  return row;
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

// The machine's guarded transition on this connection, or on your own MYSQL* borrowed for
// the call and left as it was (see Connection(MYSQL*)), inside its open transaction if any.
// Throws IllegalTransition for an undeclared move before anything is sent. One UPDATE; with
// options.explain, a rejection costs one more statement, probe_statement's locking read.
// After a rejected UPDATE on a unique key InnoDB already holds that row's lock, so the read
// adds no new waits. Throws UsageError if the UPDATE changed more than one row (the key
// column is not unique), StoreError for the database's failures.
inline constexpr idem::backend::TransitionApply<Connection, MYSQL, detail::RunTransition> apply{};

}  // namespace idem::mysql
