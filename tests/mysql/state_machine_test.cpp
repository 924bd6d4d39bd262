// StateMachine transitions on a real MariaDB: the SQL idem::mysql renders for them, every
// configuration run on the server, idem's connections and a caller's MYSQL*, what reaches the
// server, a 50-thread race on one row, and the articles' incident replayed through guard +
// state machine in one transaction (and without the state machine, where it fails).
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/incident.hpp"
#include "../support/mysql_server.hpp"
#include "../support/mysql_shop.hpp"
#include "../support/orders.hpp"
#include "../support/threads.hpp"

namespace {

using idem_test::OrderStatus;
using enum OrderStatus;
using idem::RejectReason;
using idem::mysql::Connection;
using idem_test::Errors;
using idem_test::order_moves;
using idem_test::order_name;
using idem_test::run_threads;
using idem_test::Shop;
using idem_test::to_ll;

// Statements this session sent: COM_QUERY and COM_STMT_EXECUTE (Questions) plus prepares.
long long statements_sent(Connection& c) {
  long long n = 0;
  for (const auto& r :
       c.select("SHOW SESSION STATUS WHERE Variable_name IN ('Questions', 'Com_stmt_prepare')", {}))
    n += to_ll(r.at(1));
  return n;
}

}  // namespace

TEST_CASE("the SQL rendered for MySQL: backticks, every value a parameter") {
  const idem::StateMachine<OrderStatus> versioned{
      {.table = "t_order", .key_column = "order_no", .version_column = "version"}, order_moves};
  const auto t = versioned.transition("A1001", paid, refunded, 7);
  CHECK(idem::mysql::update_statement(t) ==
        idem::Statement{"UPDATE `t_order` SET `status` = ?, `version` = `version` + 1 WHERE "
                        "`order_no` = ? AND `status` = ? AND `version` = ?",
                        {3, "A1001", 1, std::int64_t{7}}});
  CHECK(idem::mysql::probe_statement(t) ==
        idem::Statement{
            "SELECT `status`, `version` FROM `t_order` WHERE `order_no` = ? LOCK IN SHARE MODE",
            {"A1001"}});

  const idem::StateMachine<OrderStatus> plain{{.table = "shop.t_order",
                                               .key_column = "id",
                                               .status_column = "state",
                                               .status_name = order_name},
                                              order_moves};
  const auto p = plain.transition(42, pending, paid);
  CHECK(idem::mysql::update_statement(p) ==
        idem::Statement{"UPDATE `shop`.`t_order` SET `state` = ? WHERE `id` = ? AND `state` = ?",
                        {"PAID", 42, "PENDING"}});
  CHECK(idem::mysql::probe_statement(p).sql ==
        "SELECT `state` FROM `shop`.`t_order` WHERE `id` = ? LOCK IN SHARE MODE");

  // A hand-made transition is held to the identifier rule too: nothing unquotable reaches SQL.
  auto bad = t;
  bad.key_column = "order_no` = 1 OR `x";
  CHECK_THROWS_AS(idem::mysql::update_statement(bad), idem::InvalidArgument);
  bad = t;
  bad.table = "a.b.c";
  CHECK_THROWS_WITH(idem::mysql::probe_statement(bad),
                    Catch::Contains("idem::mysql: table \"a.b.c\" is not a valid identifier"));
  // Without its expected version it compares the version with NULL, which matches nothing.
  bad = t;
  bad.expected_version.reset();
  CHECK(idem::mysql::update_statement(bad).params.back().is_null());
}

TEST_CASE("transitions on MariaDB: with a version column") {
  auto pool = idem_test::make_pool(2);
  Shop shop(pool);
  const auto m = shop.machine();
  shop.add_order("A1");
  auto c = pool->acquire();

  CHECK(idem::mysql::apply(*c, m, "A1", pending, paid, 0).transitioned());
  CHECK(shop.row("A1") == std::pair<std::string, long long>{"1", 1});

  const auto dup = idem::mysql::apply(*c, m, "A1", pending, paid, 0, {.explain = true});
  CHECK(dup.rejected());
  CHECK(dup.reason == RejectReason::status_moved_on);
  CHECK(dup.status == paid);
  CHECK(dup.stored_status == "1");
  CHECK(dup.version == 1);

  const auto stale = idem::mysql::apply(*c, m, "A1", paid, refunded, 0, {.explain = true});
  CHECK(stale.reason == RejectReason::version_moved_on);
  CHECK(stale.version == 1);

  CHECK(idem::mysql::apply(*c, m, "nope", pending, paid, 0, {.explain = true}).reason ==
        RejectReason::not_found);
  CHECK(idem::mysql::apply(*c, m, "A1", paid, refunded, 0).reason == RejectReason::not_explained);

  CHECK(idem::mysql::apply(*c, m, "A1", paid, refunded, 1));
  CHECK(shop.row("A1") == std::pair<std::string, long long>{"3", 2});
  // The rendered statements are ordinary ones: idem::mysql::execute / select run them.
  const auto t = m.transition("A1", paid, completed, 2);
  const auto rows = idem::mysql::select(*c, idem::mysql::probe_statement(t));
  REQUIRE(rows.size() == 1);
  CHECK(rows[0][0] == "3");
  CHECK(idem::mysql::execute(*c, idem::mysql::update_statement(t)) == 0);
}

