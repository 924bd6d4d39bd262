// idem on the service's own connections: raw MYSQL* handles that the test opens and owns,
// set up far from idem's habits (a UTC+8 clock, ANSI_QUOTES and NO_BACKSLASH_ESCAPES,
// latin1, READ COMMITTED). idem binds to them inside the service's transactions, runs
// beside the service's own text-protocol SQL, changes none of their session state and
// needs no pool of its own.
#include <mysql.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <idem/metrics.hpp>
#include <idem/run_once.hpp>

#include "../support/mysql_server.hpp"
#include "../support/mysql_service.hpp"
#include "../support/threads.hpp"

using namespace std::chrono_literals;
using idem_test::Errors;
using idem_test::run_threads;
using idem_test::Table;

namespace {

// The service's pool: handles it opened itself; lend(use) is what with_transaction takes.
class ServicePool {
 public:
  explicit ServicePool(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      MYSQL* m = idem_test::open_service_handle();
      all_.push_back(m);
      idle_.push_back(m);
    }
  }
  ~ServicePool() {
    for (MYSQL* m : all_)
      mysql_close(m);
  }
  ServicePool(const ServicePool&) = delete;
  ServicePool& operator=(const ServicePool&) = delete;

  template <class Use>
  decltype(auto) operator()(Use&& use) {
    MYSQL* m = take();
    struct GiveBack {
      ServicePool* pool;
      MYSQL* m;
      ~GiveBack() { pool->give_back(m); }
    } back{this, m};
    return use(m);
  }

  const std::vector<MYSQL*>& handles() const { return all_; }

 private:
  MYSQL* take() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !idle_.empty(); });
    MYSQL* m = idle_.back();
    idle_.pop_back();
    return m;
  }
  void give_back(MYSQL* m) {
    std::lock_guard lock(mutex_);
    idle_.push_back(m);
    cv_.notify_one();
  }

  std::vector<MYSQL*> all_;
  std::vector<MYSQL*> idle_;
  std::mutex mutex_;
  std::condition_variable cv_;
};

// The service's own SQL: text protocol, its errors classified as idem classifies its own.
void run(MYSQL* m, const std::string& sql) {
  idem::mysql::check(m, mysql_query(m, sql.c_str()), "service statement");
}

std::vector<std::string> rows_of(MYSQL* m, const std::string& sql) {
  run(m, sql);
  MYSQL_RES* res = mysql_store_result(m);
  if (res == nullptr) throw idem::mysql::error_from(m, "service store_result");
  std::vector<std::string> out;
  const unsigned columns = mysql_num_fields(res);
  while (MYSQL_ROW row = mysql_fetch_row(res)) {
    std::string line;
    for (unsigned c = 0; c < columns; ++c)
      line += std::string(row[c] != nullptr ? row[c] : "NULL") + "|";
    out.push_back(line);
  }
  mysql_free_result(res);
  return out;
}

std::string session_of(MYSQL* m) {
  return rows_of(m,
                 "SELECT @@time_zone, @@autocommit, @@tx_isolation, @@sql_mode, "
                 "@@character_set_client, @@character_set_results, @@collation_connection, "
                 "@@innodb_lock_wait_timeout")
      .at(0);
}

long long number(MYSQL* m, const std::string& sql) {
  const std::string row = rows_of(m, sql).at(0);
  return std::stoll(row.substr(0, row.find('|')));
}

// The service's business table: its own clock columns, written by NOW() and DEFAULT.
struct Payments {
  std::string name = idem_test::unique_table("pay");
  explicit Payments(MYSQL* m) {
    run(m, "CREATE TABLE " + name +
               " (id BIGINT AUTO_INCREMENT PRIMARY KEY, trade_no VARCHAR(64) NOT NULL, "
               "now_at DATETIME NOT NULL, utc_at DATETIME NOT NULL, "
               "created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB");
  }
  void insert(MYSQL* m, const std::string& trade_no) const {
    run(m, "INSERT INTO " + name + " (trade_no, now_at, utc_at) VALUES ('" + trade_no +
               "', NOW(), UTC_TIMESTAMP())");
  }
};

}  // namespace

