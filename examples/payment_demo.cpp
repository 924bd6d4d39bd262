// The articles' incident, replayed on a database file. After a deploy hiccup a payment gateway
// retries notifyPayResult callbacks: 11 orders receive 58 callbacks (47 of them duplicates)
// from 8 threads at once, and the gateway retries a callback answered "in progress" up to 3
// times, 200 ms apart.
//
// The handler's business is the legacy code of the incident: a "paid" callback marks an unpaid
// order paid, and for an order that is already paid it "refunds the duplicate charge" - the
// double refund that hit 11 orders. Guarded by idem, the business runs once per order, so no
// refund can happen.
//
// The records live in a SQLite file (idem-demo.db, or --db PATH / IDEM_DEMO_DB), so a second
// run replays every callback from the file and executes nothing. --mysql-socket PATH (or
// IDEM_DEMO_MYSQL_SOCKET) runs the same storm on MySQL / MariaDB instead. --unguarded runs it
// without idem, on a separate order table, to show the double refunds it prevents.
//
// Exit code 0 only when nothing ran twice.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <idem/sqlite.hpp>
#ifdef IDEM_DEMO_WITH_MYSQL
#include <idem/mysql.hpp>
#endif

namespace {

using namespace std::chrono_literals;

constexpr int orders = 11;
constexpr int duplicates = 47;
constexpr int gateway_threads = 8;
constexpr int gateway_retries = 3;
constexpr auto gateway_retry_delay = 200ms;

struct Callback {
  std::string trade_no;  // the channel's trade number: the idempotency key
  long amount_fen = 0;
};

// The business tables, in the same database as idem's records.
class OrderBook {
 public:
  virtual ~OrderBook() = default;
  // Creates the orders as unpaid unless they exist; returns how many were created.
  virtual int open(const std::vector<Callback>& orders) = 0;
  // The legacy handler of the incident: unpaid -> paid; already paid -> refunded (it takes the
  // repeated callback for a duplicate charge). Returns the order's new status.
  virtual std::string apply_paid_callback(const Callback& cb) = 0;

  struct Totals {
    long paid = 0;          // orders whose status is paid
    long refunds = 0;       // refunds ever made
    long max_payments = 0;  // the most times one order was marked paid
  };
  virtual Totals totals() = 0;
  // Drops the orders (the unguarded run starts from unpaid orders every time).
  virtual void clear() = 0;
};

class SqliteOrders final : public OrderBook {
 public:
  SqliteOrders(idem::sqlite::Store& store, std::string table)
      : store_(store), t_(std::move(table)) {}

  int open(const std::vector<Callback>& all) override {
    auto c = store_.pool().acquire();
    c->exec("CREATE TABLE IF NOT EXISTS " + t_ +
            " (trade_no TEXT PRIMARY KEY, status TEXT NOT NULL, amount_fen INTEGER NOT NULL, "
            "payments INTEGER NOT NULL DEFAULT 0, refunds INTEGER NOT NULL DEFAULT 0)");
    int created = 0;
    for (const auto& cb : all) {
      created += static_cast<int>(c->execute(
          "INSERT OR IGNORE INTO " + t_ + " (trade_no, status, amount_fen) VALUES (?, 'unpaid', ?)",
          {cb.trade_no, cb.amount_fen}));
    }
    return created;
  }

  std::string apply_paid_callback(const Callback& cb) override {
    return idem::sqlite::with_transaction(store_.pool(), [&](idem::sqlite::Connection& c) {
      std::string status;
      {
        auto rows = c.query("SELECT status FROM " + t_ + " WHERE trade_no = ?", {cb.trade_no});
        if (rows.next()) status = rows.text(0);
      }
      if (status == "unpaid") {
        c.execute(
            "UPDATE " + t_ + " SET status = 'paid', payments = payments + 1 WHERE trade_no = ?",
            {cb.trade_no});
        return std::string("paid");
      }
      if (status == "paid") {
        c.execute(
            "UPDATE " + t_ + " SET status = 'refunded', refunds = refunds + 1 WHERE trade_no = ?",
            {cb.trade_no});
        return std::string("refunded");
      }
      return status;
    });
  }

  Totals totals() override {
    auto c = store_.pool().acquire();
    auto rows = c->query(
        "SELECT COALESCE(SUM(status = 'paid'), 0), COALESCE(SUM(refunds), 0), "
        "COALESCE(MAX(payments), 0) FROM " +
        t_);
    rows.next();
    return {rows.integer(0), rows.integer(1), rows.integer(2)};
  }

