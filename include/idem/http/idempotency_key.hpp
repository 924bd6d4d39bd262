#pragma once
// The Idempotency-Key header field (IETF draft "The Idempotency-Key HTTP Header Field"): an
// Item Structured Field (RFC 8941) whose value is an sf-string, e.g.
//
//   Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// Many clients and SDKs send the key without the quotes instead, so by default a bare key is
// read too, as the same key as its quoted form:
//
//   Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324
//
// parse_idempotency_key() reads the quoted form strictly by RFC 8941 section 4.2 (leading and
// trailing spaces allowed, parameters allowed and ignored - including RFC 9651's dates and
// display strings as their values - anything else refused), so two comma-joined values (the
// header sent twice) or a bad escape is not a key. A bare key is the trimmed value itself,
// every byte an is_bare_key_char(); KeySyntax::quoted_only refuses it like any other unquoted
// item. format_idempotency_key() writes the quoted form, for clients and tests.

#include <cstddef>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/http/message.hpp"
#include "idem/key.hpp"

namespace idem::http {

// Which forms of the field value a server reads as a key.
enum class KeySyntax {
  // The quoted sf-string, and a bare key of is_bare_key_char() characters (what many SDKs
  // send). Both forms of one key are the same key, so a client that switches still dedups.
  quoted_or_bare,
  // The quoted sf-string only, as RFC 8941 and the draft define the field; a bare key is 400.
  quoted_only,
};

// The characters of a key sent without quotes: RFC 3986's unreserved set (letters, digits,
// '-', '.', '_', '~'), base64's '+', '/' and '=', and ':' for namespaced keys. That covers
// UUIDs, ULIDs, base64 and base64url, which an sf-token cannot (it must start with a letter
// or '*' and has no '='). Left out: ',' ';' '"' '\' and whitespace, which the field's syntax
// gives a meaning, and the rest of the punctuation, which key generators do not emit and
// which would make a mistyped value look like a key; the quoted form carries all of them.
constexpr bool is_bare_key_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view{"-._~:+/="}.find(c) != std::string_view::npos;
}

namespace detail {

// A cursor over a field value; every parse_* either consumes a well-formed part or throws.
class SfCursor {
 public:
  SfCursor(std::string_view s, KeySyntax syntax) : s_(s), syntax_(syntax) {}

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

  [[noreturn]] void fail(std::string_view what) const { fail(what, i_); }
  [[noreturn]] void fail(std::string_view what, std::size_t at) const {
    const std::string_view expected =
        syntax_ == KeySyntax::quoted_only
            ? "one structured-field string in double quotes (RFC 8941), e.g. "
              "\"8e03978e-40d5-43e8-bc93-6894a57f9324\""
            : "one key, in double quotes (an RFC 8941 string, e.g. "
              "\"8e03978e-40d5-43e8-bc93-6894a57f9324\") or bare (letters, digits and -._~:+/=, "
              "e.g. 8e03978e-40d5-43e8-bc93-6894a57f9324)";
    throw InvalidArgument(fmt::format("Idempotency-Key must be {}; {} at byte {} of {}", expected,
                                      what, at, idem::detail::printable(s_)));
  }

  // A bare key: the longest run of is_bare_key_char() characters here (possibly empty).
  std::string parse_bare_key() {
    const std::size_t start = i_;
    while (!done() && is_bare_key_char(s_[i_]))
      ++i_;
    return std::string{s_.substr(start, i_ - start)};
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
  KeySyntax syntax_;
  std::size_t i_ = 0;
};

// Why byte c cannot be in a bare key, for the error message.
inline std::string bare_key_fault(char c) {
  if (c == ' ') return "a key without quotes cannot hold spaces (quote a key that does)";
  const auto u = static_cast<unsigned char>(c);
  if (u < 0x20 || u > 0x7e) return "a key may only hold printable ASCII (0x20-0x7E)";
  if (c == ';') return "parameters may only follow a key in double quotes";
  const char quote = c == '\'' ? '"' : '\'';
  return fmt::format(
      "{}{}{} cannot appear in a key without quotes (only letters, digits and -._~:+/= can; "
      "quote the key to send other printable characters)",
      quote, c, quote);
}

}  // namespace detail

// The key carried by an Idempotency-Key field value (repeated field lines joined with ", ",
// as HTTP combines them), in the forms that `syntax` admits: a quoted key is its unescaped
// content, a bare key is itself, so "k-1" and k-1 are the same key. Throws
// idem::InvalidArgument, saying what is wrong and where, for anything else: an empty value,
// a list, a bad escape, characters a form cannot hold (parameters of a quoted key are ignored).
inline std::string parse_idempotency_key(std::string_view field_value,
                                         KeySyntax syntax = KeySyntax::quoted_or_bare) {
  detail::SfCursor cursor{field_value, syntax};
  cursor.skip_ows();  // HTTP trims OWS around field values; some libraries leave it
  if (cursor.done()) cursor.fail("the field is empty");
  std::string key;
  if (cursor.peek() == '"') {
    key = cursor.parse_string();
    cursor.parse_parameters();
  } else if (syntax == KeySyntax::quoted_only) {
    cursor.fail(
        "the value is not quoted (a token, number or other item is not a key; this endpoint "
        "accepts only the quoted form)");
  } else {
    key = cursor.parse_bare_key();
    const std::size_t stop = cursor.pos();
    const char stop_char = cursor.peek();
    cursor.skip_ows();
    if (key.empty() || (!cursor.done() && cursor.peek() != ',')) {
      // Text after a space or tab is that byte's fault: the client meant one key holding it.
      cursor.fail(detail::bare_key_fault(stop_char), stop);
    }
  }
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
