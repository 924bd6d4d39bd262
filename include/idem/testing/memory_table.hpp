#pragma once
// idem::testing::MemoryTable: an in-process stand-in for a business table, so that handlers
// using an idem::StateMachine can be unit-tested without a database (with idem::MemoryStore
// for the guard). It applies the machine's GuardedTransition directly and gives the same
// transitioned / rejected answers, and the same explanations, as the database backends:
//
//   idem::testing::MemoryTable orders{machine};          // table and columns of the machine
//   orders.insert({{"order_no", "A1001"}, {"status", 0}, {"version", 0}});
//   auto r = orders.apply(machine, "A1001", pending, paid, 0);      // transitioned
//   auto again = orders.apply(machine, "A1001", pending, paid, 0, {.explain = true});
//   // again.rejected(), again.reason == idem::RejectReason::status_moved_on, *again.status == paid
//
// Thread-safe: one mutex serialises every operation, and apply() holds it across the update
// and the explaining read, so an explanation is never torn.
//
// Comparisons: NULL equals nothing (not even NULL); any other two values are equal when their
// text forms (SqlValue::text(): integers in decimal) are the same bytes. So integers compare
// by value whatever their signedness, an integer equals the text of its decimal form, and text
// compares byte for byte. Not emulated: collations (MySQL's default _ci collations also match
// 'paid' with 'PAID', PAD SPACE ones ignore trailing spaces), column types and SQLite's type
// affinity ('01' is not 1 here), and transactions (each operation is atomic on its own).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/detail/identifier.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/sql_value.hpp"
#include "idem/state_machine.hpp"

namespace idem::testing {

// One row: column name -> value. Columns the row was inserted without hold NULL.
using MemoryRow = std::map<std::string, SqlValue, std::less<>>;

struct MemoryTableParams {
  // The table name as the machine declares it: t_order, or schema.t_order.
  std::string table{};
  // The unique key: insert() refuses a second row with the same key.
  std::string key_column{};
  // Every other column.
  std::vector<std::string> columns{};
};

class MemoryTable {
 public:
  explicit MemoryTable(MemoryTableParams params) : table_(std::move(params.table)) {
    idem::detail::split_identifier(table_, "idem::testing::MemoryTable", "table", true);
    key_ = add_column(params.key_column);
    for (const auto& c : params.columns)
      add_column(c);
  }

  // A table with the machine's table name, key, status and version columns, plus `columns`.
  template <StatusEnum E>
  explicit MemoryTable(const StateMachine<E>& machine, std::vector<std::string> columns = {})
      : MemoryTable(with_machine_columns(machine, std::move(columns))) {}

  MemoryTable(const MemoryTable&) = delete;
  MemoryTable& operator=(const MemoryTable&) = delete;

  // Adds a row. Throws InvalidArgument for an unknown column, a NULL key or a key that is
  // already taken.
  void insert(MemoryRow row) {
    MemoryRow r = normalise(std::move(row));
    std::lock_guard lock(mutex_);
    if (find_locked(r.at(key_))) {
      throw InvalidArgument(
          fmt::format("idem::testing::MemoryTable: {} already holds a row with {} = {}", table_,
                      key_, describe(r.at(key_))));
    }
    rows_.push_back(std::move(r));
  }

  // Adds the row, or replaces the one with the same key.
  void put(MemoryRow row) {
    MemoryRow r = normalise(std::move(row));
    std::lock_guard lock(mutex_);
    if (MemoryRow* old = find_locked(r.at(key_))) {
      *old = std::move(r);
    } else {
      rows_.push_back(std::move(r));
    }
  }

  bool erase(const SqlValue& key) {
    std::lock_guard lock(mutex_);
    for (auto it = rows_.begin(); it != rows_.end(); ++it) {
      if (equal(it->at(key_), key)) {
        rows_.erase(it);
        return true;
      }
    }
    return false;
  }

  std::optional<MemoryRow> find(const SqlValue& key) const {
    std::lock_guard lock(mutex_);
    if (const MemoryRow* r = find_locked(key)) return *r;
    return std::nullopt;
  }

  std::vector<MemoryRow> rows() const {
    std::lock_guard lock(mutex_);
    return rows_;
  }

  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return rows_.size();
  }

  // Updates and explaining reads that reached the table (execute() and apply()), to show that
  // an illegal move never did; insert, find and the other helpers do not count.
  std::size_t operations() const {
    std::lock_guard lock(mutex_);
    return operations_;
  }

  // Applies the guarded update: when the row with t.key holds t.from (and t.expected_version),
  // sets the status to t.to and bumps the version. Returns the rows it changed, 0 or 1; like
  // MySQL, an unversioned update that leaves the status as it was changes nothing. Throws
  // InvalidArgument for another table, an unknown column or one that is the key column.
  std::uint64_t execute(const GuardedTransition& t) {
    const Columns c = columns_of(t);
    std::lock_guard lock(mutex_);
    return update_locked(t, c);
  }

  // The machine's guarded transition on this table, with the same result as the database
  // backends' apply. Throws IllegalTransition (nothing reaches the table) for an undeclared
  // move. With options.explain, a rejection is explained by a read under the same lock.
  template <StatusEnum E>
  TransitionResult<E> apply(const StateMachine<E>& machine, const SqlValue& id, E from, E to,
                            std::optional<std::int64_t> version = std::nullopt,
                            TransitionOptions options = {}) {
    const GuardedTransition t = machine.transition(id, from, to, version);
    const Columns c = columns_of(t);
    std::lock_guard lock(mutex_);
    const std::uint64_t changed = update_locked(t, c);
    return machine.conclude(t, changed, options, [&] { return probe_locked(t, c); });
  }

