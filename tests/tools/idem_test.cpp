// The operator's program, tools/idem, run as a child process against a SQLite file and the
// test MariaDB server: what it prints, its exit codes, and that a repair applies only with
// the fence the operator read and changes nothing otherwise.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <idem/mysql.hpp>
#include <idem/run_once.hpp>
#include <idem/sqlite.hpp>

#include "../mysql/layout1_table.hpp"
#include "../support/admin_program.hpp"
#include "../support/mysql_server.hpp"
#include "../support/paths.hpp"
#include "../support/run_program.hpp"
#include "../support/temp_dir.hpp"

using namespace std::chrono_literals;

namespace {

using Ran = idem_test::ProgramRun;
using idem_test::operator+;
using idem_test::run_admin;

// A SQLite file with a claim whose worker died, a success and a permanent failure.
struct SqliteFile {
  idem_test::TempDir dir;
  std::string file = (dir.path() / "idem.db").string();
  idem::sqlite::Store store{file};
  std::vector<std::string> where{"--sqlite", file};

  SqliteFile() {
    REQUIRE(store.claim({"PAY", "dead"}, "fp", {.lease = 1ms, .ttl = 1h}).verdict ==
            idem::Verdict::acquired);
    idem::run_once(store, {"PAY", "paid"}, "fp", [] { return nlohmann::json{{"charge", "ch_9"}}; });
    (void)idem::run_once(store, {"REFUND", "declined"}, "fp", []() -> int {
      throw idem::PermanentFailure({{"error", "card_declined"}});
    });
    std::this_thread::sleep_for(5ms);  // the dead claim's lease runs out
  }
};

}  // namespace

TEST_CASE("idem: --help, and usage errors exit 2 without touching a store") {
  const Ran help = run_admin({"--help"});
  CHECK(help.status == 0);
  CHECK_THAT(help.out, Catch::Contains("inspect BIZ_TYPE ID") &&
                           Catch::Contains("schema check | print | migrate") &&
                           Catch::Contains("EXIT STATUS"));
  CHECK(run_admin({}).status == 2);
  const Ran unknown = run_admin({"--sqlite", "/nonexistent", "frobnicate"});
  CHECK(unknown.status == 2);
  CHECK_THAT(unknown.err, Catch::Contains("unknown command \"frobnicate\""));
  // The test run sets IDEM_MYSQL_SOCKET, which the program reads too: without it, no store.
  const char* socket = std::getenv("IDEM_MYSQL_SOCKET");
  const std::string saved = socket != nullptr ? socket : "";
  ::unsetenv("IDEM_MYSQL_SOCKET");
  const Ran no_store = run_admin({"inspect", "PAY", "1"});
  if (!saved.empty()) ::setenv("IDEM_MYSQL_SOCKET", saved.c_str(), 1);
  CHECK(no_store.status == 2);
  CHECK_THAT(no_store.err, Catch::Contains("no store"));
  idem_test::TempDir dir;
  const std::string typo = (dir.path() / "idem.dbb").string();
  const Ran missing = run_admin({"--sqlite", typo, "inspect", "PAY", "1"});
  CHECK(missing.status == 4);
  CHECK_THAT(missing.err, Catch::Contains("no SQLite file at " + typo));
  CHECK_FALSE(std::filesystem::exists(typo));  // a typo does not become a new database
  CHECK(run_admin({"-h"}).status == 0);
  const Ran bad_table = run_admin({"--sqlite", typo, "--table", "no-dashes", "schema", "print"});
  CHECK(bad_table.status == 2);
  CHECK_THAT(bad_table.err, Catch::Contains("table name"));
}