TEST_CASE("the service's own MYSQL* pool: 16 threads, 12% duplicates, one execution per key") {
  Table t;  // the record table (its pool only sets up and counts)
  ServicePool service(16);
  idem::mysql::Store store{{.table = t.name}};  // no pool: only ever bound
  MYSQL* first = service.handles().front();
  store.ensure_schema(first);  // an idempotent no-op here; runs on the caller's handle
  const Payments payments(first);

  std::vector<std::string> before;
  for (MYSQL* m : service.handles())
    before.push_back(session_of(m));
  CHECK_THAT(before.front(), Catch::StartsWith("+08:00|1|READ-COMMITTED|"));

  // 440 keys, and 60 of them sent twice more (12% of the 500 requests are duplicates).
  std::vector<std::string> requests;
  for (int k = 0; k < 440; ++k)
    requests.push_back("trade-" + std::to_string(k));
  std::mt19937 rng(7);
  for (int d = 0; d < 60; ++d)
    requests.push_back("trade-" + std::to_string(rng() % 440));
  std::shuffle(requests.begin(), requests.end(), rng);

  // bodies counts every run of a body, also a record-last duplicate's speculative run that was
  // rolled back (idem::BoundClaim); the payments table is the truth.
  std::atomic<int> bodies{0}, replays{0}, next{0};
  Errors errors;
  run_threads(16, [&](int) {
    for (int i = next++; i < static_cast<int>(requests.size()); i = next++) {
      const std::string& trade_no = requests[static_cast<std::size_t>(i)];
      try {
        const auto out = idem::mysql::with_transaction(service, [&](idem::mysql::Connection& c) {
          MYSQL* m = c.native();
          rows_of(m, "SELECT COUNT(*) FROM " + payments.name);  // the service's read first
          auto tx = store.bind(m);  // the raw handle: the try still sees its claims
          return idem::run_once(tx, idem::Key{"PAY", trade_no}, "", [&] {
            ++bodies;
            payments.insert(m, trade_no);
            rows_of(m, "SELECT id FROM " + payments.name + " WHERE trade_no = '" + trade_no + "'");
            return trade_no;
          });
        });
        if (out.verdict() == idem::Verdict::replayed) ++replays;
        if (!out || out.value() != trade_no) errors.add("wrong answer for " + trade_no);
      } catch (const std::exception& e) {
        errors.add(e.what());
      }
    }
  });
  INFO(errors.first());
  CHECK(errors.size() == 0);
  CHECK(bodies >= 440);
  CHECK(replays == 60);
  CHECK(number(first, "SELECT COUNT(*) FROM " + payments.name) == 440);
  CHECK(number(first, "SELECT COUNT(DISTINCT trade_no) FROM " + payments.name) == 440);
  CHECK(t.count("status = 1") == 440);

  // Nothing of the handles' sessions moved, and the service's clock columns kept its zone.
  for (std::size_t i = 0; i < service.handles().size(); ++i)
    CHECK(session_of(service.handles()[i]) == before[i]);
  CHECK(number(first, "SELECT COUNT(*) FROM " + payments.name +
                          " WHERE TIMESTAMPDIFF(MINUTE, utc_at, now_at) BETWEEN 479 AND 481 "
                          "AND TIMESTAMPDIFF(MINUTE, utc_at, created_at) BETWEEN 479 AND 481") ==
        440);
  // ... the same offset as a row the service writes without idem ...
  run(first, "START TRANSACTION");
  payments.insert(first, "without-idem");
  run(first, "COMMIT");
  CHECK(number(first, "SELECT TIMESTAMPDIFF(MINUTE, utc_at, now_at) FROM " + payments.name +
                          " WHERE trade_no = 'without-idem'") == 480);
  // ... while idem's own times are UTC.
  CHECK(t.count("ABS(TIMESTAMPDIFF(MINUTE, created_at, UTC_TIMESTAMP())) < 10") == 440);
  run(first, "DROP TABLE " + payments.name);
}

