#pragma once
// idem::http::identify(): which idem::Key and fingerprint an HTTP request has, or the 400
// problem that refuses it. Nothing is written to any store here.
//
// The key comes from the Idempotency-Key header (quoted or bare, as Policy::key_syntax
// admits), or - when the header is absent and Policy::body_field is set - from that string
// member of a JSON object body. Its id is the client's key, prefixed with "scope:" when
// Request::scope is set. The fingerprint covers the method, the target and the body (JSON
// bodies in canonical form, so member order and whitespace do not matter; other bodies byte
// for byte).

#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/errors.hpp"
#include "idem/fingerprint.hpp"
#include "idem/http/idempotency_key.hpp"
#include "idem/http/message.hpp"
#include "idem/http/policy.hpp"
#include "idem/http/problem.hpp"
#include "idem/key.hpp"

namespace idem::http {

struct RequestIdentity {
  Key key;
  std::string fingerprint;
};

namespace detail {

// application/json or any structured +json type (application/problem+json, ...).
inline bool is_json_media_type(std::string_view content_type) {
  std::string type{content_type.substr(0, content_type.find(';'))};
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t'))
    type.pop_back();
  for (char& c : type)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return type == "application/json" ||
         (type.size() > 5 && type.compare(type.size() - 5, 5, "+json") == 0);
}

inline std::optional<nlohmann::json> parse_json(std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

inline Problem bad_key(const Policy& p, std::string detail) {
  return Problem{p.problem_type_base + "key-invalid", "Invalid idempotency key", 400,
                 std::move(detail)};
}

}  // namespace detail

// The request's fingerprint (see the top of this file).
inline std::string request_fingerprint(const Request& request) {
  nlohmann::json body;
  const auto content_type = field_value(request.headers, "Content-Type");
  std::optional<nlohmann::json> parsed;
  if (content_type && detail::is_json_media_type(*content_type)) {
    parsed = detail::parse_json(request.body);
  }
  if (parsed) {
    body = nlohmann::json{{"json", std::move(*parsed)}};
  } else {
    body = nlohmann::json{{"sha256", fingerprint(std::string_view{request.body})}};
  }
  // Method and target are hashed as bytes, so odd bytes in them cannot make this throw.
  return fingerprint(nlohmann::json{{"method", fingerprint(std::string_view{request.method})},
                                    {"target", fingerprint(std::string_view{request.target})},
                                    {"body", std::move(body)}});
}

// The key and fingerprint, or a 400 problem saying what is wrong with the client's key.
// Throws idem::InvalidArgument for a bad policy or scope (the server's values, not the
// client's: a scope must be free of ':' and control characters).
inline std::variant<RequestIdentity, Problem> identify(const Request& request,
                                                       const Policy& policy) {
  validate(policy);
  if (request.scope.find(':') != std::string::npos) {
    throw InvalidArgument(fmt::format("idem::http: the scope \"{}\" must not contain ':'",
                                      idem::detail::printable(request.scope)));
  }

  std::optional<std::string> from_header;
  if (const auto raw = field_value(request.headers, policy.header)) {
    try {
      from_header = parse_idempotency_key(*raw, policy.key_syntax);
    } catch (const InvalidArgument& e) {
      return detail::bad_key(policy, fmt::format("{} (in the {} header)", e.what(), policy.header));
    }
  }

  std::optional<std::string> from_body;
  if (!policy.body_field.empty()) {
    const auto body = detail::parse_json(request.body);
    if (body && body->is_object()) {
      if (const auto it = body->find(policy.body_field); it != body->end()) {
        if (!it->is_string()) {
          return detail::bad_key(
              policy, fmt::format("the body member \"{}\" must be a string", policy.body_field));
        }
        from_body = it->get<std::string>();
        for (std::size_t i = 0; i < from_body->size(); ++i) {
          const auto c = static_cast<unsigned char>((*from_body)[i]);
          if (c < 0x20 || c > 0x7e) {
            return detail::bad_key(
                policy, fmt::format("the body member \"{}\" may only hold printable ASCII "
                                    "(0x20-0x7E), like the {} header; byte {} is not",
                                    policy.body_field, policy.header, i));
          }
        }
        if (from_body->empty()) {
          return detail::bad_key(
              policy, fmt::format("the body member \"{}\" must not be empty", policy.body_field));
        }
      }
    }
  }

  if (from_header && from_body && *from_header != *from_body) {
    return detail::bad_key(policy, fmt::format("the {} header and the body member \"{}\" differ; "
                                               "send one key",
                                               policy.header, policy.body_field));
  }
  const std::optional<std::string>& client_key = from_header ? from_header : from_body;
  if (!client_key) {
    std::string detail = fmt::format(
        "this operation requires an idempotency key: send the {} header with a unique value the "
        "client generated for this operation (e.g. a UUIDv7), e.g. {}: "
        "\"018f2e4c-7b1a-7c3e-9a4b-2f1d6c8e0a55\", and the same value on every retry",
        policy.header, policy.header);
    if (!policy.body_field.empty()) {
      detail += fmt::format(" (or, if a proxy strips the header, the JSON body member \"{}\")",
                            policy.body_field);
    }
    return Problem{policy.problem_type_base + "key-missing", "Idempotency key missing", 400,
                   std::move(detail)};
  }

  if (!request.scope.empty() && request.scope.size() + 1 >= max_id_bytes) {
    throw InvalidArgument(
        fmt::format("idem::http: the scope is {} bytes; it must leave room "
                    "for a key within the {}-byte id limit",
                    request.scope.size(), max_id_bytes));
  }
  const std::size_t room = max_id_bytes - (request.scope.empty() ? 0 : request.scope.size() + 1);
  if (client_key->size() > room) {
    return detail::bad_key(policy, fmt::format("the idempotency key is {} bytes; at most {} are "
                                               "accepted (a UUID is 36)",
                                               client_key->size(), room));
  }
  std::string id = request.scope.empty() ? *client_key : request.scope + ":" + *client_key;
  // The client's part is printable ASCII by now; only a bad scope can fail here (the server's).
  Key key{policy.biz_type, std::move(id)};
  return RequestIdentity{std::move(key), request_fingerprint(request)};
}

}  // namespace idem::http
