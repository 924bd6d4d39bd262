// examples/http_server.cpp as a child process on a loopback port, driven with real HTTP
// requests (cpp-httplib's client): concurrent duplicates charge once, mismatched payloads are
// 422, missing or malformed keys 400, replays (also of a key sent without quotes) carry the
// original status, headers and body.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
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
#include "../support/sqlite_file.hpp"
#include "../support/strings.hpp"

using nlohmann::json;

namespace {

// The server binary as a child. The destructor (also on a failed assertion or an exception)
// stops it with SIGTERM, then SIGKILL; PR_SET_PDEATHSIG kills it if this process dies first.
class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> args) {
    args.insert(args.begin(), idem_test::paths::http_server);
    std::vector<char*> argv;
    for (std::string& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    // Close-on-exec, so that no other child (a server started later) inherits this pipe.
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2() failed");
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork() failed");
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);  // the parent died before prctl
      ::dup2(fds[1], STDOUT_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = fds[0];
    try {
      port_ = read_port();
    } catch (...) {
      stop();
      throw;
    }
  }
  ~ServerProcess() { stop(); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }

  // Stops the server; its exit status (0 after a clean SIGTERM), or -1 if it had to be killed.
  int stop() {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGTERM);
    int wstatus = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
    pid_t done = 0;
    while ((done = ::waitpid(pid_, &wstatus, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }
    if (done == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &wstatus, 0);
      status_ = -1;
    } else {
      status_ = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
    }
    pid_ = 0;
    ::close(out_);
    return status_;
  }

 private:
  // The first stdout line: "listening on 127.0.0.1:PORT (...)".
  int read_port() {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{60};
    while (line.find('\n') == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) throw std::runtime_error("the server printed no port within 60 s");
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[256];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) throw std::runtime_error("the server exited before printing its port: " + line);
      line.append(buf, static_cast<std::size_t>(n));
    }
    const auto colon = line.find("127.0.0.1:");
    if (colon == std::string::npos) throw std::runtime_error("unexpected first line: " + line);
    return std::stoi(line.substr(colon + 10));
  }

  pid_t pid_ = 0;
  int out_ = -1;
  int port_ = 0;
  int status_ = 0;
};

// Keys unique across runs (the MySQL table outlives a test run).
std::string fresh_key() {
  static std::mt19937_64 rng{std::random_device{}()};
  static std::atomic<int> counter{0};
  return "t-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
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

struct Tally {
  int fresh = 0, replays = 0, busy = 0, other = 0;
};

// `copies` requests per key, all threads released at once (copy i of a key after i * stagger);
// checks every answer.
Tally burst(int port, const std::vector<std::string>& keys, int copies,
            std::chrono::milliseconds stagger = std::chrono::milliseconds{0}) {
  const std::string body = R"({"amount":2990,"currency":"EUR"})";
  std::vector<std::string> key_of;
  for (const auto& k : keys)
    for (int i = 0; i < copies; ++i)
      key_of.push_back(k);
  std::vector<Answer> answers(key_of.size());
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < key_of.size(); ++i) {
    threads.emplace_back([&, i] {
      const std::string field = idem::http::format_idempotency_key(key_of[i]);
      while (!go.load())
        std::this_thread::yield();
      std::this_thread::sleep_for(stagger * static_cast<int>(i % copies));
      answers[i] = post(port, field, body);
    });
  }
  go = true;
  for (auto& t : threads)
    t.join();

  Tally tally;
  std::map<std::string, std::string> first_body;  // key -> the fresh 201's body
  std::map<std::string, int> fresh_per_key;
  for (std::size_t i = 0; i < answers.size(); ++i) {
    const Answer& a = answers[i];
    if (a.status == 201 && !a.has_replayed_header) {
      ++tally.fresh;
      ++fresh_per_key[key_of[i]];
      first_body[key_of[i]] = a.body;
    }
  }
  for (std::size_t i = 0; i < answers.size(); ++i) {
    const Answer& a = answers[i];
    INFO("answer " << i << " for key " << key_of[i] << ": " << a.status << ' ' << a.body << ' '
                   << a.error);
    if (a.status == 201 && a.replayed) {
      ++tally.replays;
      CHECK(a.body == first_body[key_of[i]]);
      CHECK(a.content_type == "application/json");
    } else if (a.status == 409) {
      ++tally.busy;
      CHECK(a.content_type == "application/problem+json");
      CHECK(a.retry_after == "1");
      CHECK(json::parse(a.body).at("status") == 409);
    } else if (!(a.status == 201 && !a.has_replayed_header)) {
      ++tally.other;
      FAIL_CHECK("unexpected answer");
    }
  }
  for (const auto& k : keys)
    CHECK(fresh_per_key[k] == 1);
  return tally;
}

