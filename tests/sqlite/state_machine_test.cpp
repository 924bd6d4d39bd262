// StateMachine transitions on a real SQLite file (a fresh temporary directory per test): the
// SQL idem::sqlite renders, every configuration, idem's connections and a caller's sqlite3*,
// what reaches the file, transactions, and threads on separate connections racing one move.
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/orders.hpp"
#include "../support/sqlite_file.hpp"

namespace {

using idem_test::OrderStatus;
using enum OrderStatus;
using idem::RejectReason;
using idem::sqlite::Connection;
using idem_test::Errors;
using idem_test::order_moves;
using idem_test::order_name;
using idem_test::RawConnection;
using idem_test::run_threads;
using idem_test::TempDir;

idem::StateMachine<OrderStatus> machine(const std::string& table = "t_order") {
  return idem_test::order_machine(table);
}

// A t_order-like business table in its own file, with an audit of every status change
// written by a trigger, so the test sees the moves the database really made.
struct Shop {
  TempDir dir;
  std::filesystem::path file = dir / "shop.db";
  Connection c{file};

  explicit Shop(const std::string& status_type = "INTEGER") {
    c.exec("CREATE TABLE t_order (order_no TEXT NOT NULL PRIMARY KEY, status " + status_type +
           " NOT NULL, version INTEGER NOT NULL DEFAULT 0);"
           "CREATE TABLE t_move (id INTEGER PRIMARY KEY, order_no TEXT NOT NULL, from_status, "
           "to_status);"
           "CREATE TRIGGER t_order_audit AFTER UPDATE ON t_order FOR EACH ROW BEGIN "
           "INSERT INTO t_move (order_no, from_status, to_status) VALUES (OLD.order_no, "
           "OLD.status, NEW.status); END;");
  }

  void add_order(const std::string& order_no, idem::sqlite::Value status = 0) {
    c.execute("INSERT INTO t_order (order_no, status) VALUES (?, ?)", {order_no, status});
  }

  // {status, version} as the table holds them now.
  std::pair<std::string, std::int64_t> row(const std::string& order_no) {
    auto rows = c.query("SELECT status, version FROM t_order WHERE order_no = ?", {order_no});
    REQUIRE(rows.next());
    return {rows.text(0), rows.integer(1)};
  }

  std::int64_t moves() {
    auto rows = c.query("SELECT COUNT(*) FROM t_move");
    REQUIRE(rows.next());
    return rows.integer(0);
  }
};

// Counts the statements a handle runs (sqlite3_trace_v2), to show what reached the file.
struct StatementCounter {
  std::atomic<int> n{0};
  explicit StatementCounter(sqlite3* db) {
    sqlite3_trace_v2(
        db, SQLITE_TRACE_STMT,
        [](unsigned, void* self, void*, void* sql) {
          // Trigger programs are reported too, as "-- TRIGGER name": count statements only.
          const std::string_view text = sql != nullptr ? static_cast<const char*>(sql) : "";
          if (text.substr(0, 2) != "--") ++static_cast<StatementCounter*>(self)->n;
          return 0;
        },
        this);
  }
};

}  // namespace

TEST_CASE("the SQL rendered for SQLite: double quotes, every value a parameter") {
  const auto t = machine().transition("A1001", paid, refunded, 7);
  CHECK(idem::sqlite::update_statement(t) ==
        idem::Statement{R"(UPDATE "t_order" SET "status" = ?, "version" = "version" + 1 WHERE )"
                        R"("order_no" = ? AND "status" = ? AND "version" = ?)",
                        {3, "A1001", 1, std::int64_t{7}}});
  CHECK(idem::sqlite::probe_statement(t) ==
        idem::Statement{R"(SELECT "status", "version" FROM "t_order" WHERE "order_no" = ?)",
                        {"A1001"}});

  const idem::StateMachine<OrderStatus> plain{{.table = "main.t_order",
                                               .key_column = "id",
                                               .status_column = "state",
                                               .status_name = order_name},
                                              order_moves};
  const auto p = plain.transition(42, pending, paid);
  CHECK(idem::sqlite::update_statement(p) ==
        idem::Statement{R"(UPDATE "main"."t_order" SET "state" = ? WHERE "id" = ? AND "state" = ?)",
                        {"PAID", 42, "PENDING"}});
  CHECK(idem::sqlite::probe_statement(p).sql ==
        R"(SELECT "state" FROM "main"."t_order" WHERE "id" = ?)");

  auto bad = t;
  bad.status_column = "status\" = 1 OR \"x";
  CHECK_THROWS_WITH(idem::sqlite::update_statement(bad),
                    Catch::Contains("idem::sqlite: status column") &&
                        Catch::Contains("is not a valid identifier"));
}