TEST_CASE("a caller's transaction on its own handle: bind, check_committable, commit") {
  Table t;
  ServicePool service(1);
  MYSQL* m = service.handles().front();
  const Payments payments(m);
  const std::string session = session_of(m);
  idem::mysql::Store store{{.table = t.name}};
  const idem::Key key{"PAY", "manual"};

  SECTION("mysql_autocommit(0) opens the transaction") {
    REQUIRE(mysql_autocommit(m, 0) == 0);
    {
      auto tx = store.bind(m);
      const auto out = idem::run_once(tx, key, "", [&] {
        payments.insert(m, key.id());
        return 1;
      });
      CHECK(out.verdict() == idem::Verdict::acquired);
      tx.check_committable();
    }
    REQUIRE(mysql_commit(m) == 0);
    REQUIRE(mysql_autocommit(m, 1) == 0);
    CHECK(t.count("status = 1") == 1);
  }
  SECTION("an abandoned guard: not committable, the caller rolls back") {
    run(m, "START TRANSACTION");
    {
      auto tx = store.bind(m);
      {
        idem::IdempotencyGuard guard{tx, key, ""};
        REQUIRE(guard.acquired());
        payments.insert(m, key.id());
      }
      CHECK_FALSE(tx.committable());
      CHECK_THROWS_AS(tx.check_committable(), idem::UsageError);
    }
    run(m, "ROLLBACK");
    CHECK(t.count() == 0);
    CHECK(number(m, "SELECT COUNT(*) FROM " + payments.name) == 0);
  }
  SECTION("with autocommit on and no transaction the claim is refused") {
    auto tx = store.bind(m);
    CHECK_THROWS_AS(tx.claim(key, "", {}), idem::UsageError);
    CHECK(t.count() == 0);
  }
  SECTION("standalone operations of a store without a pool are a UsageError") {
    CHECK_THROWS_AS(store.claim(key, "", {}), idem::UsageError);
    CHECK_THROWS_AS(store.pool(), idem::UsageError);
    CHECK_FALSE(store.has_pool());
  }
  CHECK(session_of(m) == session);
  run(m, "DROP TABLE " + payments.name);
}

TEST_CASE("a forgotten commit on a lent handle: rolled back, UsageError, no row") {
  Table t;
  ServicePool service(2);
  const Payments payments(service.handles().front());
  idem::mysql::Store store{{.table = t.name}};
  const idem::Key key{"PAY", "lent-forgotten"};
  for (int delivery = 0; delivery < 3; ++delivery) {
    CHECK_THROWS_AS(idem::mysql::with_transaction(service,
                                                  [&](idem::mysql::Connection& c) {
                                                    auto tx = store.bind(c.native());
                                                    idem::IdempotencyGuard guard{tx, key, ""};
                                                    REQUIRE(guard.acquired());
                                                    payments.insert(c.native(), key.id());
                                                  }),
                    idem::UsageError);
  }
  CHECK(t.count() == 0);
  CHECK(number(service.handles().front(), "SELECT COUNT(*) FROM " + payments.name) == 0);
  run(service.handles().front(), "DROP TABLE " + payments.name);
}

TEST_CASE("a lock wait in the service's own SQL is retried by with_transaction and counted apart") {
  Table t;
  ServicePool service(2);
  MYSQL* holder = service.handles().front();
  const Payments payments(holder);
  payments.insert(holder, "hot-row");
  idem::mysql::Store store{{.table = t.name}};
  idem::Metrics metrics;
  const idem::Options options{.observer = &metrics};

  // The holder keeps the business row locked past the service's 1 s lock wait timeout once.
  run(holder, "START TRANSACTION");
  rows_of(holder, "SELECT id FROM " + payments.name + " WHERE trade_no = 'hot-row' FOR UPDATE");
  std::thread release([&] {
    std::this_thread::sleep_for(1500ms);
    run(holder, "COMMIT");
  });
  int tries = 0;
  std::string first_error;
  auto lend_other = [&](auto&& use) { return use(service.handles().back()); };
  const auto out = idem::mysql::with_transaction(
      lend_other,
      [&](idem::mysql::Connection& c) {
        ++tries;
        auto tx = store.bind(c);
        return idem::run_once(
            tx, idem::Key{"PAY", "hot"}, "",
            [&] {
              try {
                run(c.native(), "UPDATE " + payments.name +
                                    " SET trade_no = 'hot-row' WHERE trade_no = 'hot-row'");
              } catch (const idem::StoreError& e) {
                first_error = e.what();
                throw;
              }
              return 1;
            },
            options);
      },
      {.retry = {.max_attempts = 5, .backoff = 50ms, .max_backoff = 500ms}});
  release.join();
  CHECK(out.verdict() == idem::Verdict::acquired);
  CHECK(tries == 2);
  CHECK_THAT(first_error, Catch::Contains("1205") && Catch::Contains("Lock wait timeout"));
  CHECK(metrics.count("PAY", idem::EventKind::transaction_retried) == 1);
  CHECK(metrics.count("PAY", idem::EventKind::store_error) == 0);
  CHECK(metrics.count("PAY", idem::EventKind::committed) == 1);
  CHECK_THAT(metrics.render(),
             Catch::Contains("idem_store_errors_retried_total{biz_type=\"PAY\"} 1") &&
                 Catch::Contains("idem_store_errors_total{biz_type=\"PAY\"} 0"));
  CHECK(t.count("status = 1") == 1);
  run(holder, "DROP TABLE " + payments.name);
}

