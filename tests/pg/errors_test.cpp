// How idem::pg reads PostgreSQL's errors (idem/pg/errors.hpp): which SQLSTATEs are retried and
// which lose the connection, and what a StoreError carries from a real server and from libpq.
#include <string>

#include <catch2/catch.hpp>

#include <idem/pg.hpp>

#include "../support/pg_server.hpp"

namespace {

idem::backend::FailureKind kind_of(std::string_view state) {
  return idem::pg::detail::Backend::classify(
      idem::pg::make_error("test", state, "the server's text", true));
}

}  // namespace

TEST_CASE("pg errors: serialization failures, deadlocks and timeouts are retried") {
  using idem::backend::FailureKind;
  for (const std::string_view state : {"40001", "40P01", "55P03", "57014", "53300"}) {
    INFO(state);
    CHECK(idem::pg::is_transient(state));
    CHECK_FALSE(idem::pg::is_connection_lost(state));
    CHECK(kind_of(state) == FailureKind::transient);
  }
}

TEST_CASE(
    "pg errors: a lost connection, a terminated backend or a demoted primary lose the reply") {
  using idem::backend::FailureKind;
  for (const std::string_view state :
       {"08006", "08003", "57P01", "57P02", "57P03", "40003", "25006"}) {
    INFO(state);
    CHECK(idem::pg::is_connection_lost(state));
    CHECK(kind_of(state) == FailureKind::reply_lost);
  }
}

TEST_CASE("pg errors: anything else is fatal - a unique violation too") {
  using idem::backend::FailureKind;
  for (const std::string_view state : {"23505", "42601", "42P01", "22021", "23502", ""}) {
    INFO(state);
    CHECK_FALSE(idem::pg::is_transient(state));
    CHECK(kind_of(state) == FailureKind::fatal);
  }
}

TEST_CASE("pg errors: a server error keeps its SQLSTATE and text apart from idem's") {
  auto pool = idem_test::make_pg_pool(1);
  auto c = pool->acquire();
  try {
    c->query("SELEC 1", "a typo");
    FAIL("the statement ran");
  } catch (const idem::StoreError& e) {
    CHECK_FALSE(e.retryable());
    CHECK(e.diagnostics().sqlstate == "42601");
    CHECK(e.diagnostics().from_server);
    CHECK(e.diagnostics().message.find("syntax error") != std::string::npos);
    CHECK(std::string(e.what()).starts_with("idem::pg: a typo failed (42601: "));
  }
  CHECK_FALSE(c->broken());  // a failed statement leaves the connection usable
  CHECK(c->ping());
}

TEST_CASE("pg errors: a server that cannot be reached is a retryable StoreError from libpq") {
  try {
    idem::pg::Connection c(idem::pg::ConnectionParams{
        .conninfo = "host=/nonexistent-idem-socket-dir dbname=idem user=idem"});
    FAIL("connected");
  } catch (const idem::StoreError& e) {
    CHECK(e.retryable());
    CHECK(e.diagnostics().sqlstate == "08006");
    CHECK_FALSE(e.diagnostics().from_server);
    CHECK(e.diagnostics().message.find("/nonexistent-idem-socket-dir") != std::string::npos);
  }
}

TEST_CASE("pg errors: a terminated connection is marked broken and the pool replaces it") {
  auto pool = idem_test::make_pg_pool(1);
  auto admin_pool = idem_test::make_pg_pool(1);
  unsigned long pid = 0;
  {
    auto c = pool->acquire();
    pid = c->id();
    admin_pool->acquire()->exec("SELECT pg_terminate_backend($1)", {pid});
    try {
      c->query("SELECT 1");
      FAIL("the terminated connection answered");
    } catch (const idem::StoreError& e) {
      CHECK(e.retryable());
      CHECK(idem::pg::is_connection_lost(e.diagnostics().sqlstate));
    }
    CHECK(c->broken());
  }
  auto again = pool->acquire();
  CHECK(again->id() != pid);
  CHECK(again->ping());
}
