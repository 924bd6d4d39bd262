#pragma once
// A t_order-like business table on the test PostgreSQL (tests/pg/state_machine_test.cpp,
// async_state_machine_test.cpp).
#include <memory>
#include <string>
#include <utility>

#include <catch2/catch.hpp>
#include <idem/pg.hpp>

#include "orders.hpp"
#include "pg_server.hpp"

namespace idem_test {

// A t_order-like business table, a ledger of executed refunds and an audit of every status
// change written by a trigger, so the test sees the moves the database really made.
struct PgShop {
  std::shared_ptr<idem::pg::Pool> pool;
  std::string orders = idem_test::unique_pg_table("t_order");
  std::string refunds = idem_test::unique_pg_table("t_refund");
  std::string moves = idem_test::unique_pg_table("t_move");

  explicit PgShop(std::shared_ptr<idem::pg::Pool> p, const std::string& status_type = "smallint")
      : pool(std::move(p)) {
    auto c = pool->acquire();
    c->query("CREATE TABLE " + orders + " (order_no text PRIMARY KEY, status " + status_type +
             " NOT NULL, version integer NOT NULL DEFAULT 0);"
             // No unique key on purpose: a second refund of one order is a second row.
             "CREATE TABLE " +
             refunds + " (id bigserial PRIMARY KEY, order_no text NOT NULL);" + "CREATE TABLE " +
             moves + " (id bigserial PRIMARY KEY, order_no text NOT NULL, from_status " +
             status_type + ", to_status " + status_type + ");" + "CREATE FUNCTION " + moves +
             "_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO " + moves +
             " (order_no, from_status, to_status) VALUES (OLD.order_no, OLD.status, "
             "NEW.status); RETURN NEW; END $$;" +
             "CREATE TRIGGER " + moves + "_audit AFTER UPDATE ON " + orders +
             " FOR EACH ROW EXECUTE FUNCTION " + moves + "_audit()");
  }
  ~PgShop() {
    try {
      pool->acquire()->query("DROP TABLE IF EXISTS " + orders + ", " + refunds + ", " + moves +
                             "; DROP FUNCTION IF EXISTS " + moves + "_audit()");
    } catch (...) {
    }
  }
  PgShop(const PgShop&) = delete;
  PgShop& operator=(const PgShop&) = delete;

  idem::StateMachine<OrderStatus> machine() const {
    return {{.table = orders, .key_column = "order_no", .version_column = "version"}, order_moves};
  }
  void add_order(const std::string& order_no, const idem::SqlValue& status = 0) {
    auto c = pool->acquire();
    idem::pg::execute(
        *c, {"INSERT INTO " + orders + " (order_no, status) VALUES ($1, $2)", {order_no, status}});
  }
  // {status, version} as the table holds them now.
  std::pair<std::string, long long> row(const std::string& order_no) {
    auto c = pool->acquire();
    const auto r =
        c->exec("SELECT status, version FROM " + orders + " WHERE order_no = $1", {order_no});
    REQUIRE(r.rows() == 1);
    return {std::string(r.text(0, 0)), *r.integer(0, 1)};
  }
  long long scalar(const std::string& sql) {
    auto c = pool->acquire();
    return *c->exec(sql, {}).integer(0, 0);
  }
};

}  // namespace idem_test
