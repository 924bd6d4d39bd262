// tools/idem on Redis (tools/idem/redis_target.hpp), run as a program against the test server:
// it finds a key's record by the services' prefix and bucket count, shows where it lies, and
// reads, repairs, counts and purges through the store's own operations.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <idem/redis.hpp>
#include <idem/run_once.hpp>

#include "../support/admin_program.hpp"
#include "../support/redis_server.hpp"

using namespace std::chrono_literals;
using idem_test::operator+;

TEST_CASE("idem on Redis: inspect shows where a key lies - release, list, stats and purge") {
  const auto server = idem_test::redis_server();
  const std::string prefix = idem_test::unique_prefix("admin");
  auto pool = idem_test::make_redis_pool(2);
  idem::redis::Store store{pool, {.prefix = prefix, .buckets = 16}};
  REQUIRE(store.claim({"PAY", "dead"}, "fp", {.lease = 1ms, .ttl = 1h}).verdict ==
          idem::Verdict::acquired);
  idem::run_once(store, {"PAY", "paid"}, "fp", [] { return nlohmann::json{{"charge", "ch_9"}}; });
  REQUIRE(store.claim({"OLD", "1"}, "", {.lease = 1ms, .ttl = 1ms}).verdict ==
          idem::Verdict::acquired);
  std::this_thread::sleep_for(20ms);  // the dead claim's lease and the old record's ttl run out
  const std::vector<std::string> where{"--redis-socket", server.unix_socket, "--redis-prefix",
                                       prefix,           "--redis-buckets",  "16"};

  // Where the record lies: its key in its bucket, the bucket's slot, the node serving it.
  const idem::redis::detail::Layout layout(prefix, 16);
  const auto bucket = layout.bucket("PAY:dead");
  const std::string record_key = layout.keys("PAY:dead").record;
  CHECK(record_key == prefix + ":{" + std::to_string(bucket) + "}:r:PAY:dead");
  const auto inspect =
      idem_test::run_admin(where + std::vector<std::string>{"inspect", "PAY", "dead"});
  INFO(inspect.err);
  REQUIRE(inspect.status == 0);
  CHECK_THAT(inspect.out, Catch::Contains("status          processing (0), stale") &&
                              Catch::Contains("redis key       " + record_key) &&
                              Catch::Contains("bucket          " + std::to_string(bucket)) &&
                              Catch::Contains("node            " + server.unix_socket));
  const auto as_json =
      idem_test::run_admin(where + std::vector<std::string>{"inspect", "PAY", "dead", "--json"});
  REQUIRE(as_json.status == 0);
  const auto j = nlohmann::json::parse(as_json.out);
  CHECK(j.at("location").at("redis key") == record_key);
  CHECK(j.at("location").at("slot") == std::to_string(idem::redis::detail::key_slot(record_key)));

  // Another bucket count than the services' looks in the wrong bucket: the record is not found.
  const std::vector<std::string> wrong{"--redis-socket", server.unix_socket, "--redis-prefix",
                                       prefix,           "--redis-buckets",  "17"};
  if (idem::redis::detail::Layout(prefix, 17).bucket("PAY:paid") != layout.bucket("PAY:paid")) {
    CHECK(idem_test::run_admin(wrong + std::vector<std::string>{"inspect", "PAY", "paid"}).status ==
          1);
  }

  const auto stale =
      idem_test::run_admin(where + std::vector<std::string>{"list", "--stale", "--json"});
  REQUIRE(stale.status == 0);
  CHECK(nlohmann::json::parse(stale.out).size() == 1);
  const std::vector<std::string> release{
      "release", "PAY", "dead", "--fence", "1", "--reason", "deploy killed the worker"};
  CHECK(idem_test::run_admin(where + release).status == 0);
  CHECK(idem_test::run_admin(where + release).status == 3);  // the fence moved on
  const auto r = store.find({"PAY", "dead"});
  REQUIRE(r);
  CHECK(r->ticket.fence == 2);
  CHECK(r->repair_reason == "deploy killed the worker");

  const auto stats = idem_test::run_admin(where + std::vector<std::string>{"stats", "--json"});
  INFO(stats.err);
  REQUIRE(stats.status == 0);
  const auto counted = nlohmann::json::parse(stats.out);
  CHECK(counted.at("total") == 3);
  CHECK(counted.at("purge_backlog") == 1);
  CHECK(counted.at("stale_claims") == 0);  // released above
  CHECK(counted.at("counts") == nlohmann::json::parse(R"([
        {"biz_type":"OLD","status":"processing","records":1},
        {"biz_type":"PAY","status":"succeeded","records":1},
        {"biz_type":"PAY","status":"failed","records":1}])"));
  CHECK(counted.at("table_bytes").get<std::uint64_t>() > 0);

  const auto dry = idem_test::run_admin(where + std::vector<std::string>{"purge", "--dry-run"});
  CHECK(dry.out == "would purge 1 expired record(s); nothing was deleted\n");
  const auto purge = idem_test::run_admin(where + std::vector<std::string>{"purge"});
  CHECK(purge.status == 0);
  CHECK(purge.out == "purged 1 expired record(s)\n");
  CHECK_FALSE(store.find({"OLD", "1"}));
  CHECK(store.find({"PAY", "paid"}));
}

