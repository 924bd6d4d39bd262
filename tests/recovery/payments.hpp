#pragma once
// What the payment service (payment_service.cpp) and its crash tests (crash_test.cpp) share:
// the workload file, a payment's key, request and response, and the resolver that asks the
// fake gateway whether a trade was charged.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <idem/fingerprint.hpp>
#include <idem/key.hpp>
#include <idem/record.hpp>
#include <idem/resolver.hpp>

#include "gateway_client.hpp"

namespace idem_recovery {

inline constexpr std::string_view biz_type = "PAY";

struct Payment {
  std::int64_t trade = 0;
  std::int64_t amount = 0;
};

// The trade's id: the idempotency key's id and the gateway's trade.
inline std::string trade_id(std::int64_t trade) {
  return "T" + std::to_string(trade);
}

inline std::optional<std::int64_t> trade_number(std::string_view id) {
  if (id.size() < 2 || id[0] != 'T') return std::nullopt;
  std::int64_t n = 0;
  for (const char c : id.substr(1)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

// `count` payments of which 12% repeat an earlier line (a client's retry, a broker's
// redelivery): trades 1..count*88/100, each once, then duplicates drawn among them, shuffled.
inline std::vector<Payment> make_workload(int count, unsigned seed) {
  const int distinct = count * 88 / 100;
  std::vector<Payment> payments;
  for (int t = 1; t <= distinct; ++t)
    payments.push_back({t, 100 + (t * 37) % 9'900});
  std::mt19937 rng(seed);
  while (static_cast<int>(payments.size()) < count)
    payments.push_back(payments[rng() % static_cast<unsigned>(distinct)]);
  std::shuffle(payments.begin(), payments.end(), rng);
  return payments;
}

// One payment a line: "trade amount".
inline void write_workload(const std::string& path, const std::vector<Payment>& payments) {
  std::ofstream out(path);
  for (const Payment& p : payments)
    out << p.trade << ' ' << p.amount << '\n';
  if (!out.flush()) throw std::runtime_error("cannot write the workload " + path);
}

inline std::vector<Payment> read_workload(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the workload " + path);
  std::vector<Payment> payments;
  Payment p;
  while (in >> p.trade >> p.amount) {
    if (p.trade <= 0 || p.amount <= 0) throw std::runtime_error("bad line in " + path);
    payments.push_back(p);
  }
  if (!in.eof()) throw std::runtime_error("bad line in " + path);
  return payments;
}

inline idem::Key key_of(const Payment& p) {
  return idem::Key{std::string(biz_type), trade_id(p.trade)};
}

inline std::string fingerprint_of(const Payment& p) {
  return idem::fingerprint(nlohmann::json{{"trade", trade_id(p.trade)}, {"amount", p.amount}});
}

// The payment's response: what the business records and a resolver's "happened" repeats.
inline nlohmann::json charge_response(const idem_test::Charge& c) {
  return {{"trade", c.trade}, {"charge_id", c.id}, {"amount", c.amount}};
}

// Whether the resolver answers unknown about this trade when `share_percent`% of the trades
// are forced to: the same trades in every process and every run.
inline bool forced_unknown(std::int64_t trade, int share_percent) {
  auto x = static_cast<std::uint64_t>(trade) + 0x9e3779b97f4a7c15ULL;  // splitmix64
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<int>(x % 100) < share_percent;
}

// Told of every answer the resolver gives (trade id, answer).
using ResolverLog = std::function<void(const std::string&, idem::Resolution::Kind)>;

// The resolver of biz_type: "was trade T charged?" asked of the gateway (a lookup, never a
// charge). happened with the charge as the payment's response, not_happened, or unknown when
// the gateway gives no answer in time, or when the trade is one of the forced share.
inline idem::Resolver gateway_resolver(int port, int unknown_share, ResolverLog log = {}) {
  return [port, unknown_share, log = std::move(log)](const idem::Record& r,
                                                     const idem::ResolveContext& ctx) {
    const auto answer = [&] {
      const std::optional<std::int64_t> n = trade_number(r.key.id());
      if (!n) return idem::Resolution::unknown("not a trade id");
      if (forced_unknown(*n, unknown_share)) {
        return idem::Resolution::unknown("forced (--unknown-share)");
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          ctx.deadline - std::chrono::steady_clock::now());
      if (left <= std::chrono::milliseconds::zero()) {
        return idem::Resolution::unknown("no time left to ask");
      }
      const idem_test::GatewayClient gateway{port, left};
      const auto charges = gateway.charges_of(r.key.id());
      if (!charges) return idem::Resolution::unknown("the gateway did not answer");
      if (charges->empty()) return idem::Resolution::not_happened();
      return idem::Resolution::happened(charge_response(charges->front()));
    }();
    if (log) log(r.key.id(), answer.kind());
    return answer;
  };
}

}  // namespace idem_recovery
