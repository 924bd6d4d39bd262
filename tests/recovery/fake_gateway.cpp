// A fake payment gateway for the recovery tests: a separate process on loopback whose every
// charge is committed to a SQLite ledger before it is answered, so that a test can count what
// was really charged after a client (or the gateway itself) was killed at any moment.
//
//   idem_fake_gateway --ledger FILE --mode dedup|plain [--port N] [--delay-ms N]
//
// POST /charges {"trade": "T", "amount": 123}
//   dedup: needs an Idempotency-Key header; a known key answers its charge again
//          ("replayed": true), a known key with another trade or amount is 422.
//   plain: charges on every call and ignores any key (the gateway that double-charges).
//   200 {"charge_id": N, "trade": "T", "amount": 123, "replayed": false}; 400 for a bad body.
// GET /charges?trade=T
//   200 {"trade": "T", "charged": true|false, "charges": [{"charge_id": N, "amount": 123}]}
//
// --port 0 (the default) binds a free port on 127.0.0.1; the first line on stdout is
// "listening on 127.0.0.1:PORT". --delay-ms sleeps after a charge is committed and before it
// is answered. SIGINT or SIGTERM stops the gateway.
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;

enum class Mode { dedup, plain };

struct Config {
  std::string ledger;
  Mode mode = Mode::dedup;
  int port = 0;
  int delay_ms = 0;
};

[[noreturn]] void fail(sqlite3* db, std::string_view what) {
  throw std::runtime_error(std::string(what) + ": " + sqlite3_errmsg(db));
}

// One prepared statement, finalized on every path.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) fail(db, sql);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  void bind(int index, std::string_view text) {
    check(sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()),
                            SQLITE_TRANSIENT));
  }
  void bind(int index, std::int64_t value) { check(sqlite3_bind_int64(stmt_, index, value)); }
  void bind_null(int index) { check(sqlite3_bind_null(stmt_, index)); }

  // True while there is a row to read.
  bool step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(db_, "sqlite3_step");
  }
  std::int64_t integer(int column) { return sqlite3_column_int64(stmt_, column); }
  std::string text(int column) {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    return p == nullptr ? std::string() : std::string(p);
  }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) fail(db_, "sqlite3_bind");
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

void exec(sqlite3* db, const char* sql) {
  if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) fail(db, sql);
}

struct LedgerCharge {
  std::int64_t id = 0;
  std::string trade;
  std::int64_t amount = 0;
};

enum class Outcome { charged, replayed, key_reused };

struct ChargeResult {
  Outcome outcome;
  LedgerCharge charge;  // the new charge, or the one the key already names
};

