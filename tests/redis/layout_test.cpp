// The record's two encodings and the layout stamp of idem::redis (detail/layout.hpp, "Layouts"):
// a stamped bucket packs its records in one string, an unstamped one writes the hashes an idem of
// layout 1 reads, both are read everywhere, and stamping under load runs nothing twice.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/redis.hpp>

#include "../support/redis_server.hpp"
#include "../support/threads.hpp"
#include "../support/workload.hpp"
#include "raw.hpp"

using namespace std::chrono_literals;
using idem_test::raw;
using idem_test::record_key;
using idem_test::RedisStore;

namespace {

std::string type_of(const std::string& key) {
  return std::string(raw({"TYPE", key}).text());
}

// The packed record's values, unpacked by the server's own cmsgpack, as strings.
std::vector<std::string> unpacked(const std::string& key) {
  const auto r = raw({"EVAL",
                      "local out = {} for i, v in ipairs(cmsgpack.unpack(redis.call('GET', "
                      "KEYS[1]))) do out[i] = tostring(v) end return out",
                      "1", key});
  std::vector<std::string> values;
  for (std::size_t i = 0; i < r.size(); ++i)
    values.emplace_back(r[i].text());
  return values;
}

long long memory_of(const std::string& key) {
  return raw({"MEMORY", "USAGE", key, "SAMPLES", "0"}).integer();
}

}  // namespace

TEST_CASE("a stamped prefix packs each record in one string, its fields in the documented order") {
  RedisStore s(2, {.buckets = 4});
  const auto done = s.store.ensure_schema();
  CHECK(done.stamped_buckets == 4);
  CHECK(done.layout.layout == 2);
  CHECK(done.layout.stamped);
  CHECK(std::string(raw({"GET", s.store.ops().layout().layout(3)}).text()) ==
        "idem layout=2 oldest_reader=2");

  const idem::Key key{"PAY", "packed"};
  const auto c = s.store.claim(key, "fp", idem::Options{.lease = 30s, .ttl = 1h});
  const std::string rk = record_key(s.store, key);
  REQUIRE(type_of(rk) == "string");
  s.store.complete(key, c.record.ticket, R"({"ok":true})");
  REQUIRE(type_of(rk) == "string");
  const auto values = unpacked(rk);
  REQUIRE(values.size() == idem::redis::detail::record_fields.size());
  CHECK(values[0] == "succeeded");
  CHECK(values[1] == "1");
  CHECK(values[2] == c.record.ticket.owner);
  CHECK(values[3] == "fp");
  CHECK(values[4] == R"({"ok":true})");
  CHECK(values[10] == idem_test::ms_text(c.record.expire_at));
  CHECK(values[11].empty());  // no steps
  // The key keeps its time to live through the rewrite.
  CHECK(raw({"PEXPIRETIME", rk}).integer() ==
        c.record.expire_at.time_since_epoch().count() + 3'600'000);
  CHECK(s.store.claim(key, "fp", {}).verdict == idem::Verdict::replayed);
  // Stamping again stamps nothing.
  CHECK(s.store.ensure_schema().stamped_buckets == 0);
}

TEST_CASE(
    "an unstamped prefix writes hashes, and a stamped one reads them and packs them on write") {
  RedisStore s(2, {.buckets = 2});
  CHECK_FALSE(s.store.check_schema().stamped);
  CHECK(s.store.check_schema().layout == 1);
  const idem::Key done_key{"PAY", "old-done"}, live_key{"PAY", "old-live"};
  const auto d = s.store.claim(done_key, "fp", {.lease = 30s, .ttl = 1h});
  s.store.complete(done_key, d.record.ticket, "paid");
  const auto live = s.store.claim(live_key, "fp", {.lease = 30s, .ttl = 1h});
  REQUIRE(type_of(record_key(s.store, done_key)) == "hash");
  REQUIRE(type_of(record_key(s.store, live_key)) == "hash");

  s.store.ensure_schema();
  // Read as they are: a replay does not rewrite.
  CHECK(s.store.claim(done_key, "fp", {}).verdict == idem::Verdict::replayed);
  CHECK(s.store.find(done_key)->snapshot == "paid");
  CHECK(type_of(record_key(s.store, done_key)) == "hash");
  // The live claim's step and finish are written packed, with its fields and time to live.
  const long long ttl_before = raw({"PEXPIRETIME", record_key(s.store, live_key)}).integer();
  s.store.record_step(live_key, live.record.ticket, "charge", "7");
  CHECK(type_of(record_key(s.store, live_key)) == "string");
  s.store.complete(live_key, live.record.ticket, "shipped");
  const auto r = s.store.find(live_key);
  REQUIRE(r);
  CHECK(r->status == idem::Status::succeeded);
  CHECK(r->snapshot == "shipped");
  CHECK(r->fingerprint == "fp");
  CHECK(r->recovery_points == R"({"charge":7})");
  CHECK(r->created_at == live.record.created_at);
  CHECK(raw({"PEXPIRETIME", record_key(s.store, live_key)}).integer() == ttl_before);
}

