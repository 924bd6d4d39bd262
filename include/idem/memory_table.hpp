#pragma once
// idem::MemoryTable: an in-process stand-in for a business table, so that handlers using an
// idem::StateMachine can be unit-tested without a database. It runs the very statements the
// machine builds - the guarded UPDATE and the explaining SELECT - with the same WHERE
// semantics as MySQL, so a test sees the same transitioned / rejected answers:
//
//   idem::MemoryTable orders{machine};                       // table and columns of the machine
//   orders.insert({{"order_no", "A1001"}, {"status", 0}, {"version", 0}});
//   auto r = orders.apply(machine, "A1001", pending, paid, 0);      // transitioned
//   auto again = orders.apply(machine, "A1001", pending, paid, 0, {.explain = true});
//   // again.rejected(), again.reason == idem::RejectReason::status_moved_on, *again.status == paid
//
// Thread-safe: one mutex serialises every statement, and apply() holds it across the UPDATE
// and the explaining read, so an explanation is never torn.
//
// What it understands (anything else is InvalidArgument):
//   UPDATE `t` SET `c` = ? | `c` = `d` + N [, ...] WHERE `c` = ? [AND `c` = ? ...]
//   SELECT `c` [, `c` ...] FROM `t` WHERE `c` = ? [AND `c` = ? ...]
// WHERE semantics as in SQL: NULL equals nothing; integers compare by value whatever their
// signedness; text compares byte for byte (like a _bin collation: MySQL's default _ci
// collations would also match 'paid' with 'PAID'); an integer equals a text that is its
// decimal form. An UPDATE counts the rows it changed, as MySQL's affected rows do.

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
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/state_machine.hpp"
#include "idem/statement.hpp"

namespace idem {

// One row: column name -> value. Columns the row was inserted without hold NULL.
using MemoryRow = std::map<std::string, SqlValue, std::less<>>;

struct MemoryTableParams {
  // The table name as the statements use it: t_order, or schema.t_order.
  std::string table{};
  // The unique key: insert() refuses a second row with the same key.
  std::string key_column{};
  // Every other column.
  std::vector<std::string> columns{};
};

namespace detail {

inline bool same_integer(const SqlValue::Variant& a, const SqlValue::Variant& b) {
  auto as_signed = [](const SqlValue::Variant& v, std::int64_t& out) {
    if (const auto* i = std::get_if<std::int64_t>(&v)) {
      out = *i;
      return true;
    }
    const auto u = std::get<std::uint64_t>(v);
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
    out = static_cast<std::int64_t>(u);
    return true;
  };
  std::int64_t x = 0;
  std::int64_t y = 0;
  if (!as_signed(a, x) || !as_signed(b, y)) {
    // At least one is an unsigned value above INT64_MAX: equal only to the same unsigned value.
    return std::holds_alternative<std::uint64_t>(a) && std::holds_alternative<std::uint64_t>(b) &&
           std::get<std::uint64_t>(a) == std::get<std::uint64_t>(b);
  }
  return x == y;
}

// `a = b` in a WHERE clause: NULL is never equal to anything.
inline bool sql_equal(const SqlValue& a, const SqlValue& b) {
  if (a.is_null() || b.is_null()) return false;
  if (a.is_integer() && b.is_integer()) return same_integer(a.value(), b.value());
  return a.text() == b.text();
}

// Whether an assignment left the value as it was (MySQL does not count such rows).
inline bool same_stored(const SqlValue& a, const SqlValue& b) {
  if (a.is_null() || b.is_null()) return a.is_null() && b.is_null();
  return sql_equal(a, b);
}

// The statements of StateMachine, parsed. Column names are kept as written (unquoted).
struct ParsedSql {
  struct Assignment {
    std::string column;
    std::optional<std::size_t> param;  // `c = ?`
    std::string source;                // `c = source + delta`
    std::int64_t delta = 0;
  };
  struct Condition {
    std::string column;
    std::size_t param = 0;
  };
  bool update = false;
  std::string table;  // quoted, as in the SQL
  std::vector<Assignment> assignments;
  std::vector<std::string> selected;
  std::vector<Condition> where;
  std::size_t params = 0;
};

class SqlParser {
 public:
  explicit SqlParser(std::string_view sql) : sql_(sql) {}