TEST_CASE("transitions on MariaDB: status only, names, qualified table") {
  auto pool = idem_test::make_pool(2);
  auto c = pool->acquire();

  SECTION("compare-and-set on the status alone") {
    Shop shop(pool);
    const idem::StateMachine<OrderStatus> m{{.table = shop.orders, .key_column = "order_no"},
                                            order_moves};
    shop.add_order("B1");
    CHECK(idem::mysql::apply(*c, m, "B1", pending, paid));
    const auto again =
        idem::mysql::apply(*c, m, "B1", pending, paid, std::nullopt, {.explain = true});
    CHECK(again.reason == RejectReason::status_moved_on);
    CHECK_FALSE(again.version.has_value());
    CHECK(shop.row("B1").first == "1");
    CHECK(shop.row("B1").second == 0);  // the version column is not touched
  }
  SECTION("statuses stored as names") {
    Shop shop(pool, "VARCHAR(16)");
    const idem::StateMachine<OrderStatus> m{{.table = shop.orders,
                                             .key_column = "order_no",
                                             .version_column = "version",
                                             .status_name = order_name},
                                            order_moves};
    shop.add_order("C1", "PENDING");
    CHECK(idem::mysql::apply(*c, m, "C1", pending, paid, 0));
    CHECK(idem::mysql::apply(*c, m, "C1", paid, completed, 1));
    const auto late = idem::mysql::apply(*c, m, "C1", paid, refunded, 2, {.explain = true});
    CHECK(late.reason == RejectReason::status_moved_on);
    CHECK(late.status == completed);
    CHECK(late.stored_status == "COMPLETED");
    CHECK(shop.row("C1") == std::pair<std::string, long long>{"COMPLETED", 2});
  }
  SECTION("a schema-qualified table name") {
    Shop shop(pool);
    const idem::StateMachine<OrderStatus> m{{.table = "idem_test." + shop.orders,
                                             .key_column = "order_no",
                                             .version_column = "version"},
                                            order_moves};
    shop.add_order("D1");
    CHECK(idem::mysql::apply(*c, m, "D1", pending, paid, 0));
    CHECK(shop.row("D1").first == "1");
  }
}

TEST_CASE("illegal transitions never reach the server") {
  auto pool = idem_test::make_pool(2);
  Shop shop(pool);
  const auto m = shop.machine();
  shop.add_order("E1", 3);
  auto c = pool->acquire();
  (void)statements_sent(*c);  // prepare the counter's own statement first
  const long long a = statements_sent(*c);
  const long long b = statements_sent(*c);
  const long long reading = b - a;  // what one reading of the counter costs

  CHECK_THROWS_AS(idem::mysql::apply(*c, m, "E1", refunded, refunded, 1, {.explain = true}),
                  idem::IllegalTransition);
  CHECK_THROWS_AS(idem::mysql::apply(*c, m, "E1", paid, pending, 1), idem::IllegalTransition);
  const long long after_illegal = statements_sent(*c);
  CHECK(after_illegal - b == reading);  // nothing else was sent

  // The counter does see a legal (rejected) transition: its UPDATE, prepare and SELECT.
  CHECK(idem::mysql::apply(*c, m, "E1", paid, refunded, 1, {.explain = true}).rejected());
  CHECK(statements_sent(*c) - after_illegal > reading);
  CHECK(shop.row("E1") == std::pair<std::string, long long>{"3", 0});
}

