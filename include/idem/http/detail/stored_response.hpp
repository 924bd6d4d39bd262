#pragma once
// The snapshot of an HTTP response in the idempotency record:
//   {"status":201,"headers":[["Content-Type","application/json"],...],"body":"..."}
// A body that is not valid UTF-8 (JSON strings must be) is kept as "body_base64" instead.

#include <openssl/evp.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "idem/http/message.hpp"
#include "idem/http/policy.hpp"

namespace idem::http::detail {

inline std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

inline std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(3 * (text.size() / 4), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the bytes that the '=' padding stands for; drop them.
  std::size_t size = static_cast<std::size_t>(n);
  if (!text.empty() && text.back() == '=') --size;
  if (text.size() >= 2 && text[text.size() - 2] == '=') --size;
  out.resize(size);
  return out;
}

inline bool valid_utf8(std::string_view s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

inline nlohmann::json encode_response(const Response& r, const Policy& policy) {
  nlohmann::json headers = nlohmann::json::array();
  for (const Header& h : r.headers) {
    bool keep = field_name_equals(h.name, "Content-Type");
    for (const std::string& name : policy.replayed_headers)
      keep = keep || field_name_equals(h.name, name);
    if (!keep) continue;
    if (!valid_utf8(h.name) || !valid_utf8(h.value)) continue;  // not a legal field anyway
    headers.push_back(nlohmann::json::array({h.name, h.value}));
  }
  nlohmann::json j{{"status", r.status}, {"headers", std::move(headers)}};
  if (valid_utf8(r.body)) {
    j["body"] = r.body;
  } else {
    j["body_base64"] = base64_encode(r.body);
  }
  return j;
}

// nullopt when j is not a response snapshot (written by something else, or damaged).
inline std::optional<Response> decode_response(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  const auto status = j.find("status");
  const auto headers = j.find("headers");
  if (status == j.end() || !status->is_number_integer() || headers == j.end() ||
      !headers->is_array()) {
    return std::nullopt;
  }
  Response r;
  r.status = status->get<int>();
  if (r.status < 100 || r.status > 599) return std::nullopt;
  for (const nlohmann::json& h : *headers) {
    if (!h.is_array() || h.size() != 2 || !h[0].is_string() || !h[1].is_string()) {
      return std::nullopt;
    }
    r.headers.push_back({h[0].get<std::string>(), h[1].get<std::string>()});
  }
  if (const auto body = j.find("body"); body != j.end() && body->is_string()) {
    r.body = body->get<std::string>();
  } else if (const auto b64 = j.find("body_base64"); b64 != j.end() && b64->is_string()) {
    auto bytes = base64_decode(b64->get<std::string>());
    if (!bytes) return std::nullopt;
    r.body = std::move(*bytes);
  } else {
    return std::nullopt;
  }
  return r;
}

}  // namespace idem::http::detail