TEST_CASE("idem on SQLite: inspect and list show every field - a missing key exits 1") {
  SqliteFile f;
  const Ran paid = run_admin(f.where + std::vector<std::string>{"inspect", "PAY", "paid"});
  INFO(paid.err);
  REQUIRE(paid.status == 0);
  CHECK_THAT(paid.out,
             Catch::StartsWith("PAY/paid\n") && Catch::Contains("status          succeeded (1)") &&
                 Catch::Contains("fence           1") && Catch::Contains("attempts        1") &&
                 Catch::Contains("snapshot        {\"charge\":\"ch_9\"}") &&
                 Catch::Contains(" ago)") && Catch::Contains("Z (in "));

  const Ran json =
      run_admin(f.where + std::vector<std::string>{"inspect", "PAY", "paid", "--json"});
  REQUIRE(json.status == 0);
  const auto j = nlohmann::json::parse(json.out);
  CHECK(j.at("status") == "succeeded");
  CHECK(j.at("snapshot") == nlohmann::json{{"charge", "ch_9"}});
  CHECK(j.at("fence") == 1);
  CHECK(j.at("created_at").at("utc").get<std::string>().ends_with("Z"));

  const Ran none = run_admin(f.where + std::vector<std::string>{"inspect", "PAY", "nope"});
  CHECK(none.status == 1);
  CHECK_THAT(none.err, Catch::Contains("no record for PAY/nope"));

  const Ran stale = run_admin(f.where + std::vector<std::string>{"list", "--stale"});
  REQUIRE(stale.status == 0);
  CHECK(stale.out.find("PAY/dead  processing  fence 1") == 0);
  CHECK(stale.out.find("paid") == std::string::npos);
  const Ran failed =
      run_admin(f.where + std::vector<std::string>{"list", "--status", "failed", "--biz-type",
                                                   "REFUND", "--json"});
  REQUIRE(failed.status == 0);
  const auto rows = nlohmann::json::parse(failed.out);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].at("id") == "declined");
  CHECK(rows[0].at("snapshot").at("error") == "card_declined");
  CHECK(run_admin(f.where + std::vector<std::string>{"list", "--status", "done"}).status == 2);
  CHECK(run_admin(f.where + std::vector<std::string>{"list", "--older-than", "5x"}).status == 2);
  const Ran old = run_admin(f.where + std::vector<std::string>{"list", "--older-than", "1h"});
  CHECK(old.status == 0);
  CHECK(old.out.empty());
}

TEST_CASE("idem on SQLite: a repair needs the fence read and a reason - a stale fence is refused") {
  SqliteFile f;
  const std::vector<std::string> release{"release", "PAY", "dead", "--reason", "worker OOM-killed"};
  // Usage errors change nothing.
  CHECK(run_admin(f.where + release).status == 2);  // no --fence
  CHECK(run_admin(f.where + std::vector<std::string>{"release", "PAY", "dead", "--fence", "1"})
            .status == 2);  // no --reason
  const Ran bad_json =
      run_admin(f.where + std::vector<std::string>{"complete", "PAY", "dead", "--fence", "1",
                                                   "--reason", "x", "--response", "{not json"});
  CHECK(bad_json.status == 2);
  CHECK_THAT(bad_json.err, Catch::Contains("--response must be JSON"));
  CHECK(f.store.find({"PAY", "dead"})->status == idem::Status::processing);

  const Ran done = run_admin(f.where + release + std::vector<std::string>{"--fence", "1"});
  INFO(done.err);
  REQUIRE(done.status == 0);
  CHECK_THAT(done.err, Catch::Contains("PAY/dead: release, now fence 2"));
  const auto released = f.store.find({"PAY", "dead"});
  CHECK(released->status == idem::Status::failed);
  CHECK(released->retryable);
  CHECK(released->ticket.fence == 2);
  CHECK(released->repair_reason == "worker OOM-killed");

  // The same command again: the fence moved on, nothing is written.
  const Ran again = run_admin(f.where + release + std::vector<std::string>{"--fence", "1"});
  CHECK(again.status == 3);
  CHECK_THAT(again.err, Catch::Contains("refused, nothing written") &&
                            Catch::Contains("the record now:") &&
                            Catch::Contains("fence           2"));
  CHECK(f.store.find({"PAY", "dead"}) == released);

  // complete with the fence now: duplicates replay the operator's response.
  const Ran complete =
      run_admin(f.where + std::vector<std::string>{"complete", "PAY", "dead", "--fence", "2",
                                                   "--reason", "gateway shows ch_7", "--response",
                                                   R"({"charge":"ch_7"})"});
  REQUIRE(complete.status == 0);
  const auto replay = idem::run_once(f.store, {"PAY", "dead"}, "fp", [] {
    return nlohmann::json{{"charge", "twice"}};
  });
  CHECK(replay.verdict() == idem::Verdict::replayed);
  CHECK(replay.value() == nlohmann::json{{"charge", "ch_7"}});

  // fail, not retryable: duplicates replay the error.
  const Ran fail =
      run_admin(f.where + std::vector<std::string>{"fail", "REFUND", "declined", "--fence", "1",
                                                   "--reason", "confirmed with the bank", "--error",
                                                   R"({"error":"stolen_card"})"});
  REQUIRE(fail.status == 0);
  const auto stored = f.store.find({"REFUND", "declined"});
  CHECK(nlohmann::json::parse(stored->snapshot) == nlohmann::json{{"error", "stolen_card"}});
  CHECK_FALSE(stored->retryable);
}

