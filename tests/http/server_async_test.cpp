// examples/http_server_async.cpp (Boost.Beast, one loop thread, idem::http::async_handle on
// the non-blocking MariaDB store) as a child process on a loopback port, against the test
// MariaDB, driven with cpp-httplib's client: the first request runs, a duplicate replays,
// another payload is 422, a missing key 400, concurrent duplicates charge once, and the loop
// answers other requests while a charge waits.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <idem/http/idempotency_key.hpp>

#include "../support/paths.hpp"
#include "../support/server_process.hpp"

using nlohmann::json;

namespace {

// The server on the fixture's MariaDB, in a database of its own.
idem_test::ServerProcess start_server(std::vector<std::string> args) {
  const char* socket = std::getenv("IDEM_MYSQL_SOCKET");
  if (socket == nullptr) throw std::runtime_error("IDEM_MYSQL_SOCKET is not set");  // the fixture
  args.insert(args.end(), {"--mysql-socket", socket, "--database", "idem_http_async_test"});
  return idem_test::ServerProcess{idem_test::paths::http_server_async, std::move(args)};
}

// Keys unique across runs (the table outlives a test run).
std::string fresh_key() {
  static std::mt19937_64 rng{std::random_device{}()};
  static std::atomic<int> counter{0};
  return "ta-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(rng() % 1000000007);
}

struct Answer {
  int status = 0;  // 0: no HTTP answer at all
  std::string body;
  std::string content_type;
  std::string location;
  std::string retry_after;
  bool replayed = false;
  bool has_replayed_header = false;
  std::string error;
};

httplib::Client client(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(std::chrono::seconds{10});
  c.set_read_timeout(std::chrono::seconds{60});
  return c;
}

Answer post(int port, const std::string& key, const std::string& body) {
  httplib::Client c = client(port);
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Idempotency-Key", key);
  Answer a;
  auto res = c.Post("/payments", headers, body, "application/json");
  if (!res) {
    a.error = httplib::to_string(res.error());
    return a;
  }
  a.status = res->status;
  a.body = res->body;
  a.content_type = res->get_header_value("Content-Type");
  a.location = res->get_header_value("Location");
  a.retry_after = res->get_header_value("Retry-After");
  a.has_replayed_header = res->has_header("Idempotent-Replayed");
  a.replayed = res->get_header_value("Idempotent-Replayed") == "true";
  return a;
}

long charges(int port) {
  httplib::Client c = client(port);
  auto res = c.Get("/payments/count");
  if (!res || res->status != 200) throw std::runtime_error("GET /payments/count failed");
  return json::parse(res->body).at("charges").get<long>();
}

void check_problem(const Answer& a, int status, const std::string& type) {
  INFO(a.status << ' ' << a.body << ' ' << a.error);
  CHECK(a.status == status);
  CHECK(a.content_type == "application/problem+json");
  CHECK_FALSE(a.has_replayed_header);
  const json j = json::parse(a.body, nullptr, false);
  REQUIRE(j.is_object());
  CHECK(j.at("type") == "urn:idem:problem:idempotency-" + type);
  CHECK(j.at("status") == status);
}

// `copies` threads send the same request at once.
std::vector<Answer> burst(int port, const std::string& key, int copies) {
  const std::string field = idem::http::format_idempotency_key(key);
  const std::string body = R"({"amount":2990,"currency":"EUR"})";
  std::vector<Answer> answers(static_cast<std::size_t>(copies));
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < answers.size(); ++i) {
    threads.emplace_back([&, i] {
      while (!go.load())
        std::this_thread::yield();
      answers[i] = post(port, field, body);
    });
  }
  go = true;
  for (auto& t : threads)
    t.join();
  return answers;
}

}  // namespace

