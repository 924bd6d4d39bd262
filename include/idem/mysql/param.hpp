#pragma once
// idem::mysql::Param: one value bound to a `?` placeholder of Connection::execute / select.
// A Param holds its own copy of the text it was made from (a temporary string is moved in), so
// a parameter list built from temporaries stays valid until the call returns.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/errors.hpp"

namespace idem::mysql {

class Param {
 public:
  enum class Kind { null, int64, uint64, text, blob, time };

  Param(std::nullptr_t) noexcept : kind_(Kind::null) {}  // NOLINT: implicit by design
  template <std::integral T>
  Param(T v) noexcept {  // NOLINT
    if constexpr (std::is_signed_v<T> || std::is_same_v<T, bool>) {
      kind_ = Kind::int64;
      i64_ = static_cast<std::int64_t>(v);
    } else {
      kind_ = Kind::uint64;
      u64_ = static_cast<std::uint64_t>(v);
    }
  }
  // Text: a std::string (a temporary is moved in), a string_view or a C string (copied).
  Param(std::string s) noexcept : kind_(Kind::text), text_(std::move(s)) {}  // NOLINT
  template <class S>
  requires(std::convertible_to<const S&, std::string_view> && !std::is_same_v<S, std::nullptr_t> &&
           !std::is_same_v<S, std::string>) Param(const S& s)
      : kind_(Kind::text), text_(std::string_view(s)) {}  // NOLINT
  static Param blob(std::string_view bytes) {
    Param p(bytes);
    p.kind_ = Kind::blob;
    return p;
  }

  // A DATETIME value in UTC, to the millisecond (what idem's time columns hold).
  static Param time(TimePoint t) noexcept {
    Param p(nullptr);
    p.kind_ = Kind::time;
    p.i64_ = static_cast<std::int64_t>(t.time_since_epoch().count());
    return p;
  }

  Kind kind() const noexcept { return kind_; }
  std::int64_t int64() const noexcept { return i64_; }
  std::uint64_t uint64() const noexcept { return u64_; }
  std::string_view text() const noexcept { return text_; }  // text and blob
  TimePoint time_point() const noexcept { return TimePoint{Duration{i64_}}; }

 private:
  Kind kind_ = Kind::null;
  std::int64_t i64_ = 0;  // int64, and time as milliseconds since the epoch
  std::uint64_t u64_ = 0;
  std::string text_;
};

namespace detail {

// Both paths refuse a statement whose placeholders and parameters do not match, alike.
inline UsageError wrong_param_count(std::size_t takes, std::size_t given, std::string_view sql) {
  return UsageError(
      fmt::format("idem::mysql: statement takes {} parameters, {} given: {}", takes, given, sql));
}

}  // namespace detail
}  // namespace idem::mysql