TEST_CASE("a StoreError's what() carries the server's message and error_from classifies") {
  ServicePool service(1);
  MYSQL* m = service.handles().front();
  REQUIRE(mysql_query(m, "SELECT * FROM no_such_table_here") != 0);
  const idem::StoreError e = idem::mysql::error_from(m, "probe");
  CHECK_THAT(e.what(), Catch::Contains("probe failed (1146") &&
                           Catch::Contains("no_such_table_here") &&
                           Catch::Contains("doesn't exist"));
  CHECK(e.diagnostics().code == 1146);
  CHECK(e.diagnostics().sqlstate == "42S02");
  CHECK(e.diagnostics().from_server);
  CHECK_FALSE(e.retryable());
  CHECK_NOTHROW(idem::mysql::check(m, 0, "nothing"));
  CHECK(idem::mysql::make_error("x", idem::mysql::code::deadlock, "40001", "Deadlock").retryable());
}

TEST_CASE("a borrowed handle's statements: placeholders outside quotes, values byte for byte") {
  ServicePool service(1);  // ANSI_QUOTES and NO_BACKSLASH_ESCAPES, as the service set them
  MYSQL* m = service.handles().front();
  idem::mysql::Connection c(m);
  const std::string bytes("a'b\\c\"d\0e?`", 12);
  const std::vector<idem::mysql::Param> params{idem::mysql::Param::blob(bytes), std::int64_t{-42},
                                               nullptr};
  auto check_row = [&](const std::vector<idem::mysql::Row>& rows, const std::string& escaped) {
    REQUIRE(rows.size() == 1);
    CHECK(rows[0][0].text() == bytes);
    CHECK(rows[0][1].text() == "what?");
    CHECK(rows[0][2].integer() == -42);
    CHECK(rows[0][3].text() == "it's?");
    CHECK(rows[0][4].text() == escaped);
    CHECK(rows[0][5].is_null());
  };
  // Here a backslash is an ordinary character and "..." quotes an identifier.
  check_row(c.select(R"(SELECT ?, 'what?', ? AS "x?", 'it''s?', 'a\', ?)", params), "a\\");
  run(m, "SET SESSION sql_mode = ''");  // the default: backslash escapes, "..." is a string
  check_row(c.select(R"(SELECT ?, 'what?', ? AS `x?`, "it's?", 'a\'?', ?)", params), "a'?");
  CHECK_THROWS_AS(c.select("SELECT ?, ?", {1}), idem::UsageError);
  CHECK_THROWS_AS(c.select("SELECT ?", {1, 2}), idem::UsageError);
  CHECK_THROWS_AS(c.reconnect(), idem::UsageError);  // never reopened by idem
}

TEST_CASE("a lender that never lends, or swallows a try's exception, is a UsageError") {
  ServicePool service(1);
  MYSQL* m = service.handles().front();
  auto never = [](auto&&) {};
  CHECK_THROWS_WITH(idem::mysql::with_transaction(never, [](idem::mysql::Connection&) {}),
                    Catch::Contains("without calling use"));
  auto swallowing = [&](auto&& use) {
    try {
      use(m);
    } catch (...) {
    }
  };
  CHECK_THROWS_WITH(idem::mysql::with_transaction(swallowing,
                                                  [](idem::mysql::Connection&) -> int {
                                                    throw std::runtime_error("business failed");
                                                  }),
                    Catch::Contains("swallowed"));
  CHECK((m->server_status & SERVER_STATUS_IN_TRANS) == 0);  // the try was rolled back
}
