#pragma once
// idem::StateMachine: guarded status transitions for a business table.
//
// A dedup record stops a repeated *execution*; it cannot stop a repeated or illegal *state
// change*, such as a duplicate callback moving an already paid order to "refunded" a second
// time. The machine declares the legal moves once and turns each move into one guarded UPDATE
// (compare-and-set on the status, and on a version column when the table has one):
//
//   enum class OrderStatus { pending = 0, paid = 1, completed = 2, refunded = 3 };
//   using enum OrderStatus;
//   const idem::StateMachine<OrderStatus> orders{
//       {.table = "t_order", .key_column = "order_no", .version_column = "version"},
//       {{pending, paid}, {paid, completed}, {paid, refunded}}};
//   orders.transition("A1001", paid, refunded, 7).sql ==
//       "UPDATE `t_order` SET `status` = ?, `version` = `version` + 1 "
//       "WHERE `order_no` = ? AND `status` = ? AND `version` = ?"   // params: 3, "A1001", 1, 7
//
// 1 row changed: transitioned. 0 rows: rejected (the status or the version moved on, or no
// such row); a rejection is an expected outcome, a value (TransitionResult), not an error.
// An undeclared move throws IllegalTransition before any SQL exists. Run the statement with
// idem::mysql::apply / execute, or against an idem::MemoryTable in unit tests.

#include <charconv>
#include <concepts>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/statement.hpp"

namespace idem {

template <class E>
concept StatusEnum = std::is_enum_v<E>;

// A move that was not declared. Thrown by StateMachine::transition before any SQL exists,
// so an illegal move never costs a database round trip.
class IllegalTransition : public InvalidArgument {
 public:
  IllegalTransition(const std::string& what, std::string from, std::string to)
      : InvalidArgument(what), from_(std::move(from)), to_(std::move(to)) {}
  // The two statuses as the table stores them (decimal or the mapped name).
  const std::string& from() const noexcept { return from_; }
  const std::string& to() const noexcept { return to_; }

 private:
  std::string from_;
  std::string to_;
};

template <StatusEnum E>
struct Transition {
  E from;
  E to;
  friend bool operator==(const Transition&, const Transition&) = default;
};

template <StatusEnum E>
struct StateMachineParams {
  // The business table: 1-64 characters of [A-Za-z0-9_$], optionally schema.table.
  std::string table{};
  // A column that names exactly one row (primary or unique key): order_no, trade_no.
  std::string key_column{};
  std::string status_column = "status";
  // Empty: compare-and-set on the status alone. Otherwise every transition also checks the
  // caller's version and bumps it, so a move based on a stale read is rejected even when the
  // status happens to match again.
  std::string version_column{};
  // Empty: the status column stores the enum's integer value. Otherwise the name stored for
  // each status (for tables that store 'PAID' rather than 1).
  std::function<std::string(E)> status_name{};
};

enum class TransitionOutcome { transitioned, rejected };

enum class RejectReason {
  none,              // not rejected
  not_explained,     // rejected; the caller did not ask why (TransitionOptions::explain)
  not_found,         // no row has this key
  status_moved_on,   // the row's status is no longer `from` (already paid, refunded, ...)
  version_moved_on,  // the status is still `from`, but the version is not the caller's
  indeterminate,     // the read after the UPDATE found the row matching: it changed in
                     // between (only possible when the two do not share a transaction)
};

constexpr std::string_view to_string(TransitionOutcome o) noexcept {
  return o == TransitionOutcome::transitioned ? "transitioned" : "rejected";
}

constexpr std::string_view to_string(RejectReason r) noexcept {
  switch (r) {
    case RejectReason::none:
      return "none";
    case RejectReason::not_explained:
      return "not_explained";
    case RejectReason::not_found:
      return "not_found";
    case RejectReason::status_moved_on:
      return "status_moved_on";
    case RejectReason::version_moved_on:
      return "version_moved_on";
    case RejectReason::indeterminate:
      return "indeterminate";
  }
  return "unknown";
}

struct TransitionOptions {
  // On a rejection, read the row once (one SELECT, on the rejection path only) to say why.
  bool explain = false;
};

// The outcome of one transition: transitioned, or rejected with (when asked) the reason and
// what the row holds now.
template <StatusEnum E>
struct TransitionResult {
  TransitionOutcome outcome = TransitionOutcome::rejected;
  RejectReason reason = RejectReason::not_explained;
  // Filled by an explained rejection that found the row:
  std::optional<std::string> stored_status{};  // the status column as text; nullopt for NULL
  std::optional<E> status{};              // stored_status, if it is one of the machine's states
  std::optional<std::int64_t> version{};  // the version column (versioned machines)

