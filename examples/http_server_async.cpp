// POST /payments guarded by idem::http::async_handle on Boost.Beast: examples/http_server.cpp
// (same endpoint, answers and options) on one io_context thread and the non-blocking MariaDB
// store. Each connection is a coroutine and the charge is one too (a timer stands for the card
// network), so the one thread serves every other request while charges, claims and commits
// wait; no request blocks the loop. GET /payments/count says how many charges really ran.
//
//   idem_http_server_async --mysql-socket PATH [--database NAME] [--port N] [--charge-ms N]
//                          [--wait-ms N] [--stored successes|client-errors]
//
// --port 0 (the default) binds an ephemeral port on 127.0.0.1; the first line on stdout is
// "listening on 127.0.0.1:PORT". The records go to the table http_idempotency of the
// database (idem_http_demo by default; created when missing), user root. SIGINT or SIGTERM
// stops the server.
//
//   curl -i -X POST localhost:PORT/payments -H 'Content-Type: application/json'
//        -H 'Idempotency-Key: "018f2e4c-7b1a-7c3e-9a4b-2f1d6c8e0a55"'
//        -d '{"amount": 2990, "currency": "EUR"}'     (one command line)
#include <chrono>
#include <csignal>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <idem/http.hpp>
#include <idem/http/async_handle.hpp>
#include <idem/mysql/async.hpp>

namespace {

namespace net = idem::async::net;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using nlohmann::json;

struct Config {
  int port = 0;
  std::string mysql_socket;
  std::string database = "idem_http_demo";
  int charge_ms = 300;
  int wait_ms = 0;
  idem::http::StoredResponses stored = idem::http::StoredResponses::successes_and_client_errors;
};

// The business effect: every charge that really ran. One thread touches it, so no lock.
class Ledger {
 public:
  std::size_t add(const json& payment) {
    payments_.push_back(payment);
    return payments_.size();
  }
  std::size_t count() const { return payments_.size(); }

