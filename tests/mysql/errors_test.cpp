// How a server's error number becomes a StoreError: which ones a transaction may try again,
// which ones cost the connection, and what the caller reads from it.
#include <catch2/catch.hpp>

#include "../support/mysql_server.hpp"
#include "idem/mysql/errors.hpp"

using namespace idem::mysql;

TEST_CASE("errors: the numbers a transaction may try again are the transient ones") {
  for (const unsigned n : {code::deadlock, code::lock_wait_timeout, code::query_interrupted,
                           code::table_def_changed, code::wsrep_not_ready}) {
    INFO(n);
    CHECK(is_transient(n));
    CHECK_FALSE(is_connection_lost(n));  // the connection stays usable after a rollback
  }
  for (const unsigned n :
       {code::server_gone, code::server_lost, code::server_lost_extended, code::connection_killed,
        code::server_shutdown, code::client_disconnected, code::client_conn_error,
        code::client_conn_host_error}) {
    INFO(n);
    CHECK(is_connection_lost(n));
    CHECK(is_transient(n));
  }
  // A request that is wrong stays wrong: never tried again.
  for (const unsigned n :
       {code::dup_entry, code::parse_error, code::signal_exception, 1054u, 1264u, 1146u}) {
    INFO(n);
    CHECK_FALSE(is_transient(n));
    CHECK_FALSE(is_connection_lost(n));
  }
  // Only a deadlock takes the whole transaction back; a lock wait timeout takes the statement.
  CHECK(rolls_back_transaction(code::deadlock));
  CHECK_FALSE(rolls_back_transaction(code::lock_wait_timeout));
  CHECK_FALSE(rolls_back_transaction(code::table_def_changed));
}

TEST_CASE("errors: a StoreError carries idem's context, the number and the server's text") {
  const auto e = make_error("claim", code::deadlock, "40001", "Deadlock found");
  CHECK(e.retryable());
  CHECK(e.diagnostics().code == code::deadlock);
  CHECK(e.diagnostics().sqlstate == "40001");
  CHECK(e.diagnostics().from_server);
  CHECK_THAT(e.what(), Catch::Contains("claim") && Catch::Contains("1213") &&
                           Catch::Contains("Deadlock found"));
  const auto lost = make_error("finish", code::server_lost, "HY000", "Lost connection");
  CHECK_FALSE(lost.diagnostics().from_server);  // a client library number
  CHECK_THAT(lost.what(), Catch::Contains("connection lost"));

  // From a real server: a statement it cannot parse.
  auto pool = idem_test::make_pool(1);
  auto c = pool->acquire();
  try {
    c->query("SELEKT 1");
    FAIL("the server ran a statement it cannot parse");
  } catch (const idem::StoreError& err) {
    CHECK(err.diagnostics().code == code::parse_error);
    CHECK(err.diagnostics().from_server);
    CHECK_FALSE(err.retryable());
  }
}
