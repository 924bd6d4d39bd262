#pragma once
// idem::http::Problem: an RFC 9457 (formerly 7807) problem details body, sent as
// application/problem+json. idem::http answers every refusal (missing or bad key, key in use,
// key reused) with one, as the Idempotency-Key draft recommends.

#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "idem/http/message.hpp"

namespace idem::http {

inline constexpr std::string_view problem_content_type = "application/problem+json";

struct Problem {
  std::string type = "about:blank";  // a URI naming the problem kind (docs for humans)
  std::string title;                 // short, the same for every occurrence of the type
  int status = 500;
  std::string detail;  // this occurrence, for a human: what was wrong and how to fix it

  friend bool operator==(const Problem&, const Problem&) = default;
};

inline nlohmann::json to_json_body(const Problem& p) {
  return nlohmann::json{
      {"type", p.type}, {"title", p.title}, {"status", p.status}, {"detail", p.detail}};
}

// The response carrying p; `extra` headers are appended after Content-Type. Invalid UTF-8 in
// the texts is replaced rather than thrown on: a refusal must always be sendable.
inline Response problem_response(const Problem& p, Headers extra = {}) {
  Response r;
  r.status = p.status;
  r.headers.push_back({"Content-Type", std::string{problem_content_type}});
  for (Header& h : extra)
    r.headers.push_back(std::move(h));
  r.body = to_json_body(p).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

}  // namespace idem::http