 private:
  std::vector<json> payments_;
};

idem::http::Response json_response(int status, const json& body) {
  return {status, {{"Content-Type", "application/json"}}, body.dump()};
}

idem::http::Response business_problem(int status, std::string title, std::string detail) {
  return idem::http::problem_response(
      {"https://payments.example/problems/" + std::to_string(status), std::move(title), status,
       std::move(detail)});
}

// The refusal of a payment the charge cannot take, or nullopt.
std::optional<idem::http::Response> invalid_payment(const json& body) {
  if (body.is_discarded() || !body.is_object()) {
    return business_problem(400, "Bad request", "the body must be a JSON object");
  }
  const auto amount = body.find("amount");
  const auto currency = body.find("currency");
  if (amount == body.end() || !amount->is_number_integer() || amount->get<long long>() <= 0) {
    return business_problem(400, "Bad request", "amount must be a positive integer (minor units)");
  }
  if (currency == body.end() || !currency->is_string() ||
      currency->get<std::string>().size() != 3) {
    return business_problem(400, "Bad request", "currency must be a 3-letter ISO 4217 code");
  }
  return std::nullopt;
}

idem::http::Response captured(const json& body, std::size_t n) {
  const std::string id = "pay_" + std::to_string(n);
  idem::http::Response r = json_response(201, {{"id", id},
                                               {"amount", body.at("amount")},
                                               {"currency", body.at("currency")},
                                               {"status", "captured"}});
  r.headers.push_back({"Location", "/payments/" + id});
  return r;
}

// The charge: validates, waits for the card network on a timer, records one ledger entry.
net::awaitable<idem::http::Response> charge(const idem::http::Request& request, Ledger& ledger,
                                            int charge_ms) {
  const json body = json::parse(request.body, nullptr, false);
  if (std::optional<idem::http::Response> refused = invalid_payment(body)) co_return *refused;
  co_await idem::async::sleep_for(std::chrono::milliseconds(charge_ms));
  if (body.value("card", "") == "tok_declined") {
    co_return business_problem(402, "Card declined", "the issuer declined the card");
  }
  const std::size_t n = ledger.add(body);
  co_return captured(body, n);
}

// The business handed to async_handle (a named type: GCC 12 cannot compile a class, lambdas
// included, local to a coroutine).
struct Charge {
  const idem::http::Request& request;
  Ledger& ledger;
  int charge_ms;
  net::awaitable<idem::http::Response> operator()() const {
    return charge(request, ledger, charge_ms);
  }
};

struct App {
  idem::mysql::AsyncStore& store;
  idem::http::Policy policy;
  Ledger ledger;
  int charge_ms;
};

net::awaitable<idem::http::Response> payments(App& app, const idem::http::Request& request) {
  const Charge business{request, app.ledger, app.charge_ms};
  std::optional<idem::http::Problem> failure;
  idem::http::Headers extra;
  try {
    co_return co_await idem::http::async_handle(app.store, request, business, app.policy);
  } catch (const idem::StoreError& e) {
    // Nothing is known to have run; the client retries with the same key.
    failure = idem::http::Problem{"about:blank", "Service Unavailable", 503, e.what()};
    extra.push_back({"Retry-After", "1"});
  } catch (const std::exception& e) {
    failure = idem::http::Problem{"about:blank", "Internal Server Error", 500, e.what()};
  }
  co_return idem::http::problem_response(*failure, std::move(extra));
}

net::awaitable<idem::http::Response> route(App& app, const idem::http::Request& request) {
  if (request.target == "/payments" && request.method == "POST") {
    co_return co_await payments(app, request);
  }
  if (request.target == "/payments/count" && request.method == "GET") {
    const json count = {{"charges", app.ledger.count()}};
    co_return json_response(200, count);
  }
  const idem::http::Problem missing{"about:blank", "Not Found", 404,
                                    "POST /payments or GET /payments/count"};
  co_return idem::http::problem_response(missing);
}

idem::http::Request from_beast(const beast::http::request<beast::http::string_body>& req) {
  idem::http::Request r;
  r.method = std::string(req.method_string());
  r.target = std::string(req.target());
  for (const auto& field : req)
    r.headers.push_back({std::string(field.name_string()), std::string(field.value())});
  r.body = req.body();
  return r;
}

beast::http::response<beast::http::string_body> to_beast(const idem::http::Response& from,
                                                         unsigned version, bool keep_alive) {
  beast::http::response<beast::http::string_body> to;
  to.version(version);
  to.result(static_cast<unsigned>(from.status));
  for (const auto& h : from.headers)
    to.insert(h.name, h.value);
  to.body() = from.body;
  to.keep_alive(keep_alive);
  to.prepare_payload();
  return to;
}

// One connection: its requests in turn, until the client closes it or an error.
net::awaitable<void> session(tcp::socket socket, App& app) {
  beast::flat_buffer buffer;
  try {
    while (true) {
      beast::http::request<beast::http::string_body> req;
      co_await beast::http::async_read(socket, buffer, req, net::use_awaitable);
      const idem::http::Request request = from_beast(req);
      const idem::http::Response answer = co_await route(app, request);
      auto res = to_beast(answer, req.version(), req.keep_alive());
      co_await beast::http::async_write(socket, res, net::use_awaitable);
      if (!res.keep_alive()) break;
    }
  } catch (const std::exception&) {
    // The client went away (or sent something that is not HTTP): nothing left to answer.
  }
  boost::system::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_send, ignored);
}

net::awaitable<void> accept_loop(tcp::acceptor& acceptor, App& app) {
  try {
    while (true) {
      tcp::socket socket = co_await acceptor.async_accept(net::use_awaitable);
      net::co_spawn(acceptor.get_executor(), session(std::move(socket), app), net::detached);
    }
  } catch (const std::exception&) {
    // The acceptor was closed: the server stops.
  }
}

// The database and the record table, then the listening socket; prints the port.
net::awaitable<void> start(const Config& config, const idem::mysql::ConnectionParams& admin,
                           App& app, tcp::acceptor& acceptor) {
  auto connection = co_await idem::mysql::AsyncConnection::open(admin);
  co_await connection->query("CREATE DATABASE IF NOT EXISTS `" + config.database + "`");
  connection.reset();
  co_await app.store.ensure_schema();

  const tcp::endpoint where(net::ip::make_address("127.0.0.1"),
                            static_cast<unsigned short>(config.port));
  acceptor.open(where.protocol());
  acceptor.set_option(tcp::acceptor::reuse_address(true));
  acceptor.bind(where);
  // A burst of simultaneous connections must not overflow the backlog.
  acceptor.listen(net::socket_base::max_listen_connections);
  std::printf("listening on 127.0.0.1:%u (MySQL via %s, database %s, one loop thread)\n",
              static_cast<unsigned>(acceptor.local_endpoint().port()), config.mysql_socket.c_str(),
              config.database.c_str());
  std::fflush(stdout);
  net::co_spawn(acceptor.get_executor(), accept_loop(acceptor, app), net::detached);
}

