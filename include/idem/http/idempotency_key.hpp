#pragma once
// The Idempotency-Key header field (IETF draft "The Idempotency-Key HTTP Header Field"): an
// Item Structured Field (RFC 8941) whose value is an sf-string, e.g.
//
//   Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// parse_idempotency_key() reads a field value strictly by RFC 8941 section 4.2 (leading and
// trailing spaces allowed, parameters allowed and ignored - including RFC 9651's dates and
// display strings as their values - anything else refused): a token
// (unquoted text), an integer, two comma-joined values (the header sent twice) or a bad escape
// is not a key. format_idempotency_key() writes one, for clients and tests.

#include <cstddef>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/key.hpp"

namespace idem::http {

namespace detail {

// A cursor over a field value; every parse_* either consumes a well-formed part or throws.
class SfCursor {
 public:
  explicit SfCursor(std::string_view s) : s_(s) {}

  bool done() const noexcept { return i_ >= s_.size(); }
  char peek() const noexcept { return done() ? '\0' : s_[i_]; }
  std::size_t pos() const noexcept { return i_; }
  void skip_sp() {
    while (!done() && s_[i_] == ' ')
      ++i_;
  }
  void skip_ows() {
    while (!done() && (s_[i_] == ' ' || s_[i_] == '\t'))
      ++i_;
  }

  [[noreturn]] void fail(std::string_view what) const {
    throw InvalidArgument(
        fmt::format("Idempotency-Key must be one structured-field string in double quotes (RFC "
                    "8941), e.g. \"8e03978e-40d5-43e8-bc93-6894a57f9324\"; {} at byte {} of {}",
                    what, i_, idem::detail::printable(s_)));
  }

  // sf-string: DQUOTE *( %x20-21 / %x23-5B / %x5D-7E / "\" ( DQUOTE / "\" ) ) DQUOTE
  std::string parse_string() {
    if (peek() != '"') fail("expected '\"'");
    ++i_;
    std::string out;
    while (!done()) {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '\\') {
        ++i_;
        if (done() || (s_[i_] != '"' && s_[i_] != '\\')) {
          fail("a backslash may only escape '\"' or '\\'");
        }
        out += s_[i_++];
      } else if (c == '"') {
        ++i_;
        return out;
      } else if (c < 0x20 || c > 0x7e) {
        fail("a string may only hold printable ASCII (0x20-0x7E)");
      } else {
        out += static_cast<char>(c);
        ++i_;
      }
    }
    fail("the string has no closing '\"'");
  }

  // The other bare items may only appear as parameter values here; they are checked, not kept.
  void parse_bare_item() {
    const char c = peek();
    if (c == '"') {
      parse_string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      parse_number();
    } else if (c == ':') {
      parse_byte_sequence();
    } else if (c == '?') {
      ++i_;
      if (peek() != '0' && peek() != '1') fail("a boolean must be ?0 or ?1");
      ++i_;
    } else if (c == '@') {  // sf-date (RFC 9651): "@" sf-integer
      ++i_;
      parse_number();
    } else if (c == '%') {  // sf-displaystring (RFC 9651): %" with %xx escapes of UTF-8
      ++i_;
      parse_display_string();
    } else if (is_alpha(c) || c == '*') {
      ++i_;
      while (!done() && (is_tchar(peek()) || peek() == ':' || peek() == '/'))
        ++i_;
    } else {
      fail("expected a value");
    }
  }

  // parameters: *( ";" *SP key [ "=" bare-item ] )
  void parse_parameters() {
    while (peek() == ';') {
      ++i_;
      skip_sp();
      const char c = peek();
      if (!((c >= 'a' && c <= 'z') || c == '*')) fail("a parameter name must start with a-z or *");
      while (!done()) {
        const char k = peek();
        if ((k >= 'a' && k <= 'z') || (k >= '0' && k <= '9') || k == '_' || k == '-' || k == '.' ||
            k == '*') {
          ++i_;
        } else {
          break;
        }
      }
      if (peek() == '=') {
        ++i_;
        parse_bare_item();
      }
    }
  }

