#pragma once
// Strict UTF-8 checks (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF.

#include <cstddef>
#include <string_view>

namespace idem::detail {

enum class TextFault { none, invalid_utf8, control_character };

struct TextCheck {
  TextFault fault = TextFault::none;
  std::size_t offset = 0;  // byte offset of the first fault
};

// Validates UTF-8 and rejects control characters (C0, DEL and C1: U+0000-U+001F, U+007F-U+009F).
inline TextCheck check_text(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) return {TextFault::control_character, i};
      ++i;
      continue;
    }
    std::size_t len = 0;
    char32_t cp = 0;
    char32_t min = 0;
    if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return {TextFault::invalid_utf8, i};
    }
    if (n - i < len) return {TextFault::invalid_utf8, i};
    for (std::size_t k = 1; k < len; ++k) {
      const unsigned char cc = p[i + k];
      if ((cc & 0xc0) != 0x80) return {TextFault::invalid_utf8, i};
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return {TextFault::invalid_utf8, i};
    }
    if (cp >= 0x80 && cp <= 0x9f) return {TextFault::control_character, i};
    i += len;
  }
  return {};
}

}  // namespace idem::detail
