// StateMachine transitions on a real PostgreSQL: the SQL idem::pg renders for them, every
// configuration run on the server, idem's connections and the service's PGconn*, transactions
// under READ COMMITTED and REPEATABLE READ, a 50-thread race on one row, and the articles'
// incident replayed through guard + state machine in one transaction (and without the state
// machine, where it refunds twice).
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "../support/incident.hpp"
#include "../support/orders.hpp"
#include "../support/pg_server.hpp"
#include "../support/pg_shop.hpp"
#include "../support/threads.hpp"

namespace {

using idem_test::OrderStatus;
using enum OrderStatus;
using idem::RejectReason;
using idem::pg::Connection;
using idem_test::Errors;
using idem_test::order_moves;
using idem_test::order_name;
using idem_test::PgShop;

}  // namespace

TEST_CASE("the SQL rendered for PostgreSQL: double quotes - numbered placeholders") {
  const idem::StateMachine<OrderStatus> versioned{
      {.table = "t_order", .key_column = "order_no", .version_column = "version"}, order_moves};
  const auto t = versioned.transition("A1001", paid, refunded, 7);
  CHECK(idem::pg::update_statement(t) ==
        idem::Statement{"UPDATE \"t_order\" SET \"status\" = $1, \"version\" = \"version\" + 1 "
                        "WHERE \"order_no\" = $2 AND \"status\" = $3 AND \"version\" = $4",
                        {3, "A1001", 1, std::int64_t{7}}});
  CHECK(idem::pg::probe_statement(t) ==
        idem::Statement{"SELECT \"status\", \"version\" FROM \"t_order\" WHERE \"order_no\" = $1",
                        {"A1001"}});
  const idem::StateMachine<OrderStatus> plain{{.table = "shop.t_order",
                                               .key_column = "id",
                                               .status_column = "state",
                                               .status_name = order_name},
                                              order_moves};
  CHECK(idem::pg::update_statement(plain.transition(42, pending, paid)) ==
        idem::Statement{
            "UPDATE \"shop\".\"t_order\" SET \"state\" = $1 WHERE \"id\" = $2 AND \"state\" = $3",
            {"PAID", 42, "PENDING"}});
  auto bad = t;
  bad.key_column = "order_no\" = 1 OR \"x";
  CHECK_THROWS_AS(idem::pg::update_statement(bad), idem::InvalidArgument);
}

TEST_CASE("transitions on PostgreSQL: versioned - status only - names - illegal moves") {
  auto pool = idem_test::make_pg_pool(2);
  auto c = pool->acquire();
  SECTION("with a version column") {
    PgShop shop(pool);
    const auto m = shop.machine();
    shop.add_order("A1");
    CHECK(idem::pg::apply(*c, m, "A1", pending, paid, 0).transitioned());
    CHECK(shop.row("A1") == std::pair<std::string, long long>{"1", 1});
    const auto dup = idem::pg::apply(*c, m, "A1", pending, paid, 0, {.explain = true});
    CHECK(dup.reason == RejectReason::status_moved_on);
    CHECK(dup.status == paid);
    CHECK(dup.version == 1);
    CHECK(idem::pg::apply(*c, m, "A1", paid, refunded, 0, {.explain = true}).reason ==
          RejectReason::version_moved_on);
    CHECK(idem::pg::apply(*c, m, "nope", pending, paid, 0, {.explain = true}).reason ==
          RejectReason::not_found);
    CHECK(idem::pg::apply(*c, m, "A1", paid, refunded, 0).reason == RejectReason::not_explained);
    CHECK(idem::pg::apply(*c, m, "A1", paid, refunded, 1));
    CHECK(shop.row("A1") == std::pair<std::string, long long>{"3", 2});
    // Illegal moves are refused before anything is sent: the audit saw two moves only.
    CHECK_THROWS_AS(idem::pg::apply(*c, m, "A1", refunded, refunded, 2), idem::IllegalTransition);
    CHECK_THROWS_AS(idem::pg::apply(*c, m, "A1", paid, pending, 2), idem::IllegalTransition);
    CHECK(shop.scalar("SELECT count(*) FROM " + shop.moves) == 2);
  }
  SECTION("statuses stored as names, compared on the status alone") {
    PgShop shop(pool, "text");
    const idem::StateMachine<OrderStatus> m{
        {.table = shop.orders, .key_column = "order_no", .status_name = order_name}, order_moves};
    shop.add_order("C1", "PENDING");
    CHECK(idem::pg::apply(*c, m, "C1", pending, paid));
    const auto late = idem::pg::apply(*c, m, "C1", pending, paid, std::nullopt, {.explain = true});
    CHECK(late.reason == RejectReason::status_moved_on);
    CHECK(late.stored_status == "PAID");
    CHECK(shop.row("C1") == std::pair<std::string, long long>{"PAID", 0});
  }
  SECTION("a key column that is not unique is a UsageError, and the transaction rolls back") {
    const std::string table = idem_test::unique_pg_table("t_dup");
    c->query("CREATE TABLE " + table + " (order_no text NOT NULL, status smallint NOT NULL);" +
             "INSERT INTO " + table + " VALUES ('X', 0), ('X', 0)");
    const idem::StateMachine<OrderStatus> m{{.table = table, .key_column = "order_no"},
                                            order_moves};
    CHECK_THROWS_WITH(idem::pg::with_transaction(
                          *pool,
                          [&](Connection& tx) {
                            return idem::pg::apply(tx, m, "X", pending, paid).transitioned();
                          }),
                      Catch::Contains("must be a primary or unique key"));
    CHECK(*c->exec("SELECT count(*) FROM " + table + " WHERE status = 0", {}).integer(0, 0) == 2);
    c->query("DROP TABLE " + table);
  }
}

