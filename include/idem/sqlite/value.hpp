#pragma once
// idem::sqlite::Value: a value bound to a statement's `?` placeholder, viewed, not copied.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace idem::sqlite {

// One value bound to a `?` placeholder. Integers are stored as 64-bit signed integers.
class Value {
 public:
  enum class Kind { null, integer, real, text, blob };

  Value(std::nullptr_t) noexcept {}  // NOLINT: implicit by design
  template <std::integral T>
  Value(T v) noexcept : kind_(Kind::integer), integer_(static_cast<std::int64_t>(v)) {}  // NOLINT
  template <std::floating_point T>
  Value(T v) noexcept : kind_(Kind::real), real_(static_cast<double>(v)) {}  // NOLINT
  Value(std::string_view s) noexcept : kind_(Kind::text), bytes_(s) {}       // NOLINT
  Value(const std::string& s) noexcept : kind_(Kind::text), bytes_(s) {}     // NOLINT
  Value(const char* s) noexcept : kind_(Kind::text), bytes_(s) {}            // NOLINT
  static Value blob(std::string_view bytes) noexcept {
    Value v(bytes);
    v.kind_ = Kind::blob;
    return v;
  }

  Kind kind() const noexcept { return kind_; }
  std::int64_t integer() const noexcept { return integer_; }
  double real() const noexcept { return real_; }
  std::string_view bytes() const noexcept { return bytes_; }

 private:
  Kind kind_ = Kind::null;
  std::int64_t integer_ = 0;
  double real_ = 0;
  std::string_view bytes_;
};

}  // namespace idem::sqlite
