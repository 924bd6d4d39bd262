#pragma once
// A t_order-like business table on the test MariaDB, with a ledger of executed refunds and an
// audit of every status change written by a trigger, so a test sees the moves the database
// really made (tests/mysql/state_machine_test.cpp, async_state_machine_test.cpp).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/mysql.hpp>

#include "mysql_server.hpp"
#include "orders.hpp"

namespace idem_test {

inline long long to_ll(const idem::mysql::Cell& v) {
  return v.is_null() ? -1 : std::stoll(*v.to_text());
}

struct Shop {
  std::shared_ptr<idem::mysql::Pool> pool;
  std::string orders = idem_test::unique_table("t_order");
  std::string refunds = idem_test::unique_table("t_refund");
  std::string moves = idem_test::unique_table("t_move");

  explicit Shop(std::shared_ptr<idem::mysql::Pool> p, const std::string& status_type = "TINYINT")
      : pool(std::move(p)) {
    auto c = pool->acquire();
    c->query("CREATE TABLE `" + orders + "` (order_no VARCHAR(32) NOT NULL PRIMARY KEY, status " +
             status_type + " NOT NULL, version INT NOT NULL DEFAULT 0) ENGINE=InnoDB");
    // No unique key on purpose: a second refund of one order shows up as a second row.
    c->query("CREATE TABLE `" + refunds +
             "` (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_no VARCHAR(32) NOT NULL, KEY "
             "(order_no)) ENGINE=InnoDB");
    c->query("CREATE TABLE `" + moves +
             "` (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_no VARCHAR(32) NOT NULL, "
             "from_status " +
             status_type + ", to_status " + status_type + ") ENGINE=InnoDB");
    c->query("CREATE TRIGGER `" + moves + "_audit` AFTER UPDATE ON `" + orders +
             "` FOR EACH ROW INSERT INTO `" + moves +
             "` (order_no, from_status, to_status) VALUES (OLD.order_no, OLD.status, NEW.status)");
  }
  ~Shop() {
    try {
      auto c = pool->acquire();
      c->query("DROP TABLE IF EXISTS `" + orders + "`, `" + refunds + "`, `" + moves + "`");
    } catch (...) {
    }
  }

  idem::StateMachine<OrderStatus> machine() const {
    return {{.table = orders, .key_column = "order_no", .version_column = "version"}, order_moves};
  }

  void add_order(const std::string& order_no, const idem::SqlValue& status = 0) {
    auto c = pool->acquire();
    idem::mysql::execute(
        *c, {"INSERT INTO `" + orders + "` (order_no, status) VALUES (?, ?)", {order_no, status}});
  }

  // {status, version} as the table holds them now.
  std::pair<std::string, long long> row(const std::string& order_no) {
    auto c = pool->acquire();
    const auto rows =
        c->select("SELECT status, version FROM `" + orders + "` WHERE order_no = ?", {order_no});
    REQUIRE(rows.size() == 1);
    return {rows[0][0].to_text().value_or("NULL"), to_ll(rows[0][1])};
  }

  std::vector<idem::mysql::Row> query(const std::string& sql) {
    auto c = pool->acquire();
    return c->select(sql, {});
  }
};

}  // namespace idem_test