TEST_CASE(
    "pg transitions in transactions: the latest row under READ COMMITTED - a serialization "
    "failure under REPEATABLE READ - rolled back with the transaction") {
  auto pool = idem_test::make_pg_pool(3);
  PgShop shop(pool);
  const auto m = shop.machine();
  shop.add_order("F1");
  shop.add_order("F2");
  shop.add_order("G1");
  auto a = pool->acquire();
  auto b = pool->acquire();
  const std::string read = "SELECT status FROM " + shop.orders + " WHERE order_no = $1";

  a->query("BEGIN");  // READ COMMITTED
  CHECK(a->exec(read, {"F1"}).text(0, 0) == "0");
  CHECK(idem::pg::apply(*b, m, "F1", pending, paid, 0));  // someone else, committed
  const auto r = idem::pg::apply(*a, m, "F1", pending, paid, 0, {.explain = true});
  CHECK(r.reason == RejectReason::status_moved_on);
  CHECK(r.version == 1);
  a->query("ROLLBACK");

  a->query("BEGIN ISOLATION LEVEL REPEATABLE READ");
  CHECK(a->exec(read, {"F2"}).text(0, 0) == "0");  // the snapshot: pending, version 0
  CHECK(idem::pg::apply(*b, m, "F2", pending, paid, 0));
  try {
    (void)idem::pg::apply(*a, m, "F2", pending, paid, 0, {.explain = true});
    FAIL("a move against a row changed after the snapshot went through");
  } catch (const idem::StoreError& e) {
    CHECK(e.retryable());
    CHECK(e.diagnostics().sqlstate == "40001");
  }
  a->query("ROLLBACK");

  CHECK_THROWS_AS(
      idem::pg::with_transaction(*pool,
                                 [&](Connection& c) {
                                   REQUIRE(idem::pg::apply(c, m, "G1", pending, paid, 0));
                                   throw std::runtime_error("a later step failed");
                                 }),
      std::runtime_error);
  CHECK(shop.row("G1") == std::pair<std::string, long long>{"0", 0});
}

TEST_CASE("pg transitions on the service's own PGconn*: the same answers, its session left alone") {
  auto pool = idem_test::make_pg_pool(2);
  PgShop shop(pool);
  const auto m = shop.machine();
  shop.add_order("H1");
  PGconn* conn = PQconnectdb(idem_test::pg_conninfo().c_str());
  struct Finish {
    PGconn* c;
    ~Finish() { PQfinish(c); }
  } finish{conn};
  REQUIRE(PQstatus(conn) == CONNECTION_OK);
  CHECK(idem::pg::apply(conn, m, "H1", pending, paid, 0));
  const auto dup = idem::pg::apply(conn, m, "H1", pending, paid, 0, {.explain = true});
  CHECK(dup.reason == RejectReason::status_moved_on);
  CHECK(dup.version == 1);
  CHECK(shop.row("H1") == std::pair<std::string, long long>{"1", 1});
  CHECK(PQtransactionStatus(conn) == PQTRANS_IDLE);
  PGresult* r = PQexec(conn, "SELECT count(*) FROM pg_settings WHERE source = 'session'");
  CHECK(std::string(PQgetvalue(r, 0, 0)) == "0");
  PQclear(r);
}