  bool transitioned() const noexcept { return outcome == TransitionOutcome::transitioned; }
  bool rejected() const noexcept { return outcome == TransitionOutcome::rejected; }
  explicit operator bool() const noexcept { return transitioned(); }
  // Rejected because someone else moved the row first (a duplicate, a race, a stale read).
  bool stale() const noexcept {
    return reason == RejectReason::status_moved_on || reason == RejectReason::version_moved_on;
  }

  static TransitionResult success() {
    return TransitionResult{.outcome = TransitionOutcome::transitioned,
                            .reason = RejectReason::none};
  }
  static TransitionResult rejection() { return TransitionResult{}; }
};

// What the follow-up read found, in text form (as a database returns it).
struct ProbeRow {
  std::optional<std::string> status{};
  std::optional<std::string> version{};  // absent for machines without a version column
};

template <StatusEnum E>
class StateMachine {
 public:
  StateMachine(StateMachineParams<E> params, std::vector<Transition<E>> transitions)
      : params_(std::move(params)),
        transitions_(std::move(transitions)),
        table_(detail::quote_identifier(params_.table, "idem::StateMachine: table", true)),
        key_(detail::quote_identifier(params_.key_column, "idem::StateMachine: key column")),
        status_(
            detail::quote_identifier(params_.status_column, "idem::StateMachine: status column")) {
    if (!params_.version_column.empty()) {
      version_ =
          detail::quote_identifier(params_.version_column, "idem::StateMachine: version column");
    }
    check_columns();
    check_transitions();
    build_sql();
  }

  // Whether `from -> to` was declared.
  bool can(E from, E to) const noexcept {
    for (const auto& t : transitions_)
      if (t.from == from && t.to == to) return true;
    return false;
  }

  // The guarded UPDATE for a machine without a version column:
  //   UPDATE t SET status = ? WHERE key = ? AND status = ?          params: to, id, from
  // Throws IllegalTransition if from -> to was not declared, InvalidArgument for a NULL id or
  // when the machine has a version column (pass the version then).
  Statement transition(const SqlValue& id, E from, E to) const {
    return make(id, from, to, std::nullopt);
  }

  // The guarded UPDATE for a machine with a version column:
  //   UPDATE t SET status = ?, version = version + 1 WHERE key = ? AND status = ? AND version = ?
  //   params: to, id, from, version
  Statement transition(const SqlValue& id, E from, E to, std::int64_t version) const {
    return make(id, from, to, version);
  }

  // Either form, chosen by whether `version` holds a value.
  Statement transition(const SqlValue& id, E from, E to,
                       std::optional<std::int64_t> version) const {
    return make(id, from, to, version);
  }

  // The read that explains a rejection: SELECT status[, version] FROM t WHERE key = ?
  // (a backend may add a locking clause so that it sees the latest committed row).
  Statement probe(const SqlValue& id) const {
    check_id(id);
    return Statement{probe_sql_, {id}};
  }

  // Turns what probe() found (nullopt: no row) into the explained rejection.
  TransitionResult<E> explain(E from, std::optional<std::int64_t> expected_version,
                              const std::optional<ProbeRow>& row) const {
    TransitionResult<E> r = TransitionResult<E>::rejection();
    if (!row) {
      r.reason = RejectReason::not_found;
      return r;
    }
    r.stored_status = row->status;
    if (row->status) r.status = status_of(*row->status);
    if (versioned() && row->version) r.version = parse_int64(*row->version);
    if (r.status != from) {
      r.reason = RejectReason::status_moved_on;
    } else if (versioned() && r.version != expected_version) {
      r.reason = RejectReason::version_moved_on;
    } else {
      r.reason = RejectReason::indeterminate;
    }
    return r;
  }

  // What the status column stores for `status`: its integer value, or its mapped name.
  SqlValue stored(E status) const {
    if (params_.status_name) return SqlValue(params_.status_name(status));
    return SqlValue(static_cast<std::underlying_type_t<E>>(status));
  }

  // The declared state whose stored text form is `text` ("1", or "PAID"), if any.
  std::optional<E> status_of(std::string_view text) const {
    for (const auto& [state, value] : states_)
      if (value == text) return state;
    return std::nullopt;
  }

  bool versioned() const noexcept { return !version_.empty(); }
  const std::vector<Transition<E>>& transitions() const noexcept { return transitions_; }
  const StateMachineParams<E>& params() const noexcept { return params_; }
  // The names as they appear in the SQL, quoted with backticks.
  const std::string& quoted_table() const noexcept { return table_; }
  const std::string& quoted_key_column() const noexcept { return key_; }
  const std::string& quoted_status_column() const noexcept { return status_; }
  const std::string& quoted_version_column() const noexcept { return version_; }

 private:
  static std::optional<std::int64_t> parse_int64(std::string_view s) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
    return v;
  }

  std::string text_of(E status) const { return *stored(status).text(); }

