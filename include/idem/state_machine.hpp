#pragma once
// idem::StateMachine: guarded status transitions for a business table.
//
// A dedup record stops a repeated *execution*; it cannot stop a repeated or illegal *state
// change*, such as a duplicate callback moving an already paid order to "refunded" a second
// time. The machine declares the legal moves once and turns each move into a
// GuardedTransition: a compare-and-set on the status (and on a version column when the table
// has one), as a value that names the row, the columns and the stored values:
//
//   enum class OrderStatus { pending = 0, paid = 1, completed = 2, refunded = 3 };
//   using enum OrderStatus;
//   const idem::StateMachine<OrderStatus> orders{
//       {.table = "t_order", .key_column = "order_no", .version_column = "version"},
//       {{pending, paid}, {paid, completed}, {paid, refunded}}};
//   const idem::GuardedTransition t = orders.transition("A1001", paid, refunded, 7);
//   // t.table "t_order", t.key "A1001", t.from 1, t.to 3, t.expected_version 7
//
// A backend renders it in its own dialect and runs it (idem::mysql::apply,
// idem::sqlite::apply, idem::testing::MemoryTable::apply): 1 row changed is transitioned;
// 0 rows is rejected (the status or the version moved on, or no such row), an expected
// outcome and so a value (TransitionResult), not an error. An undeclared move throws
// IllegalTransition before anything reaches a table. The core holds no SQL.

#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/detail/identifier.hpp"
#include "idem/errors.hpp"
#include "idem/guarded_transition.hpp"
#include "idem/key.hpp"
#include "idem/sql_value.hpp"
#include "idem/transition.hpp"
#include "idem/transition_result.hpp"

namespace idem {

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

template <StatusEnum E>
class StateMachine {
 public:
  StateMachine(StateMachineParams<E> params, std::vector<Transition<E>> transitions)
      : params_(std::move(params)), transitions_(std::move(transitions)) {
    detail::split_identifier(params_.table, "idem::StateMachine", "table", true);
    detail::split_identifier(params_.key_column, "idem::StateMachine", "key column");
    detail::split_identifier(params_.status_column, "idem::StateMachine", "status column");
    if (versioned())
      detail::split_identifier(params_.version_column, "idem::StateMachine", "version column");
    check_columns();
    check_transitions();
  }

  // Whether `from -> to` was declared.
  bool can(E from, E to) const noexcept {
    for (const auto& t : transitions_)
      if (t.from == from && t.to == to) return true;
    return false;
  }

  // The guarded move of row `id` from `from` to `to`, for a machine without a version column.
  // Throws IllegalTransition if from -> to was not declared, InvalidArgument for a NULL id or
  // when the machine has a version column (pass the version then).
  GuardedTransition transition(const SqlValue& id, E from, E to) const {
    return make(id, from, to, std::nullopt);
  }

  // The same for a machine with a version column: `version` is the one the caller read; the
  // move checks it and bumps it.
  GuardedTransition transition(const SqlValue& id, E from, E to, std::int64_t version) const {
    return make(id, from, to, version);
  }

  // Either form, chosen by whether `version` holds a value.
  GuardedTransition transition(const SqlValue& id, E from, E to,
                               std::optional<std::int64_t> version) const {
    return make(id, from, to, version);
  }

  // How a backend turns the rows its guarded UPDATE changed into the result, the same for
  // every backend: 1 is transitioned; 0 is rejected, explained only when options.explain asks,
  // by calling read_row() (the row's status and version as text; nullopt when no row has the
  // key); more than 1 means the key column is not unique: UsageError (inside a transaction,
  // roll it back).
  template <std::invocable ReadRow>
  TransitionResult<E> conclude(const GuardedTransition& t, std::uint64_t changed,
                               TransitionOptions options, ReadRow&& read_row) const {
    if (auto result = concluded(t, changed, options)) return std::move(*result);
    return explained(t, read_row());
  }