  ParsedSql parse() {
    ParsedSql p;
    if (keyword("UPDATE")) {
      p.update = true;
      p.table = table();
      expect_keyword("SET");
      do {
        ParsedSql::Assignment a;
        a.column = identifier();
        expect('=');
        if (punct('?')) {
          a.param = p.params++;
        } else {
          a.source = identifier();
          expect('+');
          a.delta = number();
        }
        p.assignments.push_back(std::move(a));
      } while (punct(','));
    } else if (keyword("SELECT")) {
      do {
        p.selected.push_back(identifier());
      } while (punct(','));
      expect_keyword("FROM");
      p.table = table();
    } else {
      fail("it starts with neither UPDATE nor SELECT");
    }
    expect_keyword("WHERE");
    do {
      ParsedSql::Condition c;
      c.column = identifier();
      expect('=');
      expect('?');
      c.param = p.params++;
      p.where.push_back(std::move(c));
    } while (keyword("AND"));
    skip_space();
    if (pos_ != sql_.size()) fail("unexpected text at the end");
    return p;
  }

 private:
  [[noreturn]] void fail(std::string_view why) const {
    throw InvalidArgument(fmt::format(
        "idem::MemoryTable: cannot run \"{}\": {} (at offset {}); it runs the UPDATE and SELECT "
        "statements that idem::StateMachine builds",
        printable(sql_), why, pos_));
  }

  void skip_space() {
    while (pos_ < sql_.size() && (sql_[pos_] == ' ' || sql_[pos_] == '\n' || sql_[pos_] == '\t'))
      ++pos_;
  }

  bool keyword(std::string_view word) {
    skip_space();
    if (sql_.size() - pos_ < word.size()) return false;
    for (std::size_t i = 0; i < word.size(); ++i) {
      char c = sql_[pos_ + i];
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
      if (c != word[i]) return false;
    }
    const std::size_t end = pos_ + word.size();
    if (end < sql_.size() && is_identifier_char(sql_[end])) return false;
    pos_ = end;
    return true;
  }

  void expect_keyword(std::string_view word) {
    if (!keyword(word)) fail(fmt::format("expected {}", word));
  }

  bool punct(char c) {
    skip_space();
    if (pos_ < sql_.size() && sql_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect(char c) {
    if (!punct(c)) fail(fmt::format("expected '{}'", c));
  }

  static bool is_identifier_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '$';
  }

  // A quoted `name` or a bare name of [A-Za-z0-9_$].
  std::string identifier() {
    skip_space();
    std::string name;
    if (pos_ < sql_.size() && sql_[pos_] == '`') {
      const auto close = sql_.find('`', pos_ + 1);
      if (close == std::string_view::npos) fail("unterminated `identifier`");
      name = std::string(sql_.substr(pos_ + 1, close - pos_ - 1));
      pos_ = close + 1;
    } else {
      const std::size_t start = pos_;
      while (pos_ < sql_.size() && is_identifier_char(sql_[pos_]))
        ++pos_;
      name = std::string(sql_.substr(start, pos_ - start));
    }
    if (!is_plain_identifier(name)) fail("expected an identifier");
    return name;
  }

  std::string table() {
    std::string t = quote_identifier(identifier(), "idem::MemoryTable: table");
    if (pos_ < sql_.size() && sql_[pos_] == '.') {
      ++pos_;
      t += "." + quote_identifier(identifier(), "idem::MemoryTable: table");
    }
    return t;
  }

  std::int64_t number() {
    skip_space();
    std::int64_t v = 0;
    const std::size_t start = pos_;
    while (pos_ < sql_.size() && sql_[pos_] >= '0' && sql_[pos_] <= '9') {
      if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10) fail("number too large");
      v = v * 10 + (sql_[pos_++] - '0');
    }
    if (pos_ == start) fail("expected a number");
    return v;
  }