  void check_columns() const {
    auto same = [](std::string_view a, std::string_view b) {  // MySQL column names ignore case
      if (a.size() != b.size()) return false;
      for (std::size_t i = 0; i < a.size(); ++i) {
        auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
        if (lower(a[i]) != lower(b[i])) return false;
      }
      return true;
    };
    const auto& p = params_;
    if (same(p.key_column, p.status_column) ||
        (versioned() &&
         (same(p.version_column, p.key_column) || same(p.version_column, p.status_column)))) {
      throw InvalidArgument(fmt::format(
          "idem::StateMachine: key, status and version columns must differ (got {}, {}, {})", key_,
          status_, versioned() ? version_ : std::string("none")));
    }
  }

  void check_transitions() {
    if (transitions_.empty())
      throw InvalidArgument("idem::StateMachine: declare at least one transition");
    for (std::size_t i = 0; i < transitions_.size(); ++i) {
      const auto& t = transitions_[i];
      add_state(t.from);
      add_state(t.to);
      // A move to the same status would change no row, and MySQL reports 0 changed rows for
      // it: it would always read as rejected.
      if (t.from == t.to) {
        throw InvalidArgument(
            fmt::format("idem::StateMachine: transition {} -> {} does not change the status",
                        describe(t.from), describe(t.to)));
      }
      for (std::size_t j = 0; j < i; ++j) {
        if (transitions_[j] == t) {
          throw InvalidArgument(
              fmt::format("idem::StateMachine: transition {} -> {} is declared "
                          "twice",
                          describe(t.from), describe(t.to)));
        }
      }
    }
  }

  void add_state(E state) {
    for (const auto& s : states_)
      if (s.first == state) return;
    std::string text = text_of(state);
    if (params_.status_name) {
      if (text.empty()) {
        throw InvalidArgument(
            fmt::format("idem::StateMachine: status_name gives status {} an "
                        "empty name",
                        static_cast<long long>(static_cast<std::underlying_type_t<E>>(state))));
      }
      for (const auto& s : states_) {
        if (s.second == text) {
          throw InvalidArgument(
              fmt::format("idem::StateMachine: status_name gives two statuses the same name \"{}\"",
                          detail::printable(text)));
        }
      }
    }
    states_.emplace_back(state, std::move(text));
  }

  std::string describe(E status) const {
    if (params_.status_name) return fmt::format("\"{}\"", detail::printable(text_of(status)));
    return text_of(status);
  }

  void build_sql() {
    if (versioned()) {
      update_sql_ = fmt::format(
          "UPDATE {0} SET {1} = ?, {2} = {2} + 1 WHERE {3} = ? AND {1} = ? "
          "AND {2} = ?",
          table_, status_, version_, key_);
      probe_sql_ =
          fmt::format("SELECT {}, {} FROM {} WHERE {} = ?", status_, version_, table_, key_);
    } else {
      update_sql_ =
          fmt::format("UPDATE {0} SET {1} = ? WHERE {2} = ? AND {1} = ?", table_, status_, key_);
      probe_sql_ = fmt::format("SELECT {} FROM {} WHERE {} = ?", status_, table_, key_);
    }
  }

  void check_id(const SqlValue& id) const {
    // `key = NULL` matches no row: every transition would read as rejected.
    if (id.is_null()) {
      throw InvalidArgument(
          fmt::format("idem::StateMachine: the {} of a transition must not be NULL", key_));
    }
  }

  Statement make(const SqlValue& id, E from, E to, std::optional<std::int64_t> version) const {
    if (!can(from, to)) {
      std::string declared;
      for (const auto& t : transitions_)
        declared += fmt::format("{}{} -> {}", declared.empty() ? "" : ", ", describe(t.from),
                                describe(t.to));
      throw IllegalTransition(
          fmt::format("idem::StateMachine: transition {} -> {} is not declared for {}.{} "
                      "(declared: {})",
                      describe(from), describe(to), table_, status_, declared),
          text_of(from), text_of(to));
    }
    check_id(id);
    if (versioned() && !version) {
      throw InvalidArgument(fmt::format(
          "idem::StateMachine: {} has a version column ({}): pass the version the caller read",
          table_, version_));
    }
    if (!versioned() && version) {
      throw InvalidArgument(fmt::format(
          "idem::StateMachine: {} has no version column; call transition() without a version",
          table_));
    }
    Statement s{update_sql_, {stored(to), id, stored(from)}};
    if (version) s.params.emplace_back(*version);
    return s;
  }

  StateMachineParams<E> params_;
  std::vector<Transition<E>> transitions_;
  std::string table_;
  std::string key_;
  std::string status_;
  std::string version_;
  std::vector<std::pair<E, std::string>> states_;  // every declared state and its stored text
  std::string update_sql_;
  std::string probe_sql_;
};

}  // namespace idem