  // conclude() in two halves, for a backend whose read is a coroutine: the result the changed
  // rows give, or none when the rejection is to be explained by explained() of the row read.
  std::optional<TransitionResult<E>> concluded(const GuardedTransition& t, std::uint64_t changed,
                                               TransitionOptions options) const {
    if (changed == 1) return TransitionResult<E>::success();
    if (changed > 1) {
      throw UsageError(fmt::format(
          "idem::StateMachine: a transition changed {} rows of {}; the key column {} must be a "
          "primary or unique key",
          changed, t.table, t.key_column));
    }
    if (!options.explain) return TransitionResult<E>::rejection();
    return std::nullopt;
  }
  TransitionResult<E> explained(const GuardedTransition& t,
                                const std::optional<ProbeRow>& row) const {
    return explain_stored(t.from.text().value_or(""), t.expected_version, row);
  }

  // Turns what the explaining read found (nullopt: no row) into the explained rejection.
  TransitionResult<E> explain(E from, std::optional<std::int64_t> expected_version,
                              const std::optional<ProbeRow>& row) const {
    return explain_stored(text_of(from), expected_version, row);
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

  bool versioned() const noexcept { return !params_.version_column.empty(); }
  const std::vector<Transition<E>>& transitions() const noexcept { return transitions_; }
  const StateMachineParams<E>& params() const noexcept { return params_; }

 private:
  static std::optional<std::int64_t> parse_int64(std::string_view s) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
    return v;
  }

  std::string text_of(E status) const { return *stored(status).text(); }

  TransitionResult<E> explain_stored(std::string_view from,
                                     std::optional<std::int64_t> expected_version,
                                     const std::optional<ProbeRow>& row) const {
    TransitionResult<E> r = TransitionResult<E>::rejection();
    if (!row) {
      r.reason = RejectReason::not_found;
      return r;
    }
    r.stored_status = row->status;
    if (row->status) r.status = status_of(*row->status);
    if (versioned() && row->version) r.version = parse_int64(*row->version);
    if (row->status != from) {
      r.reason = RejectReason::status_moved_on;
    } else if (versioned() && r.version != expected_version) {
      r.reason = RejectReason::version_moved_on;
    } else {
      r.reason = RejectReason::indeterminate;
    }
    return r;
  }

  void check_columns() const {
    // MySQL and SQLite both compare column names without case.
    auto same = [](std::string_view a, std::string_view b) {
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
          "idem::StateMachine: key, status and version columns must differ (got {}, {}, {})",
          p.key_column, p.status_column, versioned() ? p.version_column : std::string("none")));
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
              fmt::format("idem::StateMachine: transition {} -> {} is declared twice",
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
            fmt::format("idem::StateMachine: status_name gives status {} an empty name",
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

  void check_id(const SqlValue& id) const {
    // `key = NULL` matches no row: every transition would read as rejected.
    if (id.is_null()) {
      throw InvalidArgument(fmt::format(
          "idem::StateMachine: the {} of a transition must not be NULL", params_.key_column));
    }
  }

  GuardedTransition make(const SqlValue& id, E from, E to,
                         std::optional<std::int64_t> version) const {
    const auto& p = params_;
    if (!can(from, to)) {
      std::string declared;
      for (const auto& t : transitions_)
        declared += fmt::format("{}{} -> {}", declared.empty() ? "" : ", ", describe(t.from),
                                describe(t.to));
      throw IllegalTransition(
          fmt::format("idem::StateMachine: transition {} -> {} is not declared for {}.{} "
                      "(declared: {})",
                      describe(from), describe(to), p.table, p.status_column, declared),
          text_of(from), text_of(to));
    }
    check_id(id);
    if (versioned() && !version) {
      throw InvalidArgument(fmt::format(
          "idem::StateMachine: {} has a version column ({}): pass the version the caller read",
          p.table, p.version_column));
    }
    if (!versioned() && version) {
      throw InvalidArgument(fmt::format(
          "idem::StateMachine: {} has no version column; call transition() without a version",
          p.table));
    }
    return GuardedTransition{.table = p.table,
                             .key_column = p.key_column,
                             .key = id,
                             .status_column = p.status_column,
                             .from = stored(from),
                             .to = stored(to),
                             .version_column = p.version_column,
                             .expected_version = version};
  }

  StateMachineParams<E> params_;
  std::vector<Transition<E>> transitions_;
  std::vector<std::pair<E, std::string>> states_;  // every declared state and its stored text
};

}  // namespace idem
