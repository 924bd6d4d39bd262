// idem retrofitted into an existing payment service that keeps its own MySQL connections.
//
// The service already has a pool of raw MYSQL* handles (ServicePool below stands for it), its
// own SQL on them (select-then-update of pay_order, an INSERT into payment), its own session
// settings (a UTC+8 clock) and its own transactions. idem joins those transactions without a
// pool of its own and without touching a session:
//  - pay-notify: idem::mysql::with_transaction(lend, body) borrows a handle for each try, the
//    body binds the store to it and runs the service's SQL on c.native(); the service's
//    errors become idem::StoreError through idem::mysql::check, so a deadlock in its own
//    UPDATE runs the transaction again;
//  - refund: the service's own transaction as an object (idem::mysql::Transaction on a handle
//    of its pool): it begins, the refund claims through it, and commit() commits only a
//    finished refund, or rolls back; idem::retry runs it again after a deadlock.
// Gateway threads deliver every callback several times; the program checks that each trade
// was paid once and refunded once, and exits non-zero otherwise.
//
//   idem_own_connections --mysql-socket PATH [--mysql-database NAME]   (or IDEM_MYSQL_SOCKET)
#include <mysql.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <idem/idem.hpp>
#include <idem/mysql.hpp>

namespace {

// The service's pool, as it was before idem: handles opened with the service's settings.
class ServicePool {
 public:
  ServicePool(const std::string& socket, const std::string& database, std::size_t size) {
    for (std::size_t i = 0; i < size; ++i) {
      MYSQL* m = mysql_init(nullptr);
      if (m == nullptr) throw std::runtime_error("mysql_init failed");
      mysql_options(m, MYSQL_INIT_COMMAND, "SET time_zone = '+08:00'");  // the service's clock
      if (mysql_real_connect(m, "localhost", "root", nullptr, database.c_str(), 0, socket.c_str(),
                             0) == nullptr) {
        const std::string why = mysql_error(m);
        mysql_close(m);
        throw std::runtime_error("connect to " + socket + ": " + why);
      }
      idle_.push_back(m);
    }
  }
  ~ServicePool() {
    for (MYSQL* m : idle_)
      mysql_close(m);
  }
  ServicePool(const ServicePool&) = delete;
  ServicePool& operator=(const ServicePool&) = delete;

  // RAII lease of one handle, the service's usual way to use the pool.
  class Lease {
   public:
    explicit Lease(ServicePool& pool) : pool_(pool), m_(pool.take()) {}
    ~Lease() { pool_.give_back(m_); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    MYSQL* get() const { return m_; }

   private:
    ServicePool& pool_;
    MYSQL* m_;
  };

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

  std::vector<MYSQL*> idle_;
  std::mutex mutex_;
  std::condition_variable cv_;
};

// The service's SQL helpers; their errors classified the way idem classifies its own.
void run(MYSQL* m, const std::string& sql) {
  idem::mysql::check(m, mysql_query(m, sql.c_str()), "service SQL");
}

std::string value(MYSQL* m, const std::string& sql) {
  run(m, sql);
  MYSQL_RES* res = mysql_store_result(m);
  if (res == nullptr) throw idem::mysql::error_from(m, "service SQL result");
  MYSQL_ROW row = mysql_fetch_row(res);
  std::string v = row != nullptr && row[0] != nullptr ? row[0] : "";
  mysql_free_result(res);
  return v;
}

// Trade numbers here are digits only, so the service may splice them into its SQL.
std::string trade_no(int i) {
  return "20261201" + std::to_string(100000 + i);
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket = std::getenv("IDEM_MYSQL_SOCKET") ? std::getenv("IDEM_MYSQL_SOCKET") : "";
  std::string database = "idem_test";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--mysql-socket") socket = argv[i + 1];
    if (flag == "--mysql-database") database = argv[i + 1];
  }
  if (socket.empty()) {
    std::fprintf(stderr, "usage: %s --mysql-socket PATH [--mysql-database NAME]\n", argv[0]);
    return 2;
  }

