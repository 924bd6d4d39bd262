// idem::StateMachine without a database: the GuardedTransition each configuration yields,
// every bad input refused with a typed error before anything reaches a table, how a
// backend's row count becomes the result, and idem::SqlValue / idem::Statement.
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/state_machine.hpp>
#include <idem/statement.hpp>

#include "../support/orders.hpp"

namespace {

using idem_test::OrderStatus;
using enum OrderStatus;
using idem_test::order_machine;
using idem_test::order_moves;
using idem_test::order_name;

// An enum on an unsigned type: stored as an unsigned integer.
enum class Flag : std::uint8_t { off = 0, on = 200 };

using V = std::vector<idem::SqlValue>;

}  // namespace

TEST_CASE("with a version column: compare-and-set on status and version") {
  const auto m = order_machine();
  const idem::GuardedTransition t = m.transition("A1001", paid, refunded, 7);
  CHECK(t == idem::GuardedTransition{.table = "t_order",
                                     .key_column = "order_no",
                                     .key = "A1001",
                                     .status_column = "status",
                                     .from = 1,
                                     .to = 3,
                                     .version_column = "version",
                                     .expected_version = 7});
  CHECK(t.versioned());
  CHECK(m.versioned());
  // The stored values keep their types: integers for an integer status, text for the key.
  CHECK(std::holds_alternative<std::int64_t>(t.from.value()));
  CHECK(std::holds_alternative<std::string>(t.key.value()));
  // The optional overload picks the same form.
  CHECK(m.transition("A1001", paid, refunded, std::optional<std::int64_t>{7}) == t);
  std::ostringstream os;
  os << t;
  CHECK(os.str() == "t_order[order_no = \"A1001\"]: status 1 -> 3, version 7");
}

TEST_CASE("without a version column: compare-and-set on the status alone") {
  const idem::StateMachine<OrderStatus> m{{.table = "t_order", .key_column = "order_no"},
                                          order_moves};
  const idem::GuardedTransition t = m.transition("A1001", pending, paid);
  CHECK(t.from == idem::SqlValue(0));
  CHECK(t.to == idem::SqlValue(1));
  CHECK_FALSE(t.versioned());
  CHECK(t.version_column.empty());
  CHECK_FALSE(t.expected_version.has_value());
  CHECK_FALSE(m.versioned());
  std::ostringstream os;
  os << t;
  CHECK(os.str() == "t_order[order_no = \"A1001\"]: status 0 -> 1");
}

TEST_CASE("custom columns, a qualified table and an integer key") {
  const idem::StateMachine<OrderStatus> m{{.table = "shop.t_order",
                                           .key_column = "id",
                                           .status_column = "order_state",
                                           .version_column = "rev"},
                                          order_moves};
  const idem::GuardedTransition t = m.transition(std::uint64_t{42}, paid, completed, 0);
  CHECK(t.table == "shop.t_order");  // as declared: each backend quotes it in its dialect
  CHECK(t.key_column == "id");
  CHECK(t.status_column == "order_state");
  CHECK(t.version_column == "rev");
  CHECK(t.key == idem::SqlValue(std::uint64_t{42}));
  CHECK(t.expected_version == 0);
}

TEST_CASE("a string mapping stores names instead of integers") {
  const idem::StateMachine<OrderStatus> m{
      {.table = "t_order", .key_column = "order_no", .status_name = order_name}, order_moves};
  const idem::GuardedTransition t = m.transition("A1", paid, refunded);
  CHECK(t.from == idem::SqlValue("PAID"));
  CHECK(t.to == idem::SqlValue("REFUNDED"));
  CHECK(m.stored(completed) == idem::SqlValue("COMPLETED"));
  CHECK(m.status_of("PAID") == paid);
  CHECK_FALSE(m.status_of("1").has_value());
  CHECK_FALSE(m.status_of("CLOSED").has_value());  // not a state of this machine
}

TEST_CASE("an enum on an unsigned type is stored as an unsigned integer") {
  const idem::StateMachine<Flag> m{{.table = "t", .key_column = "k"}, {{Flag::off, Flag::on}}};
  const auto t = m.transition(1, Flag::off, Flag::on);
  CHECK(t.from == idem::SqlValue(std::uint64_t{0}));
  CHECK(t.to == idem::SqlValue(std::uint64_t{200}));
  CHECK(t.key == idem::SqlValue(1));
  CHECK(m.status_of("200") == Flag::on);
}

TEST_CASE("can() answers exactly the declared moves") {
  const auto m = order_machine();
  CHECK(m.can(pending, paid));
  CHECK(m.can(paid, completed));
  CHECK(m.can(paid, refunded));
  CHECK_FALSE(m.can(paid, pending));
  CHECK_FALSE(m.can(refunded, refunded));
  CHECK_FALSE(m.can(pending, refunded));
  CHECK_FALSE(m.can(completed, refunded));
  CHECK(m.transitions().size() == 3);
}