TEST_CASE("idem on SQLite: schema check, print and migrate - purge") {
  SqliteFile f;
  const Ran ok = run_admin(f.where + std::vector<std::string>{"schema", "check"});
  CHECK(ok.status == 0);
  CHECK_THAT(ok.out, Catch::Contains("as this idem expects; layout 2 (stamped"));
  const Ran print = run_admin(f.where + std::vector<std::string>{"schema", "print"});
  CHECK(print.status == 0);
  CHECK(print.out ==
        idem::sqlite::record_table_ddl(idem::sqlite::parse_table_name("idempotent_record")) +
            ";\n");

  // A table without its expiry index: every command says so and exits 5.
  {
    idem::sqlite::Connection c(f.file);
    c.execute("DROP INDEX \"idempotent_record_idx_expire\"");
  }
  const Ran broken = run_admin(f.where + std::vector<std::string>{"schema", "check"});
  CHECK(broken.status == 5);
  CHECK_THAT(broken.err, Catch::Contains("not as idem expects"));
  CHECK(run_admin(f.where + std::vector<std::string>{"inspect", "PAY", "paid"}).status == 5);
  const Ran migrate = run_admin(f.where + std::vector<std::string>{"schema", "migrate"});
  INFO(migrate.err);
  CHECK(migrate.status == 0);
  CHECK(run_admin(f.where + std::vector<std::string>{"schema", "check"}).status == 0);
  // A table of an idem before stamps is reported as such, and `schema migrate` stamps it.
  {
    idem::sqlite::Connection c(f.file);
    c.execute("DELETE FROM idem_schema");
  }
  const Ran unstamped = run_admin(f.where + std::vector<std::string>{"schema", "check"});
  CHECK(unstamped.status == 0);
  CHECK_THAT(unstamped.out, Catch::Contains("layout 2, not stamped ("));
  const Ran stamp = run_admin(f.where + std::vector<std::string>{"schema", "migrate"});
  CHECK(stamp.status == 0);
  CHECK_THAT(stamp.out, Catch::Contains("layout 2 (stamped"));

  // Expired records are counted by stats and purge --dry-run, purged, and the others stay.
  REQUIRE(f.store.claim({"OLD", "1"}, "", {.lease = 1ms, .ttl = 1ms}).verdict ==
          idem::Verdict::acquired);
  std::this_thread::sleep_for(5ms);
  const Ran stats = run_admin(f.where + std::vector<std::string>{"stats"});
  INFO(stats.err);
  REQUIRE(stats.status == 0);
  const auto has_line = [&](const std::string& pattern) {
    return std::regex_search(stats.out, std::regex("(^|\n)" + pattern + "\n"));
  };
  CHECK(has_line("PAY +processing +1"));
  CHECK(has_line("REFUND +failed +1"));
  CHECK(has_line("total +4"));
  CHECK_THAT(stats.out, Catch::Contains("purge backlog     1 expired record(s)") &&
                            Catch::Contains("stale claims      1, the oldest lease ran out at") &&
                            Catch::Contains(" KiB (records and indexes)"));
  const Ran json = run_admin(f.where + std::vector<std::string>{"stats", "--json"});
  REQUIRE(json.status == 0);
  const auto j = nlohmann::json::parse(json.out);
  CHECK(j.at("total") == 4);
  CHECK(j.at("purge_backlog") == 1);
  CHECK(j.at("stale_claims") == 1);
  CHECK(j.at("counts").size() == 4);
  CHECK(j.at("table_bytes").get<std::uint64_t>() > 0);
  const Ran dry = run_admin(f.where + std::vector<std::string>{"purge", "--dry-run"});
  CHECK(dry.status == 0);
  CHECK(dry.out == "would purge 1 expired record(s); nothing was deleted\n");
  CHECK(f.store.find({"OLD", "1"}));
  const Ran purge = run_admin(f.where + std::vector<std::string>{"purge", "--batch", "10"});
  CHECK(purge.status == 0);
  CHECK(purge.out == "purged 1 expired record(s)\n");
  CHECK_FALSE(f.store.find({"OLD", "1"}));
  CHECK(f.store.find({"PAY", "paid"}));
}

