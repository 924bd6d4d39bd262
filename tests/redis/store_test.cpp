// idem::redis::Store against the throwaway redis-server: races of real threads on real
// connections, the documented layout, expiry in Redis itself, scripts the server forgot,
// corrupt records and bad parameters.
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include <idem/redis.hpp>
#include <idem/redis/detail/slot.hpp>

#include "../support/redis_server.hpp"
#include "../support/workload.hpp"
#include "raw.hpp"

using namespace std::chrono_literals;
using idem_test::RedisStore;

using idem_test::raw;
using idem_test::record_key;

// The business writes nothing of its own here: the helpers' execution count is all there is
// to check.
TEST_CASE("200 threads over a 32-connection pool race one key - one execution, no errors") {
  RedisStore s(32);
  idem_test::race_one_key(s.store, 200, [](const std::string&) {});
}

TEST_CASE("10,000 requests at 12% duplicates over 32 connections - executions equal keys") {
  RedisStore s(32);
  idem_test::run_storm(s.store, 32, idem_test::storm_of(10'000, 12), [](const std::string&) {});
}

TEST_CASE("a record is a hash with the documented fields, in its bucket's slot") {
  RedisStore s;
  const idem::Key key{"PAY", "layout-1"};
  const auto c = s.store.claim(key, "fp", idem::Options{.lease = 30s, .ttl = 1h});
  const std::string rk = record_key(s.store, key);
  const std::string member = "PAY:layout-1";
  const auto bucket = idem::redis::detail::bucket_of(member, 1024);
  CHECK(rk == s.store.ops().layout().prefix() + ":{" + std::to_string(bucket) + "}:r:" + member);

  const auto all = raw({"HGETALL", rk});
  std::map<std::string, std::string> fields;
  for (std::size_t i = 0; i + 1 < all.size(); i += 2)
    fields[std::string(all[i].text())] = std::string(all[i + 1].text());
  CHECK(fields.size() == idem::redis::detail::required_fields);  // no steps, never repaired
  CHECK(fields["status"] == "processing");
  CHECK(fields["fence"] == "1");
  CHECK(fields["owner"] == c.record.ticket.owner);
  CHECK(fields["fingerprint"] == "fp");
  CHECK(fields["attempts"] == "1");
  CHECK(fields["retryable"] == "0");
  CHECK(fields["snapshot"].empty());
  CHECK(fields["expire_at"] == std::to_string(c.record.expire_at.time_since_epoch().count()));
  CHECK(fields["lease_until"] == std::to_string(c.record.lease_until.time_since_epoch().count()));

  // The indexes: the claim is in the bucket's leases (until it finishes) and expiry sets.
  const auto& layout = s.store.ops().layout();
  CHECK(std::string(raw({"ZSCORE", layout.leases(bucket), member}).text()) ==
        fields["lease_until"]);
  CHECK(std::string(raw({"ZSCORE", layout.expiry(bucket), member}).text()) == fields["expire_at"]);
  s.store.complete(key, c.record.ticket, R"({"ok":true})");
  CHECK(raw({"ZSCORE", layout.leases(bucket), member}).is_nil());
  CHECK(std::string(raw({"HGET", rk, "status"}).text()) == "succeeded");
  CHECK(std::string(raw({"HGET", rk, "snapshot"}).text()) == R"({"ok":true})");

  // Every key of the bucket hashes to one cluster slot, whatever the id holds.
  using idem::redis::detail::key_slot;
  const auto slot = key_slot(rk);
  CHECK(key_slot(layout.leases(bucket)) == slot);
  CHECK(key_slot(layout.expiry(bucket)) == slot);
  const std::string braces = "{x}}{";
  const auto keys = layout.keys(bucket, "PAY:" + braces);
  CHECK(key_slot(keys.record) == slot);
}

TEST_CASE("Redis deletes a record by itself keep_expired after its expire_at") {
  RedisStore s(2, {.keep_expired = 1s});
  const idem::Key key{"PAY", "self-expiring"};
  const auto c = s.store.claim(key, "", idem::Options{.lease = 100ms, .ttl = 300ms});
  s.store.complete(key, c.record.ticket, "1");
  const auto pexpiretime = raw({"PEXPIRETIME", record_key(s.store, key)}).integer();
  CHECK(pexpiretime == c.record.expire_at.time_since_epoch().count() + 1000);
  std::this_thread::sleep_for(400ms);
  // Expired, still there: the next claim takes it over with the next fence.
  REQUIRE(s.store.find(key));
  std::this_thread::sleep_for(1200ms);
  CHECK_FALSE(s.store.find(key));
  const auto again = s.store.claim(key, "", {});
  CHECK(again.verdict == idem::Verdict::acquired);
  CHECK(again.record.ticket.fence == 1);
}

TEST_CASE("the expiry index drops the entries of records Redis deleted by itself") {
  RedisStore s(2, {.buckets = 1, .keep_expired = 1s});
  for (int i = 0; i < 20; ++i)
    s.store.claim(idem::Key{"GONE", std::to_string(i)}, "", {.lease = 50ms, .ttl = 100ms});
  const std::string expiry = s.store.ops().layout().expiry(0);
  CHECK(raw({"ZCARD", expiry}).integer() == 20);
  std::this_thread::sleep_for(1300ms);
  // The next claim in the bucket trims the index; nothing else had to run.
  s.store.claim(idem::Key{"LIVE", "1"}, "", {});
  CHECK(raw({"ZCARD", expiry}).integer() == 1);
}

TEST_CASE("a server that forgot the scripts (SCRIPT FLUSH, a restart) is sent them again") {
  RedisStore s;
  const idem::Key key{"PAY", "noscript"};
  const auto c = s.store.claim(key, "", {});
  raw({"SCRIPT", "FLUSH"});
  s.store.complete(key, c.record.ticket, "1");
  raw({"SCRIPT", "FLUSH"});
  CHECK(s.store.claim(key, "", {}).verdict == idem::Verdict::replayed);
  raw({"SCRIPT", "FLUSH"});
  CHECK(s.store.purge_expired(10, 1) == 0);
  CHECK(s.store.release_stale(10) == 0);
}

TEST_CASE("a record edited by hand into nonsense is a CorruptRecord, and nothing is written") {
  RedisStore s;
  const idem::Key key{"PAY", "corrupt"};
  s.store.claim(key, "", {});
  const std::string rk = record_key(s.store, key);
  raw({"HSET", rk, "fence", "many"});
  CHECK_THROWS_AS(s.store.claim(key, "", {}), idem::CorruptRecord);
  CHECK_THROWS_AS(s.store.find(key), idem::CorruptRecord);
  raw({"HSET", rk, "fence", "1", "status", "paid"});
  CHECK_THROWS_AS(s.store.find(key), idem::CorruptRecord);
  raw({"HDEL", rk, "status"});
  CHECK_THROWS_AS(s.store.find(key), idem::CorruptRecord);
  CHECK(std::string(raw({"HGET", rk, "fence"}).text()) == "1");
}

TEST_CASE("store parameters are validated") {
  auto pool = idem_test::make_redis_pool(1);
  CHECK_THROWS_AS(idem::redis::Store(pool, {.prefix = ""}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::redis::Store(pool, {.prefix = "a{b}"}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::redis::Store(pool, {.prefix = std::string(65, 'p')}),
                  idem::InvalidArgument);
  CHECK_THROWS_AS(idem::redis::Store(pool, {.buckets = 0}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::redis::Store(pool, {.buckets = 16385}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::redis::Store(pool, {.keep_expired = 999ms}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::redis::Store(nullptr), idem::InvalidArgument);
  CHECK_NOTHROW(idem::redis::Store(pool, {.prefix = "svc-a:idem_1.v2", .buckets = 16384}));
}

TEST_CASE("a server that cannot be reached is a retryable StoreError with the client's text") {
  idem::redis::ConnectionParams p;
  p.unix_socket = "/nonexistent/redis.sock";
  try {
    idem::redis::Connection c(p);
    FAIL("connected to nothing");
  } catch (const idem::StoreError& e) {
    CHECK(e.retryable());
    CHECK_FALSE(e.diagnostics().from_server);
    CHECK(e.diagnostics().code != 0);
    CHECK_FALSE(e.diagnostics().message.empty());
    CHECK(std::string(e.what()).find("/nonexistent/redis.sock") != std::string::npos);
  }
}

TEST_CASE("server errors keep the server's reply apart from idem's text") {
  idem::redis::Connection c(idem_test::redis_server());
  try {
    c.command({"NOSUCHCOMMAND"});
    FAIL("the server accepted a command it does not have");
  } catch (const idem::StoreError& e) {
    CHECK(e.diagnostics().from_server);
    CHECK(e.diagnostics().message.rfind("ERR ", 0) == 0);
    CHECK_FALSE(e.retryable());
  }
  CHECK_FALSE(c.broken());
  CHECK(c.ping());
}

TEST_CASE("AUTH with an ACL user, SELECT of a database, CLIENT SETNAME") {
  const std::string user = idem_test::unique_prefix("user");
  raw({"ACL", "SETUSER", user, "on", ">s3cret", "~*", "&*", "+@all"});
  idem::redis::ConnectionParams p = idem_test::redis_server();
  p.user = user;
  p.password = "s3cret";
  p.database = 3;
  p.client_name = user;
  auto pool = std::make_shared<idem::redis::Pool>(p, idem::redis::PoolParams{.size = 1});
  idem::redis::Store store(pool, idem_test::fresh_params());
  const idem::Key key{"PAY", "in-db-3"};
  store.claim(key, "", {});
  {
    auto c = pool->acquire();
    CHECK(std::string(c->command({"CLIENT", "GETNAME"}).text()) == user);
    CHECK(std::string(c->command({"ACL", "WHOAMI"}).text()) == user);
  }
  // The record is in database 3, not in database 0.
  CHECK(raw({"EXISTS", record_key(store, key)}).integer() == 0);
  idem::redis::ConnectionParams db3 = idem_test::redis_server();
  db3.database = 3;
  idem::redis::Connection c3(db3);
  CHECK(c3.command({"EXISTS", record_key(store, key)}).integer() == 1);

  // A wrong password is the configuration's fault: not retryable, and the store does not
  // retry it.
  p.password = "wrong";
  auto bad = std::make_shared<idem::redis::Pool>(p, idem::redis::PoolParams{.size = 1});
  idem::redis::Store refused(bad, idem_test::fresh_params());
  try {
    refused.claim(key, "", {});
    FAIL("a wrong password was accepted");
  } catch (const idem::StoreError& e) {
    CHECK_FALSE(e.retryable());
    CHECK(e.diagnostics().from_server);
    CHECK(e.diagnostics().message.rfind("WRONGPASS", 0) == 0);
  }
  raw({"ACL", "DELUSER", user});
}

TEST_CASE("a full server (maxmemory, noeviction) refuses a claim: retryable, nothing runs") {
  idem_test::OwnRedis server("");
  auto pool = std::make_shared<idem::redis::Pool>(server.params());
  idem::redis::Store store(pool, idem_test::fresh_params());
  {
    // Any memory in use is over a limit of one byte.
    idem::redis::Connection c(server.params());
    c.command({"CONFIG", "SET", "maxmemory", "1"});
  }
  int runs = 0;
  try {
    (void)idem::run_once(store, idem::Key{"PAY", "no-room"}, "", [&] { return ++runs; });
    FAIL("a full server took the claim");
  } catch (const idem::StoreError& e) {
    CHECK(e.retryable());
    CHECK(e.diagnostics().message.find("OOM") != std::string::npos);
  }
  CHECK(runs == 0);
  CHECK_FALSE(store.find(idem::Key{"PAY", "no-room"}));
}

TEST_CASE("a takeover decided on an old read never overwrites what was written since") {
  // The races peers shipped: an orphan recovery that wrote over a result completed after its
  // read, and a live claim reclaimed as an orphan.
  RedisStore s;
  const idem::Key key{"PAY", "orphan-race"};
  const auto first = s.store.claim(key, "", idem::Options{.lease = 100ms, .ttl = 1h});
  std::this_thread::sleep_for(150ms);
  auto c = s.pool->acquire();
  const auto read = s.store.ops().read(*c, key, false);
  REQUIRE(read);
  const idem::backend::Decision d = idem::backend::decide(read->record, "", read->now);
  REQUIRE(d == idem::backend::Decision::take_over_stale);
  const idem::Record next = idem::backend::take_over(
      read->record, d, "", "recoverer-token-0000000000000000", read->now, {});

  // The first worker finishes between the read and the takeover's write.
  s.store.complete(key, first.record.ticket, R"({"paid":true})");
  CHECK_FALSE(s.store.ops().write_takeover(*c, d, next, read->record.ticket));
  auto r = s.store.find(key);
  REQUIRE(r);
  CHECK(r->status == idem::Status::succeeded);
  CHECK(r->snapshot == R"({"paid":true})");
  CHECK(r->ticket == first.record.ticket);

  // A live claim (its lease still running) is never taken over, whatever the caller decided.
  const idem::Key live{"PAY", "live-claim"};
  const auto holder = s.store.claim(live, "", idem::Options{.lease = 30s, .ttl = 1h});
  const auto seen = s.store.ops().read(*c, live, false);
  REQUIRE(seen);
  const idem::Record forced =
      idem::backend::take_over(seen->record, idem::backend::Decision::take_over_retry, "",
                               "intruder-token-00000000000000000", seen->now, {});
  CHECK_FALSE(s.store.ops().write_takeover(*c, idem::backend::Decision::take_over_retry, forced,
                                           seen->record.ticket));
  CHECK(s.store.find(live)->ticket == holder.record.ticket);
}
