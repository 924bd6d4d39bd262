#pragma once
// The SQL of a GuardedTransition for the backends, written once: each backend passes its own
// quoting of names (and the MySQL read its locking clause). The core never includes this.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "idem/detail/identifier.hpp"
#include "idem/sql_value.hpp"
#include "idem/state_machine.hpp"
#include "idem/statement.hpp"

namespace idem::backend {

// A statement's parameters as a driver's values, each made by `make` from the parameter's
// alternative; a string is passed as a view, so the values refer to the statement's strings
// (keep the statement alive while they are used).
template <class Value, class Make>
std::vector<Value> driver_values(const Statement& s, Make&& make) {
  std::vector<Value> out;
  out.reserve(s.params.size());
  for (const auto& v : s.params) {
    std::visit(
        [&](const auto& x) {
          if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>) {
            out.push_back(make(std::string_view(x)));
          } else {
            out.push_back(make(x));
          }
        },
        v.value());
  }
  return out;
}

// What a backend's public apply() runs on: one of the backend's connections, or the caller's
// own handle, borrowed for the one call and left as it was.
template <class Connection, class Native>
class ConnectionOrHandle {
 public:
  ConnectionOrHandle(Connection& c) noexcept : connection_(&c) {}  // NOLINT: implicit by design
  ConnectionOrHandle(Native* handle)                               // NOLINT: implicit by design
      : borrowed_(std::in_place, handle), connection_(&*borrowed_) {}
  ConnectionOrHandle(const ConnectionOrHandle&) = delete;
  ConnectionOrHandle& operator=(const ConnectionOrHandle&) = delete;

  Connection& operator*() const noexcept { return *connection_; }

 private:
  std::optional<Connection> borrowed_;
  Connection* connection_;
};

// A backend's public apply(), written once: the machine's transition (IllegalTransition
// before anything is sent), run by `Run::run(connection, machine, transition, options)`.
template <class Connection, class Native, class Run>
struct TransitionApply {
  template <StatusEnum E>
  TransitionResult<E> operator()(ConnectionOrHandle<Connection, Native> on,
                                 const StateMachine<E>& machine, const SqlValue& id, E from, E to,
                                 std::optional<std::int64_t> version = std::nullopt,
                                 TransitionOptions options = {}) const {
    return Run::run(*on, machine, machine.transition(id, from, to, version), options);
  }
};

// The names of a transition, validated again (a hand-made GuardedTransition must not carry
// SQL into the text) and quoted by `quote(IdentifierParts)`.
struct TransitionNames {
  std::string table;
  std::string key;
  std::string status;
  std::string version;  // empty: not versioned

  template <class Quote>
  TransitionNames(const GuardedTransition& t, std::string_view backend, Quote&& quote)
      : table(quote(detail::split_identifier(t.table, backend, "table", true))),
        key(quote(detail::split_identifier(t.key_column, backend, "key column"))),
        status(quote(detail::split_identifier(t.status_column, backend, "status column"))) {
    if (t.versioned())
      version = quote(detail::split_identifier(t.version_column, backend, "version column"));
  }
};

//   UPDATE t SET status = ?[, version = version + 1] WHERE key = ? AND status = ?[ AND version = ?]
// with the parameters to, key, from[, expected version]. A versioned transition without an
// expected version compares the version with NULL, which matches no row.
inline Statement transition_update(const GuardedTransition& t, const TransitionNames& n) {
  if (n.version.empty()) {
    return Statement{
        fmt::format("UPDATE {0} SET {1} = ? WHERE {2} = ? AND {1} = ?", n.table, n.status, n.key),
        {t.to, t.key, t.from}};
  }
  return Statement{
      fmt::format("UPDATE {0} SET {1} = ?, {2} = {2} + 1 WHERE {3} = ? AND {1} = ? AND {2} = ?",
                  n.table, n.status, n.version, n.key),
      {t.to, t.key, t.from, t.expected_version ? SqlValue(*t.expected_version) : SqlValue()}};
}

//   SELECT status[, version] FROM t WHERE key = ?   (plus `suffix`, a locking clause)
inline Statement transition_probe(const GuardedTransition& t, const TransitionNames& n,
                                  std::string_view suffix = {}) {
  const std::string columns = n.version.empty() ? n.status : n.status + ", " + n.version;
  return Statement{fmt::format("SELECT {} FROM {} WHERE {} = ?{}", columns, n.table, n.key, suffix),
                   {t.key}};
}

}  // namespace idem::backend