TEST_CASE("idem on Redis: schema check reads the layout stamps and migrate writes them") {
  const auto server = idem_test::redis_server();
  const std::string prefix = idem_test::unique_prefix("admin");
  auto pool = idem_test::make_redis_pool(1);
  idem::redis::Store store{pool, {.prefix = prefix, .buckets = 8}};
  const auto paid = idem::run_once(store, {"PAY", "before"}, "fp", [] { return 1; });
  REQUIRE(paid);
  const std::vector<std::string> where{"--redis-socket", server.unix_socket, "--redis-prefix",
                                       prefix,           "--redis-buckets",  "8"};
  const auto before = idem_test::run_admin(where + std::vector<std::string>{"schema", "check"});
  CHECK(before.status == 0);
  CHECK_THAT(before.out, Catch::Contains("layout 1") && Catch::Contains("not stamped"));
  const auto migrate = idem_test::run_admin(where + std::vector<std::string>{"schema", "migrate"});
  CHECK(migrate.status == 0);
  CHECK_THAT(migrate.out, Catch::Contains("stamped 8 of 8 buckets; layout 2"));
  const auto after = idem_test::run_admin(where + std::vector<std::string>{"schema", "check"});
  CHECK_THAT(after.out, Catch::Contains("layout 2 (stamped"));
  // The store writes packed records from then on, and reads the hash written before.
  CHECK(store.check_schema().stamped);
  CHECK(idem::run_once(store, {"PAY", "before"}, "fp", [] { return 2; }).value() == 1);
  const auto again = idem_test::run_admin(where + std::vector<std::string>{"schema", "migrate"});
  CHECK_THAT(again.out, Catch::Contains("stamped 0 of 8 buckets"));
}

TEST_CASE("idem on Redis: what does not apply to Redis is a usage error") {
  const auto server = idem_test::redis_server();
  const std::vector<std::string> where{"--redis-socket", server.unix_socket};
  const auto ddl = idem_test::run_admin(where + std::vector<std::string>{"schema", "print"});
  CHECK(ddl.status == 2);
  CHECK_THAT(ddl.err, Catch::Contains("keeps no table"));
  const auto table =
      idem_test::run_admin(where + std::vector<std::string>{"--table", "t", "stats"});
  CHECK(table.status == 2);
  CHECK_THAT(table.err, Catch::Contains("--table is not for Redis"));
  const auto two = idem_test::run_admin(
      where + std::vector<std::string>{"--mysql-socket", "/nonexistent.sock", "stats"});
  CHECK(two.status == 2);
  CHECK_THAT(two.err, Catch::Contains("one store"));
  CHECK(
      idem_test::run_admin(std::vector<std::string>{"--redis-socket", "/nonexistent.sock", "stats"})
          .status == 4);
}