TEST_CASE("inside a transaction the explanation reads the latest row, not the snapshot") {
  auto pool = idem_test::make_pool(2);
  Shop shop(pool);
  const auto m = shop.machine();
  shop.add_order("F1");
  auto a = pool->acquire();
  auto b = pool->acquire();
  a->query("START TRANSACTION");
  const std::string read = "SELECT status FROM `" + shop.orders + "` WHERE order_no = ?";
  CHECK(a->select(read, {"F1"}).at(0).at(0) == "0");  // a's snapshot: pending

  CHECK(idem::mysql::apply(*b, m, "F1", pending, paid, 0));  // someone else, committed

  const auto r = idem::mysql::apply(*a, m, "F1", pending, paid, 0, {.explain = true});
  CHECK(r.rejected());
  CHECK(r.reason == RejectReason::status_moved_on);  // not "indeterminate" from the snapshot
  CHECK(r.status == paid);
  CHECK(r.version == 1);
  CHECK(a->select(read, {"F1"}).at(0).at(0) == "0");  // the snapshot still says pending
  a->query("ROLLBACK");
}

TEST_CASE("a transition rolls back with the transaction it ran in") {
  auto pool = idem_test::make_pool(2);
  Shop shop(pool);
  const auto m = shop.machine();
  shop.add_order("G1");
  CHECK_THROWS_AS(
      idem::mysql::with_transaction(*pool,
                                    [&](Connection& c) {
                                      REQUIRE(idem::mysql::apply(c, m, "G1", pending, paid, 0));
                                      throw std::runtime_error("later step failed");
                                    }),
      std::runtime_error);
  CHECK(shop.row("G1") == std::pair<std::string, long long>{"0", 0});
}

TEST_CASE("on a caller's own MYSQL*: the same answers, its session left alone") {
  auto pool = idem_test::make_pool(2);
  Shop shop(pool);
  const auto m = shop.machine();
  shop.add_order("H1");
  const auto params = idem_test::server();
  MYSQL* mysql = mysql_init(nullptr);
  REQUIRE(mysql != nullptr);
  struct Close {
    MYSQL* m;
    ~Close() { mysql_close(m); }
  } close{mysql};
  REQUIRE(mysql_real_connect(mysql, "localhost", params.user.c_str(), nullptr,
                             params.database.c_str(), 0, params.unix_socket.c_str(), 0) != nullptr);
  // A service's session: backticks still quote names under ANSI_QUOTES.
  REQUIRE(mysql_query(mysql, "SET sql_mode = 'ANSI_QUOTES,NO_BACKSLASH_ESCAPES'") == 0);

  CHECK(idem::mysql::apply(mysql, m, "H1", pending, paid, 0));
  const auto dup = idem::mysql::apply(mysql, m, "H1", pending, paid, 0, {.explain = true});
  CHECK(dup.reason == RejectReason::status_moved_on);
  CHECK(dup.status == paid);
  CHECK(dup.version == 1);
  CHECK_THROWS_AS(idem::mysql::apply(mysql, m, "H1", paid, pending, 1), idem::IllegalTransition);
  CHECK(shop.row("H1") == std::pair<std::string, long long>{"1", 1});
  REQUIRE(mysql_query(mysql, "SELECT @@SESSION.sql_mode") == 0);
  MYSQL_RES* res = mysql_store_result(mysql);
  REQUIRE(res != nullptr);
  MYSQL_ROW row = mysql_fetch_row(res);
  const std::string mode = row != nullptr && row[0] != nullptr ? row[0] : "";
  mysql_free_result(res);
  CHECK(mode == "ANSI_QUOTES,NO_BACKSLASH_ESCAPES");
}

TEST_CASE("a key column that is not unique is a UsageError, inside the transaction") {
  auto pool = idem_test::make_pool(2);
  const std::string table = idem_test::unique_table("t_dup");
  auto c = pool->acquire();
  c->query("CREATE TABLE `" + table +
           "` (order_no VARCHAR(32) NOT NULL, status TINYINT NOT NULL) ENGINE=InnoDB");
  c->query("INSERT INTO `" + table + "` VALUES ('X', 0), ('X', 0)");
  const idem::StateMachine<OrderStatus> m{{.table = table, .key_column = "order_no"}, order_moves};
  CHECK_THROWS_WITH(idem::mysql::with_transaction(
                        *pool,
                        [&](Connection& tx) {
                          return idem::mysql::apply(tx, m, "X", pending, paid).transitioned();
                        }),
                    Catch::Contains("must be a primary or unique key"));
  CHECK(c->select("SELECT COUNT(*) FROM `" + table + "` WHERE status = 0", {}).at(0).at(0) ==
        "2");  // rolled back
  c->query("DROP TABLE `" + table + "`");
}

