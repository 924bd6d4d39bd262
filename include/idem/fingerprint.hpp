#pragma once
// idem::fingerprint: a stable digest of a request's payload. A duplicate whose fingerprint
// differs from the stored one is a conflict (the same key reused for a different request),
// never a replay.
//
// JSON is hashed in canonical form: object members sorted by key bytes, no whitespace,
// integral floating-point numbers written as integers (1.0 == 1), so {"a":1,"b":2} and
// {"b":2,"a":1} fingerprint alike. Strings must be valid UTF-8.

#include <array>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <openssl/evp.h>
#include <nlohmann/json.hpp>

#include "idem/errors.hpp"

namespace idem {

namespace detail {

inline std::string sha256_hex(std::string_view bytes) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md.data(), &len, EVP_sha256(), nullptr) != 1) {
    throw Error("idem::fingerprint: OpenSSL EVP_Digest(SHA-256) failed");
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string out(static_cast<std::size_t>(len) * 2, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 0x0f];
  }
  return out;
}

// Integral doubles within the exactly representable range become integers.
inline nlohmann::json canonical(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::object: {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& [k, v] : j.items())
        out[k] = canonical(v);
      return out;
    }
    case nlohmann::json::value_t::array: {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& v : j)
        out.push_back(canonical(v));
      return out;
    }
    case nlohmann::json::value_t::number_float: {
      const double d = j.get<double>();
      constexpr double limit = 9007199254740992.0;  // 2^53
      if (d >= -limit && d <= limit && static_cast<double>(static_cast<long long>(d)) == d) {
        return static_cast<long long>(d);
      }
      return j;
    }
    default:
      return j;
  }
}

}  // namespace detail

// Canonical text of a JSON value: what fingerprint(json) hashes. Throws idem::InvalidArgument
// for strings that are not valid UTF-8.
inline std::string canonical_json(const nlohmann::json& payload) {
  try {
    return detail::canonical(payload).dump();
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(
        fmt::format("idem::fingerprint: payload is not canonical JSON: {}", e.what()));
  }
}

// SHA-256 (lower-case hex, 64 characters) of the canonical JSON of payload.
inline std::string fingerprint(const nlohmann::json& payload) {
  return detail::sha256_hex(canonical_json(payload));
}

// SHA-256 of raw bytes, for payloads that are not JSON (form bodies, protobuf, ...). Hashes the
// bytes as given: the JSON text "{\"a\":1}" and the json value {"a":1} fingerprint differently.
inline std::string fingerprint(std::string_view bytes) {
  return detail::sha256_hex(bytes);
}
// Without these, a string literal or std::string would convert to both overloads above.
inline std::string fingerprint(const char* bytes) {
  return fingerprint(std::string_view{bytes});
}
inline std::string fingerprint(const std::string& bytes) {
  return fingerprint(std::string_view{bytes});
}

}  // namespace idem