  std::string_view sql_;
  std::size_t pos_ = 0;
};

}  // namespace detail

class MemoryTable {
 public:
  explicit MemoryTable(MemoryTableParams params)
      : table_(detail::quote_identifier(params.table, "idem::MemoryTable: table", true)) {
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
      throw InvalidArgument(fmt::format("idem::MemoryTable: {} already holds a row with {} = {}",
                                        table_, key_, describe(r.at(key_))));
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
      if (detail::sql_equal(it->at(key_), key)) {
        rows_.erase(it);
        return true;
      }
    }
    return false;
  }

  std::optional<MemoryRow> find(const SqlValue& key) const {
    std::lock_guard lock(mutex_);
    for (const auto& r : rows_)
      if (detail::sql_equal(r.at(key_), key)) return r;
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

  // Statements run so far (execute, select and those of apply), to show what reached the table.
  std::size_t statements() const {
    std::lock_guard lock(mutex_);
    return statements_;
  }

  // Runs an UPDATE; returns the rows it changed.
  std::uint64_t execute(const Statement& s) {
    const detail::ParsedSql p = parse(s, true);
    std::lock_guard lock(mutex_);
    return update_locked(p, s);
  }

  // Runs a SELECT; returns the selected columns of every matching row.
  std::vector<std::vector<SqlValue>> select(const Statement& s) const {
    const detail::ParsedSql p = parse(s, false);
    std::lock_guard lock(mutex_);
    return select_locked(p, s);
  }

  // The machine's guarded transition on this table, with the same result as
  // idem::mysql::apply. Throws IllegalTransition (nothing reaches the table) for an undeclared
  // move. With options.explain, a rejection is explained by a read under the same lock.
  template <StatusEnum E>
  TransitionResult<E> apply(const StateMachine<E>& machine, const SqlValue& id, E from, E to,
                            std::optional<std::int64_t> version = std::nullopt,
                            TransitionOptions options = {}) {
    const Statement update = machine.transition(id, from, to, version);
    const Statement probe = machine.probe(id);
    const detail::ParsedSql parsed_update = parse(update, true);
    const detail::ParsedSql parsed_probe = parse(probe, false);
    std::lock_guard lock(mutex_);
    const std::uint64_t changed = update_locked(parsed_update, update);
    if (changed > 1) throw_not_unique(changed);
    if (changed == 1) return TransitionResult<E>::success();
    if (!options.explain) return TransitionResult<E>::rejection();
    const auto rows = select_locked(parsed_probe, probe);
    std::optional<ProbeRow> row;
    if (!rows.empty()) {
      row = ProbeRow{rows.front().at(0).text(), std::nullopt};
      if (machine.versioned()) row->version = rows.front().at(1).text();
    }
    return machine.explain(from, version, row);
  }

  const std::string& quoted_table() const noexcept { return table_; }

 private:
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
    detail::quote_identifier(name, "idem::MemoryTable: column");
    for (const auto& c : columns_) {
      if (same_name(c, name))
        throw InvalidArgument(fmt::format("idem::MemoryTable: column {} is declared twice", name));
    }
    columns_.push_back(name);
    return name;
  }

  // The declared spelling of a column; InvalidArgument for one the table does not have.
  const std::string& column(std::string_view name) const {
    for (const auto& c : columns_)
      if (same_name(c, name)) return c;
    throw InvalidArgument(
        fmt::format("idem::MemoryTable: {} has no column `{}`", table_, detail::printable(name)));
  }

  MemoryRow normalise(MemoryRow row) const {
    MemoryRow r;
    for (auto& [name, value] : row)
      r[column(name)] = std::move(value);
    for (const auto& c : columns_)
      r.try_emplace(c);  // absent columns are NULL
    if (r.at(key_).is_null())
      throw InvalidArgument(fmt::format("idem::MemoryTable: the key column {} is NULL", key_));
    return r;
  }

  MemoryRow* find_locked(const SqlValue& key) {
    for (auto& r : rows_)
      if (detail::sql_equal(r.at(key_), key)) return &r;
    return nullptr;
  }