TEST_CASE("50 threads race the same legal transition on one row: exactly one wins") {
  constexpr int threads = 50;
  auto pool = idem_test::make_pool(threads);
  Shop shop(pool);
  const auto m = shop.machine();
  shop.add_order("R1");

  std::mutex mutex;
  std::vector<idem::TransitionResult<OrderStatus>> results;
  Errors errors;
  run_threads(
      threads,
      [&](int) {
        // Each thread has its connection and has read the order (pending, version 0) before
        // anyone moves.
        auto handle = std::make_unique<idem::mysql::Pool::Handle>(pool->acquire());
        (void)(*handle)->select(
            "SELECT status, version FROM `" + shop.orders + "` WHERE order_no = ?", {"R1"});
        return handle;
      },
      [&](int, std::unique_ptr<idem::mysql::Pool::Handle>& handle) {
        try {
          auto r = idem::mysql::apply(**handle, m, "R1", pending, paid, 0, {.explain = true});
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
    if (r.rejected() && r.stale() && r.status == paid && r.version == 1) ++stale;
  }
  CHECK(won == 1);
  CHECK(stale == threads - 1);
  CHECK(shop.row("R1") == std::pair<std::string, long long>{"1", 1});
  CHECK(shop.query("SELECT COUNT(*) FROM `" + shop.moves + "`").at(0).at(0) == "1");
}

namespace {

using idem_test::Incident;

struct IncidentRun {
  std::atomic<int> paid{0}, pay_replayed{0}, refunded{0}, refund_rejected{0};
  Errors errors;
};

long long read_version(Connection& c, const Shop& shop, const std::string& order_no) {
  return to_ll(c.select("SELECT version FROM `" + shop.orders + "` WHERE order_no = ?", {order_no})
                   .at(0)
                   .at(0));
}

// One callback, then its refund attempt; each is one transaction holding the guard's record
// and the business writes. With `machine`, status changes go through it; without, they are
// plain UPDATEs of the status (the code of the incident).
void handle_callback(idem_test::Table& records, Shop& shop,
                     const idem::StateMachine<OrderStatus>* machine, const Incident::Callback& cb,
                     int attempt, IncidentRun& run) {
  const std::string& order_no = cb.order_no;
  const auto pay = idem::mysql::with_transaction(*records.pool, [&](Connection& c) {
    auto tx = records.store.bind(c);
    idem::IdempotencyGuard guard{tx, idem::Key{"PAY", cb.trade_no}, ""};
    if (guard.verdict() == idem::Verdict::replayed) return idem::Verdict::replayed;
    if (!guard.acquired()) return guard.verdict();
    bool moved = false;
    if (machine) {
      const auto version = read_version(c, shop, order_no);
      moved = idem::mysql::apply(c, *machine, order_no, pending, paid, version).transitioned();
    } else {
      moved = c.execute("UPDATE `" + shop.orders +
                            "` SET status = 1, version = version + 1 WHERE order_no = ?",
                        {order_no}) == 1;
    }
    guard.commit(nlohmann::json{{"paid", moved}});
    return idem::Verdict::acquired;
  });
  if (pay == idem::Verdict::acquired) ++run.paid;
  if (pay == idem::Verdict::replayed) ++run.pay_replayed;
  if (pay != idem::Verdict::acquired && pay != idem::Verdict::replayed) {
    run.errors.add("pay callback answered " + std::string(idem::to_string(pay)));
  }

  const bool did_refund = idem::mysql::with_transaction(*records.pool, [&](Connection& c) {
    auto tx = records.store.bind(c);
    idem::IdempotencyGuard guard{
        tx, idem::Key{"REFUND", cb.trade_no + ":" + std::to_string(attempt)}, ""};
    if (!guard.acquired()) throw std::runtime_error("a fresh refund key was not acquired");
    bool moved = false;
    std::string reason;
    if (machine) {
      const auto version = read_version(c, shop, order_no);
      const auto r =
          idem::mysql::apply(c, *machine, order_no, paid, refunded, version, {.explain = true});
      moved = r.transitioned();
      reason = idem::to_string(r.reason);
    } else {
      // Checks the affected rows, and still refunds twice: nothing says the order was paid.
      moved = c.execute("UPDATE `" + shop.orders +
                            "` SET status = 3, version = version + 1 WHERE order_no = ?",
                        {order_no}) == 1;
    }
    if (moved) {
      c.execute("INSERT INTO `" + shop.refunds + "` (order_no) VALUES (?)", {order_no});
    }
    guard.commit(nlohmann::json{{"refunded", moved}, {"reason", reason}});
    return moved;
  });
  ++(did_refund ? run.refunded : run.refund_rejected);
}

struct IncidentOutcome {
  std::map<std::string, std::string> final_status;  // order_no -> status
  std::map<std::string, long long> refunds;         // order_no -> refunds executed
  long long illegal_moves = 0;
  long long moves = 0;
  long long pay_records = 0;
  long long refund_records = 0;
};

IncidentOutcome replay_incident(bool with_machine, IncidentRun& run) {
  idem_test::Table records(16);
  Shop shop(records.pool);
  const Incident incident;
  for (int i = 0; i < Incident::orders; ++i)
    shop.add_order(Incident::order_no(i));
  const auto machine = shop.machine();
  const int n = static_cast<int>(incident.callbacks.size());
  run_threads(
      n, [](int) { return 0; },
      [&](int t, int) {
        try {
          handle_callback(records, shop, with_machine ? &machine : nullptr,
                          incident.callbacks[static_cast<std::size_t>(t)], t, run);
        } catch (const std::exception& e) {
          run.errors.add(e.what());
        }
      });

  IncidentOutcome out;
  for (const auto& r : shop.query("SELECT order_no, status FROM `" + shop.orders + "`"))
    out.final_status[*r.at(0).to_text()] = *r.at(1).to_text();
  for (const auto& r :
       shop.query("SELECT order_no, COUNT(*) FROM `" + shop.refunds + "` GROUP BY order_no"))
    out.refunds[*r.at(0).to_text()] = to_ll(r.at(1));
  for (const auto& r : shop.query("SELECT from_status, to_status FROM `" + shop.moves + "`")) {
    ++out.moves;
    const auto from = static_cast<OrderStatus>(to_ll(r.at(0)));
    const auto to = static_cast<OrderStatus>(to_ll(r.at(1)));
    if (!machine.can(from, to)) ++out.illegal_moves;
  }
  out.pay_records = records.count("biz_type = 'PAY' AND status = 1");
  out.refund_records = records.count("biz_type = 'REFUND' AND status = 1");
  return out;
}

}  // namespace

TEST_CASE("the incident replayed through guard + state machine in one transaction") {
  IncidentRun run;
  const IncidentOutcome out = replay_incident(true, run);
  INFO("first error: " << run.errors.first());
  REQUIRE(run.errors.size() == 0);
  INFO("paid " << run.paid << ", pay replayed " << run.pay_replayed << ", refunded " << run.refunded
               << ", refund rejected " << run.refund_rejected);

  REQUIRE(out.final_status.size() == Incident::orders);
  for (const auto& [order_no, status] : out.final_status) {
    INFO(order_no);
    CHECK(status == "3");  // paid once, then refunded once: one legal state
  }
  long long refunds = 0;
  for (const auto& [order_no, n] : out.refunds) {
    INFO(order_no);
    CHECK(n <= 1);
    refunds += n;
  }
  CHECK(refunds == Incident::orders);
  CHECK(out.illegal_moves == 0);
  CHECK(out.moves == 2 * Incident::orders);  // pending -> paid, paid -> refunded, per order
  // The record table: one succeeded PAY record per order (biz type PAY), and one REFUND record
  // per refund attempt (biz type REFUND; every attempt had its own id, so 58).
  CHECK(out.pay_records == Incident::orders);
  CHECK(out.refund_records == Incident::orders + Incident::duplicates);
  CHECK(run.pay_replayed == Incident::duplicates);
  CHECK(run.refund_rejected == Incident::duplicates);
}

TEST_CASE("the incident replayed without the state machine refunds orders twice") {
  IncidentRun run;
  const IncidentOutcome out = replay_incident(false, run);
  INFO("first error: " << run.errors.first());
  REQUIRE(run.errors.size() == 0);
  long long refunds = 0;
  long long refunded_twice = 0;
  for (const auto& [order_no, n] : out.refunds) {
    refunds += n;
    if (n > 1) ++refunded_twice;
  }
  // The PAY guard still held (11 records) ...
  CHECK(out.pay_records == Incident::orders);
  // ... but every refund attempt went through: the double refunds of the incident.
  CHECK(refunds == Incident::orders + Incident::duplicates);
  CHECK(refunded_twice >= 1);
  CHECK(out.illegal_moves == Incident::duplicates);  // refunded -> refunded
}