TEST_CASE("idem on MariaDB: inspect, a fenced release, schema check and migrate") {
  const idem::mysql::ConnectionParams p = idem_test::server();
  idem_test::Table t;
  const std::vector<std::string> where{"--mysql-socket", p.unix_socket, "--mysql-database",
                                       p.database,       "--table",     t.name};
  REQUIRE(t.store.claim({"PAY", "dead"}, "fp", {.lease = 1ms, .ttl = 1h}).verdict ==
          idem::Verdict::acquired);
  std::this_thread::sleep_for(20ms);

  const Ran inspect = run_admin(where + std::vector<std::string>{"inspect", "PAY", "dead"});
  INFO(inspect.err);
  REQUIRE(inspect.status == 0);
  CHECK_THAT(inspect.out, Catch::Contains("status          processing (0), stale"));
  const Ran stale = run_admin(where + std::vector<std::string>{"list", "--stale", "--json"});
  REQUIRE(stale.status == 0);
  CHECK(nlohmann::json::parse(stale.out).size() == 1);

  const std::vector<std::string> release{
      "release", "PAY", "dead", "--fence", "1", "--reason", "deploy killed the worker"};
  CHECK(run_admin(where + release).status == 0);
  CHECK(run_admin(where + release).status == 3);
  const auto r = t.store.find({"PAY", "dead"});
  CHECK(r->ticket.fence == 2);
  CHECK(r->repair_reason == "deploy killed the worker");

  // The connection from an option file alone (no flag, no variable), as the on-call account's
  // my.cnf holds it: [client] for everyone, a group of the program's own for the socket.
  {
    idem_test::TempDir dir;
    const std::string cnf = (dir / "ops.cnf").string();
    std::ofstream(cnf) << "[client]\nsocket = " << (dir / "absent.sock").string()
                       << "\nuser = root\ndatabase = " << p.database
                       << "\n\n[idem_ops]\nsocket = " << p.unix_socket << "\n";
    const auto without_env = [&](const std::vector<std::string>& args) {
      std::vector<std::string> argv{"env",
                                    "-u",
                                    "IDEM_MYSQL_SOCKET",
                                    "-u",
                                    "IDEM_MYSQL_HOST",
                                    "-u",
                                    "IDEM_MYSQL_DATABASE",
                                    idem_test::paths::admin};
      argv.insert(argv.end(), args.begin(), args.end());
      return idem_test::run_program(argv);
    };
    const std::vector<std::string> inspect_dead{"--table", t.name, "inspect", "PAY", "dead"};
    const Ran from_file = without_env(
        std::vector<std::string>{"--mysql-option-file", cnf, "--mysql-option-group", "idem_ops"} +
        inspect_dead);
    INFO(from_file.err);
    CHECK(from_file.status == 0);
    CHECK_THAT(from_file.out, Catch::Contains("deploy killed the worker"));
    // [client] alone names a socket where no server listens.
    const Ran client_only =
        without_env(std::vector<std::string>{"--mysql-option-file", cnf} + inspect_dead);
    CHECK(client_only.status == 4);
    CHECK_THAT(client_only.err, Catch::Contains("option file"));
    const Ran missing =
        without_env(std::vector<std::string>{"--mysql-option-file", (dir / "none.cnf").string()} +
                    inspect_dead);
    CHECK(missing.status == 2);
    CHECK_THAT(missing.err, Catch::Contains("cannot read the option file"));
  }

  const Ran stats = run_admin(where + std::vector<std::string>{"stats", "--json"});
  INFO(stats.err);
  REQUIRE(stats.status == 0);
  const auto counted = nlohmann::json::parse(stats.out);
  CHECK(counted.at("total") == 1);
  CHECK(counted.at("stale_claims") == 0);  // released above
  CHECK(counted.at("counts") ==
        nlohmann::json::parse(R"([{"biz_type":"PAY","status":"failed","records":1}])"));
  CHECK(counted.at("table_bytes").get<std::uint64_t>() > 0);

  const Ran checked = run_admin(where + std::vector<std::string>{"schema", "check"});
  CHECK(checked.status == 0);
  CHECK_THAT(checked.out, Catch::Contains("layout 2 (stamped; an idem of layout 2 or later"));
  const Ran uptodate = run_admin(where + std::vector<std::string>{"schema", "migrate"});
  CHECK(uptodate.status == 0);
  CHECK_THAT(uptodate.out, Catch::Contains("up to date: nothing to do"));

  // A layout-1 table: every command exits 5 until `schema migrate` adds its columns.
  idem_test::Layout1Table old;
  const std::vector<std::string> on_old{"--mysql-socket", p.unix_socket, "--mysql-database",
                                        p.database,       "--table",     old.name};
  const Ran mismatch = run_admin(on_old + std::vector<std::string>{"inspect", "PAY", "x"});
  CHECK(mismatch.status == 5);
  CHECK_THAT(mismatch.err, Catch::Contains("layout 2"));
  const Ran migrated = run_admin(on_old + std::vector<std::string>{"schema", "migrate"});
  INFO(migrated.err);
  CHECK(migrated.status == 0);
  CHECK_THAT(migrated.out,
             Catch::Contains("recovery_points") && Catch::Contains("and stamped its layout"));
  CHECK(run_admin(on_old + std::vector<std::string>{"inspect", "PAY", "x"}).status == 1);

  // A server that is not there.
  const Ran down = run_admin(std::vector<std::string>{"--mysql-socket", "/nonexistent.sock",
                                                      "--mysql-database", "x", "list"});
  CHECK(down.status == 4);
  CHECK_THAT(down.err, Catch::Contains("store failure"));
}
