// idem::testing::MemoryTable: the machine's transitions applied in memory with the backends'
// answers, its comparison rules, and a handler built on guard + state machine unit-tested
// without a database.
#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/idem.hpp>
#include <idem/testing/memory_table.hpp>

#include "../support/orders.hpp"
#include "../support/threads.hpp"

namespace {

using idem_test::run_threads;

using idem_test::OrderStatus;
using enum OrderStatus;
using idem::RejectReason;
using idem::testing::MemoryTable;
using idem_test::order_machine;
using idem_test::order_moves;

}  // namespace

TEST_CASE("memory table: a transition, then its duplicate is rejected with the reason") {
  const auto m = order_machine();
  MemoryTable orders{m};
  orders.insert({{"order_no", "A1"}, {"status", 0}, {"version", 0}});

  const auto first = orders.apply(m, "A1", pending, paid, 0);
  CHECK(first.transitioned());
  CHECK(first);
  CHECK(orders.find("A1")->at("status") == idem::SqlValue(1));
  CHECK(orders.find("A1")->at("version") == idem::SqlValue(std::int64_t{1}));

  const auto again = orders.apply(m, "A1", pending, paid, 0);
  CHECK(again.rejected());
  CHECK(again.reason == RejectReason::not_explained);

  const auto why = orders.apply(m, "A1", pending, paid, 0, {.explain = true});
  CHECK(why.reason == RejectReason::status_moved_on);
  CHECK(why.status == paid);
  CHECK(why.version == 1);

  // Right status, stale version: someone moved the row on (and maybe back) since it was read.
  const auto stale = orders.apply(m, "A1", paid, refunded, 0, {.explain = true});
  CHECK(stale.reason == RejectReason::version_moved_on);
  CHECK(stale.version == 1);

  const auto missing = orders.apply(m, "A2", pending, paid, 0, {.explain = true});
  CHECK(missing.reason == RejectReason::not_found);

  CHECK(orders.apply(m, "A1", paid, refunded, 1));
  CHECK(orders.find("A1")->at("status") == idem::SqlValue(3));
  CHECK(orders.find("A1")->at("version") == idem::SqlValue(std::int64_t{2}));
}

TEST_CASE("memory table: the explaining read happens only on the rejection path") {
  const auto m = order_machine();
  MemoryTable orders{m};
  orders.insert({{"order_no", "A1"}, {"status", 0}, {"version", 0}});
  CHECK(orders.apply(m, "A1", pending, paid, 0, {.explain = true}));
  CHECK(orders.operations() == 1);  // the update only
  CHECK(orders.apply(m, "A1", pending, paid, 0, {.explain = true}).rejected());
  CHECK(orders.operations() == 3);  // update + one read
  CHECK(orders.apply(m, "A1", pending, paid, 0).rejected());
  CHECK(orders.operations() == 4);  // not asked: no read
}

TEST_CASE("memory table: illegal transitions never reach the table") {
  const auto m = order_machine();
  MemoryTable orders{m};
  orders.insert({{"order_no", "A1"}, {"status", 3}, {"version", 2}});
  CHECK_THROWS_AS(orders.apply(m, "A1", refunded, refunded, 2), idem::IllegalTransition);
  CHECK_THROWS_AS(orders.apply(m, "A1", refunded, paid, 2), idem::IllegalTransition);
  CHECK_THROWS_AS(orders.apply(m, "A1", paid, refunded), idem::InvalidArgument);  // no version
  CHECK(orders.operations() == 0);
  CHECK(orders.find("A1")->at("status") == idem::SqlValue(3));
}

TEST_CASE("memory table: machines without a version column and with status names") {
  const idem::StateMachine<OrderStatus> m{
      {.table = "t_order",
       .key_column = "order_no",
       .status_name =
           [](OrderStatus s) {
             return std::string(s == pending ? "PENDING" : s == paid ? "PAID" : "OTHER");
           }},
      {{pending, paid}}};
  MemoryTable orders{m, {"amount"}};
  orders.insert({{"order_no", "A1"}, {"status", "PENDING"}, {"amount", 29900}});
  CHECK(orders.apply(m, "A1", pending, paid));
  const auto again = orders.apply(m, "A1", pending, paid, std::nullopt, {.explain = true});
  CHECK(again.reason == RejectReason::status_moved_on);
  CHECK(again.stored_status == "PAID");
  CHECK(again.status == paid);
  CHECK_FALSE(again.version.has_value());
  CHECK(orders.find("A1")->at("amount") == idem::SqlValue(29900));
}