TEST_CASE("transitions on SQLite: with a version column") {
  Shop shop;
  const auto m = machine();
  shop.add_order("A1");

  CHECK(idem::sqlite::apply(shop.c, m, "A1", pending, paid, 0).transitioned());
  CHECK(shop.row("A1") == std::pair<std::string, std::int64_t>{"1", 1});

  const auto dup = idem::sqlite::apply(shop.c, m, "A1", pending, paid, 0, {.explain = true});
  CHECK(dup.rejected());
  CHECK(dup.reason == RejectReason::status_moved_on);
  CHECK(dup.status == paid);
  CHECK(dup.stored_status == "1");
  CHECK(dup.version == 1);

  const auto stale = idem::sqlite::apply(shop.c, m, "A1", paid, refunded, 0, {.explain = true});
  CHECK(stale.reason == RejectReason::version_moved_on);
  CHECK(stale.version == 1);

  CHECK(idem::sqlite::apply(shop.c, m, "nope", pending, paid, 0, {.explain = true}).reason ==
        RejectReason::not_found);
  CHECK(idem::sqlite::apply(shop.c, m, "A1", paid, refunded, 0).reason ==
        RejectReason::not_explained);

  CHECK(idem::sqlite::apply(shop.c, m, "A1", paid, refunded, 1));
  CHECK(shop.row("A1") == std::pair<std::string, std::int64_t>{"3", 2});
  CHECK(shop.moves() == 2);
}

TEST_CASE("transitions on SQLite: status only, names, qualified table, integer key") {
  SECTION("compare-and-set on the status alone") {
    Shop shop;
    const idem::StateMachine<OrderStatus> m{{.table = "t_order", .key_column = "order_no"},
                                            order_moves};
    shop.add_order("B1");
    CHECK(idem::sqlite::apply(shop.c, m, "B1", pending, paid));
    const auto again =
        idem::sqlite::apply(shop.c, m, "B1", pending, paid, std::nullopt, {.explain = true});
    CHECK(again.reason == RejectReason::status_moved_on);
    CHECK_FALSE(again.version.has_value());
    CHECK(shop.row("B1") == std::pair<std::string, std::int64_t>{"1", 0});  // version untouched
  }
  SECTION("statuses stored as names") {
    Shop shop("TEXT");
    const idem::StateMachine<OrderStatus> m{{.table = "t_order",
                                             .key_column = "order_no",
                                             .version_column = "version",
                                             .status_name = order_name},
                                            order_moves};
    shop.add_order("C1", "PENDING");
    CHECK(idem::sqlite::apply(shop.c, m, "C1", pending, paid, 0));
    CHECK(idem::sqlite::apply(shop.c, m, "C1", paid, completed, 1));
    const auto late = idem::sqlite::apply(shop.c, m, "C1", paid, refunded, 2, {.explain = true});
    CHECK(late.reason == RejectReason::status_moved_on);
    CHECK(late.status == completed);
    CHECK(late.stored_status == "COMPLETED");
    CHECK(shop.row("C1") == std::pair<std::string, std::int64_t>{"COMPLETED", 2});
  }
  SECTION("a schema-qualified table name") {
    Shop shop;
    shop.add_order("D1");
    CHECK(idem::sqlite::apply(shop.c, machine("main.t_order"), "D1", pending, paid, 0));
    CHECK(shop.row("D1").first == "1");
  }
  SECTION("an integer key") {
    Shop shop;
    shop.c.exec("CREATE TABLE t_item (id INTEGER PRIMARY KEY, status INTEGER NOT NULL)");
    shop.c.execute("INSERT INTO t_item (id, status) VALUES (?, ?)", {7, 0});
    const idem::StateMachine<OrderStatus> m{{.table = "t_item", .key_column = "id"}, order_moves};
    CHECK(idem::sqlite::apply(shop.c, m, std::uint64_t{7}, pending, paid));
    CHECK(
        idem::sqlite::apply(shop.c, m, 7, pending, paid, std::nullopt, {.explain = true}).status ==
        paid);
    // SQLite integers are signed 64-bit: a larger unsigned key is refused, not wrapped.
    CHECK_THROWS_AS(
        idem::sqlite::apply(shop.c, m, std::numeric_limits<std::uint64_t>::max(), pending, paid),
        idem::InvalidArgument);
  }
}

