#pragma once
// The layout of a record table: which of idem's table layouts it has, and the oldest layout of
// idem that may use it. idem stamps it on the table when it creates or migrates one (MySQL:
// the table's comment; SQLite: a row of the idem_schema table beside it) and reads it when it
// checks a table, so that an older idem refuses a table that a newer one changed in a way it
// cannot read, instead of misreading its rows. A table of an idem before stamps has none: its
// layout is read from its columns. The rules are here, once, for every store with a schema;
// tests/core/table_layout_test.cpp pins them.

#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/errors.hpp"

namespace idem {

struct TableLayout {
  int layout = 0;         // 1: the first table idem shipped; each migration adds one
  int oldest_reader = 0;  // the oldest layout of idem that reads and writes this table correctly
  bool stamped = false;   // false: an idem before stamps made it; layout was read from its columns
};

namespace detail {

// The stamp as text (MySQL keeps it as the table comment): "idem layout=2 oldest_reader=2".
inline std::string layout_stamp(const TableLayout& t) {
  return fmt::format("idem layout={} oldest_reader={}", t.layout, t.oldest_reader);
}

// The stamp of two stored numbers; nullopt when they are not one idem writes (layouts count
// from 1, and a table's oldest reader is at most its own layout).
inline std::optional<TableLayout> stamp_from(std::int64_t layout, std::int64_t oldest_reader) {
  if (oldest_reader < 1 || oldest_reader > layout || layout > std::numeric_limits<int>::max())
    return std::nullopt;
  return TableLayout{static_cast<int>(layout), static_cast<int>(oldest_reader), true};
}

// The stamp read back from its text; nullopt when the text is not a stamp (no comment, or a
// DBA's own), which counts as a table without one.
inline std::optional<TableLayout> parse_layout_stamp(std::string_view text) {
  const auto number = [&](std::string_view name, std::int64_t& out) {
    if (!text.starts_with(name)) return false;
    text.remove_prefix(name.size());
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    text.remove_prefix(static_cast<std::size_t>(end - text.data()));
    return ec == std::errc{};
  };
  std::int64_t layout = 0;
  std::int64_t oldest_reader = 0;
  if (!number("idem layout=", layout) || !number(" oldest_reader=", oldest_reader) || !text.empty())
    return std::nullopt;
  return stamp_from(layout, oldest_reader);
}

// What a table's layout is: its stamp, or, without one, what its columns show (`current` when
// it has every column of the current layout, else the first layout).
inline TableLayout table_layout(const std::optional<TableLayout>& stamp, bool has_current_columns,
                                const TableLayout& current) {
  if (stamp) return *stamp;
  const int layout = has_current_columns ? current.layout : 1;
  return {.layout = layout, .oldest_reader = layout, .stamped = false};
}

// Whether a migration by an idem whose layout is `current` writes the stamp: a table without
// one, or with an older one; never over a newer idem's stamp.
inline bool needs_stamp(const TableLayout& table, const TableLayout& current) {
  return !table.stamped || table.layout < current.layout;
}

// The problem of a table that this idem (layout `known`) must not use: a newer idem migrated
// it to a layout that needs a newer reader.
inline std::optional<SchemaMismatch::Problem> layout_problem(const TableLayout& table, int known) {
  if (table.oldest_reader <= known) return std::nullopt;
  return SchemaMismatch::Problem{
      fmt::format("the table has layout {}, which only an idem of layout {} or later reads "
                  "correctly; this idem knows layout {}",
                  table.layout, table.oldest_reader, known),
      fmt::format("run an idem of layout {} or later on this table (an older idem would misread "
                  "its records)",
                  table.oldest_reader)};
}

}  // namespace detail

}  // namespace idem