  void clear() override { store_.pool().acquire()->exec("DROP TABLE IF EXISTS " + t_); }

 private:
  idem::sqlite::Store& store_;
  std::string t_;
};

#ifdef IDEM_DEMO_WITH_MYSQL
class MysqlOrders final : public OrderBook {
 public:
  MysqlOrders(idem::mysql::Pool& pool, std::string table) : pool_(pool), t_(std::move(table)) {}

  int open(const std::vector<Callback>& all) override {
    auto c = pool_.acquire();
    c->query("CREATE TABLE IF NOT EXISTS " + t_ +
             " (trade_no VARBINARY(64) PRIMARY KEY, status VARCHAR(16) NOT NULL, amount_fen BIGINT "
             "NOT NULL, payments INT NOT NULL DEFAULT 0, refunds INT NOT NULL DEFAULT 0) "
             "ENGINE=InnoDB");
    int created = 0;
    for (const auto& cb : all) {
      created += static_cast<int>(c->execute(
          "INSERT IGNORE INTO " + t_ + " (trade_no, status, amount_fen) VALUES (?, 'unpaid', ?)",
          {cb.trade_no, cb.amount_fen}));
    }
    return created;
  }

  std::string apply_paid_callback(const Callback& cb) override {
    return idem::mysql::with_transaction(pool_, [&](idem::mysql::Connection& c) {
      const auto rows =
          c.select("SELECT status FROM " + t_ + " WHERE trade_no = ? FOR UPDATE", {cb.trade_no});
      const std::string status = rows.empty() ? "" : rows.front().at(0).to_text().value_or("");
      if (status == "unpaid") {
        c.execute(
            "UPDATE " + t_ + " SET status = 'paid', payments = payments + 1 WHERE trade_no = ?",
            {cb.trade_no});
        return std::string("paid");
      }
      if (status == "paid") {
        c.execute(
            "UPDATE " + t_ + " SET status = 'refunded', refunds = refunds + 1 WHERE trade_no = ?",
            {cb.trade_no});
        return std::string("refunded");
      }
      return status;
    });
  }

  Totals totals() override {
    auto c = pool_.acquire();
    const auto rows = c->select(
        "SELECT COALESCE(SUM(status = 'paid'), 0), COALESCE(SUM(refunds), 0), "
        "COALESCE(MAX(payments), 0) FROM " +
            t_,
        {});
    const auto& r = rows.at(0);
    // SUM answers DECIMAL (a text cell), MAX an integer: all three are read through their text.
    return {std::stol(r.at(0).to_text().value_or("0")), std::stol(r.at(1).to_text().value_or("0")),
            std::stol(r.at(2).to_text().value_or("0"))};
  }

  void clear() override { pool_.acquire()->query("DROP TABLE IF EXISTS " + t_); }

