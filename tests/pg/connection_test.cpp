// idem::pg::Connection (idem/pg/connection.hpp) on a real PostgreSQL: idem's own connections
// prepare each statement once, a reopened one prepares again, and the service's connection (or
// one told not to) is left without any prepared statement.
#include <chrono>
#include <string>

#include <catch2/catch.hpp>

#include "../support/pg_server.hpp"

namespace {

// What the session has prepared, read without preparing anything.
long long prepared_in_session(idem::pg::Connection& c) {
  PGresult* r = PQexec(c.native(), "SELECT count(*) FROM pg_prepared_statements");
  const long long n = std::stoll(PQgetvalue(r, 0, 0));
  PQclear(r);
  return n;
}

const std::string pg_probe_sql = "SELECT $1::int8 + 1";

}  // namespace

TEST_CASE("pg Connection: idem's own connection prepares a statement once - runs it by name") {
  idem::pg::Connection c(idem::pg::ConnectionParams{.conninfo = idem_test::pg_conninfo()});
  CHECK(prepared_in_session(c) == 0);
  for (int i = 0; i < 3; ++i)
    CHECK(c.exec(pg_probe_sql, {i}).integer(0, 0) == i + 1);
  CHECK(prepared_in_session(c) == 1);
  (void)c.exec("SELECT $1::text", {"x"});
  CHECK(prepared_in_session(c) == 2);
  // A new session has none of the old one's: they are prepared again.
  c.reconnect();
  CHECK(prepared_in_session(c) == 0);
  CHECK(c.exec(pg_probe_sql, {41}).integer(0, 0) == 42);
  CHECK(prepared_in_session(c) == 1);
}

TEST_CASE(
    "pg Connection: the service's connection and prepared_statements = false prepare "
    "nothing") {
  idem::pg::Connection unprepared(idem::pg::ConnectionParams{.conninfo = idem_test::pg_conninfo(),
                                                             .prepared_statements = false});
  PGconn* own = PQconnectdb(idem_test::pg_conninfo().c_str());
  REQUIRE(PQstatus(own) == CONNECTION_OK);
  {
    idem::pg::Connection borrowed(own);
    for (idem::pg::Connection* c : {&unprepared, &borrowed}) {
      for (int i = 0; i < 3; ++i)
        CHECK(c->exec(pg_probe_sql, {i}).integer(0, 0) == i + 1);
      CHECK(prepared_in_session(*c) == 0);
    }
  }
  PQfinish(own);
}

TEST_CASE(
    "pg Connection: statement_timeout bounds each statement of idem's connections - 0 "
    "leaves the server's") {
  idem::pg::Connection bounded(idem::pg::ConnectionParams{
      .conninfo = idem_test::pg_conninfo(), .statement_timeout = std::chrono::milliseconds{200}});
  try {
    (void)bounded.exec("SELECT pg_sleep(5)", {});
    FAIL("a 5 s statement ran under a 200 ms statement_timeout");
  } catch (const idem::StoreError& e) {
    CHECK(e.diagnostics().sqlstate == "57014");
    CHECK(e.retryable());
  }
  CHECK(bounded.exec("SELECT 1", {}).integer(0, 0) == 1);  // the connection stays usable
  idem::pg::Connection unbounded(idem::pg::ConnectionParams{
      .conninfo = idem_test::pg_conninfo(), .statement_timeout = std::chrono::milliseconds{0}});
  CHECK(unbounded.exec("SHOW statement_timeout", {}).text(0, 0) == "0");
  idem::pg::Connection by_default(idem::pg::ConnectionParams{.conninfo = idem_test::pg_conninfo()});
  CHECK(by_default.exec("SHOW statement_timeout", {}).text(0, 0) == "30s");
}
