// POST /payments guarded by idem::http on cpp-httplib: the Idempotency-Key header (or the
// "idempotency_key" body member), 400/409/422 problem+json answers, stored responses replayed
// with Idempotent-Replayed: true. The charge is slow on purpose (--charge-ms) so that
// concurrent duplicates overlap it; GET /payments/count says how many charges really ran.
// GET /metrics serves idem's Prometheus series (requests, duplicates, results, the Janitor
// that purges expired records and releases dead claims every --janitor-ms).
//
//   idem_http_server [--port N] [--sqlite FILE | --mysql-socket PATH] [--charge-ms N]
//                    [--wait-ms N] [--stored successes|client-errors] [--janitor-ms N]
//
// --port 0 (the default) binds an ephemeral port on 127.0.0.1; the first line on stdout is
// "listening on 127.0.0.1:PORT". SIGINT or SIGTERM stops the server.
//
//   curl -i -X POST localhost:PORT/payments -H 'Content-Type: application/json'
//        -H 'Idempotency-Key: "018f2e4c-7b1a-7c3e-9a4b-2f1d6c8e0a55"'
//        -d '{"amount": 2990, "currency": "EUR"}'     (one command line)
#include <sys/socket.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <idem/http.hpp>
#include <idem/janitor.hpp>
#include <idem/memory_store.hpp>
#include <idem/metrics.hpp>
#ifdef IDEM_HTTP_SERVER_WITH_SQLITE
#include <idem/sqlite.hpp>
#endif
#ifdef IDEM_HTTP_SERVER_WITH_MYSQL
#include <idem/mysql.hpp>
#endif

namespace {

using nlohmann::json;

struct Config {
  int port = 0;
  std::string sqlite_file;
  std::string mysql_socket;
  int charge_ms = 300;
  int wait_ms = 0;
  int janitor_ms = 60'000;
  idem::http::StoredResponses stored = idem::http::StoredResponses::successes_and_client_errors;
};

// The business effect: every charge that really ran. A duplicate that ran again would show
// up here as a second entry.
class Ledger {
 public:
  std::size_t add(const json& payment) {
    std::lock_guard lock(mutex_);
    payments_.push_back(payment);
    return payments_.size();
  }
  std::size_t count() const {
    std::lock_guard lock(mutex_);
    return payments_.size();
  }

 private:
  mutable std::mutex mutex_;
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

// The charge: validates, takes its time (a card network), records one ledger entry.
idem::http::Response charge(const idem::http::Request& request, Ledger& ledger, int charge_ms) {
  const json body = json::parse(request.body, nullptr, false);
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
  std::this_thread::sleep_for(std::chrono::milliseconds{charge_ms});
  if (body.value("card", "") == "tok_declined") {
    return business_problem(402, "Card declined", "the issuer declined the card");
  }
  const std::size_t n = ledger.add(body);
  const std::string id = "pay_" + std::to_string(n);
  idem::http::Response r = json_response(
      201, {{"id", id}, {"amount", *amount}, {"currency", *currency}, {"status", "captured"}});
  r.headers.push_back({"Location", "/payments/" + id});
  return r;
}

idem::http::Request from_httplib(const httplib::Request& req) {
  idem::http::Request r;
  r.method = req.method;
  r.target = req.target.empty() ? req.path : req.target;
  for (const auto& [name, value] : req.headers)
    r.headers.push_back({name, value});
  r.body = req.body;
  return r;
}

void to_httplib(const idem::http::Response& from, httplib::Response& to) {
  to.status = from.status;
  std::string content_type = "application/octet-stream";
  for (const auto& h : from.headers) {
    if (idem::http::field_name_equals(h.name, "Content-Type")) {
      content_type = h.value;
    } else {
      to.set_header(h.name, h.value);
    }
  }
  to.set_content(from.body, content_type);
}

template <idem::Store S>
int serve(S& store, const Config& config, const std::string& where) {
  Ledger ledger;
  // One Metrics object for the requests and the Janitor; the Janitor is declared after the
  // store's user (the server below) is set up and is destroyed, its thread stopped, first.
  idem::Metrics metrics;
  idem::Janitor janitor(
      store, {.interval = std::chrono::milliseconds{config.janitor_ms}, .metrics = &metrics});
  idem::http::Policy policy;
  policy.biz_type = "payments.create";
  policy.body_field = "idempotency_key";  // for clients behind proxies that strip the header
  policy.stored = config.stored;
  policy.claim.lease = std::chrono::seconds{30};
  policy.claim.ttl = std::chrono::hours{24};
  policy.claim.wait = std::chrono::milliseconds{config.wait_ms};
  policy.claim.observer = &metrics;
  idem::http::validate(policy);

  httplib::Server server;
  // Enough workers that every duplicate of a burst is answered while the first one runs.
  server.new_task_queue = [] { return new httplib::ThreadPool(32); };

  server.Post("/payments", [&](const httplib::Request& req, httplib::Response& res) {
    const idem::http::Request request = from_httplib(req);
    try {
      to_httplib(
          idem::http::handle(
              store, request, [&] { return charge(request, ledger, config.charge_ms); }, policy),
          res);
    } catch (const idem::StoreError& e) {
      // Nothing is known to have run; the client retries with the same key.
      to_httplib(idem::http::problem_response({"about:blank", "Service Unavailable", 503, e.what()},
                                              {{"Retry-After", "1"}}),
                 res);
    } catch (const std::exception& e) {
      to_httplib(
          idem::http::problem_response({"about:blank", "Internal Server Error", 500, e.what()}),
          res);
    }
  });
  server.Get("/payments/count", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"charges", ledger.count()}}.dump(), "application/json");
  });
  // For Prometheus: scrape_configs: [{job_name: payments, static_configs: [{targets: [...]}]}]
  // with monitoring/idem_alerts.yml in rule_files.
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  });

  // cpp-httplib listens with a backlog of 5 (a compile-time constant of the library): a burst
  // of simultaneous connections overflows it and the kernel drops some. Keep the listening
  // socket and widen its backlog after bind.
  int listen_fd = -1;
  server.set_socket_options([&listen_fd](socket_t fd) {
    httplib::default_socket_options(fd);
    listen_fd = fd;
  });

  int port = config.port;
  if (port == 0) {
    port = server.bind_to_any_port("127.0.0.1");
  } else if (!server.bind_to_port("127.0.0.1", port)) {
    port = -1;
  }
  if (port <= 0) {
    std::fprintf(stderr, "idem_http_server: cannot bind 127.0.0.1:%d\n", config.port);
    return 1;
  }
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);  // on Linux, updates the backlog

  // SIGINT/SIGTERM are blocked in every thread (main blocked them before any thread started);
  // this thread takes them and stops the server, which ends listen_after_bind().
  std::thread stopper([&server] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int signal = 0;
    sigwait(&set, &signal);
    server.stop();
  });

  std::printf("listening on 127.0.0.1:%d (%s)\n", port, where.c_str());
  std::fflush(stdout);
  const bool ok = server.listen_after_bind();
  if (!ok) {
    std::fprintf(stderr, "idem_http_server: the server stopped with an error\n");
    std::quick_exit(1);  // the stopper thread still waits for a signal
  }
  stopper.join();
  std::printf("stopped after %zu charge(s)\n", ledger.count());
  return 0;
}