  detail::ParsedSql parse(const Statement& s, bool update) const {
    detail::ParsedSql p = detail::SqlParser(s.sql).parse();
    if (p.update != update) {
      throw InvalidArgument(fmt::format("idem::MemoryTable: {} takes {} statements, got \"{}\"",
                                        update ? "execute()" : "select()",
                                        update ? "UPDATE" : "SELECT", detail::printable(s.sql)));
    }
    if (p.table != table_) {
      throw InvalidArgument(
          fmt::format("idem::MemoryTable: the statement is for {}, this is {}", p.table, table_));
    }
    if (p.params != s.params.size()) {
      throw UsageError(fmt::format("idem::MemoryTable: statement takes {} parameters, {} given: {}",
                                   p.params, s.params.size(), detail::printable(s.sql)));
    }
    for (auto& a : p.assignments) {
      a.column = column(a.column);
      if (!a.param) a.source = column(a.source);
    }
    for (auto& c : p.where)
      c.column = column(c.column);
    for (auto& c : p.selected)
      c = column(c);
    return p;
  }

  static bool matches(const MemoryRow& r, const detail::ParsedSql& p, const Statement& s) {
    for (const auto& c : p.where)
      if (!detail::sql_equal(r.at(c.column), s.params[c.param])) return false;
    return true;
  }

  static SqlValue add(const SqlValue& v, std::int64_t delta, std::string_view column) {
    if (v.is_null()) return v;  // NULL + 1 is NULL
    if (const auto* i = std::get_if<std::int64_t>(&v.value())) {
      if (*i > std::numeric_limits<std::int64_t>::max() - delta)
        throw InvalidArgument(
            fmt::format("idem::MemoryTable: {} + {} is out of range", column, delta));
      return SqlValue(*i + delta);
    }
    if (const auto* u = std::get_if<std::uint64_t>(&v.value())) {
      if (*u > std::numeric_limits<std::uint64_t>::max() - static_cast<std::uint64_t>(delta))
        throw InvalidArgument(
            fmt::format("idem::MemoryTable: {} + {} is out of range", column, delta));
      return SqlValue(*u + static_cast<std::uint64_t>(delta));
    }
    throw InvalidArgument(
        fmt::format("idem::MemoryTable: {} holds text; it cannot be incremented", column));
  }

  std::uint64_t update_locked(const detail::ParsedSql& p, const Statement& s) {
    ++statements_;
    std::uint64_t changed = 0;
    for (auto& r : rows_) {
      if (!matches(r, p, s)) continue;
      MemoryRow next = r;  // MySQL applies single-table assignments left to right
      for (const auto& a : p.assignments)
        next[a.column] = a.param ? s.params[*a.param] : add(next.at(a.source), a.delta, a.source);
      if (next.at(key_).is_null())
        throw InvalidArgument(fmt::format("idem::MemoryTable: the key column {} is NULL", key_));
      bool differs = false;
      for (const auto& [name, value] : next)
        if (!detail::same_stored(value, r.at(name))) differs = true;
      if (differs) {
        r = std::move(next);
        ++changed;
      }
    }
    return changed;
  }

  std::vector<std::vector<SqlValue>> select_locked(const detail::ParsedSql& p,
                                                   const Statement& s) const {
    ++statements_;
    std::vector<std::vector<SqlValue>> out;
    for (const auto& r : rows_) {
      if (!matches(r, p, s)) continue;
      std::vector<SqlValue> row;
      for (const auto& c : p.selected)
        row.push_back(r.at(c));
      out.push_back(std::move(row));
    }
    return out;
  }

  [[noreturn]] void throw_not_unique(std::uint64_t changed) const {
    throw UsageError(fmt::format(
        "idem::MemoryTable: a transition changed {} rows of {}; the key column {} must be unique",
        changed, table_, key_));
  }

  static std::string describe(const SqlValue& v) {
    if (v.is_null()) return "NULL";
    return detail::printable(*v.text());
  }

  std::string table_;
  std::string key_;
  std::vector<std::string> columns_;  // the key first
  mutable std::mutex mutex_;
  std::vector<MemoryRow> rows_;
  mutable std::size_t statements_ = 0;
};

}  // namespace idem