// The ledger file. One connection behind one mutex: every check-and-insert is one transaction
// that no other request can interleave with, and a charge is durable (WAL, synchronous=FULL)
// when charge() returns, before anyone answers it.
class Ledger {
 public:
  explicit Ledger(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
        SQLITE_OK) {
      const std::string message = "cannot open " + path + ": " + sqlite3_errmsg(db_);
      sqlite3_close(db_);
      throw std::runtime_error(message);
    }
    try {
      // Readers (the tests' charges_per_trade) may hold the file for a moment.
      sqlite3_busy_timeout(db_, 5000);
      use_wal();
      exec(db_, "PRAGMA synchronous=FULL");
      exec(db_,
           "CREATE TABLE IF NOT EXISTS charges ("
           " id INTEGER PRIMARY KEY,"
           " trade TEXT NOT NULL,"
           " amount INTEGER NOT NULL,"
           " idem_key TEXT UNIQUE,"  // NULL in plain mode; SQLite lets NULLs repeat
           " created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))");
      exec(db_, "CREATE INDEX IF NOT EXISTS charges_by_trade ON charges (trade)");
    } catch (...) {
      sqlite3_close(db_);
      throw;
    }
  }
  ~Ledger() { sqlite3_close(db_); }
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Charges once per key (or on every call without one); committed when it returns.
  ChargeResult charge(std::string_view trade, std::int64_t amount,
                      const std::optional<std::string>& key) {
    std::lock_guard lock(mutex_);
    exec(db_, "BEGIN IMMEDIATE");
    try {
      ChargeResult result = charge_in_transaction(trade, amount, key);
      // A failed COMMIT throws: the caller answers 500, never a charge that may not exist.
      exec(db_, result.outcome == Outcome::charged ? "COMMIT" : "ROLLBACK");
      return result;
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }

  std::vector<LedgerCharge> charges_of(std::string_view trade) {
    std::lock_guard lock(mutex_);
    Statement select(db_, "SELECT id, trade, amount FROM charges WHERE trade = ? ORDER BY id");
    select.bind(1, trade);
    std::vector<LedgerCharge> charges;
    while (select.step())
      charges.push_back({select.integer(0), select.text(1), select.integer(2)});
    return charges;
  }

 private:
  void use_wal() {
    Statement pragma(db_, "PRAGMA journal_mode=WAL");
    // SQLite answers with the mode it really uses; a file system without WAL keeps another.
    if (!pragma.step() || pragma.text(0) != "wal") {
      throw std::runtime_error("the ledger cannot use journal_mode=WAL");
    }
  }

  ChargeResult charge_in_transaction(std::string_view trade, std::int64_t amount,
                                     const std::optional<std::string>& key) {
    if (key) {
      if (std::optional<LedgerCharge> known = find_by_key(*key)) {
        const bool same = known->trade == trade && known->amount == amount;
        return {same ? Outcome::replayed : Outcome::key_reused, std::move(*known)};
      }
    }
    return {Outcome::charged, insert(trade, amount, key)};
  }

  std::optional<LedgerCharge> find_by_key(const std::string& key) {
    Statement select(db_, "SELECT id, trade, amount FROM charges WHERE idem_key = ?");
    select.bind(1, key);
    if (!select.step()) return std::nullopt;
    return LedgerCharge{select.integer(0), select.text(1), select.integer(2)};
  }

  LedgerCharge insert(std::string_view trade, std::int64_t amount,
                      const std::optional<std::string>& key) {
    Statement insert(db_, "INSERT INTO charges (trade, amount, idem_key) VALUES (?, ?, ?)");
    insert.bind(1, trade);
    insert.bind(2, amount);
    if (key) {
      insert.bind(3, *key);
    } else {
      insert.bind_null(3);
    }
    insert.step();
    return {sqlite3_last_insert_rowid(db_), std::string(trade), amount};
  }

  std::mutex mutex_;
  sqlite3* db_ = nullptr;
};

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void reply_error(httplib::Response& res, int status, const std::string& message) {
  reply(res, status, json{{"error", message}});
}

struct ChargeRequest {
  std::string trade;
  std::int64_t amount = 0;
};

// {"trade": non-empty string, "amount": positive integer}, or nothing.
std::optional<ChargeRequest> parse_charge(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return std::nullopt;  // also a parse error (discarded)
  const auto trade = j.find("trade");
  const auto amount = j.find("amount");
  if (trade == j.end() || !trade->is_string() || trade->get<std::string>().empty()) {
    return std::nullopt;
  }
  if (amount == j.end() || !amount->is_number_integer() || amount->get<std::int64_t>() <= 0) {
    return std::nullopt;
  }
  return ChargeRequest{trade->get<std::string>(), amount->get<std::int64_t>()};
}

void post_charge(const httplib::Request& req, httplib::Response& res, Ledger& ledger,
                 const Config& config) {
  const std::optional<ChargeRequest> request = parse_charge(req.body);
  if (!request) {
    return reply_error(res, 400, R"(the body must be {"trade": "T", "amount": N}, N > 0)");
  }
  std::optional<std::string> key;
  if (config.mode == Mode::dedup) {
    key = req.get_header_value("Idempotency-Key");
    if (key->empty()) return reply_error(res, 400, "an Idempotency-Key header is required");
  }
  const ChargeResult result = ledger.charge(request->trade, request->amount, key);
  if (result.outcome == Outcome::key_reused) {
    return reply(res, 422,
                 json{{"error", "the Idempotency-Key was used for another trade or amount"},
                      {"charge_id", result.charge.id}});
  }
  if (result.outcome == Outcome::charged && config.delay_ms > 0) {
    // The charge is in the ledger and the client has no answer yet: the window in which a
    // client that dies leaves a charge it never recorded.
    std::this_thread::sleep_for(std::chrono::milliseconds{config.delay_ms});
  }
  reply(res, 200,
        json{{"charge_id", result.charge.id},
             {"trade", result.charge.trade},
             {"amount", result.charge.amount},
             {"replayed", result.outcome == Outcome::replayed}});
}