void concurrent_duplicates(const std::vector<std::string>& store_args, const char* label) {
  std::vector<std::string> args = {"--port", "0", "--charge-ms", "300"};
  args.insert(args.end(), store_args.begin(), store_args.end());
  ServerProcess server{args};

  constexpr int copies = 16;
  const Tally one = burst(server.port(), {fresh_key()}, copies);
  CHECK(one.fresh == 1);
  CHECK(one.other == 0);
  CHECK(one.fresh + one.replays + one.busy == copies);
  CHECK(charges(server.port()) == 1);

  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i)
    keys.push_back(fresh_key());
  const Tally many = burst(server.port(), keys, 4);
  CHECK(many.fresh == 8);
  CHECK(many.other == 0);
  CHECK(charges(server.port()) == 9);

  // Copies spread over twice the charge time: the early ones 409, the late ones replay.
  const Tally spread = burst(server.port(), {fresh_key()}, copies, std::chrono::milliseconds{40});
  CHECK(spread.fresh == 1);
  CHECK(spread.other == 0);
  CHECK(spread.fresh + spread.replays + spread.busy == copies);
  CHECK(charges(server.port()) == 10);
  std::printf(
      "[%s] %d simultaneous duplicates: %d charge, %d x 409, %d replays | 8 keys x 4 copies: %d "
      "charges, %d x 409, %d replays | %d duplicates 40 ms apart: %d charge, %d x 409, %d "
      "replays | ledger %ld\n",
      label, copies, one.fresh, one.busy, one.replays, many.fresh, many.busy, many.replays, copies,
      spread.fresh, spread.busy, spread.replays, charges(server.port()));
  CHECK(server.stop() == 0);
}

}  // namespace

TEST_CASE("server: concurrent duplicates charge once (memory store)") {
  concurrent_duplicates({}, "memory");
}

TEST_CASE("server: concurrent duplicates charge once (SQLite store)") {
  idem_test::TempDir dir;
  concurrent_duplicates({"--sqlite", (dir / "idem.db").string()}, "sqlite");
}

TEST_CASE("server: concurrent duplicates charge once (MySQL store)", "[mysql]") {
  const char* socket = std::getenv("IDEM_MYSQL_SOCKET");
  REQUIRE(socket != nullptr);  // set by the CTest fixture; this test never skips
  concurrent_duplicates({"--mysql-socket", socket}, "mysql");
}

TEST_CASE("server: a replay repeats the original status, headers and body") {
  ServerProcess server{{"--charge-ms", "10"}};
  const std::string key = idem::http::format_idempotency_key(fresh_key());
  const std::string body = R"({"amount":1250,"currency":"USD"})";
  const Answer first = post(server.port(), key, body);
  REQUIRE(first.status == 201);
  CHECK_FALSE(first.has_replayed_header);
  CHECK(first.content_type == "application/json");
  CHECK(first.location.rfind("/payments/pay_", 0) == 0);
  for (int i = 0; i < 3; ++i) {
    // The same JSON with other spacing and member order is the same payload.
    const Answer again =
        post(server.port(), key, i == 0 ? body : R"({ "currency": "USD", "amount": 1250 })");
    CHECK(again.status == first.status);
    CHECK(again.body == first.body);
    CHECK(again.content_type == first.content_type);
    CHECK(again.location == first.location);
    CHECK(again.replayed);
  }
  CHECK(charges(server.port()) == 1);

  // The key without quotes, as many SDKs send it, is the same key: a replay.
  const Answer bare = post(server.port(), key.substr(1, key.size() - 2), body);
  CHECK(bare.status == first.status);
  CHECK(bare.body == first.body);
  CHECK(bare.replayed);
  CHECK(charges(server.port()) == 1);

  // A business refusal (a final 4xx) is stored and replayed too, by default.
  const std::string bad = idem::http::format_idempotency_key(fresh_key());
  const Answer refused = post(server.port(), bad, R"({"amount":-1,"currency":"USD"})");
  CHECK(refused.status == 400);
  const Answer refused_again = post(server.port(), bad, R"({"amount":-1,"currency":"USD"})");
  CHECK(refused_again.status == 400);
  CHECK(refused_again.body == refused.body);
  CHECK(refused_again.replayed);
  CHECK(charges(server.port()) == 1);
}