 private:
  idem::mysql::Pool& pool_;
  std::string t_;
};
#endif

struct Counters {
  std::atomic<int> executed{0}, replayed{0}, in_progress{0}, conflict{0}, gave_up{0}, errors{0};
  std::mutex mutex;
  std::string first_error;
};

// The handler the gateway calls. Returns the HTTP status it would answer.
template <idem::Store S>
int notify_pay_result(S& store, OrderBook& book, Counters& counters, const Callback& cb) {
  const idem::Key key{"PAY", cb.trade_no};
  const auto fp =
      idem::fingerprint(nlohmann::json{{"trade_no", cb.trade_no}, {"amount_fen", cb.amount_fen}});
  idem::IdempotencyGuard guard{store, key, fp, idem::Options{.lease = 30s}};
  switch (guard.verdict()) {
    case idem::Verdict::acquired: {
      std::this_thread::sleep_for(30ms);  // the channel call
      const std::string status = book.apply_paid_callback(cb);
      guard.commit(nlohmann::json{{"trade_no", cb.trade_no}, {"status", status}});
      ++counters.executed;
      return 200;
    }
    case idem::Verdict::replayed:
      ++counters.replayed;
      return 200;  // the first answer, again
    case idem::Verdict::in_progress:
      ++counters.in_progress;
      return 409;  // "still processing": the gateway will retry
    case idem::Verdict::conflict:
      ++counters.conflict;
      return 422;
    case idem::Verdict::outcome_unknown:
      return 503;  // an earlier attempt died mid-effect (docs/recovery.md); not without resolvers
  }
  return 500;
}

// The same handler as it was before idem: every delivery runs the business.
int notify_pay_result_unguarded(OrderBook& book, Counters& counters, const Callback& cb) {
  std::this_thread::sleep_for(30ms);  // the channel call
  book.apply_paid_callback(cb);
  ++counters.executed;
  return 200;
}

// Delivers the storm: 11 callbacks and 47 duplicates, shuffled, from 8 threads at once; a 409
// is retried up to 3 times, 200 ms apart. Returns the exit code.
template <class Handler>
int storm(OrderBook& book, const std::string& where, bool guarded, Handler&& handle) {
  std::vector<Callback> callbacks;
  for (int i = 0; i < orders; ++i)
    callbacks.push_back({"CH2026113017" + std::to_string(1000 + i), 29'900});
  if (!guarded) book.clear();
  const int created = book.open(callbacks);
  std::mt19937 rng(47);
  for (int d = 0; d < duplicates; ++d)
    callbacks.push_back(callbacks[rng() % orders]);
  std::shuffle(callbacks.begin(), callbacks.end(), rng);

  Counters counters;
  std::atomic<std::size_t> next{0};
  const auto started = std::chrono::steady_clock::now();
  std::vector<std::thread> gateway;
  for (int t = 0; t < gateway_threads; ++t) {
    gateway.emplace_back([&] {
      for (std::size_t i = next++; i < callbacks.size(); i = next++) {
        try {
          int status = handle(counters, callbacks[i]);
          for (int retry = 0; status == 409 && retry < gateway_retries; ++retry) {
            std::this_thread::sleep_for(gateway_retry_delay);
            status = handle(counters, callbacks[i]);
          }
          if (status != 200) ++counters.gave_up;
        } catch (const std::exception& e) {
          ++counters.errors;
          std::lock_guard lock(counters.mutex);
          if (counters.first_error.empty()) counters.first_error = e.what();
        }
      }
    });
  }
  for (auto& th : gateway)
    th.join();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  const OrderBook::Totals totals = book.totals();
  const bool earlier_run = created == 0;

  std::printf("idem payment-callback demo: the gateway storm of the articles, %s\n",
              guarded ? "guarded by idem" : "WITHOUT idem");
  std::printf("  store:                  %s\n", where.c_str());
  std::printf("  orders:                 %d (%s)\n", orders,
              earlier_run ? "created by an earlier run" : "new, unpaid");
  std::printf("  callbacks delivered:    %zu (%d duplicates) from %d gateway threads at once\n",
              callbacks.size(), duplicates, gateway_threads);
  std::printf("  executed:               %d%s\n", counters.executed.load(),
              guarded && earlier_run && counters.executed == 0
                  ? " (every callback was replayed from the records of the earlier run)"
                  : "");
  if (guarded) {
    std::printf("  replayed:               %d\n", counters.replayed.load());
    std::printf(
        "  answered in progress:   %d (retried by the gateway up to %d times, %lld ms "
        "apart)\n",
        counters.in_progress.load(), gateway_retries,
        static_cast<long long>(gateway_retry_delay.count()));
    std::printf("  conflicts:              %d\n", counters.conflict.load());
  }
  std::printf("  gave up:                %d\n", counters.gave_up.load());
  if (counters.errors > 0) {
    std::printf("  errors:                 %d (first: %s)\n", counters.errors.load(),
                counters.first_error.c_str());
  }
  std::printf("  orders paid:            %ld of %d%s\n", totals.paid, orders,
              totals.max_payments > 1 ? ", some more than once" : "");
  std::printf("  double refunds:         %ld%s\n", totals.refunds,
              totals.refunds > 0 ? " (paid orders refunded by a duplicate callback)" : "");
  std::printf("  took:                   %lld ms\n", static_cast<long long>(ms.count()));

  const bool ok = counters.gave_up == 0 && counters.conflict == 0 && counters.errors == 0 &&
                  totals.refunds == 0 && totals.max_payments == 1 && totals.paid == orders;
  if (!ok) {
    std::printf("FAILED: %s\n", guarded ? "the business ran more than once, or a callback went "
                                          "unanswered"
                                        : "without idem, the duplicates ran the business again");
    return 1;
  }
  std::printf("OK: every order was paid exactly once\n");
  std::printf(earlier_run ? "(--reset starts again from empty tables)\n"
                          : "Run it again: the records are kept in the store, so every callback "
                            "replays.\n");
  return 0;
}

int run_sqlite(const std::string& db, bool reset, bool guarded) {
  if (reset) {
    for (const char* suffix : {"", "-wal", "-shm"})
      std::filesystem::remove(db + suffix);
  }
  idem::sqlite::Store store{db};  // WAL, synchronous=FULL, 5 s busy timeout
  const std::string where = "SQLite file " + db + " (WAL, synchronous=FULL)";
  if (!guarded) {
    SqliteOrders book{store, "demo_order_unguarded"};
    return storm(book, where, false, [&](Counters& counters, const Callback& cb) {
      return notify_pay_result_unguarded(book, counters, cb);
    });
  }
  SqliteOrders book{store, "demo_order"};
  return storm(book, where, true, [&](Counters& counters, const Callback& cb) {
    return notify_pay_result(store, book, counters, cb);
  });
}

#ifdef IDEM_DEMO_WITH_MYSQL
int run_mysql(const std::string& socket, bool reset, bool guarded) {
  idem::mysql::ConnectionParams params;
  params.unix_socket = socket;
  params.user = "root";
  {
    idem::mysql::Connection admin{params};
    admin.query("CREATE DATABASE IF NOT EXISTS idem_demo");
  }
  params.database = "idem_demo";
  auto pool = std::make_shared<idem::mysql::Pool>(params, idem::mysql::PoolParams{.size = 16});
  if (reset) {
    pool->acquire()->query(
        "DROP TABLE IF EXISTS demo_order, demo_order_unguarded, idempotent_record");
  }
  idem::mysql::Store store{pool};
  store.ensure_schema();
  const std::string where = "MySQL via " + socket + ", database idem_demo";
  if (!guarded) {
    MysqlOrders book{*pool, "demo_order_unguarded"};
    return storm(book, where, false, [&](Counters& counters, const Callback& cb) {
      return notify_pay_result_unguarded(book, counters, cb);
    });
  }
  MysqlOrders book{*pool, "demo_order"};
  return storm(book, where, true, [&](Counters& counters, const Callback& cb) {
    return notify_pay_result(store, book, counters, cb);
  });
}
#endif

void usage() {
  std::printf(
      "usage: idem_demo [--db PATH | --mysql-socket PATH] [--reset] [--unguarded]\n"
      "  --db PATH            SQLite file for the records and the orders (default: $IDEM_DEMO_DB,\n"
      "                       else idem-demo.db in the current directory)\n"
      "  --mysql-socket PATH  run on MySQL / MariaDB through this unix socket instead, as root,\n"
      "                       in database idem_demo (default: $IDEM_DEMO_MYSQL_SOCKET)\n"
      "  --reset              start from empty tables\n"
      "  --unguarded          the same storm without idem (separate orders): the incident\n");
}

}  // namespace

int main(int argc, char** argv) {
  const char* env_db = std::getenv("IDEM_DEMO_DB");
  const char* env_socket = std::getenv("IDEM_DEMO_MYSQL_SOCKET");
  std::string db = env_db != nullptr && *env_db != '\0' ? env_db : "idem-demo.db";
  std::string socket = env_socket != nullptr ? env_socket : "";
  bool reset = false;
  bool guarded = true;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--db" && i + 1 < argc) {
      db = argv[++i];
      socket.clear();
    } else if (arg == "--mysql-socket" && i + 1 < argc) {
      socket = argv[++i];
    } else if (arg == "--reset") {
      reset = true;
    } else if (arg == "--unguarded") {
      guarded = false;
    } else if (arg == "-h" || arg == "--help") {
      usage();
      return 0;
    } else {
      std::fprintf(stderr, "idem_demo: unknown argument %s\n", argv[i]);
      usage();
      return 2;
    }
  }
  try {
    if (!socket.empty()) {
#ifdef IDEM_DEMO_WITH_MYSQL
      return run_mysql(socket, reset, guarded);
#else
      std::fprintf(stderr, "idem_demo: built without MySQL support (idem::mysql was not found)\n");
      return 2;
#endif
    }
    return run_sqlite(db, reset, guarded);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "idem_demo: %s\n", e.what());
    return 1;
  }
}
