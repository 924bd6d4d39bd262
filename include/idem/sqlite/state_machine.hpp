#pragma once
// idem::StateMachine transitions on SQLite: the guarded UPDATE and the explaining read
// rendered with SQLite's quoting (double quotes).
//
//   idem::sqlite::with_transaction(store.pool(), [&](idem::sqlite::Connection& c) {
//     auto tx = store.bind(c);                                  // the guard, same transaction
//     idem::IdempotencyGuard guard{tx, idem::Key{"PAY", trade_no}, fp};
//     if (!guard.acquired()) return ...;                        // replay / in progress
//     const auto r = idem::sqlite::apply(c, machine, order_no, pending, paid, version,
//                                        {.explain = true});    // on the same connection
//     guard.commit(...);                                         // transitioned or rejected
//   });
//
// Every statement runs on the caller's connection, so it joins the transaction open there (or
// autocommits when none is).

#include <sqlite3.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "idem/backend/transition_sql.hpp"
#include "idem/errors.hpp"
#include "idem/sqlite/connection.hpp"
#include "idem/sqlite/schema.hpp"
#include "idem/state_machine.hpp"
#include "idem/statement.hpp"

namespace idem::sqlite {

namespace detail {

inline idem::backend::TransitionNames names(const GuardedTransition& t) {
  return {t, "idem::sqlite",
          [](const auto& parts) { return idem::detail::quote_parts(parts, '"'); }};
}

// The statement's parameters as SQLite values; they refer to the statement's strings. SQLite
// integers are signed 64-bit: a larger unsigned value cannot be stored, so it is refused
// rather than wrapped around.
inline std::vector<Value> to_values(const Statement& s) {
  return idem::backend::driver_values<Value>(s, [](const auto& x) {
    if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::uint64_t>) {
      if (x > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        throw InvalidArgument(
            fmt::format("idem::sqlite: {} does not fit a SQLite integer (signed 64-bit)", x));
      }
      return Value(static_cast<std::int64_t>(x));
    } else {
      return Value(x);
    }
  });
}

}  // namespace detail

// The guarded UPDATE of a transition, in SQLite's dialect:
//   UPDATE "t" SET "status" = ?, "version" = "version" + 1
//    WHERE "key" = ? AND "status" = ? AND "version" = ?      params: to, key, from, version
// (without the version parts for an unversioned transition). Throws InvalidArgument for a
// name that breaks idem's identifier rule.
inline Statement update_statement(const GuardedTransition& t) {
  return idem::backend::transition_update(t, detail::names(t));
}

// The read that explains a rejection: SELECT "status"[, "version"] FROM "t" WHERE "key" = ?
// It needs no locking clause: after the UPDATE the connection holds the file's write lock,
// and SQLite lets a writer work only on the latest snapshot, so inside a transaction the read
// sees the row the UPDATE compared against.
inline Statement probe_statement(const GuardedTransition& t) {
  return idem::backend::transition_probe(t, detail::names(t));
}

namespace detail {

// One transition on one connection: the UPDATE, then the machine's conclusion.
struct RunTransition {
  template <StatusEnum E>
  static TransitionResult<E> run(Connection& c, const StateMachine<E>& machine,
                                 const GuardedTransition& t, TransitionOptions options) {
    const Statement update = update_statement(t);
    const Statement probe = probe_statement(t);
    const std::vector<Value> update_values = to_values(update);  // refuses values before any I/O
    const std::int64_t changed = c.execute(update.sql, update_values);
    return machine.conclude(t, static_cast<std::uint64_t>(changed), options,
                            [&]() -> std::optional<ProbeRow> {
                              Rows rows = c.query(probe.sql, to_values(probe));
                              if (!rows.next()) return std::nullopt;
                              auto text = [&](int column) -> std::optional<std::string> {
                                if (rows.is_null(column)) return std::nullopt;
                                return rows.text(column);
                              };
                              return ProbeRow{text(0), t.versioned() ? text(1) : std::nullopt};
                            });
  }
};

}  // namespace detail

// The machine's guarded transition on this connection, or on your own sqlite3* borrowed for
// the call and left as it was (see Connection(sqlite3*)), inside its open transaction if any.
// Throws IllegalTransition for an undeclared move before anything is sent. One UPDATE; with
// options.explain, a rejection costs one more statement, probe_statement's read. Run it in
// idem::sqlite::with_transaction (BEGIN IMMEDIATE) together with the guard: inside a deferred
// BEGIN that has already read, the UPDATE can fail with SQLITE_BUSY_SNAPSHOT when another
// connection wrote meanwhile. Throws UsageError if the UPDATE changed more than one row (the
// key column is not unique), InvalidArgument for an unsigned key or status above the signed
// 64-bit range, StoreError for the database's failures.
inline constexpr idem::backend::TransitionApply<Connection, sqlite3, detail::RunTransition> apply{};

}  // namespace idem::sqlite