TEST_CASE("an illegal transition is a typed error and no transition exists") {
  const auto m = order_machine();
  try {
    (void)m.transition("A1", refunded, refunded, 3);
    FAIL("an undeclared transition produced a transition");
  } catch (const idem::IllegalTransition& e) {
    CHECK(e.from() == "3");
    CHECK(e.to() == "3");
    const std::string what = e.what();
    CHECK(what.find("3 -> 3 is not declared") != std::string::npos);
    CHECK(what.find("declared: 0 -> 1, 1 -> 2, 1 -> 3") != std::string::npos);
  }
  CHECK_THROWS_AS(m.transition("A1", paid, pending, 1), idem::InvalidArgument);
  // The legality check comes first: an illegal move with other faults is still IllegalTransition.
  CHECK_THROWS_AS(m.transition(nullptr, completed, paid), idem::IllegalTransition);

  const idem::StateMachine<OrderStatus> named{
      {.table = "t_order", .key_column = "order_no", .status_name = order_name}, order_moves};
  CHECK_THROWS_WITH(named.transition("A1", refunded, paid),
                    Catch::Contains("\"REFUNDED\" -> \"PAID\" is not declared"));
}

TEST_CASE("identifiers are validated, anything else is refused up front") {
  using P = idem::StateMachineParams<OrderStatus>;
  auto make = [](P p) { return idem::StateMachine<OrderStatus>(std::move(p), order_moves); };
  const std::vector<std::string> bad = {"",
                                        "t order",
                                        "t`order",
                                        "t_order; DROP TABLE t_order",
                                        "t-order",
                                        "t_ordér",
                                        std::string(65, 'x'),
                                        "a.b.c",
                                        ".t",
                                        "t."};
  for (const auto& name : bad) {
    INFO("name: " << name);
    CHECK_THROWS_AS(make({.table = name, .key_column = "k"}), idem::InvalidArgument);
    CHECK_THROWS_AS(make({.table = "t", .key_column = name}), idem::InvalidArgument);
    CHECK_THROWS_AS(make({.table = "t", .key_column = "k", .status_column = name}),
                    idem::InvalidArgument);
    if (!name.empty()) {  // an empty version column means "none"
      CHECK_THROWS_AS(make({.table = "t", .key_column = "k", .version_column = name}),
                      idem::InvalidArgument);
    }
  }
  // Only the table may be qualified.
  CHECK_THROWS_WITH(make({.table = "t", .key_column = "t.k"}),
                    Catch::Contains("key column \"t.k\" is not a valid identifier"));
  CHECK_NOTHROW(make({.table = "db.t", .key_column = "k"}));
  CHECK_NOTHROW(make({.table = std::string(64, 't'), .key_column = "$k_1"}));
  // Columns must differ (MySQL and SQLite compare column names without case).
  CHECK_THROWS_AS(make({.table = "t", .key_column = "status"}), idem::InvalidArgument);
  CHECK_THROWS_AS(make({.table = "t", .key_column = "k", .version_column = "STATUS"}),
                  idem::InvalidArgument);
  CHECK_THROWS_AS(make({.table = "t", .key_column = "k", .version_column = "K"}),
                  idem::InvalidArgument);
}

TEST_CASE("the declaration itself is checked") {
  const idem::StateMachineParams<OrderStatus> p{.table = "t", .key_column = "k"};
  using T = std::vector<idem::Transition<OrderStatus>>;
  CHECK_THROWS_WITH(idem::StateMachine<OrderStatus>(p, T{}), Catch::Contains("at least one"));
  // A self-move changes no row, which MySQL reports as 0 affected rows: never "transitioned".
  CHECK_THROWS_WITH(idem::StateMachine<OrderStatus>(p, T{{paid, paid}}),
                    Catch::Contains("does not change the status"));
  CHECK_THROWS_WITH(idem::StateMachine<OrderStatus>(p, T{{pending, paid}, {pending, paid}}),
                    Catch::Contains("declared twice"));
  auto named = p;
  named.status_name = [](OrderStatus s) { return s == pending ? std::string() : order_name(s); };
  CHECK_THROWS_WITH(idem::StateMachine<OrderStatus>(named, T{{pending, paid}}),
                    Catch::Contains("empty name"));
  named.status_name = [](OrderStatus) { return std::string("SAME"); };
  CHECK_THROWS_WITH(idem::StateMachine<OrderStatus>(named, T{{pending, paid}}),
                    Catch::Contains("the same name"));
}

TEST_CASE("a NULL key or a version that does not fit the table is refused") {
  const auto m = order_machine();
  CHECK_THROWS_AS(m.transition(nullptr, pending, paid, 0), idem::InvalidArgument);
  CHECK_THROWS_WITH(m.transition("A1", pending, paid), Catch::Contains("pass the version"));
  const idem::StateMachine<OrderStatus> plain{{.table = "t", .key_column = "k"}, order_moves};
  CHECK_THROWS_WITH(plain.transition("A1", pending, paid, 0), Catch::Contains("no version column"));
  CHECK_THROWS_AS(plain.transition(nullptr, pending, paid), idem::InvalidArgument);
}