TEST_CASE("server: mismatched payload 422, missing or bad key 400 - nothing charged") {
  ServerProcess server{{"--charge-ms", "10"}};
  const int port = server.port();
  const std::string key = idem::http::format_idempotency_key(fresh_key());
  REQUIRE(post(port, key, R"({"amount":100,"currency":"EUR"})").status == 201);

  const auto problem = [](const Answer& a, int status, const std::string& type) {
    INFO(a.status << ' ' << a.body << ' ' << a.error);
    CHECK(a.status == status);
    CHECK(a.content_type == "application/problem+json");
    CHECK_FALSE(a.has_replayed_header);
    const json j = json::parse(a.body);
    CHECK(j.at("type") == "urn:idem:problem:idempotency-" + type);
    CHECK(j.at("status") == status);
  };
  problem(post(port, key, R"({"amount":999,"currency":"EUR"})"), 422, "key-reused");
  problem(post(port, "", R"({"amount":100,"currency":"EUR"})"), 400, "key-missing");
  problem(post(port, "no spaces in a bare key", R"({"amount":100,"currency":"EUR"})"), 400,
          "key-invalid");
  problem(post(port, idem_test::quoted(std::string(65, 'k')), R"({"amount":100,"currency":"EUR"})"),
          400, "key-invalid");
  CHECK(charges(port) == 1);

  // The body member fallback (the example enables "idempotency_key").
  const std::string body_key = fresh_key();
  const std::string with_key =
      R"({"amount":100,"currency":"EUR","idempotency_key":")" + body_key + R"("})";
  const Answer a = post(port, "", with_key);
  CHECK(a.status == 201);
  const Answer b = post(port, "", with_key);
  CHECK(b.replayed);
  CHECK(b.body == a.body);
  CHECK(charges(port) == 2);
}

TEST_CASE("server: on SQLite a stored response survives a restart of the server") {
  idem_test::TempDir dir;
  const std::string file = (dir / "idem.db").string();
  const std::string key = idem::http::format_idempotency_key(fresh_key());
  const std::string body = R"({"amount":700,"currency":"GBP"})";
  Answer first;
  {
    ServerProcess server{{"--sqlite", file, "--charge-ms", "10"}};
    first = post(server.port(), key, body);
    REQUIRE(first.status == 201);
    CHECK(server.stop() == 0);
  }
  ServerProcess restarted{{"--sqlite", file, "--charge-ms", "10"}};
  const Answer again = post(restarted.port(), key, body);
  CHECK(again.status == 201);
  CHECK(again.replayed);
  CHECK(again.body == first.body);
  CHECK(again.location == first.location);
  CHECK(charges(restarted.port()) == 0);  // the new process charged nothing
}

TEST_CASE("server: GET /metrics serves the requests' and the Janitor's series") {
  ServerProcess server{{"--charge-ms", "5", "--janitor-ms", "50"}};
  const std::string key = idem::http::format_idempotency_key(fresh_key());
  const std::string body = R"({"amount":990,"currency":"EUR"})";
  REQUIRE(post(server.port(), key, body).status == 201);
  REQUIRE(post(server.port(), key, body).replayed);
  httplib::Client c = client(server.port());
  std::string text;
  // The Janitor's first round ends soon after the start.
  for (int i = 0; i < 200; ++i) {
    auto res = c.Get("/metrics");
    REQUIRE(res);
    REQUIRE(res->status == 200);
    CHECK_THAT(res->get_header_value("Content-Type"), Catch::StartsWith("text/plain"));
    text = res->body;
    if (text.find("idem_janitor_last_round_timestamp_seconds ") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  INFO(text);
  CHECK_THAT(text,
             Catch::Contains("idem_requests_total{biz_type=\"payments.create\"} 2\n") &&
                 Catch::Contains("idem_duplicates_total{biz_type=\"payments.create\"} 1\n") &&
                 Catch::Contains(
                     "idem_results_total{biz_type=\"payments.create\",result=\"committed\"} 1\n") &&
                 Catch::Contains("idem_janitor_last_round_timestamp_seconds ") &&
                 Catch::Contains("idem_stale_claims 0\n"));
}