TEST_CASE("a packed record takes less than half the memory of its hash once the response is long") {
  RedisStore hashes(1, {.buckets = 1});
  RedisStore packed(1, {.buckets = 1});
  packed.store.ensure_schema();
  const std::string response(256, 'r');
  const idem::Key key{"PAY", "8d5f7c0e-4b8a-4f3e-9a51-2f6f3c1d7e90"};
  for (auto* s : {&hashes, &packed}) {
    const auto c = s->store.claim(key, idem::fingerprint("a request"), {});
    s->store.complete(key, c.record.ticket, response);
  }
  const long long hash_bytes = memory_of(record_key(hashes.store, key));
  const long long packed_bytes = memory_of(record_key(packed.store, key));
  INFO("hash " << hash_bytes << " B, packed " << packed_bytes << " B");
  CHECK(packed_bytes * 2 <= hash_bytes);
}

TEST_CASE("stamping while 8 threads claim: every record reads, whatever its encoding, once") {
  constexpr int threads = 8;
  constexpr int keys = 400;
  RedisStore s(threads, {.buckets = 16});
  idem_test::Executions runs;
  idem_test::Errors errors;
  std::atomic<int> settled{0};
  std::atomic<bool> stamped{false};
  idem_test::run_threads(threads + 1, [&](int t) {
    if (t == threads) {
      while (settled.load() < keys / 4)
        std::this_thread::sleep_for(1ms);
      try {
        s.store.ensure_schema();
      } catch (const std::exception& e) {
        errors.add(std::string("stamp: ") + e.what());
      }
      stamped = true;
      return;
    }
    // Every thread walks every key, one step behind the next thread: most claims meet a
    // record another thread wrote, before or after the stamp.
    for (int i = 0; i < keys; ++i) {
      const std::string id = "k-" + std::to_string((i + t) % keys);
      for (;;) {
        try {
          const auto out = idem::run_once(s.store, idem::Key{"PAY", id}, "fp", [&] {
            runs.executed(id);
            return id;
          });
          if (out) {
            if (out.value() != id) errors.add("wrong answer for " + id);
            ++settled;
            break;
          }
          if (out.verdict() != idem::Verdict::in_progress) {
            errors.add(id + ": " + std::string(idem::to_string(out.verdict())));
            break;
          }
        } catch (const std::exception& e) {
          errors.add(e.what());
          break;
        }
        std::this_thread::sleep_for(1ms);
      }
    }
  });
  INFO(errors.first());
  REQUIRE(errors.size() == 0);
  CHECK(stamped.load());
  CHECK(runs.total() == keys);
  CHECK(runs.max_per_key() == 1);
  int hashes = 0, strings = 0;
  for (int i = 0; i < keys; ++i) {
    const std::string type =
        type_of(record_key(s.store, idem::Key{"PAY", "k-" + std::to_string(i)}));
    hashes += type == "hash";
    strings += type == "string";
  }
  CHECK(hashes > 0);   // finished before the stamp
  CHECK(strings > 0);  // claimed after it
  CHECK(hashes + strings == keys);
  CHECK(s.store.check_schema().stamped);
}

TEST_CASE("a newer idem's layout is refused before any claim, a compatible one is used as it is") {
  SECTION("a layout this idem cannot write") {
    RedisStore s(1, {.buckets = 4});
    raw({"SET", s.store.ops().layout().layout(2), "idem layout=3 oldest_reader=3"});
    CHECK_THROWS_AS(s.store.claim(idem::Key{"PAY", "too-new"}, "", {}), idem::SchemaMismatch);
    CHECK_THROWS_AS(s.store.check_schema(), idem::SchemaMismatch);
    CHECK_THROWS_AS(s.store.ensure_schema(), idem::SchemaMismatch);
    CHECK(raw({"EXISTS", s.store.ops().layout().layout(0)}).integer() == 0);  // nothing stamped
    CHECK(raw({"EXISTS", record_key(s.store, idem::Key{"PAY", "too-new"})}).integer() == 0);
  }
  SECTION("a newer layout that this idem may still write") {
    RedisStore s(1, {.buckets = 2});
    for (std::uint32_t b = 0; b < 2; ++b)
      raw({"SET", s.store.ops().layout().layout(b), "idem layout=3 oldest_reader=2"});
    const auto layout = s.store.check_schema();
    CHECK(layout.layout == 3);
    CHECK(s.store.ensure_schema().stamped_buckets == 0);  // never stamped back
    CHECK(std::string(raw({"GET", s.store.ops().layout().layout(1)}).text()) ==
          "idem layout=3 oldest_reader=2");
    CHECK(s.store.claim(idem::Key{"PAY", "ok"}, "", {}).verdict == idem::Verdict::acquired);
  }
  SECTION("a layout key that holds something else") {
    RedisStore s(1, {.buckets = 2});
    raw({"SET", s.store.ops().layout().layout(1), "v2"});
    try {
      s.store.check_schema();
      FAIL("a layout key that is not a stamp was accepted");
    } catch (const idem::SchemaMismatch& e) {
      CHECK_THAT(e.what(), Catch::Contains("not a layout stamp") && Catch::Contains(":layout"));
    }
  }
}

TEST_CASE("a packed record that does not unpack is a CorruptRecord, and nothing is written") {
  RedisStore s(1, {.buckets = 1});
  s.store.ensure_schema();
  const idem::Key key{"PAY", "garbled"};
  s.store.claim(key, "", {});
  const std::string rk = record_key(s.store, key);
  raw({"SET", rk, "not msgpack at all \xc1"});
  CHECK_THROWS_AS(s.store.find(key), idem::CorruptRecord);
  CHECK_THROWS_AS(s.store.claim(key, "", {}), idem::CorruptRecord);
  CHECK(std::string(raw({"GET", rk}).text()) == "not msgpack at all \xc1");
}
