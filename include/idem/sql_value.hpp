#pragma once
// idem::SqlValue: one value of a table's column, as idem hands it to a database: NULL, an
// integer or text. StateMachine transitions carry their key and statuses as SqlValues; each
// backend binds them as parameters, never as SQL text.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "idem/key.hpp"

namespace idem {

// One column value: NULL, a signed or unsigned 64-bit integer, or text.
class SqlValue {
 public:
  using Variant = std::variant<std::nullptr_t, std::int64_t, std::uint64_t, std::string>;

  SqlValue() noexcept : value_(nullptr) {}
  SqlValue(std::nullptr_t) noexcept : value_(nullptr) {}  // NOLINT: implicit by design
  // One template instead of int64/uint64 overloads, so that a plain `42` is not ambiguous.
  template <std::integral T>
  SqlValue(T v) noexcept : value_(widen(v)) {}                // NOLINT
  SqlValue(std::string s) noexcept : value_(std::move(s)) {}  // NOLINT
  SqlValue(std::string_view s) : value_(std::string(s)) {}    // NOLINT
  SqlValue(const char* s) : value_(std::string(s)) {}         // NOLINT

  const Variant& value() const noexcept { return value_; }
  bool is_null() const noexcept { return std::holds_alternative<std::nullptr_t>(value_); }
  bool is_integer() const noexcept {
    return std::holds_alternative<std::int64_t>(value_) ||
           std::holds_alternative<std::uint64_t>(value_);
  }
  bool is_text() const noexcept { return std::holds_alternative<std::string>(value_); }

  // The value as a database returns it in text form: integers in decimal, text as is;
  // nullopt for NULL.
  std::optional<std::string> text() const {
    if (const auto* i = std::get_if<std::int64_t>(&value_)) return std::to_string(*i);
    if (const auto* u = std::get_if<std::uint64_t>(&value_)) return std::to_string(*u);
    if (const auto* s = std::get_if<std::string>(&value_)) return *s;
    return std::nullopt;
  }

  // Same alternative and same value: int64 5 and uint64 5 differ here (how a table compares
  // values is its own business, see idem::testing::MemoryTable).
  friend bool operator==(const SqlValue&, const SqlValue&) = default;

  // For logs and test failure messages: NULL, 42, 42u, "text".
  friend std::ostream& operator<<(std::ostream& os, const SqlValue& v) {
    if (v.is_null()) return os << "NULL";
    if (const auto* i = std::get_if<std::int64_t>(&v.value_)) return os << *i;
    if (const auto* u = std::get_if<std::uint64_t>(&v.value_)) return os << *u << 'u';
    return os << '"' << detail::printable(std::get<std::string>(v.value_)) << '"';
  }

 private:
  // Built in the initialiser, not assigned: GCC 12 at -O2 warns (falsely) that assigning
  // over the default alternative may read an uninitialised string.
  template <std::integral T>
  static constexpr auto widen(T v) noexcept {
    if constexpr (std::is_signed_v<T> || std::is_same_v<T, bool>) {
      return static_cast<std::int64_t>(v);
    } else {
      return static_cast<std::uint64_t>(v);
    }
  }

  Variant value_;
};

}  // namespace idem