 private:
  static bool is_alpha(char c) noexcept { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
  static bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
  static bool is_tchar(char c) noexcept {
    return is_alpha(c) || is_digit(c) ||
           std::string_view{"!#$%&'*+-.^_`|~"}.find(c) != std::string_view::npos;
  }

  // sf-integer / sf-decimal: ["-"] 1*15DIGIT, or ["-"] 1*12DIGIT "." 1*3DIGIT
  void parse_number() {
    if (peek() == '-') ++i_;
    std::size_t whole = 0;
    while (is_digit(peek()))
      ++i_, ++whole;
    if (whole == 0) fail("a number needs a digit");
    if (peek() != '.') {
      if (whole > 15) fail("an integer has at most 15 digits");
      return;
    }
    ++i_;
    std::size_t frac = 0;
    while (is_digit(peek()))
      ++i_, ++frac;
    if (whole > 12 || frac == 0 || frac > 3) fail("a decimal has 1-12 digits, '.', 1-3 digits");
  }

  void parse_display_string() {
    if (peek() != '"') fail("a display string starts with %\"");
    ++i_;
    while (!done()) {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return;
      }
      if (c < 0x20 || c > 0x7e) fail("a display string may only hold printable ASCII");
      if (c == '%') {
        const auto hex = [](char h) { return (h >= '0' && h <= '9') || (h >= 'a' && h <= 'f'); };
        if (i_ + 2 >= s_.size() || !hex(s_[i_ + 1]) || !hex(s_[i_ + 2])) {
          fail("'%' in a display string must start a lower-case %xx escape");
        }
        i_ += 3;
      } else {
        ++i_;
      }
    }
    fail("the display string has no closing '\"'");
  }

  // sf-binary: ":" *base64 ":"
  void parse_byte_sequence() {
    ++i_;
    while (!done() && peek() != ':') {
      const char c = peek();
      if (!(is_alpha(c) || is_digit(c) || c == '+' || c == '/' || c == '=')) {
        fail("a byte sequence holds base64 only");
      }
      ++i_;
    }
    if (done()) fail("the byte sequence has no closing ':'");
    ++i_;
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace detail

// The key carried by an Idempotency-Key field value (repeated field lines joined with ", ",
// as HTTP combines them). Throws idem::InvalidArgument, saying what is wrong and where, for
// anything that is not exactly one non-empty sf-string (parameters are ignored).
inline std::string parse_idempotency_key(std::string_view field_value) {
  detail::SfCursor cursor{field_value};
  cursor.skip_ows();  // HTTP trims OWS around field values; some libraries leave it
  if (cursor.done()) cursor.fail("the field is empty");
  if (cursor.peek() != '"') {
    cursor.fail("the value is not quoted (a token, number or other item is not a key)");
  }
  std::string key = cursor.parse_string();
  cursor.parse_parameters();
  cursor.skip_ows();
  if (!cursor.done()) {
    cursor.fail(cursor.peek() == ',' ? "found a list (was the header sent more than once?)"
                                     : "unexpected characters after the string");
  }
  if (key.empty()) {
    throw InvalidArgument("Idempotency-Key must not be an empty string");
  }
  return key;
}

// The field value that carries key: the key in double quotes, '"' and '\' escaped. Throws
// idem::InvalidArgument for an empty key or bytes an sf-string cannot hold (outside 0x20-0x7E).
inline std::string format_idempotency_key(std::string_view key) {
  if (key.empty()) throw InvalidArgument("Idempotency-Key must not be an empty string");
  std::string out = "\"";
  for (std::size_t i = 0; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c < 0x20 || c > 0x7e) {
      throw InvalidArgument(fmt::format(
          "Idempotency-Key can only carry printable ASCII (0x20-0x7E); byte {} of \"{}\" is not", i,
          idem::detail::printable(key)));
    }
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<char>(c);
  }
  out += '"';
  return out;
}

}  // namespace idem::http
