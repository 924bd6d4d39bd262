#pragma once
// The fake payment gateway (tests/recovery/fake_gateway.cpp) from its callers' side: charges
// and the "was trade T charged?" lookup over HTTP, and the count of what its ledger file
// really holds. For the tests and for a service process linked with cpp-httplib, nlohmann_json
// and SQLite 3.
#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace idem_test {

struct Charge {
  std::int64_t id;
  std::string trade;
  std::int64_t amount;
  bool replayed;
};

// A charge that was not answered with 200. status() is 0 when no HTTP answer came at all
// (connection refused, reset or timed out): the charge may or may not be in the ledger then.
// Otherwise it is the gateway's status: 400 bad body or missing key, 422 key reused with another
// trade or amount (nothing charged), 500 the ledger failed (nothing answered as charged); or
// 200 with a body that is not a charge.
class GatewayError : public std::runtime_error {
 public:
  GatewayError(int status, const std::string& what) : std::runtime_error(what), status_(status) {}
  int status() const noexcept { return status_; }

 private:
  int status_;
};

// Every call opens its own connection (cpp-httplib's Client is not for concurrent use), so one
// GatewayClient may be shared by threads. The timeout bounds connecting, sending and waiting.
class GatewayClient {
 public:
  GatewayClient(int port, std::chrono::milliseconds timeout) : port_(port), timeout_(timeout) {}

  // POST /charges; the key goes in the Idempotency-Key header when there is one. Throws
  // GatewayError unless the answer is 200.
  Charge charge(std::string_view trade, std::int64_t amount,
                std::optional<std::string> idempotency_key) const {
    httplib::Headers headers;
    if (idempotency_key) headers.emplace("Idempotency-Key", std::move(*idempotency_key));
    const std::string body = nlohmann::json{{"trade", trade}, {"amount", amount}}.dump();
    const httplib::Result res = connect().Post("/charges", headers, body, "application/json");
    if (!res) {
      throw GatewayError(0, "POST /charges: no answer (" + httplib::to_string(res.error()) + ")");
    }
    if (res->status != 200) {
      throw GatewayError(
          res->status, "POST /charges answered " + std::to_string(res->status) + ": " + res->body);
    }
    try {
      const nlohmann::json j = nlohmann::json::parse(res->body);
      return {j.at("charge_id").get<std::int64_t>(), j.at("trade").get<std::string>(),
              j.at("amount").get<std::int64_t>(), j.at("replayed").get<bool>()};
    } catch (const nlohmann::json::exception& e) {
      throw GatewayError(200, "POST /charges: not a charge: " + res->body + " (" + e.what() + ")");
    }
  }

  // GET /charges?trade=T: the trade's charges in the ledger, oldest first (empty: never
  // charged); nullopt when the gateway gave no usable answer, as for charged().
  std::optional<std::vector<Charge>> charges_of(std::string_view trade) const {
    const httplib::Result res = connect().Get(
        "/charges", httplib::Params{{"trade", std::string(trade)}}, httplib::Headers{});
    if (!res || res->status != 200) return std::nullopt;
    try {
      const nlohmann::json body = nlohmann::json::parse(res->body);
      std::vector<Charge> found;
      for (const nlohmann::json& c : body.at("charges")) {
        found.push_back({c.at("charge_id").get<std::int64_t>(), std::string(trade),
                         c.at("amount").get<std::int64_t>(), false});
      }
      return found;
    } catch (const nlohmann::json::exception&) {
      return std::nullopt;
    }
  }

  // GET /charges?trade=T: whether the ledger holds a charge for the trade; nullopt when the
  // gateway gave no usable answer (unreachable, not 200, unreadable): "unknown", not "no".
  std::optional<bool> charged(std::string_view trade) const {
    const httplib::Result res = connect().Get(
        "/charges", httplib::Params{{"trade", std::string(trade)}}, httplib::Headers{});
    if (!res || res->status != 200) return std::nullopt;
    try {
      return nlohmann::json::parse(res->body).at("charged").get<bool>();
    } catch (const nlohmann::json::exception&) {
      return std::nullopt;
    }
  }

 private:
  httplib::Client connect() const {
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(timeout_);
    client.set_read_timeout(timeout_);
    client.set_write_timeout(timeout_);
    return client;
  }

  int port_;
  std::chrono::milliseconds timeout_;
};

// Charges per trade in a gateway's ledger file, read directly (read-only; the gateway may run
// or may have been killed). Throws std::runtime_error when the file cannot be read.
inline std::map<std::string, int> charges_per_trade(const std::string& ledger_path) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(ledger_path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
  const std::unique_ptr<sqlite3, int (*)(sqlite3*)> db(raw, sqlite3_close);
  const auto fail = [&](const std::string& what) {
    return std::runtime_error("ledger " + ledger_path + ": " + what + ": " +
                              (raw != nullptr ? sqlite3_errmsg(raw) : "out of memory"));
  };
  if (rc != SQLITE_OK) throw fail("cannot open");
  sqlite3_busy_timeout(raw, 5000);  // the gateway may be committing

  sqlite3_stmt* raw_stmt = nullptr;
  if (sqlite3_prepare_v2(raw, "SELECT trade, COUNT(*) FROM charges GROUP BY trade", -1, &raw_stmt,
                         nullptr) != SQLITE_OK) {
    throw fail("cannot query");
  }
  const std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> stmt(raw_stmt, sqlite3_finalize);
  std::map<std::string, int> counts;
  int step = SQLITE_ROW;
  while ((step = sqlite3_step(raw_stmt)) == SQLITE_ROW) {
    counts[reinterpret_cast<const char*>(sqlite3_column_text(raw_stmt, 0))] =
        sqlite3_column_int(raw_stmt, 1);
  }
  if (step != SQLITE_DONE) throw fail("cannot read");
  return counts;
}

}  // namespace idem_test
