#pragma once
// idem::mysql::Cell and Row: one result row of Connection::select, typed.
//
// A cell is NULL, an integer (the integer column types), a DATETIME / TIMESTAMP as a time
// point, or text (everything else, bytes included: VARBINARY, BLOB, DECIMAL, ...). Both ways
// a statement travels (prepared, or SQL text on a borrowed handle) give the same cells.
// Times are the column's wall-clock value read as UTC (idem's columns hold UTC); a value that
// names no instant (a zero date) stays text.

#include <mysql.h>

#include <charconv>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/clock.hpp"
#include "idem/mysql/detail/datetime.hpp"

namespace idem::mysql {

class Cell {
 public:
  enum class Kind : unsigned char { null, integer, text, time };

  Cell() noexcept = default;  // NULL
  static Cell from_int64(std::int64_t v) noexcept {
    Cell c(Kind::integer);
    c.bits_ = static_cast<std::uint64_t>(v);
    return c;
  }
  static Cell from_uint64(std::uint64_t v) noexcept {
    Cell c(Kind::integer);
    c.bits_ = v;
    c.unsigned_ = true;
    return c;
  }
  static Cell from_text(std::string s) noexcept {
    Cell c(Kind::text);
    c.text_ = std::move(s);
    return c;
  }
  // `digits` (0-6): the column's fraction digits, which to_text() writes.
  static Cell from_time(detail::Micros t, unsigned digits = 3) noexcept {
    Cell c(Kind::time);
    c.bits_ = static_cast<std::uint64_t>(t.time_since_epoch().count());
    c.digits_ = static_cast<unsigned char>(digits > 6 ? 6 : digits);
    return c;
  }

  Kind kind() const noexcept { return kind_; }
  bool is_null() const noexcept { return kind_ == Kind::null; }

  // Typed reads: nullopt unless the cell holds that kind (and, for integer, T holds the value).
  template <std::integral T = std::int64_t>
  requires(!std::same_as<T, bool>) std::optional<T> integer()
  const noexcept {
    if (kind_ != Kind::integer) return std::nullopt;
    if (unsigned_) {
      if (!std::in_range<T>(bits_)) return std::nullopt;
      return static_cast<T>(bits_);
    }
    const auto v = static_cast<std::int64_t>(bits_);
    if (!std::in_range<T>(v)) return std::nullopt;
    return static_cast<T>(v);
  }
  std::optional<std::string_view> text() const noexcept {
    if (kind_ != Kind::text) return std::nullopt;
    return std::string_view(text_);
  }
  // To the millisecond, rounded down (a DATETIME(6) keeps its microseconds for to_text()).
  std::optional<TimePoint> time() const noexcept {
    if (kind_ != Kind::time) return std::nullopt;
    return std::chrono::floor<Duration>(micros());
  }

  // Any cell as the server's text protocol writes it (integers in decimal, times as
  // "YYYY-MM-DD HH:MM:SS[.fff]"); nullopt for NULL. For display, logs and tests.
  std::optional<std::string> to_text() const {
    switch (kind_) {
      case Kind::null:
        return std::nullopt;
      case Kind::integer: {
        char out[24];
        const auto r = unsigned_
                           ? std::to_chars(out, out + sizeof out, bits_)
                           : std::to_chars(out, out + sizeof out, static_cast<std::int64_t>(bits_));
        return std::string(out, r.ptr);
      }
      case Kind::text:
        return text_;
      case Kind::time:
        return detail::datetime_text(detail::to_mysql_time(micros()), digits_);
    }
    return std::nullopt;
  }

  // A non-NULL cell whose to_text() is `s` (what a test usually means by cell == "42").
  friend bool operator==(const Cell& c, std::string_view s) {
    if (c.kind_ == Kind::text) return c.text_ == s;
    const auto t = c.to_text();
    return t && *t == s;
  }
  friend bool operator==(const Cell&, const Cell&) = default;

 private:
  explicit Cell(Kind k) noexcept : kind_(k) {}
  detail::Micros micros() const noexcept {
    return detail::Micros{std::chrono::microseconds{static_cast<std::int64_t>(bits_)}};
  }

  Kind kind_ = Kind::null;
  bool unsigned_ = false;
  unsigned char digits_ = 0;
  std::uint64_t bits_ = 0;  // an integer (two's complement unless unsigned_), or a time's µs
  std::string text_;
};

using Row = std::vector<Cell>;

namespace detail {

// What a result column's values become, read once from its metadata.
struct ColumnType {
  Cell::Kind kind = Cell::Kind::text;
  bool is_unsigned = false;
  unsigned char digits = 0;  // fraction digits of a time column
};

inline ColumnType column_type(const MYSQL_FIELD& f) noexcept {
  const enum_field_types t = f.type;
  if (t == MYSQL_TYPE_TINY || t == MYSQL_TYPE_SHORT || t == MYSQL_TYPE_INT24 ||
      t == MYSQL_TYPE_LONG || t == MYSQL_TYPE_LONGLONG) {
    return {Cell::Kind::integer, (f.flags & UNSIGNED_FLAG) != 0, 0};
  }
  if ((t == MYSQL_TYPE_DATETIME || t == MYSQL_TYPE_TIMESTAMP) && f.decimals <= 6)
    return {Cell::Kind::time, false, static_cast<unsigned char>(f.decimals)};
  return {};
}

inline std::vector<ColumnType> column_types(const MYSQL_FIELD* fields, unsigned n) {
  std::vector<ColumnType> out;
  out.reserve(n);
  for (unsigned c = 0; c < n; ++c)
    out.push_back(column_type(fields[c]));
  return out;
}

// A DATETIME as fetched into a MYSQL_TIME; text when it names no instant.
inline Cell time_cell(const MYSQL_TIME& t, unsigned digits) {
  if (const auto at = from_mysql_time(t)) return Cell::from_time(*at, digits);
  return Cell::from_text(datetime_text(t, digits));
}

// A value in the server's text form (the text protocol), typed by its column: parsed here,
// once, so that nothing downstream parses it again. Text that does not parse stays text.
inline Cell text_cell(const ColumnType& type, std::string_view text) {
  switch (type.kind) {
    case Cell::Kind::integer: {
      const char* end = text.data() + text.size();
      if (type.is_unsigned) {
        std::uint64_t v = 0;
        const auto r = std::from_chars(text.data(), end, v);
        if (r.ec == std::errc{} && r.ptr == end) return Cell::from_uint64(v);
      } else {
        std::int64_t v = 0;
        const auto r = std::from_chars(text.data(), end, v);
        if (r.ec == std::errc{} && r.ptr == end) return Cell::from_int64(v);
      }
      break;
    }
    case Cell::Kind::time:
      if (const auto fields = parse_datetime(text)) {
        if (const auto at = from_mysql_time(*fields)) return Cell::from_time(*at, type.digits);
      }
      break;
    case Cell::Kind::null:
    case Cell::Kind::text:
      break;
  }
  return Cell::from_text(std::string(text));
}

}  // namespace detail
}  // namespace idem::mysql