TEST_CASE(
    "async server: first request runs, a duplicate replays, another payload is 422, no key "
    "is 400",
    "[mysql]") {
  idem_test::ServerProcess server = start_server({"--charge-ms", "10"});
  const int port = server.port();
  const std::string key = idem::http::format_idempotency_key(fresh_key());
  const std::string body = R"({"amount":1250,"currency":"USD"})";

  const Answer first = post(port, key, body);
  INFO(first.status << ' ' << first.body << ' ' << first.error);
  REQUIRE(first.status == 201);
  CHECK_FALSE(first.has_replayed_header);
  CHECK(first.content_type == "application/json");
  CHECK(first.location.rfind("/payments/pay_", 0) == 0);

  const Answer again = post(port, key, R"({ "currency": "USD", "amount": 1250 })");
  CHECK(again.status == 201);
  CHECK(again.replayed);
  CHECK(again.body == first.body);
  CHECK(again.content_type == first.content_type);
  CHECK(again.location == first.location);
  // The key without quotes is the same key.
  CHECK(post(port, key.substr(1, key.size() - 2), body).replayed);

  check_problem(post(port, key, R"({"amount":999,"currency":"USD"})"), 422, "key-reused");
  check_problem(post(port, "", body), 400, "key-missing");
  check_problem(post(port, "no spaces in a bare key", body), 400, "key-invalid");
  CHECK(charges(port) == 1);

  // A business refusal (a final 4xx) is stored and replayed too.
  const std::string declined = idem::http::format_idempotency_key(fresh_key());
  const std::string card = R"({"amount":100,"currency":"EUR","card":"tok_declined"})";
  const Answer refused = post(port, declined, card);
  CHECK(refused.status == 402);
  const Answer refused_again = post(port, declined, card);
  CHECK(refused_again.status == 402);
  CHECK(refused_again.replayed);
  CHECK(refused_again.body == refused.body);
  CHECK(charges(port) == 1);
  CHECK(server.stop() == 0);
}

TEST_CASE("async server: 20 concurrent duplicates charge once", "[mysql]") {
  constexpr int copies = 20;
  {
    idem_test::ServerProcess server = start_server({"--charge-ms", "300"});
    const std::vector<Answer> answers = burst(server.port(), fresh_key(), copies);
    int fresh = 0, replays = 0, busy = 0;
    std::string first_body;
    for (const Answer& a : answers) {
      if (a.status == 201 && !a.has_replayed_header) {
        ++fresh;
        first_body = a.body;
      }
    }
    for (const Answer& a : answers) {
      INFO(a.status << ' ' << a.body << ' ' << a.error);
      if (a.status == 201 && a.replayed) {
        ++replays;
        CHECK(a.body == first_body);
      } else if (a.status == 409) {
        ++busy;
        CHECK(a.retry_after == "1");
        CHECK(a.content_type == "application/problem+json");
      } else {
        CHECK((a.status == 201 && !a.has_replayed_header));
      }
    }
    CHECK(fresh == 1);
    CHECK(fresh + replays + busy == copies);
    CHECK(charges(server.port()) == 1);
    CHECK(server.stop() == 0);
    std::printf("[async mysql] %d simultaneous duplicates: %d charge, %d x 409, %d replays\n",
                copies, fresh, busy, replays);
  }
  // With --wait-ms the duplicates wait for the charge on the loop's timers, then replay.
  idem_test::ServerProcess waiting = start_server({"--charge-ms", "300", "--wait-ms", "20000"});
  const std::vector<Answer> answers = burst(waiting.port(), fresh_key(), copies);
  int replays = 0;
  for (const Answer& a : answers) {
    INFO(a.status << ' ' << a.body << ' ' << a.error);
    CHECK(a.status == 201);
    if (a.replayed) ++replays;
  }
  CHECK(replays == copies - 1);
  CHECK(charges(waiting.port()) == 1);
  CHECK(waiting.stop() == 0);
}

TEST_CASE("async server: the one loop thread answers other requests while a charge waits",
          "[mysql]") {
  idem_test::ServerProcess server = start_server({"--charge-ms", "3000"});
  const int port = server.port();
  Answer slow;
  std::thread payer([&] {
    slow = post(port, idem::http::format_idempotency_key(fresh_key()),
                R"({"amount":500,"currency":"EUR"})");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds{300});
  const auto start = std::chrono::steady_clock::now();
  const long during = charges(port);
  const auto took = std::chrono::steady_clock::now() - start;
  payer.join();
  CHECK(during == 0);  // answered before the charge ended
  CHECK(took < std::chrono::milliseconds{1500});
  CHECK(slow.status == 201);
  CHECK(charges(port) == 1);
  CHECK(server.stop() == 0);
}
