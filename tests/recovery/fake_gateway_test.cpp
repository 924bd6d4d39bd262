// The fake payment gateway (fake_gateway.cpp) as a child process on loopback, each case on a
// ledger in its own temporary directory: plain mode double-charges a retry, dedup mode charges
// once per key and replays it, the lookup answers true/false (and "unknown" when the gateway is
// gone), concurrent charges serialise, and a charge is in the ledger before it is answered, so
// that neither a slow answer nor a SIGKILLed gateway loses one.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <httplib.h>
#include <catch2/catch.hpp>

#include "../support/paths.hpp"
#include "../support/server_process.hpp"
#include "../support/temp_dir.hpp"
#include "../support/threads.hpp"
#include "gateway_client.hpp"

using idem_test::Charge;
using idem_test::charges_per_trade;
using idem_test::GatewayClient;
using idem_test::GatewayError;
using Counts = std::map<std::string, int>;
using idem_test::TempDir;

namespace {

constexpr std::chrono::milliseconds timeout{10000};

idem_test::ServerProcess start_gateway(const std::string& ledger, const std::string& mode,
                                       std::vector<std::string> more = {}) {
  std::vector<std::string> args{"--ledger", ledger, "--mode", mode};
  args.insert(args.end(), more.begin(), more.end());
  return idem_test::ServerProcess{idem_test::paths::fake_gateway, std::move(args)};
}

// The HTTP status a charge is refused with (0: no answer); -1 if it was charged.
int refusal(const GatewayClient& client, const std::string& trade, std::int64_t amount,
            std::optional<std::string> key) {
  try {
    client.charge(trade, amount, std::move(key));
    return -1;
  } catch (const GatewayError& e) {
    return e.status();
  }
}

}  // namespace

TEST_CASE("plain mode charges twice for two calls with the same key", "[gateway]") {
  const TempDir dir;
  const std::string ledger = (dir / "ledger.db").string();
  auto gateway = start_gateway(ledger, "plain");
  const GatewayClient client{gateway.port(), timeout};

  const Charge first = client.charge("T-1", 500, "key-1");
  const Charge retry = client.charge("T-1", 500, "key-1");
  CHECK(first.trade == "T-1");
  CHECK(first.amount == 500);
  CHECK_FALSE(first.replayed);
  CHECK_FALSE(retry.replayed);
  CHECK(retry.id != first.id);
  CHECK(charges_per_trade(ledger) == Counts{{"T-1", 2}});
  CHECK(gateway.stop() == 0);  // SIGTERM stops it cleanly
}

TEST_CASE("dedup mode charges once for two calls with the same key and replays the charge",
          "[gateway]") {
  const TempDir dir;
  const std::string ledger = (dir / "ledger.db").string();
  auto gateway = start_gateway(ledger, "dedup");
  const GatewayClient client{gateway.port(), timeout};

  const Charge first = client.charge("T-1", 500, "key-1");
  const Charge retry = client.charge("T-1", 500, "key-1");
  CHECK_FALSE(first.replayed);
  CHECK(retry.replayed);
  CHECK(retry.id == first.id);
  CHECK(retry.trade == "T-1");
  CHECK(retry.amount == 500);
  const Charge other = client.charge("T-2", 700, "key-2");
  CHECK_FALSE(other.replayed);
  CHECK(other.id != first.id);
  CHECK(charges_per_trade(ledger) == Counts{{"T-1", 1}, {"T-2", 1}});
  CHECK(gateway.stop() == 0);
}

TEST_CASE("dedup mode answers 422 for a key reused with another amount or trade", "[gateway]") {
  const TempDir dir;
  const std::string ledger = (dir / "ledger.db").string();
  auto gateway = start_gateway(ledger, "dedup");
  const GatewayClient client{gateway.port(), timeout};

  const Charge first = client.charge("T-1", 500, "key-1");
  CHECK(refusal(client, "T-1", 501, "key-1") == 422);
  CHECK(refusal(client, "T-2", 500, "key-1") == 422);
  const Charge retry = client.charge("T-1", 500, "key-1");  // the key still names its charge
  CHECK(retry.replayed);
  CHECK(retry.id == first.id);
  CHECK(charges_per_trade(ledger) == Counts{{"T-1", 1}});
}

