// tools/idem on PostgreSQL (tools/idem/pg_target.hpp), run as a program against the test
// server: inspect, list, a fenced release, stats, purge and the schema commands, through the
// store's own operations; the connection string from the flag or the environment.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <idem/run_once.hpp>

#include "../support/admin_program.hpp"
#include "../support/pg_server.hpp"

using namespace std::chrono_literals;
using idem_test::operator+;

TEST_CASE("idem on PostgreSQL: inspect - list - a fenced release - stats - purge - schema") {
  idem_test::PgTable t;
  REQUIRE(t.store.claim({"PAY", "dead"}, "fp", {.lease = 1ms, .ttl = 1h}).verdict ==
          idem::Verdict::acquired);
  idem::run_once(t.store, {"PAY", "paid"}, "fp", [] { return nlohmann::json{{"charge", "ch_9"}}; });
  REQUIRE(t.store.claim({"OLD", "1"}, "", {.lease = 1ms, .ttl = 1ms}).verdict ==
          idem::Verdict::acquired);
  std::this_thread::sleep_for(20ms);  // the dead claim's lease and the old record's TTL run out
  const std::vector<std::string> where{"--pg", idem_test::pg_conninfo(), "--table", t.name};

  const auto inspect =
      idem_test::run_admin(where + std::vector<std::string>{"inspect", "PAY", "dead"});
  INFO(inspect.err);
  REQUIRE(inspect.status == 0);
  CHECK_THAT(inspect.out, Catch::Contains("status          processing (0), stale"));
  CHECK(idem_test::run_admin(where + std::vector<std::string>{"inspect", "PAY", "none"}).status ==
        1);
  const auto stale =
      idem_test::run_admin(where + std::vector<std::string>{"list", "--stale", "--json"});
  REQUIRE(stale.status == 0);
  CHECK(nlohmann::json::parse(stale.out).size() == 1);

  const std::vector<std::string> release{
      "release", "PAY", "dead", "--fence", "1", "--reason", "the worker was killed in a deploy"};
  CHECK(idem_test::run_admin(where + release).status == 0);
  CHECK(idem_test::run_admin(where + release).status == 3);  // the fence moved on
  const auto released = t.store.find({"PAY", "dead"});
  REQUIRE(released);
  CHECK(released->ticket.fence == 2);
  CHECK(released->repair_reason == "the worker was killed in a deploy");

  const auto stats = idem_test::run_admin(where + std::vector<std::string>{"stats", "--json"});
  INFO(stats.err);
  REQUIRE(stats.status == 0);
  const auto counted = nlohmann::json::parse(stats.out);
  CHECK(counted.at("total") == 3);
  CHECK(counted.at("purge_backlog") == 1);
  CHECK(counted.at("table_bytes").get<std::uint64_t>() > 0);
  CHECK(idem_test::run_admin(where + std::vector<std::string>{"purge"}).status == 0);
  CHECK(t.count() == 2);

  CHECK(idem_test::run_admin(where + std::vector<std::string>{"schema", "check"}).status == 0);
  const auto printed = idem_test::run_admin(where + std::vector<std::string>{"schema", "print"});
  CHECK_THAT(printed.out, Catch::Contains("CREATE TABLE IF NOT EXISTS \"" + t.name + "\""));
  // A table that is not there: the check says so (exit 5), migrate creates it.
  const std::string fresh = idem_test::unique_pg_table("admin_new");
  const std::vector<std::string> elsewhere{"--pg", idem_test::pg_conninfo(), "--table", fresh};
  CHECK(idem_test::run_admin(elsewhere + std::vector<std::string>{"schema", "check"}).status == 5);
  const auto migrated =
      idem_test::run_admin(elsewhere + std::vector<std::string>{"schema", "migrate"});
  INFO(migrated.err);
  CHECK(migrated.status == 0);
  CHECK(idem_test::run_admin(elsewhere + std::vector<std::string>{"schema", "check"}).status == 0);
  t.pool->acquire()->query("DROP TABLE " + fresh);

  // The connection string from the environment, as an on-call shell has it.
  const auto from_env = idem_test::run_program(
      {"env", "IDEM_PG_CONNINFO=" + idem_test::pg_conninfo(), idem_test::paths::admin, "--table",
       t.name, "inspect", "PAY", "paid"});
  INFO(from_env.err);
  CHECK(from_env.status == 0);
  CHECK_THAT(from_env.out, Catch::Contains("ch_9"));
  // A server that is not there: a store failure (exit 4).
  CHECK(idem_test::run_admin({"--pg", "host=/nonexistent user=idem dbname=idem", "stats"}).status ==
        4);
}