TEST_CASE("memory table: its comparisons") {
  const auto m = order_machine();
  MemoryTable t{m};
  t.insert({{"order_no", "N"}, {"status", 1}});  // version NULL
  t.insert({{"order_no", "U"}, {"status", std::uint64_t{1}}, {"version", std::uint64_t{5}}});
  t.insert({{"order_no", "S"}, {"status", "1"}, {"version", "5"}});
  t.insert({{"order_no", 7}, {"status", 0}, {"version", 0}});
  t.insert({{"order_no", "paid"}, {"status", 0}, {"version", 0}});

  // NULL equals nothing: a row without a version never transitions, and neither does a
  // hand-made versioned transition without an expected version.
  CHECK(t.apply(m, "N", paid, refunded, 0, {.explain = true}).reason ==
        RejectReason::version_moved_on);
  auto no_version = m.transition("U", paid, refunded, 5);
  no_version.expected_version.reset();
  CHECK(t.execute(no_version) == 0);
  // Integers compare by value whatever their signedness; a text matches its decimal form.
  CHECK(t.apply(m, "U", paid, refunded, 5));
  CHECK(t.apply(m, "S", paid, refunded, 5));
  CHECK(t.find("S")->at("version") == idem::SqlValue(6));
  CHECK(t.apply(m, "7", pending, paid, 0));  // text key, integer column
  CHECK(t.find(7)->at("status") == idem::SqlValue(1));
  // Text compares byte for byte: no collation folds case or trailing spaces.
  CHECK_FALSE(t.find("PAID").has_value());
  CHECK_FALSE(t.find("paid ").has_value());
  CHECK(t.apply(m, "PAID", pending, paid, 0, {.explain = true}).reason == RejectReason::not_found);
  // An unversioned update that leaves the status as it was changes no row, as in MySQL.
  const idem::StateMachine<OrderStatus> plain{{.table = "t_order", .key_column = "order_no"},
                                              order_moves};
  auto same = plain.transition("paid", pending, paid);
  same.to = same.from;
  CHECK(t.execute(same) == 0);
  // The version is bumped, not overflowed.
  t.put(
      {{"order_no", "MAX"}, {"status", 0}, {"version", std::numeric_limits<std::int64_t>::max()}});
  CHECK_THROWS_AS(t.apply(m, "MAX", pending, paid, std::numeric_limits<std::int64_t>::max()),
                  idem::InvalidArgument);
  CHECK(t.find("MAX")->at("status") == idem::SqlValue(0));
}

TEST_CASE("memory table: transitions for another table, or with other columns, are refused") {
  const auto m = order_machine();
  MemoryTable t{m};
  t.insert({{"order_no", "A"}, {"status", 0}, {"version", 0}});
  auto other = m.transition("A", pending, paid, 0);
  other.table = "other";
  CHECK_THROWS_AS(t.execute(other), idem::InvalidArgument);
  auto unknown = m.transition("A", pending, paid, 0);
  unknown.status_column = "nope";
  CHECK_THROWS_AS(t.execute(unknown), idem::InvalidArgument);
  auto wrong_key = m.transition("A", pending, paid, 0);
  wrong_key.key_column = "status";
  CHECK_THROWS_AS(t.execute(wrong_key), idem::InvalidArgument);
  auto writes_key = m.transition("A", pending, paid, 0);
  writes_key.version_column = "ORDER_NO";
  CHECK_THROWS_AS(t.execute(writes_key), idem::InvalidArgument);
  // Column names ignore case, as in MySQL and SQLite.
  auto shouting = m.transition("A", pending, paid, 0);
  shouting.status_column = "STATUS";
  CHECK(t.execute(shouting) == 1);
  CHECK(t.find("A")->at("status") == idem::SqlValue(1));

  const idem::StateMachine<OrderStatus> elsewhere{
      {.table = "shop.t_order", .key_column = "order_no"}, order_moves};
  CHECK_THROWS_AS(t.apply(elsewhere, "A", paid, completed), idem::InvalidArgument);
  CHECK(t.find("A")->at("status") == idem::SqlValue(1));
}