TEST_CASE("explain() reads a rejection from what the row holds now") {
  const auto m = order_machine();
  using idem::ProbeRow;
  using idem::RejectReason;
  CHECK(m.explain(pending, 0, std::nullopt).reason == RejectReason::not_found);

  auto r = m.explain(pending, 0, ProbeRow{"1", "1"});
  CHECK(r.rejected());
  CHECK(r.reason == RejectReason::status_moved_on);
  CHECK(r.stale());
  CHECK(r.status == paid);
  CHECK(r.stored_status == "1");
  CHECK(r.version == 1);

  r = m.explain(paid, 4, ProbeRow{"1", "5"});
  CHECK(r.reason == RejectReason::version_moved_on);
  CHECK(r.stale());
  CHECK(r.version == 5);

  r = m.explain(paid, 4, ProbeRow{"1", "4"});  // matches now: it changed between the two reads
  CHECK(r.reason == RejectReason::indeterminate);
  CHECK_FALSE(r.stale());

  r = m.explain(paid, 4, ProbeRow{"9", "4"});  // a status the machine does not know
  CHECK(r.reason == RejectReason::status_moved_on);
  CHECK_FALSE(r.status.has_value());
  CHECK(r.stored_status == "9");

  r = m.explain(paid, 4, ProbeRow{std::nullopt, "4"});  // NULL status
  CHECK(r.reason == RejectReason::status_moved_on);
  CHECK_FALSE(r.stored_status.has_value());

  CHECK(std::string(idem::to_string(RejectReason::version_moved_on)) == "version_moved_on");
  CHECK(idem::TransitionResult<OrderStatus>::success().transitioned());
  CHECK(idem::TransitionResult<OrderStatus>::success().reason == RejectReason::none);
  CHECK(idem::TransitionResult<OrderStatus>::rejection().reason == RejectReason::not_explained);
}

TEST_CASE("conclude(): how every backend reads the rows its UPDATE changed") {
  const auto m = order_machine();
  const auto t = m.transition("A1", pending, paid, 0);
  int reads = 0;
  auto read = [&](std::optional<idem::ProbeRow> row) {
    return [&reads, row] {
      ++reads;
      return row;
    };
  };
  CHECK(m.conclude(t, 1, {.explain = true}, read(std::nullopt)).transitioned());
  CHECK(m.conclude(t, 0, {}, read(std::nullopt)).reason == idem::RejectReason::not_explained);
  CHECK(reads == 0);  // the read runs only for a rejection that should be explained

  const auto why = m.conclude(t, 0, {.explain = true}, read(idem::ProbeRow{"1", "1"}));
  CHECK(reads == 1);
  CHECK(why.reason == idem::RejectReason::status_moved_on);
  CHECK(why.status == paid);
  CHECK(why.version == 1);
  CHECK(m.conclude(t, 0, {.explain = true}, read(idem::ProbeRow{"0", "3"})).reason ==
        idem::RejectReason::version_moved_on);
  CHECK(m.conclude(t, 0, {.explain = true}, read(std::nullopt)).reason ==
        idem::RejectReason::not_found);

  // More than one row: the key column does not name one row.
  CHECK_THROWS_WITH(m.conclude(t, 2, {}, read(std::nullopt)),
                    Catch::Contains("key column order_no must be a primary or unique key"));

  // Named statuses are compared as stored.
  const idem::StateMachine<OrderStatus> named{
      {.table = "t_order", .key_column = "order_no", .status_name = order_name}, order_moves};
  const auto n = named.transition("A1", pending, paid);
  CHECK(named.conclude(n, 0, {.explain = true}, read(idem::ProbeRow{"PENDING", std::nullopt}))
            .reason == idem::RejectReason::indeterminate);
  CHECK(
      named.conclude(n, 0, {.explain = true}, read(idem::ProbeRow{"PAID", std::nullopt})).status ==
      paid);
}

TEST_CASE("SqlValue: integers keep their signedness, text and NULL print readably") {
  CHECK(std::holds_alternative<std::int64_t>(idem::SqlValue(42).value()));
  CHECK(std::holds_alternative<std::uint64_t>(idem::SqlValue(42u).value()));
  CHECK(std::holds_alternative<std::int64_t>(idem::SqlValue(true).value()));
  CHECK(idem::SqlValue().is_null());
  CHECK(idem::SqlValue(nullptr).is_null());
  CHECK(idem::SqlValue(std::string_view("x")).is_text());
  CHECK(idem::SqlValue(-3).text() == "-3");
  CHECK_FALSE(idem::SqlValue().text().has_value());
  std::ostringstream os;
  os << idem::Statement{"SELECT ?", {nullptr, 1, 2u, "a\nb"}};
  CHECK(os.str() == "SELECT ? [NULL, 1, 2u, \"a\\x0ab\"]");
}