  try {
    ServicePool pool(socket, database, 8);
    // The service's way of lending a handle, which is all with_transaction needs.
    auto lend = [&](auto&& use) {
      ServicePool::Lease lease(pool);
      return use(lease.get());
    };
    idem::mysql::Store store{{.table = "example_idempotent_record"}};  // no pool of its own
    {
      ServicePool::Lease lease(pool);
      MYSQL* m = lease.get();
      store.ensure_schema(m);
      run(m, "DROP TABLE IF EXISTS example_pay_order, example_payment");
      run(m,
          "CREATE TABLE example_pay_order (trade_no VARCHAR(32) PRIMARY KEY, status VARCHAR(16) "
          "NOT NULL, updated_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB");
      run(m,
          "CREATE TABLE example_payment (id BIGINT AUTO_INCREMENT PRIMARY KEY, trade_no "
          "VARCHAR(32) NOT NULL, kind VARCHAR(8) NOT NULL, at DATETIME NOT NULL DEFAULT "
          "CURRENT_TIMESTAMP) ENGINE=InnoDB");
      run(m, "DELETE FROM example_idempotent_record");
      for (int t = 0; t < 50; ++t)
        run(m, "INSERT INTO example_pay_order (trade_no, status) VALUES ('" + trade_no(t) +
                   "', 'pending')");
    }

    // pay-notify: the service's select-then-update, guarded, in one transaction per try.
    auto pay_notify = [&](const std::string& trade) {
      return idem::mysql::with_transaction(lend, [&](idem::mysql::Connection& c) {
        MYSQL* m = c.native();
        auto tx = store.bind(c);
        return idem::run_once(tx, idem::Key{"PAY", trade}, "", [&] {
          const std::string status = value(m,
                                           "SELECT status FROM example_pay_order WHERE "
                                           "trade_no = '" +
                                               trade + "' FOR UPDATE");
          if (status != "pending") throw idem::PermanentFailure({{"error", "not_pending"}});
          run(m,
              "UPDATE example_pay_order SET status = 'paid', updated_at = NOW() WHERE trade_no "
              "= '" +
                  trade + "'");
          run(m, "INSERT INTO example_payment (trade_no, kind) VALUES ('" + trade + "', 'pay')");
          return std::string("paid");
        });
      });
    };

    // refund: the service's own transaction, as an object: it begins, the refund's claim is
    // made in it, and commit() commits only a finished refund. idem::retry runs it again after
    // a deadlock.
    auto refund = [&](const std::string& trade) {
      return idem::retry(idem::RetryPolicy{.max_attempts = 5}, "refund", "", [&](int) {
        ServicePool::Lease lease(pool);
        MYSQL* m = lease.get();
        idem::mysql::Transaction tx(store, m);
        const auto out = idem::run_once(tx, idem::Key{"REFUND", trade}, "", [&] {
          run(m, "UPDATE example_pay_order SET status = 'refunded' WHERE trade_no = '" + trade +
                     "' AND status = 'paid'");
          run(m, "INSERT INTO example_payment (trade_no, kind) VALUES ('" + trade + "', 'refund')");
          return std::string("refunded");
        });
        tx.commit();
        return out.verdict();
      });
    };

    // 8 gateway threads deliver each payment callback three times; then each refund twice.
    std::atomic<int> failures{0};
    auto deliver = [&](int copies, auto&& handle) {
      std::atomic<int> next{0};
      std::vector<std::thread> gateway;
      for (int g = 0; g < 8; ++g) {
        gateway.emplace_back([&] {
          for (int i = next++; i < 50 * copies; i = next++) {
            const std::string trade = trade_no(i % 50);
            try {
              handle(trade);
            } catch (const std::exception& e) {
              std::fprintf(stderr, "delivery of %s failed: %s\n", trade.c_str(), e.what());
              ++failures;
            }
          }
        });
      }
      for (auto& t : gateway)
        t.join();
    };
    deliver(3, pay_notify);
    deliver(2, refund);

    ServicePool::Lease lease(pool);
    MYSQL* m = lease.get();
    const int pays = std::stoi(value(m, "SELECT COUNT(*) FROM example_payment WHERE kind='pay'"));
    const int refunds =
        std::stoi(value(m, "SELECT COUNT(*) FROM example_payment WHERE kind='refund'"));
    const int refunded =
        std::stoi(value(m, "SELECT COUNT(*) FROM example_pay_order WHERE status = 'refunded'"));
    const std::string tz = value(m, "SELECT @@time_zone");
    std::printf(
        "250 deliveries for 50 trades: %d payments, %d refunds, %d orders refunded, %d "
        "failed deliveries; session time_zone still %s\n",
        pays, refunds, refunded, failures.load(), tz.c_str());
    run(m, "DROP TABLE example_pay_order, example_payment, example_idempotent_record");
    const bool ok =
        pays == 50 && refunds == 50 && refunded == 50 && failures == 0 && tz == "+08:00";
    std::puts(ok ? "OK: every trade paid once and refunded once"
                 : "FAILED: a trade was not handled exactly once");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