TEST_CASE("memory table: rows") {
  const auto m = order_machine();
  MemoryTable t{m};
  CHECK_THROWS_AS(t.insert({{"status", 1}}), idem::InvalidArgument);  // no key
  CHECK_THROWS_AS(t.insert({{"order_no", "A"}, {"colour", 1}}), idem::InvalidArgument);
  t.insert({{"order_no", "A"}, {"status", 0}});
  CHECK_THROWS_AS(t.insert({{"order_no", "A"}, {"status", 1}}), idem::InvalidArgument);
  t.put({{"order_no", "A"}, {"status", 1}, {"version", 4}});
  CHECK(t.find("A")->at("version") == idem::SqlValue(4));
  CHECK(t.size() == 1);
  CHECK(t.rows().size() == 1);
  CHECK(t.erase("A"));
  CHECK_FALSE(t.erase("A"));
  CHECK(t.table() == "t_order");
  CHECK_THROWS_AS(MemoryTable({.table = "t", .key_column = "k", .columns = {"a", "A"}}),
                  idem::InvalidArgument);
  CHECK_THROWS_AS(MemoryTable({.table = "t`x", .key_column = "k"}), idem::InvalidArgument);
}

TEST_CASE("memory table: 50 threads race one legal transition, exactly one wins") {
  const auto m = order_machine();
  MemoryTable orders{m};
  orders.insert({{"order_no", "A1"}, {"status", 0}, {"version", 0}});
  std::mutex mutex;
  std::vector<idem::TransitionResult<OrderStatus>> results;
  run_threads(50, [&](int) {
    auto r = orders.apply(m, "A1", pending, paid, 0, {.explain = true});
    std::lock_guard lock(mutex);
    results.push_back(r);
  });
  int won = 0;
  int stale = 0;
  for (const auto& r : results) {
    won += r.transitioned();
    stale += r.rejected() && r.reason == RejectReason::status_moved_on && r.status == paid;
  }
  CHECK(won == 1);
  CHECK(stale == 49);
  CHECK(orders.find("A1")->at("version") == idem::SqlValue(std::int64_t{1}));
}

namespace {

// What a payment handler looks like in a service, written against any idem store and a table
// that can apply transitions: the unit test below runs it on MemoryStore + MemoryTable.
struct PayResult {
  int http = 0;
  bool paid_now = false;
};

template <class S>
PayResult on_paid(S& store, MemoryTable& orders, const idem::StateMachine<OrderStatus>& m,
                  const std::string& trade_no, const std::string& order_no) {
  idem::IdempotencyGuard guard{store, idem::Key{"PAY", trade_no}, "",
                               idem::Options{.wait = std::chrono::seconds{5}}};
  if (guard.verdict() == idem::Verdict::replayed) return {200, false};
  if (!guard.acquired()) return {409, false};
  const auto version = std::get<std::int64_t>(orders.find(order_no)->at("version").value());
  const auto r = orders.apply(m, order_no, pending, paid, version, {.explain = true});
  guard.commit(nlohmann::json{{"paid", r.transitioned()}, {"reason", idem::to_string(r.reason)}});
  return {200, r.transitioned()};
}

}  // namespace

TEST_CASE("a guarded handler is unit-testable on MemoryStore + MemoryTable") {
  const auto m = order_machine();
  idem::MemoryStore store;
  MemoryTable orders{m};
  orders.insert({{"order_no", "A1"}, {"status", 0}, {"version", 0}});
  orders.insert({{"order_no", "A2"}, {"status", 0}, {"version", 0}});

  CHECK(on_paid(store, orders, m, "CH-1", "A1").paid_now);
  const auto dup = on_paid(store, orders, m, "CH-1", "A1");  // the gateway's retry
  CHECK(dup.http == 200);
  CHECK_FALSE(dup.paid_now);
  // The user paid twice through the channel: a second trade number for the same order. The
  // guard lets it in (another key); the state machine refuses to pay the order again.
  CHECK_FALSE(on_paid(store, orders, m, "CH-2", "A1").paid_now);
  CHECK(store.find(idem::Key{"PAY", "CH-2"})->snapshot ==
        R"({"paid":false,"reason":"status_moved_on"})");

  // Concurrent duplicates: one pays, the rest replay.
  std::atomic<int> paid_now{0};
  std::atomic<int> not_ok{0};
  run_threads(16, [&](int) {
    const auto r = on_paid(store, orders, m, "CH-3", "A2");
    paid_now += r.paid_now;
    not_ok += r.http != 200;
  });
  CHECK(paid_now == 1);
  CHECK(not_ok == 0);
  CHECK(orders.find("A2")->at("version") == idem::SqlValue(std::int64_t{1}));
}