TEST_CASE("bad requests are 400 and charge nothing", "[gateway]") {
  const TempDir dir;
  const std::string ledger = (dir / "ledger.db").string();
  auto gateway = start_gateway(ledger, "dedup");
  const GatewayClient client{gateway.port(), timeout};
  httplib::Client raw("127.0.0.1", gateway.port());
  const httplib::Headers key{{"Idempotency-Key", "key-1"}};

  for (const std::string body :
       {"not json", "[]", R"({"amount": 5})", R"({"trade": "", "amount": 5})",
        R"({"trade": "T-1"})", R"({"trade": "T-1", "amount": 0})",
        R"({"trade": "T-1", "amount": 1.5})", R"({"trade": 7, "amount": 5})"}) {
    INFO(body);
    const httplib::Result res = raw.Post("/charges", key, body, "application/json");
    REQUIRE(res);
    CHECK(res->status == 400);
  }
  CHECK(refusal(client, "T-1", 500, std::nullopt) == 400);  // dedup mode needs a key
  const httplib::Result lookup = raw.Get("/charges");       // no ?trade=
  REQUIRE(lookup);
  CHECK(lookup->status == 400);
  CHECK(charges_per_trade(ledger).empty());
}

TEST_CASE("the lookup says whether a trade was charged, and nothing when the gateway is gone",
          "[gateway]") {
  const std::string mode = GENERATE("dedup", "plain");
  INFO("mode " << mode);
  const TempDir dir;
  const std::string ledger = (dir / "ledger.db").string();
  auto gateway = start_gateway(ledger, mode);
  const GatewayClient client{gateway.port(), timeout};

  CHECK(client.charged("T-1") == std::optional<bool>{false});
  client.charge("T-1", 500, "key-1");
  client.charge("T 2&trade=T-1", 500, "key-2");  // the trade travels URL-encoded
  CHECK(client.charged("T-1") == std::optional<bool>{true});
  CHECK(client.charged("T 2&trade=T-1") == std::optional<bool>{true});
  CHECK(client.charged("T-3") == std::optional<bool>{false});

  REQUIRE(gateway.stop() == 0);
  CHECK(client.charged("T-1") == std::nullopt);  // unknown, not "no"
  CHECK(refusal(client, "T-3", 500, "key-3") == 0);
}

TEST_CASE("8 threads x 50 charges on 100 keys in dedup mode leave exactly 100 charges",
          "[gateway]") {
  const TempDir dir;
  const std::string ledger = (dir / "ledger.db").string();
  auto gateway = start_gateway(ledger, "dedup");
  const GatewayClient client{gateway.port(), timeout};

  struct Answer {
    int key;
    std::int64_t id;
    bool replayed;
  };
  constexpr int threads = 8;
  constexpr int per_thread = 50;
  constexpr int keys = 100;
  std::vector<std::vector<Answer>> answers(threads);
  idem_test::Errors errors;
  // Thread t sends keys t*50 .. t*50+49 (mod 100) in order: four threads race on each key.
  idem_test::run_threads(threads, [&](int t) {
    for (int i = 0; i < per_thread; ++i) {
      const int k = (t * per_thread + i) % keys;
      try {
        const Charge c =
            client.charge("T-" + std::to_string(k), 1000 + k, "key-" + std::to_string(k));
        answers[static_cast<std::size_t>(t)].push_back({k, c.id, c.replayed});
      } catch (const std::exception& e) {
        errors.add(e.what());
      }
    }
  });
  INFO(errors.first());
  REQUIRE(errors.size() == 0);

  std::map<int, std::set<std::int64_t>> ids;
  std::map<int, int> fresh;
  for (const auto& of_thread : answers) {
    for (const Answer& a : of_thread) {
      ids[a.key].insert(a.id);
      fresh[a.key] += a.replayed ? 0 : 1;
    }
  }
  REQUIRE(ids.size() == keys);
  for (int k = 0; k < keys; ++k) {
    INFO("key " << k);
    CHECK(ids[k].size() == 1);  // every answer for a key names the same charge
    CHECK(fresh[k] == 1);       // and exactly one of them was not a replay
  }
  const Counts counts = charges_per_trade(ledger);
  CHECK(counts.size() == keys);
  int total = 0;
  for (const auto& [trade, n] : counts)
    total += n;
  CHECK(total == keys);
}