int usage() {
  std::fputs(
      "usage: idem_http_server [--port N] [--sqlite FILE | --mysql-socket PATH] [--charge-ms N]\n"
      "                        [--wait-ms N] [--stored successes|client-errors] [--janitor-ms N]\n"
      "  --port N             port on 127.0.0.1; 0 (default) picks a free one and prints it\n"
      "  --sqlite FILE        keep the idempotency records in this SQLite file\n"
      "  --mysql-socket PATH  keep them in MySQL/MariaDB (database idem_http_demo, user root)\n"
      "  --charge-ms N        how long one charge takes (default 300)\n"
      "  --wait-ms N          how long a duplicate waits for a running charge before 409 (0)\n"
      "  --stored WHICH       which responses are replayed: successes (2xx/3xx) or\n"
      "                       client-errors (also final 4xx; the default)\n"
      "  --janitor-ms N       the Janitor's interval (default 60000)\n",
      stderr);
  return 2;
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
      } else if (arg == "--sqlite" && has_value) {
        config.sqlite_file = argv[++i];
      } else if (arg == "--mysql-socket" && has_value) {
        config.mysql_socket = argv[++i];
      } else if (arg == "--charge-ms" && has_value) {
        config.charge_ms = std::stoi(argv[++i]);
      } else if (arg == "--wait-ms" && has_value) {
        config.wait_ms = std::stoi(argv[++i]);
      } else if (arg == "--janitor-ms" && has_value) {
        config.janitor_ms = std::stoi(argv[++i]);
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
      config.janitor_ms < 1 || (!config.sqlite_file.empty() && !config.mysql_socket.empty())) {
    return usage();
  }

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  try {
    if (!config.sqlite_file.empty()) {
#ifdef IDEM_HTTP_SERVER_WITH_SQLITE
      idem::sqlite::Store store{config.sqlite_file};
      return serve(store, config, "SQLite " + config.sqlite_file);
#else
      std::fputs("idem_http_server: built without SQLite (idem::sqlite was not found)\n", stderr);
      return 2;
#endif
    }
    if (!config.mysql_socket.empty()) {
#ifdef IDEM_HTTP_SERVER_WITH_MYSQL
      idem::mysql::ConnectionParams params;
      params.unix_socket = config.mysql_socket;
      params.user = "root";
      idem::mysql::Connection{params}.query("CREATE DATABASE IF NOT EXISTS idem_http_demo");
      params.database = "idem_http_demo";
      auto pool = std::make_shared<idem::mysql::Pool>(params, idem::mysql::PoolParams{.size = 16});
      idem::mysql::Store store{pool, {.table = "http_idempotency"}};
      store.ensure_schema();
      return serve(store, config, "MySQL via " + config.mysql_socket);
#else
      std::fputs("idem_http_server: built without MySQL (idem::mysql was not found)\n", stderr);
      return 2;
#endif
    }
    idem::MemoryStore store;
    return serve(store, config, "in-memory store");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "idem_http_server: %s\n", e.what());
    return 1;
  }
}
