#pragma once
// Running idem::Statement and idem::StateMachine transitions on MySQL / MariaDB.
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
// Every statement is a prepared statement on the caller's connection, so it joins whatever
// transaction is open there (or autocommits when none is).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/state_machine.hpp"
#include "idem/statement.hpp"

namespace idem::mysql {

// The statement's parameters as driver parameters. They refer to the statement's strings:
// keep the statement alive while they are used.
inline std::vector<Param> to_params(const Statement& s) {
  std::vector<Param> out;
  out.reserve(s.params.size());
  for (const auto& v : s.params) {
    std::visit(
        [&](const auto& x) {
          if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>) {
            out.emplace_back(std::string_view(x));
          } else {
            out.emplace_back(x);
          }
        },
        v.value());
  }
  return out;
}

// Runs the statement as a prepared statement; returns the affected rows (for an UPDATE, the
// rows it changed: MySQL does not count a row whose values stayed the same). Throws
// StoreError, or UsageError when the parameter count does not match the placeholders.
inline std::uint64_t execute(Connection& c, const Statement& s) {
  return c.execute(s.sql, to_params(s));
}

// Runs a query statement and returns every row (columns as text, nullopt for NULL).
inline std::vector<Row> select(Connection& c, const Statement& s) {
  return c.select(s.sql, to_params(s));
}

// The machine's guarded transition on this connection (and its open transaction, if any).
// Throws IllegalTransition for an undeclared move before anything is sent. One UPDATE; with
// options.explain, a rejection costs one more statement, a locking read of the row (LOCK IN
// SHARE MODE, so that inside a REPEATABLE READ transaction it sees the latest committed row,
// the one the UPDATE compared against, rather than the transaction's old snapshot). Throws
// UsageError if the UPDATE changed more than one row (the key column is not unique; inside
// a transaction, roll it back).
template <StatusEnum E>
TransitionResult<E> apply(Connection& c, const StateMachine<E>& machine, const SqlValue& id, E from,
                          E to, std::optional<std::int64_t> version = std::nullopt,
                          TransitionOptions options = {}) {
  const Statement update = machine.transition(id, from, to, version);
  const std::uint64_t changed = execute(c, update);
  if (changed == 1) return TransitionResult<E>::success();
  if (changed > 1) {
    throw UsageError(fmt::format(
        "idem::mysql::apply: a transition changed {} rows of {}; the key column {} must be a "
        "primary or unique key",
        changed, machine.quoted_table(), machine.quoted_key_column()));
  }
  if (!options.explain) return TransitionResult<E>::rejection();
  Statement probe = machine.probe(id);
  probe.sql += " LOCK IN SHARE MODE";
  const auto rows = select(c, probe);
  std::optional<ProbeRow> row;
  if (!rows.empty()) {
    row = ProbeRow{rows.front().at(0), std::nullopt};
    if (machine.versioned()) row->version = rows.front().at(1);
  }
  return machine.explain(from, version, row);
}

}  // namespace idem::mysql