TEST_CASE("on a caller's own sqlite3*: the same answers, and illegal moves never reach it") {
  Shop shop;
  const auto m = machine();
  shop.add_order("E1", 3);
  RawConnection app{shop.file};
  StatementCounter counter{app.db};

  CHECK_THROWS_AS(idem::sqlite::apply(app.db, m, "E1", refunded, refunded, 0, {.explain = true}),
                  idem::IllegalTransition);
  CHECK_THROWS_AS(idem::sqlite::apply(app.db, m, "E1", paid, pending, 0), idem::IllegalTransition);
  CHECK_THROWS_AS(idem::sqlite::apply(app.db, m, "E1", paid, refunded), idem::InvalidArgument);
  CHECK(counter.n == 0);

  // A legal move that is rejected: its UPDATE, then the explaining SELECT.
  const auto r = idem::sqlite::apply(app.db, m, "E1", paid, refunded, 0, {.explain = true});
  CHECK(r.reason == RejectReason::status_moved_on);
  CHECK(r.status == refunded);
  CHECK(counter.n == 2);
  CHECK(shop.moves() == 0);

  shop.add_order("E2");
  CHECK(idem::sqlite::apply(app.db, m, "E2", pending, paid, 0));
  CHECK(counter.n == 3);
  CHECK(shop.row("E2") == std::pair<std::string, std::int64_t>{"1", 1});
  CHECK(sqlite3_get_autocommit(app.db) != 0);  // nothing left open on the caller's handle
}

TEST_CASE("a transition on SQLite commits and rolls back with the transaction it ran in") {
  Shop shop;
  const auto m = machine();
  shop.add_order("G1");
  CHECK_THROWS_AS(
      idem::sqlite::with_transaction(shop.c,
                                     [&](Connection& c) {
                                       REQUIRE(idem::sqlite::apply(c, m, "G1", pending, paid, 0));
                                       throw std::runtime_error("later step failed");
                                     }),
      std::runtime_error);
  CHECK(shop.row("G1") == std::pair<std::string, std::int64_t>{"0", 0});

  RawConnection app{shop.file};
  const bool moved = idem::sqlite::with_transaction(app.db, [&](sqlite3* db) {
    return idem::sqlite::apply(db, m, "G1", pending, paid, 0).transitioned();
  });
  CHECK(moved);
  CHECK(shop.row("G1") == std::pair<std::string, std::int64_t>{"1", 1});
}

TEST_CASE("a key column that is not unique is a UsageError on SQLite") {
  Shop shop;
  shop.c.exec("CREATE TABLE t_dup (order_no TEXT NOT NULL, status INTEGER NOT NULL)");
  shop.c.exec("INSERT INTO t_dup VALUES ('X', 0), ('X', 0)");
  const idem::StateMachine<OrderStatus> m{{.table = "t_dup", .key_column = "order_no"},
                                          order_moves};
  CHECK_THROWS_WITH(idem::sqlite::with_transaction(
                        shop.c,
                        [&](Connection& c) {
                          return idem::sqlite::apply(c, m, "X", pending, paid).transitioned();
                        }),
                    Catch::Contains("must be a primary or unique key"));
  auto rows = shop.c.query("SELECT COUNT(*) FROM t_dup WHERE status = 0");
  REQUIRE(rows.next());
  CHECK(rows.integer(0) == 2);  // rolled back
}

