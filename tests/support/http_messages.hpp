#pragma once
// The requests and responses the tests of idem::http::handle() and async_handle() exchange:
// a payment POST, the business's 201, and the checks of a replay and a problem+json answer.
#include <optional>
#include <string>
#include <utility>

#include <catch2/catch.hpp>
#include <idem/http.hpp>
#include <nlohmann/json.hpp>

namespace idem_test {

// A payment POST; an empty key_field sends no Idempotency-Key header.
inline idem::http::Request post(std::string key_field,
                                std::string body = R"({"amount":100,"currency":"EUR"})") {
  idem::http::Request r;
  r.method = "POST";
  r.target = "/payments";
  r.headers = {{"Host", "example.test"}, {"Content-Type", "application/json"}};
  if (!key_field.empty()) r.headers.push_back({"Idempotency-Key", std::move(key_field)});
  r.body = std::move(body);
  return r;
}

// The business's answer to its n-th execution.
inline idem::http::Response created(int n) {
  return {201,
          {{"Content-Type", "application/json"},
           {"Location", "/payments/pay_" + std::to_string(n)},
           {"Set-Cookie", "session=abc"},
           {"X-Request-Id", "r" + std::to_string(n)}},
          nlohmann::json{{"id", "pay_" + std::to_string(n)}, {"status", "captured"}}.dump()};
}

inline bool replayed(const idem::http::Response& r) {
  return r.header("Idempotent-Replayed") == std::optional<std::string>{"true"};
}

// Checks a problem+json answer and returns its body.
inline nlohmann::json problem(const idem::http::Response& r, int status,
                              const std::string& type_suffix) {
  CHECK(r.status == status);
  CHECK(r.header("Content-Type") == std::optional<std::string>{"application/problem+json"});
  const nlohmann::json j = nlohmann::json::parse(r.body);
  CHECK(j.at("status") == status);
  CHECK(j.at("type") == "urn:idem:problem:idempotency-" + type_suffix);
  CHECK(j.at("title").get<std::string>().size() > 0);
  CHECK(j.at("detail").get<std::string>().size() > 0);
  CHECK_FALSE(replayed(r));
  return j;
}

}  // namespace idem_test