void get_charges(const httplib::Request& req, httplib::Response& res, Ledger& ledger) {
  const std::string trade = req.get_param_value("trade");
  if (trade.empty()) return reply_error(res, 400, "the query needs ?trade=T");
  json charges = json::array();
  for (const LedgerCharge& c : ledger.charges_of(trade))
    charges.push_back({{"charge_id", c.id}, {"amount", c.amount}});
  reply(res, 200, json{{"trade", trade}, {"charged", !charges.empty()}, {"charges", charges}});
}

// A handler whose ledger access failed answers 500: the client cannot take it for a charge.
template <class Handler>
httplib::Server::Handler guarded(Handler handler) {
  return [handler](const httplib::Request& req, httplib::Response& res) {
    try {
      handler(req, res);
    } catch (const std::exception& e) {
      reply_error(res, 500, e.what());
    }
  };
}

int serve(Ledger& ledger, const Config& config) {
  httplib::Server server;
  // More workers than the tests have concurrent clients, so that none waits for a worker.
  server.new_task_queue = [] { return new httplib::ThreadPool(32); };
  server.Post("/charges", guarded([&](const httplib::Request& req, httplib::Response& res) {
                post_charge(req, res, ledger, config);
              }));
  server.Get("/charges", guarded([&](const httplib::Request& req, httplib::Response& res) {
               get_charges(req, res, ledger);
             }));

  // cpp-httplib listens with a backlog of 5 (compiled into Debian's library): a burst of
  // concurrent clients overflows it and waits for SYN retransmits. Widen it after bind.
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
    std::fprintf(stderr, "idem_fake_gateway: cannot bind 127.0.0.1:%d\n", config.port);
    return 1;
  }
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);  // on Linux, updates the backlog

  // SIGINT/SIGTERM are blocked in every thread (main blocked them before any thread started):
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

  std::printf("listening on 127.0.0.1:%d\n", port);
  std::fflush(stdout);
  const bool ok = server.listen_after_bind();
  if (!ok) ::kill(::getpid(), SIGTERM);  // wakes the stopper, which still waits for a signal
  stopper.join();
  if (!ok) std::fprintf(stderr, "idem_fake_gateway: the server stopped with an error\n");
  return ok ? 0 : 1;
}

int usage() {
  std::fputs(
      "usage: idem_fake_gateway --ledger FILE --mode dedup|plain [--port N] [--delay-ms N]\n"
      "  --ledger FILE   SQLite file of every charge (created if missing)\n"
      "  --mode dedup    one charge per Idempotency-Key (the header is required)\n"
      "  --mode plain    a charge on every call, keys ignored\n"
      "  --port N        port on 127.0.0.1; 0 (default) picks a free one and prints it\n"
      "  --delay-ms N    sleep after committing a charge, before answering it (default 0)\n",
      stderr);
  return 2;
}

std::optional<Config> parse_args(int argc, char** argv) {
  Config config;
  bool has_mode = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 == argc) return std::nullopt;  // every option takes a value
    const std::string value = argv[++i];
    if (arg == "--ledger") {
      config.ledger = value;
    } else if (arg == "--mode" && (value == "dedup" || value == "plain")) {
      config.mode = value == "dedup" ? Mode::dedup : Mode::plain;
      has_mode = true;
    } else if (arg == "--port") {
      config.port = std::stoi(value);
    } else if (arg == "--delay-ms") {
      config.delay_ms = std::stoi(value);
    } else {
      return std::nullopt;
    }
  }
  if (config.ledger.empty() || !has_mode || config.port < 0 || config.port > 65535 ||
      config.delay_ms < 0) {
    return std::nullopt;
  }
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Config> config;
  try {
    config = parse_args(argc, argv);
  } catch (const std::exception&) {  // std::stoi on a value that is no number
  }
  if (!config) return usage();

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  try {
    Ledger ledger{config->ledger};
    return serve(ledger, *config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "idem_fake_gateway: %s\n", e.what());
    return 1;
  }
}