TEST_CASE("threads on separate SQLite connections race one legal transition: one wins") {
  constexpr int threads = 16;
  Shop shop;
  const auto m = machine();
  shop.add_order("R1");
  const bool in_transaction = GENERATE(false, true);
  INFO((in_transaction ? "each in its own transaction" : "autocommit"));

  std::mutex mutex;
  std::vector<idem::TransitionResult<OrderStatus>> results;
  Errors errors;
  run_threads(
      threads,
      [&](int) {
        // Each thread has its connection and has read the order (pending, version 0) before
        // anyone moves.
        auto c = std::make_unique<Connection>(shop.file);
        auto rows = c->query("SELECT status, version FROM t_order WHERE order_no = ?", {"R1"});
        if (!rows.next() || rows.integer(1) != 0) errors.add("the order was not at version 0");
        return c;
      },
      [&](int, std::unique_ptr<Connection>& c) {
        try {
          auto move = [&](Connection& on) {
            return idem::sqlite::apply(on, m, "R1", pending, paid, 0, {.explain = true});
          };
          auto r = in_transaction ? idem::sqlite::with_transaction(*c, move) : move(*c);
          std::lock_guard lock(mutex);
          results.push_back(std::move(r));
        } catch (const std::exception& e) {
          errors.add(e.what());
        }
      });
  INFO("first error: " << errors.first());
  REQUIRE(errors.size() == 0);
  REQUIRE(results.size() == threads);
  int won = 0;
  int stale = 0;
  for (const auto& r : results) {
    if (r.transitioned()) ++won;
    if (r.rejected() && r.reason == RejectReason::status_moved_on && r.status == paid &&
        r.version == 1)
      ++stale;
  }
  CHECK(won == 1);
  CHECK(stale == threads - 1);
  CHECK(shop.row("R1") == std::pair<std::string, std::int64_t>{"1", 1});
  CHECK(shop.moves() == 1);
}

TEST_CASE("guard + state machine in one SQLite transaction: duplicates replay, moves once") {
  TempDir dir;
  idem::sqlite::Store store{dir / "pay.db"};
  {
    auto c = store.pool().acquire();
    c->exec(
        "CREATE TABLE t_order (order_no TEXT PRIMARY KEY, status INTEGER NOT NULL, "
        "version INTEGER NOT NULL DEFAULT 0)");
    c->execute("INSERT INTO t_order (order_no, status) VALUES (?, 0)", {"A1"});
  }
  const auto m = machine();
  std::atomic<int> paid_now{0};
  std::atomic<int> replayed{0};
  std::atomic<int> rejected{0};
  Errors errors;
  // Callbacks for the same order: 12 retries of trade CH-1 and 4 of a second payment, CH-2.
  run_threads(16, [&](int t) {
    const std::string trade_no = t % 4 == 0 ? "CH-2" : "CH-1";
    try {
      idem::sqlite::with_transaction(store.pool(), [&](Connection& c) {
        auto tx = store.bind(c);
        idem::IdempotencyGuard guard{tx, idem::Key{"PAY", trade_no}, ""};
        if (guard.verdict() == idem::Verdict::replayed) return ++replayed;
        if (!guard.acquired()) throw std::runtime_error("in progress inside BEGIN IMMEDIATE");
        std::int64_t version = 0;
        {
          auto rows = c.query("SELECT version FROM t_order WHERE order_no = ?", {"A1"});
          if (rows.next()) version = rows.integer(0);
        }
        const auto r = idem::sqlite::apply(c, m, "A1", pending, paid, version, {.explain = true});
        guard.commit(nlohmann::json{{"paid", r.transitioned()}});
        return r ? ++paid_now : ++rejected;
      });
    } catch (const std::exception& e) {
      errors.add(e.what());
    }
  });
  INFO("first error: " << errors.first());
  REQUIRE(errors.size() == 0);
  CHECK(paid_now == 1);   // the first of the two trade numbers to claim
  CHECK(rejected == 1);   // the other one: the order had moved on
  CHECK(replayed == 14);  // every retry, from the record
  CHECK(idem_test::count(store) == 2);
}