  const std::string& table() const noexcept { return table_; }

 private:
  // The declared spellings of a transition's columns.
  struct Columns {
    std::string status;
    std::string version;  // empty: not versioned
  };

  // `a = b`: NULL equals nothing; otherwise the same text form (see the header comment).
  static bool equal(const SqlValue& a, const SqlValue& b) {
    if (a.is_null() || b.is_null()) return false;
    return a.text() == b.text();
  }

  template <StatusEnum E>
  static MemoryTableParams with_machine_columns(const StateMachine<E>& m,
                                                std::vector<std::string> columns) {
    const auto& p = m.params();
    columns.insert(columns.begin(), p.status_column);
    if (m.versioned()) columns.insert(columns.begin() + 1, p.version_column);
    return MemoryTableParams{p.table, p.key_column, std::move(columns)};
  }

  static bool same_name(std::string_view a, std::string_view b) {  // columns ignore case
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
      if (lower(a[i]) != lower(b[i])) return false;
    }
    return true;
  }

  std::string add_column(const std::string& name) {
    idem::detail::split_identifier(name, "idem::testing::MemoryTable", "column");
    for (const auto& c : columns_) {
      if (same_name(c, name)) {
        throw InvalidArgument(
            fmt::format("idem::testing::MemoryTable: column {} is declared twice", name));
      }
    }
    columns_.push_back(name);
    return name;
  }

  // The declared spelling of a column; InvalidArgument for one the table does not have.
  const std::string& column(std::string_view name) const {
    for (const auto& c : columns_)
      if (same_name(c, name)) return c;
    throw InvalidArgument(fmt::format("idem::testing::MemoryTable: {} has no column {}", table_,
                                      idem::detail::printable(name)));
  }

  Columns columns_of(const GuardedTransition& t) const {
    if (t.table != table_) {
      throw InvalidArgument(
          fmt::format("idem::testing::MemoryTable: the transition is for {}, this is {}",
                      idem::detail::printable(t.table), table_));
    }
    if (column(t.key_column) != key_) {
      throw InvalidArgument(fmt::format("idem::testing::MemoryTable: {} is keyed by {}, not {}",
                                        table_, key_, idem::detail::printable(t.key_column)));
    }
    Columns c{column(t.status_column), t.versioned() ? column(t.version_column) : std::string()};
    if (c.status == key_ || c.version == key_) {
      throw InvalidArgument(fmt::format(
          "idem::testing::MemoryTable: a transition must not write the key column {}", key_));
    }
    return c;
  }

  MemoryRow normalise(MemoryRow row) const {
    MemoryRow r;
    for (auto& [name, value] : row)
      r[column(name)] = std::move(value);
    for (const auto& c : columns_)
      r.try_emplace(c);  // absent columns are NULL
    if (r.at(key_).is_null()) {
      throw InvalidArgument(
          fmt::format("idem::testing::MemoryTable: the key column {} is NULL", key_));
    }
    return r;
  }

  const MemoryRow* find_locked(const SqlValue& key) const {
    for (const auto& r : rows_)
      if (equal(r.at(key_), key)) return &r;
    return nullptr;
  }

  MemoryRow* find_locked(const SqlValue& key) {
    return const_cast<MemoryRow*>(std::as_const(*this).find_locked(key));
  }

  std::uint64_t update_locked(const GuardedTransition& t, const Columns& c) {
    ++operations_;
    MemoryRow* r = find_locked(t.key);  // keys are unique: at most one row matches
    if (r == nullptr || !equal(r->at(c.status), t.from)) return 0;
    if (c.version.empty()) {
      if (equal(r->at(c.status), t.to)) return 0;  // MySQL counts changed rows only
      (*r)[c.status] = t.to;
      return 1;
    }
    // A versioned transition without an expected version compares with NULL: no match.
    if (!t.expected_version || !equal(r->at(c.version), SqlValue(*t.expected_version))) return 0;
    if (*t.expected_version == std::numeric_limits<std::int64_t>::max()) {
      throw InvalidArgument(
          fmt::format("idem::testing::MemoryTable: {} + 1 is out of range", c.version));
    }
    (*r)[c.status] = t.to;
    (*r)[c.version] = SqlValue(*t.expected_version + 1);
    return 1;
  }

  std::optional<ProbeRow> probe_locked(const GuardedTransition& t, const Columns& c) {
    ++operations_;
    const MemoryRow* r = find_locked(t.key);
    if (r == nullptr) return std::nullopt;
    ProbeRow row{r->at(c.status).text(), std::nullopt};
    if (!c.version.empty()) row.version = r->at(c.version).text();
    return row;
  }

  static std::string describe(const SqlValue& v) {
    if (v.is_null()) return "NULL";
    return idem::detail::printable(*v.text());
  }

  std::string table_;
  std::string key_;
  std::vector<std::string> columns_;  // the key first
  mutable std::mutex mutex_;
  std::vector<MemoryRow> rows_;
  std::size_t operations_ = 0;
};

}  // namespace idem::testing