TEST_CASE("pg: 50 threads race the same legal transition on one row - exactly one wins") {
  constexpr int threads = 50;
  auto pool = idem_test::make_pg_pool(threads);
  PgShop shop(pool);
  const auto m = shop.machine();
  shop.add_order("R1");
  std::mutex mutex;
  std::vector<idem::TransitionResult<OrderStatus>> results;
  Errors errors;
  idem_test::run_threads(
      threads,
      [&](int) {  // each thread holds its connection and has read the order before anyone moves
        auto handle = std::make_unique<idem::pg::Pool::Handle>(pool->acquire());
        (void)(*handle)->exec("SELECT status FROM " + shop.orders + " WHERE order_no = 'R1'", {});
        return handle;
      },
      [&](int, std::unique_ptr<idem::pg::Pool::Handle>& handle) {
        try {
          auto r = idem::pg::apply(**handle, m, "R1", pending, paid, 0, {.explain = true});
          std::lock_guard lock(mutex);
          results.push_back(std::move(r));
        } catch (const std::exception& e) {
          errors.add(e.what());
        }
      });
  INFO("first error: " << errors.first());
  REQUIRE(errors.size() == 0);
  REQUIRE(results.size() == threads);
  int won = 0, stale = 0;
  for (const auto& r : results) {
    if (r.transitioned()) ++won;
    if (r.rejected() && r.stale() && r.status == paid && r.version == 1) ++stale;
  }
  CHECK(won == 1);
  CHECK(stale == threads - 1);
  CHECK(shop.scalar("SELECT count(*) FROM " + shop.moves) == 1);
}

