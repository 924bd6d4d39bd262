#pragma once
// idem::pg::Param: a statement parameter of idem::pg's connections, sent as text.

#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "idem/clock.hpp"

namespace idem::pg {

// A statement parameter, sent as text. It owns its text, so a temporary string binds safely.
class Param {
 public:
  Param(std::nullptr_t) noexcept {}                              // NOLINT: SQL NULL
  Param(std::string_view text) : text_(text), null_(false) {}    // NOLINT
  Param(const std::string& text) : text_(text), null_(false) {}  // NOLINT
  Param(const char* text) : text_(text), null_(false) {}         // NOLINT
  template <std::integral I>
  requires(!std::same_as<I, bool>) Param(I value)
      : text_(std::to_string(value)), null_(false) {}  // NOLINT
  // The integer columns (retryable) take 1 and 0.
  Param(bool value) : text_(value ? "1" : "0"), null_(false) {}  // NOLINT

  // A time as milliseconds since the epoch (the statements turn them back into timestamptz).
  static Param time(TimePoint t) { return Param(t.time_since_epoch().count()); }
  static Param time_or_null(const std::optional<TimePoint>& t) {
    return t ? time(*t) : Param(nullptr);
  }
  // Optional text columns are NULL when empty, so that "" and NULL never both mean "none".
  static Param text_or_null(std::string_view text) {
    return text.empty() ? Param(nullptr) : Param(text);
  }

  bool is_null() const noexcept { return null_; }
  const std::string& text() const noexcept { return text_; }

 private:
  std::string text_;
  bool null_ = true;
};

}  // namespace idem::pg