TEST_CASE("a charge is in the ledger before it is answered (--delay-ms)", "[gateway]") {
  const TempDir dir;
  const std::string ledger = (dir / "ledger.db").string();
  auto gateway = start_gateway(ledger, "dedup", {"--delay-ms", "2000"});

  // The client gives up while the gateway holds the answer: it cannot know it was charged.
  const auto sent = std::chrono::steady_clock::now();
  const GatewayClient impatient{gateway.port(), std::chrono::milliseconds{400}};
  CHECK(refusal(impatient, "T-1", 500, "key-1") == 0);
  // The charge shows in the ledger while the answer is still held back (looked for until
  // shortly before the gateway answers: a loaded or sanitized gateway may be slow to write it).
  Counts seen = charges_per_trade(ledger);
  while (seen.empty() &&
         std::chrono::steady_clock::now() - sent < std::chrono::milliseconds{1800}) {
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
    seen = charges_per_trade(ledger);
  }
  CHECK(seen == Counts{{"T-1", 1}});
  // Its retry with the same key learns it at once.
  const GatewayClient client{gateway.port(), timeout};
  const Charge retry = client.charge("T-1", 500, "key-1");
  CHECK(retry.replayed);
  CHECK(charges_per_trade(ledger) == Counts{{"T-1", 1}});
}

TEST_CASE("a gateway SIGKILLed right after answering still has every answered charge",
          "[gateway]") {
  const TempDir dir;
  const std::string ledger = (dir / "ledger.db").string();

  struct Answered {
    std::string trade;
    std::int64_t amount;
    std::int64_t id;
  };
  constexpr int threads = 4;
  constexpr int kill_after = 40;
  std::vector<std::vector<Answered>> answered(threads);
  idem_test::Errors errors;
  {
    auto gateway = start_gateway(ledger, "dedup");
    const GatewayClient client{gateway.port(), timeout};
    std::atomic<int> answers{0};
    // Each thread charges new trades until the gateway is gone; the thread that gets the
    // 40th answer kills it at once, while the others have charges in flight.
    idem_test::run_threads(threads, [&](int t) {
      for (int i = 0; i < 1000; ++i) {
        const std::string trade = "T-" + std::to_string(t) + "-" + std::to_string(i);
        const std::int64_t amount = 100 + i;
        try {
          const Charge c = client.charge(trade, amount, "key-" + trade);
          answered[static_cast<std::size_t>(t)].push_back({trade, amount, c.id});
          if (++answers == kill_after) gateway.kill();
        } catch (const GatewayError& e) {
          if (e.status() != 0) errors.add(e.what());
          return;  // no answer: the gateway was killed
        }
      }
      errors.add("thread " + std::to_string(t) + " was never cut off");
    });
  }
  INFO(errors.first());
  REQUIRE(errors.size() == 0);

  const Counts counts = charges_per_trade(ledger);
  std::size_t total_answered = 0;
  std::vector<std::string> lost;
  for (const auto& of_thread : answered) {
    total_answered += of_thread.size();
    for (const Answered& a : of_thread) {
      const auto it = counts.find(a.trade);
      if (it == counts.end() || it->second != 1) lost.push_back(a.trade);
    }
  }
  CHECK(total_answered >= kill_after);
  CHECK(lost.empty());
  // Beyond the answered ones, at most the one charge per thread that was in flight.
  CHECK(counts.size() <= total_answered + threads);

  // Restarted on the same ledger, the gateway knows every answered charge by trade and by key.
  auto restarted = start_gateway(ledger, "dedup");
  const GatewayClient client{restarted.port(), timeout};
  for (const auto& of_thread : answered) {
    for (const Answered& a : of_thread) {
      INFO(a.trade);
      CHECK(client.charged(a.trade) == std::optional<bool>{true});
      const Charge again = client.charge(a.trade, a.amount, "key-" + a.trade);
      CHECK(again.replayed);
      CHECK(again.id == a.id);
    }
  }
  CHECK(charges_per_trade(ledger) == counts);  // the lookups and replays charged nothing
}