namespace {

using idem_test::Incident;

struct PgIncidentOutcome {
  std::map<std::string, std::string> final_status;
  std::map<std::string, long long> refunds;
  long long illegal_moves = 0;
  long long moves = 0;
  long long pay_records = 0;
  long long refund_records = 0;
  int pay_replayed = 0;
  int refund_rejected = 0;
};

// Each callback, then its refund attempt, each one transaction holding the guard's record and
// the business writes. With the machine, status changes go through it; without, they are the
// incident's plain UPDATEs of the status.
PgIncidentOutcome replay_pg_incident(bool with_machine, Errors& errors) {
  idem_test::PgTable records(16);
  PgShop shop(records.pool);
  const Incident incident;
  for (int i = 0; i < Incident::orders; ++i)
    shop.add_order(Incident::order_no(i));
  const auto machine = shop.machine();
  std::atomic<int> pay_replayed{0}, refund_rejected{0};
  const auto version_of = [&](Connection& c, const std::string& order_no) {
    return *c.exec("SELECT version FROM " + shop.orders + " WHERE order_no = $1", {order_no})
                .integer(0, 0);
  };
  const int n = static_cast<int>(incident.callbacks.size());
  idem_test::run_threads(n, [&](int t) {
    const auto& cb = incident.callbacks[static_cast<std::size_t>(t)];
    try {
      const auto pay = idem::pg::with_transaction(records.store.pool(), [&](Connection& c) {
        auto tx = records.store.bind(c);
        idem::IdempotencyGuard guard{tx, idem::Key{"PAY", cb.trade_no}, ""};
        if (!guard.acquired()) return guard.verdict();
        const bool moved =
            with_machine
                ? idem::pg::apply(c, machine, cb.order_no, pending, paid,
                                  version_of(c, cb.order_no))
                      .transitioned()
                : c.execute("UPDATE " + shop.orders +
                                " SET status = 1, version = version + 1 WHERE order_no = $1",
                            {cb.order_no}) == 1;
        guard.commit(nlohmann::json{{"paid", moved}});
        return idem::Verdict::acquired;
      });
      if (pay == idem::Verdict::replayed) ++pay_replayed;
      const bool refunded_now =
          idem::pg::with_transaction(records.store.pool(), [&](Connection& c) {
            auto tx = records.store.bind(c);
            idem::IdempotencyGuard guard{
                tx, idem::Key{"REFUND", cb.trade_no + ":" + std::to_string(t)}, ""};
            if (!guard.acquired()) throw std::runtime_error("a fresh refund key was not acquired");
            const bool moved = with_machine
                                   ? idem::pg::apply(c, machine, cb.order_no, paid, refunded,
                                                     version_of(c, cb.order_no))
                                         .transitioned()
                                   : c.execute("UPDATE " + shop.orders +
                                                   " SET status = 3, version = version + 1 WHERE "
                                                   "order_no = $1",
                                               {cb.order_no}) == 1;
            if (moved)
              c.execute("INSERT INTO " + shop.refunds + " (order_no) VALUES ($1)", {cb.order_no});
            guard.commit(nlohmann::json{{"refunded", moved}});
            return moved;
          });
      if (!refunded_now) ++refund_rejected;
    } catch (const std::exception& e) {
      errors.add(e.what());
    }
  });
  PgIncidentOutcome out;
  auto c = records.pool->acquire();
  const auto statuses = c->exec("SELECT order_no, status::text FROM " + shop.orders, {});
  for (int i = 0; i < statuses.rows(); ++i)
    out.final_status[std::string(statuses.text(i, 0))] = std::string(statuses.text(i, 1));
  const auto refunds =
      c->exec("SELECT order_no, count(*) FROM " + shop.refunds + " GROUP BY order_no", {});
  for (int i = 0; i < refunds.rows(); ++i)
    out.refunds[std::string(refunds.text(i, 0))] = *refunds.integer(i, 1);
  const auto moves = c->exec("SELECT from_status, to_status FROM " + shop.moves, {});
  for (int i = 0; i < moves.rows(); ++i) {
    ++out.moves;
    if (!machine.can(static_cast<OrderStatus>(*moves.integer(i, 0)),
                     static_cast<OrderStatus>(*moves.integer(i, 1))))
      ++out.illegal_moves;
  }
  out.pay_records = records.count("biz_type = 'PAY' AND status = 1");
  out.refund_records = records.count("biz_type = 'REFUND' AND status = 1");
  out.pay_replayed = pay_replayed;
  out.refund_rejected = refund_rejected;
  return out;
}

}  // namespace

TEST_CASE("pg: the incident replayed through guard + state machine in one transaction") {
  Errors errors;
  const PgIncidentOutcome out = replay_pg_incident(true, errors);
  INFO("first error: " << errors.first());
  REQUIRE(errors.size() == 0);
  REQUIRE(out.final_status.size() == Incident::orders);
  for (const auto& [order_no, status] : out.final_status) {
    INFO(order_no);
    CHECK(status == "3");  // paid once, then refunded once
  }
  long long refunds = 0;
  for (const auto& [order_no, n] : out.refunds) {
    INFO(order_no);
    CHECK(n == 1);
    refunds += n;
  }
  CHECK(refunds == Incident::orders);
  CHECK(out.illegal_moves == 0);
  CHECK(out.moves == 2 * Incident::orders);
  CHECK(out.pay_records == Incident::orders);
  CHECK(out.refund_records == Incident::orders + Incident::duplicates);
  CHECK(out.pay_replayed == Incident::duplicates);
  CHECK(out.refund_rejected == Incident::duplicates);
}

TEST_CASE("pg: the incident replayed without the state machine refunds orders twice") {
  Errors errors;
  const PgIncidentOutcome out = replay_pg_incident(false, errors);
  INFO("first error: " << errors.first());
  REQUIRE(errors.size() == 0);
  long long refunds = 0, refunded_twice = 0;
  for (const auto& [order_no, n] : out.refunds) {
    refunds += n;
    if (n > 1) ++refunded_twice;
  }
  CHECK(out.pay_records == Incident::orders);                 // the PAY guard still held ...
  CHECK(refunds == Incident::orders + Incident::duplicates);  // ... but every refund ran
  CHECK(refunded_twice >= 1);
  CHECK(out.illegal_moves == Incident::duplicates);  // refunded -> refunded
}