int serve(const Config& config) {
  idem::mysql::ConnectionParams admin;
  admin.unix_socket = config.mysql_socket;
  admin.user = "root";
  idem::mysql::ConnectionParams params = admin;
  params.database = config.database;
  // Declared before the loop: coroutine frames the loop still holds at its end give their
  // connections back to the pool when it destroys them.
  auto pool = std::make_shared<idem::mysql::AsyncPool>(params, idem::mysql::PoolParams{.size = 16});
  idem::mysql::AsyncStore store{pool, {.table = "http_idempotency"}};
  App app{store, {}, {}, config.charge_ms};
  app.policy.biz_type = "payments.create";
  app.policy.body_field = "idempotency_key";  // for clients behind proxies that strip the header
  app.policy.stored = config.stored;
  app.policy.claim.lease = std::chrono::seconds{30};
  app.policy.claim.ttl = std::chrono::hours{24};
  app.policy.claim.wait = std::chrono::milliseconds{config.wait_ms};
  idem::http::validate(app.policy);

  net::io_context io{1};
  tcp::acceptor acceptor{io};
  net::signal_set signals{io, SIGINT, SIGTERM};
  signals.async_wait([&](const boost::system::error_code&, int) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    io.stop();
  });
  int status = 0;
  net::co_spawn(io, start(config, admin, app, acceptor), [&](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      std::fprintf(stderr, "idem_http_server_async: %s\n", x.what());
    }
    status = 1;
    io.stop();
  });
  io.run();
  if (status == 0) std::printf("stopped after %zu charge(s)\n", app.ledger.count());
  return status;
}

int usage() {
  std::fputs(
      "usage: idem_http_server_async --mysql-socket PATH [--database NAME] [--port N]\n"
      "                              [--charge-ms N] [--wait-ms N]\n"
      "                              [--stored successes|client-errors]\n"
      "  --mysql-socket PATH  the MySQL/MariaDB server's unix socket (user root)\n"
      "  --database NAME      the database of the record table (default idem_http_demo)\n"
      "  --port N             port on 127.0.0.1; 0 (default) picks a free one and prints it\n"
      "  --charge-ms N        how long one charge takes (default 300)\n"
      "  --wait-ms N          how long a duplicate waits for a running charge before 409 (0)\n"
      "  --stored WHICH       which responses are replayed: successes (2xx/3xx) or\n"
      "                       client-errors (also final 4xx; the default)\n",
      stderr);
  return 2;
}

// The name goes into CREATE DATABASE as text, so it is held to plain identifier characters.
bool plain_identifier(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    try {
      if (arg == "--port" && has_value) {
        config.port = std::stoi(argv[++i]);
      } else if (arg == "--mysql-socket" && has_value) {
        config.mysql_socket = argv[++i];
      } else if (arg == "--database" && has_value) {
        config.database = argv[++i];
      } else if (arg == "--charge-ms" && has_value) {
        config.charge_ms = std::stoi(argv[++i]);
      } else if (arg == "--wait-ms" && has_value) {
        config.wait_ms = std::stoi(argv[++i]);
      } else if (arg == "--stored" && has_value) {
        const std::string_view which = argv[++i];
        if (which == "successes") {
          config.stored = idem::http::StoredResponses::successes;
        } else if (which == "client-errors") {
          config.stored = idem::http::StoredResponses::successes_and_client_errors;
        } else {
          return usage();
        }
      } else {
        return usage();
      }
    } catch (const std::exception&) {
      return usage();
    }
  }
  if (config.port < 0 || config.port > 65535 || config.charge_ms < 0 || config.wait_ms < 0 ||
      config.mysql_socket.empty() || !plain_identifier(config.database)) {
    return usage();
  }
  try {
    return serve(config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "idem_http_server_async: %s\n", e.what());
    return 1;
  }
}
