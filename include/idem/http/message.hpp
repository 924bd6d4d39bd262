#pragma once
// idem::http::Request / Response: plain HTTP messages, independent of any HTTP library. Copy
// what your server gives you into a Request, and copy the Response back out (docs/http.md
// shows it for cpp-httplib).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idem::http {

struct Header {
  std::string name{};
  std::string value{};

  friend bool operator==(const Header&, const Header&) = default;
};

// In the order received or to be sent; a name may repeat.
using Headers = std::vector<Header>;

// tchar (RFC 9110 section 5.6.2): the characters of a token, such as a field name.
constexpr bool is_tchar(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view{"!#$%&'*+-.^_`|~"}.find(c) != std::string_view::npos;
}

// A field name is a token: one or more tchar.
constexpr bool is_field_name(std::string_view name) noexcept {
  if (name.empty()) return false;
  for (const char c : name)
    if (!is_tchar(c)) return false;
  return true;
}

// HTTP field names are case-insensitive (ASCII).
inline bool field_name_equals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    char y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// The value of field `name`: repeated lines joined with ", " as RFC 9110 section 5.3 combines
// them; nullopt when absent.
inline std::optional<std::string> field_value(const Headers& headers, std::string_view name) {
  std::optional<std::string> out;
  for (const Header& h : headers) {
    if (!field_name_equals(h.name, name)) continue;
    if (out) {
      *out += ", ";
      *out += h.value;
    } else {
      out = h.value;
    }
  }
  return out;
}

struct Request {
  std::string method = "POST";
  // Path and query as received (e.g. "/payments"); part of the request fingerprint, so a key
  // reused on another endpoint is refused.
  std::string target{};
  Headers headers{};
  std::string body{};
  // Optional: who is calling (an authenticated account or API client id). When set, keys are
  // unique per scope, so one client can never replay another client's response.
  std::string scope{};
};

struct Response {
  int status = 200;
  Headers headers{};
  std::string body{};

  std::optional<std::string> header(std::string_view name) const {
    return field_value(headers, name);
  }

  friend bool operator==(const Response&, const Response&) = default;
};

}  // namespace idem::http
